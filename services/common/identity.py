"""Who is calling: the identity a credential maps to, and the tenant rules every service applies.

The auth interceptor (interceptors.AuthInterceptor) sets the caller's Identity for the whole
call in a contextvar; domain and servicer code reads it with `current()` and applies the
rules below, so no service decides on its own what a role may do:

- a read-only caller may read (Get/List/Watch/logs) but not create, cancel, stop or delete
  (`require_write`: PERMISSION_DENIED);
- a resource's tenant comes from the caller's credential; a member naming another tenant is
  refused, an admin may name any (`tenant_for_write`);
- a resource of another tenant is answered as if it did not exist (`check_visible`:
  NOT_FOUND), and lists are narrowed to the caller's tenant (`list_filter`); admins see all.

With auth off (no token configured, the local default) and in a service's own background work
(dispatch, reconcile loops: no call, so nothing set) the identity is LOCAL: an admin of the
"default" tenant, which is what the services did before tenants came from credentials.
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

_current: contextvars.ContextVar[Identity] = contextvars.ContextVar("paddleray_identity", default=LOCAL)


def current() -> Identity:
    """The identity of the call being served (LOCAL outside calls and with auth off)."""
    return _current.get()


@contextlib.contextmanager
def acting_as(identity: Identity) -> Iterator[None]:
    """Runs the block (and tasks it starts) as identity."""
    token = _current.set(identity)
    try:
        yield
    finally:
        _current.reset(token)


def set_current(identity: Identity) -> contextvars.Token:
    """For interceptors that cannot use a with-block across an async generator's yields."""
    return _current.set(identity)


def require_write(action: str) -> Identity:
    """The caller, if it may change things; PERMISSION_DENIED for read-only credentials."""
    caller = current()
    if not caller.can_write:
        raise errors.PermissionDenied(f"{action} needs a member or admin credential; this one is read-only")
    return caller


def tenant_for_write(requested: str, field: str) -> str:
    """The tenant a new resource gets: the caller's, or the one requested if the caller may write it."""
    caller = current()
    if not requested or requested == caller.tenant:
        return caller.tenant
    if not TENANT_PATTERN.fullmatch(requested):
        raise errors.InvalidArgument(field, "must be 1-63 characters of [a-z0-9-], starting and ending alphanumeric")
    if caller.is_admin:
        return requested
    raise errors.PermissionDenied(
        f"{field}: a credential of tenant '{caller.tenant}' cannot create resources of tenant '{requested}'"
    )


def visible(tenant: str) -> bool:
    caller = current()
    return caller.is_admin or (tenant or DEFAULT_TENANT) == caller.tenant


def check_visible(tenant: str, name: str) -> None:
    """NOT_FOUND, worded as for a missing resource, when the caller may not see tenant's resources."""
    if not visible(tenant):
        raise errors.NotFound(f"{name} not found")


def list_filter(requested: str) -> str | None:
    """The tenant a list is narrowed to ('' = every tenant, admins only), or None when the
    caller asked for another tenant's resources (the answer is then an empty list)."""
    caller = current()
    if caller.is_admin:
        return requested
    if requested and requested != caller.tenant:
        return None
    return caller.tenant
