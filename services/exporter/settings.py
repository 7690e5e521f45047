"""Exporter configuration (env prefix PADDLERAY_EXPORTER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.settings import ServiceSettings


class ExporterSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_EXPORTER_", extra="ignore")

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis holding the model registry.")
    ray_address: str = Field("auto", description="Ray cluster that runs Ray Serve.")
