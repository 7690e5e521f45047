"""Scheduler configuration (env prefix PADDLERAY_SCHEDULER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.settings import ServiceSettings


class SchedulerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_SCHEDULER_", extra="ignore")

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis holding all scheduler state.")
    trainer_address: str = Field("127.0.0.1:50052", description="host:port of the trainer service.")
