"""Trainer configuration (env prefix PADDLERAY_TRAINER_)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.entrypoints import DEFAULT_ALLOWLIST
from paddleray.services.common.settings import ServiceSettings, StrList


class TrainerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_TRAINER_", extra="ignore")

    ray_address: str = Field(
        "auto",
        description="Ray cluster to drive: the GCS host:port (the trainer runs on a Ray node), 'auto', "
        "'local', or 'ray://host:10001' (Ray Client, a fallback only).",
    )
    ray_probe_interval_s: float = Field(1.0, gt=0, description="How often the trainer checks that its Ray cluster answers.")
    records_dir: Path | None = Field(
        None, description="Where the trainer keeps its run records and events when storage_root is an object store "
        "(checkpoints and logs go there; these records are the trainer's own); unset: ~/.paddleray/trainer-records. "
        "With a directory storage_root they stay under its runs/ and this is ignored.",
    )
    # Ray itself ends a driver whose GCS has been gone for 60 s: let go of the cluster well before.
    ray_lost_after_s: float = Field(
        10.0, gt=0, le=45,
        description="A cluster that does not answer for this long is lost: its runs fail and the trainer reconnects.",
    )
    ray_retry_interval_s: float = Field(2.0, gt=0, description="Wait between attempts to connect to Ray.")
    entrypoint_allowlist: StrList = Field(
        default_factory=lambda: list(DEFAULT_ALLOWLIST),
        description="Module prefixes whose functions runs may call; modules inside a run's own uploaded "
        "package are allowed on top (see paddleray.services.common.entrypoints).",
    )
    pool_max_idle_groups: int = Field(4, ge=0, description="Warm worker groups kept between runs; 0 disables the pool.")
    pool_idle_ttl_s: float = Field(300.0, gt=0, description="Idle warm groups are released after this long.")
    pool_yield_to_demand: bool = Field(
        True, description="Release idle warm groups (oldest first, one a second) while other work on the cluster "
        "(exports, Serve replicas, other drivers) waits for resources.",
    )
    stop_grace_s: float = Field(
        10.0, ge=0, description="Time ranks get to return after a stop (StopRun default, timeouts) before they are killed."
    )
    collective_init_timeout_s: float = Field(120.0, gt=0, description="Time the ranks get to join Paddle's collective group.")
    poll_timeout_s: float = Field(1.0, gt=0, description="Long-poll wait for reports from a rank.")
    log_follow_interval_s: float = Field(0.2, gt=0, description="How often GetRunLogs(follow) looks for new lines.")
