"""Builders of the exporter's records for tests."""

from __future__ import annotations

from paddleray.exporter.v1 import model_pb2


def new_model(model_id: str, create_ms: int = 1_000) -> model_pb2.Model:
    model = model_pb2.Model(name=f"models/{model_id}", display_name=model_id)
    model.create_time.FromMilliseconds(create_ms)
    return model


def new_version(builder: str = "paddleray.services.trainer.examples.digits_mlp:build_model") -> model_pb2.ModelVersion:
    return model_pb2.ModelVersion(model_builder=builder, state=model_pb2.MODEL_VERSION_STATE_EXPORTING)
