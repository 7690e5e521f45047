"""Trainer configuration (env prefix PADDLERAY_TRAINER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.settings import ServiceSettings


class TrainerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_TRAINER_", extra="ignore")

    ray_address: str = Field("auto", description="Ray cluster to drive ('auto', 'ray://...', or 'local').")
    entrypoint_allowlist: list[str] = Field(
        default_factory=lambda: ["paddleray.services.trainer.examples"],
        description="Module prefixes whose functions runs may call.",
    )
