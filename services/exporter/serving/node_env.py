"""The environment of every Ray node that runs Serve's proxy or its replicas.

Ray reads it when those processes start, so it belongs to `ray start`, not to serve.start:
- RAY_SERVE_PROXY_USE_GRPC: the proxy calls the ingress over gRPC instead of Ray actor calls
  (the ingress's hop to the model goes over gRPC too: ingress.handle_runner). Measured here
  (32 clients, the digits MLP): 6.9-7.5 ms instead of 12.5-13.3 ms of server CPU per request,
  1.5-1.7x the throughput (serving/README.md).
- RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH: those gRPC hops accept 4 MiB by default, while the
  public gRPC proxy accepts 2 GiB, so a request the proxy took would fail inside
  (RESOURCE_EXHAUSTED). Set to the proxy's limit.
The local stack's Ray head sets it, and so do deploy/kuberay and deploy/compose on every Ray
node. Kept apart from the serving code so that the local stack imports it without numpy.
"""

# Serve's own default for its public gRPC proxy (ray.serve._private.constants).
PROXY_MAX_MESSAGE_BYTES = 2**31 - 1
SERVE_NODE_ENV = {
    "RAY_SERVE_PROXY_USE_GRPC": "1",
    "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(PROXY_MAX_MESSAGE_BYTES),
}
