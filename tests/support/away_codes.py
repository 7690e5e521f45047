"""What a v2 client may be told while a Ray head is away, named so tests can hold the line.

Issue 21.12: never INTERNAL, UNKNOWN or NOT_FOUND. Serve's HAProxy maps its 502/503/504 to an
HTTP 500 error page, which gRPC clients read as UNKNOWN; Serve starts HAProxy through
paddleray-haproxy (services/exporter/serving/haproxy_errors.py), which makes that page a 503:
UNAVAILABLE. Before the reconciler has deployed the model's app again on the new head, HAProxy
sends the call to the server app, which knows the installation's names and answers UNAVAILABLE
(services/exporter/serving/haproxy_routes.py), or, with no server app yet either, answers
UNAVAILABLE itself. So a model of the installation is never NOT_FOUND while the head is away.
"""

from __future__ import annotations

import grpc

AWAY = {"UNAVAILABLE", "DEADLINE_EXCEEDED"}


def away_code(error: grpc.RpcError) -> str:
    """The code's name."""
    return error.code().name
