"""Who is calling: the identity a credential maps to, and the tenant rules every service applies.

Runs in: every service's process. The rules take the caller explicitly, so no rule can act for
a caller nobody named:

- a read-only caller may read (Get/List/Watch/logs) but not create, cancel, stop or delete
  (`require_write`: PERMISSION_DENIED);
- a resource's tenant comes from the caller's credential; a member naming another tenant is
  refused, an admin may name any (`tenant_for_write`);
- a resource of another tenant is answered as if it did not exist (`check_visible`:
  NOT_FOUND), and lists are narrowed to the caller's tenant (`list_filter`); admins see all.

Where the caller comes from: every gRPC call runs as the identity its interceptor set
(interceptors.AuthInterceptor: the token's; with auth off, interceptors.LocalIdentityInterceptor:
LOCAL, an admin of the "default" tenant, what the services did before tenants came from
credentials). Only servicers read it: each reads it once with `of_call()` and passes it, as an
argument named `caller` with no default, to the domain calls that need it; no other module of
services/ calls `of_call`, `acting_as` or `set_current` (tests/unit/test_explicit_caller.py).
The rules below are applied by the domain (the scheduler's JobManager / ExperimentManager with
scheduler/tenancy.py, the trainer's Trainer, the exporter's registry, exports and deployments),
never by a servicer (tests/unit/test_tenancy_layer.py).
Outside a call there is no caller: `of_call()` raises NoCaller instead of answering with an
admin, and a domain call without a caller is a TypeError. A service's own background work that
must act for someone names whom as that argument (the scheduler creates a sweep's trials with
caller=LOCAL: their template was checked with its creator's rights at CreateExperiment).
`acting_as` and `set_current` are for the interceptors (and tests that call a servicer directly).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from paddleray.services.common import errors

DEFAULT_TENANT = "default"
# Same form as Job.tenant (Kubernetes label values, lower case): tenants become Redis keys.
TENANT_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    READ_ONLY = "read-only"


@dataclass(frozen=True)
class Identity:
    """A caller: its tenant, its role, and a name for logs (never the token)."""

    tenant: str
    role: Role
    name: str = ""

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def can_write(self) -> bool:
        return self.role is not Role.READ_ONLY


LOCAL = Identity(DEFAULT_TENANT, Role.ADMIN, "local")

# No default: outside a call (or an acting_as block) there is no caller, never an admin.
_caller: contextvars.ContextVar[Identity] = contextvars.ContextVar("paddleray_caller")


class NoCaller(RuntimeError):
    """Asked for the caller where nobody called: a bug (INTERNAL), not an admin by default."""


def of_call() -> Identity:
    """The caller of the gRPC call being served (or of an acting_as block); NoCaller elsewhere."""
    try:
        return _caller.get()
    except LookupError:
        raise NoCaller("no caller: this runs outside a gRPC call and no acting_as block names one") from None


@contextlib.contextmanager
def acting_as(caller: Identity) -> Iterator[None]:
    """Runs the block (and tasks it starts) as caller."""
    token = _caller.set(caller)
    try:
        yield
    finally:
        _caller.reset(token)


def set_current(caller: Identity) -> contextvars.Token:
    """For interceptors that cannot use a with-block across an async generator's yields."""
    return _caller.set(caller)


def require_write(caller: Identity, action: str) -> Identity:
    """The caller, if it may change things; PERMISSION_DENIED for read-only credentials."""
    if not caller.can_write:
        raise errors.PermissionDenied(f"{action} needs a member or admin credential; this one is read-only")
    return caller


def tenant_for_write(caller: Identity, requested: str, field: str) -> str:
    """The tenant a new resource gets: the caller's, or the one requested if the caller may write it."""
    if not requested or requested == caller.tenant:
        return caller.tenant
    if not TENANT_PATTERN.fullmatch(requested):
        raise errors.InvalidArgument(field, "must be 1-63 characters of [a-z0-9-], starting and ending alphanumeric")
    if caller.is_admin:
        return requested
    raise errors.PermissionDenied(
        f"{field}: a credential of tenant '{caller.tenant}' cannot create resources of tenant '{requested}'"
    )


def visible(caller: Identity, tenant: str) -> bool:
    return caller.is_admin or (tenant or DEFAULT_TENANT) == caller.tenant


def check_visible(caller: Identity, tenant: str, name: str) -> None:
    """NOT_FOUND, worded as for a missing resource, when the caller may not see tenant's resources."""
    if not visible(caller, tenant):
        raise errors.NotFound(f"{name} not found")


def list_filter(caller: Identity, requested: str) -> str | None:
    """The tenant a list is narrowed to ('' = every tenant, admins only), or None when the
    caller asked for another tenant's resources (the answer is then an empty list)."""
    if caller.is_admin:
        return requested
    if requested and requested != caller.tenant:
        return None
    return caller.tenant
