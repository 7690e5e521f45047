"""Token files, the identities they map to, and the tenant rules of common.identity."""

from __future__ import annotations

import json
import os

import pytest

from paddleray.services.common import errors, identity
from paddleray.services.common.credentials import Credentials, TokenFileError, load_token_file
from paddleray.services.common.identity import Identity, Role

pytestmark = pytest.mark.unit

TOKEN_A = "token-of-team-a-member-0001"
TOKEN_R = "token-of-team-a-reader-0001"
TOKEN_ADMIN = "token-of-the-platform-admin-01"


def _write(path, text: str):
    path.write_text(text)
    return path


def test_yaml_and_json_token_files_map_tokens_to_identities(tmp_path):
    yaml_file = _write(tmp_path / "tokens.yaml", f"""
{TOKEN_A}: {{tenant: team-a, role: member, name: ci}}
{TOKEN_R}: {{tenant: team-a, role: read-only}}
""")
    json_file = _write(tmp_path / "tokens.json", json.dumps({TOKEN_ADMIN: {"tenant": "ops", "role": "admin"}}))
    credentials = Credentials("short-admin", yaml_file)
    assert credentials.identify(TOKEN_A.encode()) == Identity("team-a", Role.MEMBER, "ci")
    assert credentials.identify(TOKEN_R.encode()).role is Role.READ_ONLY
    # The single auth_token stays a shorthand for an admin of the default tenant.
    assert credentials.identify(b"short-admin") == Identity("default", Role.ADMIN, "auth-token")
    assert credentials.identify(b"not-a-token") is None
    assert credentials.identify(TOKEN_A.encode()[:-1]) is None
    assert Credentials(tokens_file=json_file).identify(TOKEN_ADMIN.encode()).is_admin


@pytest.mark.parametrize(("text", "rule"), [
    ("[1, 2]", "must map tokens"),
    ("shorttoken: {tenant: a}", "at least 16"),
    (f"{TOKEN_A}: {{tenant: Team_A}}", "tenant must be"),
    (f"{TOKEN_A}: {{tenant: a, role: root}}", "role must be one of"),
    (f"{TOKEN_A}: {{tenant: a, roles: admin}}", "unknown keys"),
    (f"{TOKEN_A}: {{tenant: a", "not valid YAML"),
])
def test_a_bad_token_file_is_refused_without_quoting_a_token(tmp_path, text, rule):
    path = _write(tmp_path / "tokens.yaml", text)
    with pytest.raises(TokenFileError) as raised:
        load_token_file(path)
    assert rule in str(raised.value)
    assert TOKEN_A not in str(raised.value)


def test_a_changed_token_file_is_reloaded_and_a_broken_one_keeps_the_old_tokens(tmp_path, monkeypatch):
    from paddleray.services.common import credentials as module

    monkeypatch.setattr(module, "_RELOAD_INTERVAL_S", 0.0)
    path = _write(tmp_path / "tokens.yaml", f"{TOKEN_A}: {{tenant: team-a}}\n")
    credentials = Credentials(tokens_file=path)
    assert credentials.identify(TOKEN_A.encode()).tenant == "team-a"
    _write(path, f"{TOKEN_R}: {{tenant: team-b}}\n")
    os.utime(path, ns=(1, 10**18))
    assert credentials.identify(TOKEN_A.encode()) is None
    assert credentials.identify(TOKEN_R.encode()).tenant == "team-b"
    _write(path, "{broken")
    os.utime(path, ns=(1, 2 * 10**18))
    assert credentials.identify(TOKEN_R.encode()).tenant == "team-b"


def test_tenant_rules_by_role():
    member = Identity("team-a", Role.MEMBER)
    assert identity.tenant_for_write(member, "", "job.tenant") == "team-a"
    assert identity.tenant_for_write(member, "team-a", "job.tenant") == "team-a"
    with pytest.raises(errors.PermissionDenied, match="job.tenant"):
        identity.tenant_for_write(member, "team-b", "job.tenant")
    with pytest.raises(errors.NotFound):
        identity.check_visible(member, "team-b", "jobs/x")
    identity.check_visible(member, "team-a", "jobs/x")
    assert identity.list_filter(member, "") == "team-a"
    assert identity.list_filter(member, "team-b") is None
    with pytest.raises(errors.PermissionDenied):
        identity.require_write(Identity("team-a", Role.READ_ONLY), "CancelJob")
    admin = Identity("ops", Role.ADMIN)
    assert identity.tenant_for_write(admin, "team-b", "job.tenant") == "team-b"
    with pytest.raises(errors.InvalidArgument, match="job.tenant"):
        identity.tenant_for_write(admin, "Not A Tenant", "job.tenant")
    identity.check_visible(admin, "team-b", "jobs/x")
    assert identity.list_filter(admin, "") == ""


def test_outside_a_call_there_is_no_caller_not_an_admin():
    # Background work, or code run without the server's interceptors, is nobody: it cannot act
    # as the local admin by default (the default the contextvar had before issue 22.5).
    with pytest.raises(identity.NoCaller):
        identity.of_call()
    with identity.acting_as(Identity("team-a", Role.MEMBER)):
        assert identity.of_call().tenant == "team-a"
    with pytest.raises(identity.NoCaller):
        identity.of_call()
