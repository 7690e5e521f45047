"""Scheduler configuration (env prefix PADDLERAY_SCHEDULER_)."""

from __future__ import annotations

import os
import socket
import uuid

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.entrypoints import DEFAULT_ALLOWLIST
from paddleray.services.common.peers import PeerSettings
from paddleray.services.common.redis_client import RedisSettings
from paddleray.services.common.settings import ServiceSettings, StrList


class TenantLimits(BaseModel):
    """Caps on one tenant's dispatched (STARTING/RUNNING) jobs; -1 means no cap."""

    max_jobs: int = Field(-1, ge=-1)
    max_gpus: float = Field(-1, ge=-1)


def _replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class TrainerPeer(PeerSettings):
    address: str = Field("127.0.0.1:50052", description="host:port of the trainer service.")
    auth_token: SecretStr = Field(
        SecretStr(""), description="The scheduler's own service credential at the trainer: a bearer token of an admin "
        "(it starts runs in the tenant of each job), if the trainer requires tokens."
    )
    rpc_timeout_s: float = Field(30.0, gt=0, description="Deadline of unary calls to the trainer.")


class SchedulerSettings(ServiceSettings, RedisSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_SCHEDULER_", extra="ignore")

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding all scheduler state; rediss://... for TLS. "
        "Keep the password out of it: use redis_password."
    )
    store_check_interval_s: float = Field(
        1.0, gt=0, description="How often Redis is pinged; while it does not answer, health says NOT_SERVING."
    )
    trainer: TrainerPeer = Field(default_factory=TrainerPeer, description="The trainer service "
                                 "(PADDLERAY_SCHEDULER_TRAINER_ADDRESS, _TRAINER_AUTH_TOKEN, _TRAINER_TLS_CA_FILE, ...).")
    replica_id: str = Field(default_factory=_replica_id, description="Owner name of this replica's leases.")
    dispatch: bool = Field(True, description="Run the dispatcher; off serves the API only.")
    dispatch_interval_s: float = Field(0.25, gt=0, description="Longest wait between dispatch passes.")
    dispatch_window: int = Field(64, ge=1, description="Queued jobs considered per dispatch pass.")
    max_backfill_wait_s: float = Field(
        300.0, ge=0, description="A queued job that has waited this long and does not fit stops smaller jobs "
        "behind it from starting, so that backfill cannot starve it.",
    )
    parked_recheck_s: float = Field(
        60.0, gt=0, description="Parked jobs (larger than the whole cluster) are checked again at least this often, "
        "besides whenever the cluster's shape changes.",
    )
    lease_ttl_s: float = Field(10.0, gt=0, description="A dead replica's jobs are taken over after this.")
    aging_s_per_priority: float = Field(
        60.0, gt=0, description="Queue wait worth one priority point (aging, so nothing starves)."
    )
    events_cap: int = Field(10_000, ge=10, description="Events kept per job; older ones are trimmed.")
    stop_wait_s: float = Field(15.0, ge=0, description="How long CancelJob waits for a running job to end.")
    stop_grace_s: float = Field(10.0, ge=0, description="Grace period StopRun gives the ranks.")
    start_run_retry_s: float = Field(
        120.0, ge=0, description="How long StartRun is retried while the trainer answers UNAVAILABLE (or another "
        "transient code), with backoff, before the attempt fails as a trainer error and frees what it holds.",
    )
    default_tenant_limits: TenantLimits = Field(default_factory=TenantLimits)
    tenant_limits: dict[str, TenantLimits] = Field(
        default_factory=dict, description='Per-tenant caps as JSON, e.g. {"team-a": {"max_jobs": 4, "max_gpus": 2}}.'
    )

    entrypoint_allowlist: StrList = Field(
        default_factory=lambda: list(DEFAULT_ALLOWLIST),
        description="Module prefixes whose functions jobs may call, checked at CreateJob: keep it the same as "
        "PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST (the trainer checks again at StartRun). Modules inside a "
        "job's own uploaded package are allowed on top.",
    )
    package_max_bytes: int = Field(
        100 * 1024 * 1024, gt=0, description="Largest code package (zip) UploadPackage accepts, in bytes."
    )

    package_retention_s: float = Field(
        7 * 24 * 3600, ge=0, description="Stored packages unused this long (not uploaded, and named by no new job) "
        "and named by no unfinished job are removed; 0 keeps them forever.",
    )
    package_gc_interval_s: float = Field(3600, gt=0, description="Seconds between passes of the package collector.")

    def limits_for(self, tenant: str) -> TenantLimits:
        return self.tenant_limits.get(tenant, self.default_tenant_limits)
