"""request_id: the one rule of the creates that take one (AIP-155): CreateJob,
CreateExperiment, ExportModel, CreateDeployment and the trainer's StartRun (a test fails when
an RPC with a request_id is added without being listed there).

A create given a request_id remembers it with the resource it made (24 hours). The same
request_id again with the same request returns that first resource, so a client may resend a
create whose answer it lost. The same request_id with a different request is ALREADY_EXISTS
naming request_id: the key is taken by another request, and silently answering with the
first resource would hand the caller something it did not ask for. ALREADY_EXISTS rather
than INVALID_ARGUMENT because the request is not wrong in itself (gRPC keeps INVALID_ARGUMENT
for arguments that are wrong whatever the state): it clashes with what is stored. A request_id
another tenant used is the same case, answered the same way, and shows nothing of the first
resource.

"The same request" is decided by a fingerprint: the SHA-256 of the deterministic protobuf
serialization of the fields that define the create, taken as the caller sent them (before the
service resolves references, whose targets may change between a try and its retry) and
without the fields a retry recomputes (StartRun's relative timeout). Each create stores the
fingerprint beside its request_id's resource; a resource stored before fingerprints existed
has none, and any request repeating its request_id gets it, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from google.protobuf.message import Message

from paddleray.services.common import errors

# AIP-155 leaves the length open; every create takes at most this many characters.
MAX_REQUEST_ID = 128
REUSED = "request_id: already used by a different request; a retry must repeat the request unchanged"


def fingerprint(*parts: Message | str) -> str:
    """The hex SHA-256 of the parts (messages deterministically serialized, strings as UTF-8),
    each length-prefixed so that no two different lists of parts give the same bytes."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.SerializeToString(deterministic=True) if isinstance(part, Message) else part.encode()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def of_request(request: Message, *, ignore: Sequence[str] = (), **resolved: str) -> str:
    """The fingerprint of a create request as sent, without its request_id and the `ignore`d
    fields, with the `resolved` fields (a tenant taken from the credential) set as resolved."""
    asked = type(request)()
    asked.CopyFrom(request)
    for name in ("request_id", *ignore):
        asked.ClearField(name)
    for name, value in resolved.items():
        setattr(asked, name, value)
    return fingerprint(asked)


def reused() -> errors.AlreadyExists:
    """The answer to a request_id that another request took (another body, another tenant)."""
    return errors.AlreadyExists(REUSED)


def check_repeat(first: str, given: str) -> None:
    """A request_id seen before, first created by a request of fingerprint `first` ("" when it
    was stored without one): returns when `given` repeats it, else raises reused()."""
    if first and first != given:
        raise reused()


def check_request_id(request_id: str, field: str = "request_id") -> None:
    """INVALID_ARGUMENT naming `field` for a request_id longer than MAX_REQUEST_ID."""
    if len(request_id) > MAX_REQUEST_ID:
        raise errors.InvalidArgument(field, f"must be at most {MAX_REQUEST_ID} characters")
