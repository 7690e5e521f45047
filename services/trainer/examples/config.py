"""The training keys shared by the digits examples, validated once.

Configs arrive as a protobuf Struct, where every number is a double: integer keys accept
2.0 but not 2.5. Model keys (hidden sizes, channels) belong to each model's build_model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPTIMIZERS = ("adam", "sgd", "momentum")


def as_int(config: dict[str, Any], key: str, default: int, minimum: int = 0) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"config.{key}: must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"config.{key}: must be >= {minimum}, got {value!r}")
    return int(value)


def as_int_list(config: dict[str, Any], key: str, default: list[int]) -> list[int]:
    value = config.get(key, default)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"config.{key}: must be a non-empty list of positive integers, got {value!r}")
    return [as_int({key: v}, key, 0, minimum=1) for v in value]


def as_float(config: dict[str, Any], key: str, default: float, minimum: float = 0.0) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ValueError(f"config.{key}: must be a number >= {minimum}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 5
    # Global batch: split evenly over the ranks, so results do not depend on world size.
    batch_size: int = 64
    lr: float = 0.01
    optimizer: str = "adam"
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0
    validation_fraction: float = 0.2
    # Evaluation needs no gradients, so it takes large batches: fewer, cheaper forward passes.
    eval_batch_size: int = 512
    # With several ranks, how often (in steps) they agree on whether a stop was asked.
    stop_check_steps: int = 10
    # A fault a user can inject to try retries: the attempt that starts from no checkpoint of
    # its own raises right after it reported (and checkpointed) this epoch; 0: never.
    fail_once_after_epoch: int = 0

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> TrainConfig:
        optimizer = config.get("optimizer", cls.optimizer)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"config.optimizer: must be one of {OPTIMIZERS}, got {optimizer!r}")
        validation_fraction = as_float(config, "validation_fraction", cls.validation_fraction)
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"config.validation_fraction: must be in (0, 1), got {validation_fraction!r}")
        return cls(
            epochs=as_int(config, "epochs", cls.epochs, minimum=1),
            batch_size=as_int(config, "batch_size", cls.batch_size, minimum=1),
            lr=as_float(config, "lr", cls.lr),
            optimizer=optimizer,
            momentum=as_float(config, "momentum", cls.momentum),
            weight_decay=as_float(config, "weight_decay", cls.weight_decay),
            seed=as_int(config, "seed", cls.seed),
            validation_fraction=validation_fraction,
            eval_batch_size=as_int(config, "eval_batch_size", cls.eval_batch_size, minimum=1),
            stop_check_steps=as_int(config, "stop_check_steps", cls.stop_check_steps, minimum=1),
            fail_once_after_epoch=as_int(config, "fail_once_after_epoch", cls.fail_once_after_epoch),
        )

    def per_rank_batch(self, world_size: int) -> int:
        if self.batch_size % world_size:
            raise ValueError(
                f"config.batch_size: the global batch ({self.batch_size}) must divide evenly over "
                f"{world_size} ranks"
            )
        return self.batch_size // world_size
