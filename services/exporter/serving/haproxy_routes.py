"""Runs in: Serve's HAProxy start on a Ray node (paddleray-haproxy, haproxy_errors.main, before it execs HAProxy).

gRPC calls without `application` metadata, routed by the model they name, as a stock v2 client
(tritonclient, KServe's) sends them.

Serve's HAProxy routes gRPC by the `application` metadata only: with more than one application
(always here: the server app beside every model's) a call without it is answered NOT_FOUND
"Application metadata not set" (Serve's template, `default_grpc_backend`). The v2 protocol names
the model in the request body instead (ModelInferRequest.model_name, ModelReadyRequest.name,
ModelMetadataRequest.name: field 1 of each), and Serve has no setting for its routing, so this
adds rules to the gRPC frontend of the config Serve wrote, for calls that carry no
`application` only (calls that do are routed as before, by Serve's own rules):

- a call whose message starts with field 1 = a served app's name is given that app's
  `application` metadata, so Serve's own rule sends it to the app's backend: the model's
  replicas (no hop), or the backend's backup server, Serve's fallback proxy, while HAProxy holds
  every replica down (a health check timed out under load, the checks after a reload, a replica
  being replaced). That proxy routes by `application` only: a call routed by name alone was
  answered NOT_FOUND "Application metadata not set" there. A gRPC message is 1 byte of
  compression flag (0: plain), 4 of length, then the protobuf; a protobuf whose first bytes are
  0x0a, len, name has name as its field 1, so a match is never another model's call. Protobuf
  serializers write fields in field-number order (all the stock ones do); a client that does
  not, or a compressed message, matches nothing and gets the fallback below;
- every other call without `application` (ServerLive/Ready/Metadata, a model nobody serves, a
  message the rules cannot read) goes to the server app, which answers the server-level RPCs
  and NOT_FOUND naming the model for the rest.

And for every v2 call, with or without `application`, that no app's backend takes: the server
app, which knows the installation's model names (serve_config.server_app) and answers
UNAVAILABLE for one whose app is not deployed yet (after a Ray head restart the exporter deploys
every app again; Serve's template would answer NOT_FOUND "Application 'x' not found" meanwhile),
NOT_FOUND for the rest. While there is no server app either (a Serve just started), nothing can
tell a model being deployed from an unknown one: such calls get UNAVAILABLE (STARTING_BACKEND).

HAProxy waits for the first bytes of the body of such calls (`wait-for-body ... at-least`), at
most WAIT_S when a stream sends less.
"""

from __future__ import annotations

import re

# The server app's backend in Serve's config: "grpc-" + the app name (serve_config.SERVER_APP).
SERVER_APP = "_paddleray"
SERVER_BACKEND = f"grpc-{SERVER_APP}"
STARTING_BACKEND = "paddleray_starting"
_STARTING = (f"backend {STARTING_BACKEND}\n    mode http\n"
             "    http-request return status 200 content-type application/grpc hdr grpc-status 14 "
             "hdr grpc-message \"the server is starting: no model answers yet, retry\"\n")
WAIT_S = 1
_MARK = "    # paddleray: calls without `application` metadata, by the model they name (haproxy_routes.py)\n"
# Serve's per-app gRPC rule: `acl is_<backend> req.hdr(application) -m str <app>`.
_APP_RULE = re.compile(r"^    acl is_(\S+) req\.hdr\(application\) -m str (\S+)$", re.M)
_DEFAULT = re.compile(r"^    default_backend (\S+)$", re.M)
_BIND = re.compile(r"^    bind \S+ proto h2$", re.M)
# The v2 service's gRPC name (grpc_services.INFERENCE_SERVICE; not imported: this runs before
# HAProxy with nothing of the serving code loaded).
INFERENCE_SERVICE = "inference.GRPCInferenceService"


def field_one(name: str) -> bytes:
    """The protobuf encoding of field 1 (length-delimited) holding name: 0x0a, varint length, bytes."""
    data = name.encode()
    length, size = bytearray(), len(data)
    while True:
        byte, size = size & 0x7F, size >> 7
        length.append(byte | (0x80 if size else 0))
        if not size:
            break
    return b"\x0a" + bytes(length) + data


def route_by_model_name(config: str) -> str:
    """Serve's HAProxy config with the rules above added to its gRPC frontend (unchanged when it
    has no gRPC frontend or the rules are there already)."""
    start = config.find("\nfrontend grpc_frontend\n")
    if start < 0 or _MARK in config:
        return config
    end = config.find("\nbackend ", start)
    end = len(config) if end < 0 else end
    section = config[start:end]
    apps = [(backend, app) for backend, app in _APP_RULE.findall(section)]
    default = _DEFAULT.search(section)
    if default is None:
        return config
    bind = _BIND.search(section)
    if bind is None:
        return config
    has_server = default.group(1) == SERVER_BACKEND or any(b == SERVER_BACKEND for b, _ in apps)
    prefixes = {backend: (app, field_one(app)) for backend, app in apps if backend != SERVER_BACKEND}
    longest = max((len(p) for _, p in prefixes.values()), default=0)
    # Before Serve's own http-request rules (HAProxy runs them all before any use_backend).
    checks = [_MARK, "    acl pr_has_app req.hdr(application) -m found\n",
              f"    acl pr_v2 path_beg /{INFERENCE_SERVICE}/\n"]
    if prefixes:
        checks.append(f"    http-request wait-for-body time {WAIT_S}s at-least {5 + longest} if !pr_has_app pr_v2\n")
        checks.append("    acl pr_plain req.body,bytes(0,1) -m bin 00\n")
    routes = [_MARK]
    for backend, (app, prefix) in prefixes.items():
        checks.append(f"    acl pr_names_{backend} req.body,bytes(5,{len(prefix)}) -m bin {prefix.hex()}\n")
        # Evaluated at use_backend time, after every http-request rule: Serve's `is_<backend>`
        # matches the header set here, and `pr_has_app` is then true for the rules after it.
        checks.append(f"    http-request set-header application {app} if !pr_has_app pr_v2 pr_plain pr_names_{backend}\n")
    # After Serve's own per-app rules: a call whose `application` names a backend goes there.
    routes.append(f"    use_backend {SERVER_BACKEND if has_server else STARTING_BACKEND} if pr_v2\n")
    at_bind, at_default = start + bind.end() + 1, start + default.start()
    tail = config[at_default:] if has_server else config[at_default:].rstrip("\n") + "\n" + _STARTING
    routed = config[:at_bind] + "".join(checks) + config[at_bind:at_default] + "".join(routes) + tail
    # Serve's replicas answer NOT_FOUND themselves to a call whose `application` names another app:
    # a call the server app takes for a model is told it is the server app's.
    server = routed.find(f"\nbackend {SERVER_BACKEND}\n")
    if server >= 0:
        at = server + len(f"\nbackend {SERVER_BACKEND}\n")
        routed = routed[:at] + f"    http-request set-header application {SERVER_APP}\n" + routed[at:]
    return routed


def rewrite_config(args: list[str]) -> bool:
    """Adds the rules to the config file of an HAProxy command line; whether it changed it."""
    config = next((value for flag, value in zip(args, args[1:], strict=False) if flag == "-f"), None)
    if config is None:
        return False
    try:
        with open(config, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False  # HAProxy itself says what is wrong with its config
    routed = route_by_model_name(text)
    if routed == text:
        return False
    with open(config, "w", encoding="utf-8") as f:
        f.write(routed)
    return True
