"""Exporter configuration (env prefix PADDLERAY_EXPORTER_)."""

from __future__ import annotations

import os
import socket
import uuid

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.settings import ServiceSettings


def _replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ExporterSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_EXPORTER_", extra="ignore")

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis holding the model registry.")
    ray_address: str = Field("auto", description="Ray cluster that runs exports and Ray Serve.")
    # The connection to it: paddleray.services.common.ray_connection, as the trainer's.
    ray_probe_interval_s: float = Field(1.0, gt=0, description="How often the exporter checks that its Ray cluster answers.")
    # Ray itself ends a driver whose GCS has been gone for 60 s: let go of the cluster well before.
    ray_lost_after_s: float = Field(
        10.0, gt=0, le=45,
        description="A cluster that does not answer for this long is lost: its exports fail and the exporter reconnects.",
    )
    ray_retry_interval_s: float = Field(2.0, gt=0, description="Wait between attempts to connect to Ray.")

    # Serving (services/exporter/serving): Ray Serve's proxies. The gRPC proxy (the v2 inference
    # API) binds every interface on this port (Serve has no host option for it); HTTP binds host.
    serving_grpc_port: int = Field(9000, description="Port of Ray Serve's gRPC proxy (Open Inference Protocol v2).")
    serving_http_host: str = Field("127.0.0.1", description="Host Ray Serve's HTTP proxy binds (Serve always starts it).")
    serving_http_port: int = Field(8000, description="Port of Ray Serve's HTTP proxy.")
    # Each deployment's own v2 endpoint, served by its model replicas (serving/replica_endpoint.py).
    serving_direct_ports: str = Field(
        "9100-9199", description="Ports for deployments' own v2 endpoints, FIRST-LAST, one per deployment; empty turns them off.",
    )
    serving_direct_host: str = Field("127.0.0.1", description="Address deployments' own v2 endpoints bind on the Ray nodes.")
    direct_endpoint_host: str = Field(
        "", description="Host shown in deployments' direct_endpoint; defaults to serving_direct_host (127.0.0.1 for 0.0.0.0).",
    )

    # -- export, registry and deployments ----------------------------------------------------
    scheduler_address: str = Field(
        "127.0.0.1:50051", description="host:port of the scheduler, read for exports from a job; empty disables them."
    )
    scheduler_auth_token: str = Field("", description="Bearer token the scheduler requires, if any.")
    scheduler_rpc_timeout_s: float = Field(10.0, gt=0, description="Deadline of calls to the scheduler.")
    builder_allowlist: list[str] = Field(
        default_factory=lambda: ["paddleray.services.trainer.examples"],
        description="Module prefixes whose model builders exports may call (as the trainer's entrypoint_allowlist).",
    )
    export_num_cpus: float = Field(1.0, gt=0, description="CPUs the export task reserves on the cluster.")
    export_timeout_s: float = Field(900.0, gt=0, description="An export running longer than this fails.")
    replica_id: str = Field(default_factory=_replica_id, description="Owner name of this replica's exports.")
    owner_lease_s: float = Field(
        10.0, gt=0, description="Exports of a replica that stopped renewing its lease this long ago are failed."
    )
    sweep_interval_s: float = Field(2.0, gt=0, description="How often leases are renewed and lost exports swept.")
    reconcile_interval_s: float = Field(
        5.0, gt=0, description="Longest wait between reconcile passes (a change triggers one at once)."
    )
    health_interval_s: float = Field(2.0, gt=0, description="How often Redis and Ray reachability is checked.")
    inference_endpoint: str = Field(
        "", description="Address of the v2 inference endpoint shown on deployments; defaults to 127.0.0.1:serving_grpc_port."
    )

    @field_validator("serving_direct_ports")
    @classmethod
    def _port_range(cls, value: str) -> str:
        from paddleray.services.exporter.direct_ports import parse_range

        parse_range(value)  # ValueError names the rule
        return value

    def direct_endpoint(self, port: int) -> str:
        from paddleray.services.exporter.serving.replica_endpoint import reachable_host

        return f"{self.direct_endpoint_host or reachable_host(self.serving_direct_host)}:{port}"
