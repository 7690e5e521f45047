"""What a run asks for, validated once: StartRun's request becomes a RunSpec or a clear error.

Every rule names the field it checks (INVALID_ARGUMENT); the spec's own rules are the ones
the scheduler applies at CreateJob (paddleray.services.common.training_spec); an entrypoint that is neither under
the allowlist nor a module file of the run's own package is PERMISSION_DENIED
(paddleray.services.common.entrypoints). A working_dir naming a package resolves to the
stored zip under the shared storage root (paddleray.services.common.packages.stored_package).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from paddleray.common.v1 import common_pb2
from paddleray.services.common import (
    entrypoints,
    errors,
    model_manifest,
    names,
    packages,
    storage_paths,
    structs,
    training_spec,
)
from paddleray.services.common.checkpoints import RetentionPolicy, read_checkpoint
from paddleray.services.common.storage import is_uri

_STRATEGIES = {
    common_pb2.PLACEMENT_STRATEGY_UNSPECIFIED: "PACK",
    common_pb2.PLACEMENT_STRATEGY_PACK: "PACK",
    common_pb2.PLACEMENT_STRATEGY_SPREAD: "SPREAD",
    common_pb2.PLACEMENT_STRATEGY_STRICT_PACK: "STRICT_PACK",
    common_pb2.PLACEMENT_STRATEGY_STRICT_SPREAD: "STRICT_SPREAD",
}


@dataclass(frozen=True)
class WorkerResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory_bytes: int = 0
    custom: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class EnvSpec:
    image: str = ""
    env_vars: tuple[tuple[str, str], ...] = ()
    working_dir: str = ""
    # The stored zip when working_dir names a package (what Ray is given).
    package_zip: str = ""

    @property
    def immutable(self) -> bool:
        """Whether the same EnvSpec always means the same code: no working_dir, or a package
        (content-addressed). A plain directory may change between runs."""
        return not self.working_dir or bool(self.package_zip)

    def to_ray(self) -> dict[str, Any]:
        """As Ray's runtime_env (image_uri for the container image)."""
        env: dict[str, Any] = {}
        if self.env_vars:
            env["env_vars"] = dict(self.env_vars)
        if self.working_dir:
            env["working_dir"] = self.package_zip or self.working_dir
        if self.image:
            env["image_uri"] = self.image
        return env


@dataclass(frozen=True)
class GroupSpec:
    """What makes worker groups interchangeable: the key of the warm pool."""

    num_workers: int = 1
    resources: WorkerResources = field(default_factory=WorkerResources)
    env: EnvSpec = field(default_factory=EnvSpec)
    strategy: str = "PACK"


@dataclass(frozen=True)
class RunSpec:
    entrypoint: str
    config: dict[str, Any]
    group: GroupSpec
    retention: RetentionPolicy
    commit_in_background: bool = False
    datasets: tuple[common_pb2.Dataset, ...] = ()
    timeout_s: float | None = None
    resume_from: str | None = None
    # Directory of the weights to start from (spec.init_from), for ctx.init_checkpoint.
    init_from: str | None = None
    # The entrypoint is allowed only as a module of the run's package: the worker checks that
    # the module it imports comes from the package's directory.
    package_entrypoint: bool = False


def check_entrypoint(entrypoint: str, allowlist: Sequence[str], package_files: Sequence[str] | None = None) -> bool:
    return entrypoints.check_entrypoint(entrypoint, allowlist, package_files)


def run_spec(
    spec: common_pb2.TrainingSpec,
    allowlist: Sequence[str],
    timeout_s: float | None = None,
    resume_from_uri: str = "",
    storage_root: str | Path = "",
) -> RunSpec:
    training_spec.validate_spec(spec, "spec")
    env, package_files = _env(spec.runtime_env, storage_root)
    package_entrypoint = check_entrypoint(spec.entrypoint, allowlist, package_files)
    num_workers = spec.num_workers or 1
    if timeout_s is not None and not (math.isfinite(timeout_s) and 0 < timeout_s <= training_spec.MAX_TIMEOUT_S):
        raise errors.InvalidArgument("timeout", "must be positive and at most 30 days")
    resume_from = None
    if resume_from_uri:
        if read_checkpoint(resume_from_uri) is None:
            raise errors.InvalidArgument("resume_from.uri", "must be a complete checkpoint directory (with its manifest)")
        resume_from = resume_from_uri if is_uri(resume_from_uri) else str(Path(resume_from_uri))
    return RunSpec(
        entrypoint=spec.entrypoint,
        config=structs.to_python(spec.config),
        group=GroupSpec(
            num_workers=num_workers,
            resources=_resources(spec.resources_per_worker),
            env=env,
            strategy=_strategy(spec.placement_strategy),
        ),
        retention=retention_policy(spec.checkpoint_policy),
        commit_in_background=spec.checkpoint_policy.commit_in_background,
        datasets=tuple(spec.datasets),
        timeout_s=timeout_s,
        resume_from=resume_from,
        init_from=_init_from(spec.init_from, storage_root) if spec.HasField("init_from") else None,
        package_entrypoint=package_entrypoint,
    )


def _resources(resources: common_pb2.Resources) -> WorkerResources:
    return WorkerResources(
        num_cpus=training_spec.cpus(resources),
        num_gpus=resources.num_gpus,
        memory_bytes=resources.memory_bytes,
        custom=tuple(sorted(resources.custom.items())),
    )


def _env(env: common_pb2.RuntimeEnv, storage_root: str | Path) -> tuple[EnvSpec, tuple[str, ...] | None]:
    """The run's environment, and the files of its package (None without one)."""
    field = "spec.runtime_env.working_dir"
    if env.image and env.working_dir:
        raise errors.InvalidArgument(field, "cannot be combined with image (Ray's image_uri takes only env_vars)")
    package_zip, package_files = "", None
    if packages.is_package_uri(env.working_dir):
        package = packages.stored_package(env.working_dir, storage_root, field, sys.modules)
        package_zip, package_files = str(package.zip_path), package.files
    elif env.working_dir and "://" not in env.working_dir and not _exists(Path(env.working_dir)):
        raise errors.InvalidArgument(field, "must be a directory the trainer can read, or a URI that Ray accepts")
    if any(not key for key in env.env_vars):
        raise errors.InvalidArgument("spec.runtime_env.env_vars", "names must be non-empty")
    return EnvSpec(
        image=env.image, env_vars=tuple(sorted(env.env_vars.items())), working_dir=env.working_dir,
        package_zip=package_zip,
    ), package_files


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, say
        return False


def _init_from(init_from: common_pb2.InitFrom, storage_root: str | Path) -> str:
    """The directory user code gets as ctx.init_checkpoint: a complete checkpoint, or an
    exported model version (its manifest.json written)."""
    field = "spec.init_from"
    source = init_from.WhichOneof("source")
    path: Path | str
    if init_from.resolved_uri:
        path, field = _location(init_from.resolved_uri), f"{field}.resolved_uri"
    elif source == "checkpoint_uri":
        path, field = _location(init_from.checkpoint_uri), f"{field}.checkpoint_uri"
    elif source == "model_version":
        field = f"{field}.model_version"
        ids = names.MODEL_VERSION.parse(init_from.model_version, field)
        path = storage_paths.model_version_dir(storage_root, ids["model"], ids["version"])
    elif source == "job":
        raise errors.InvalidArgument(
            f"{field}.job", "is resolved by the scheduler; StartRun takes resolved_uri or checkpoint_uri"
        )
    else:
        raise errors.InvalidArgument(field, "set one of checkpoint_uri, model_version or resolved_uri")
    if read_checkpoint(path) is None and not model_manifest.exists(path):
        raise errors.InvalidArgument(field, "must be a complete checkpoint directory or an exported model version")
    return str(path)


def _location(uri: str) -> Path | str:
    """A checkpoint or model directory as named: a local path, or a URI of an object store."""
    return uri if is_uri(uri) else Path(uri)


def _strategy(value: common_pb2.PlacementStrategy) -> str:
    if value not in _STRATEGIES:
        raise errors.InvalidArgument("spec.placement_strategy", "must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD")
    return _STRATEGIES[value]


def retention_policy(policy: common_pb2.CheckpointPolicy) -> RetentionPolicy:
    prefix = "spec.checkpoint_policy"
    if policy.keep_last < 0:
        raise errors.InvalidArgument(f"{prefix}.keep_last", "must be >= 0")
    if policy.keep_best < 0:
        raise errors.InvalidArgument(f"{prefix}.keep_best", "must be >= 0")
    modes: dict[int, Literal["min", "max"]] = {common_pb2.METRIC_MODE_MIN: "min", common_pb2.METRIC_MODE_MAX: "max"}
    mode = modes.get(policy.best_mode)
    if policy.best_metric and mode is None:
        raise errors.InvalidArgument(f"{prefix}.best_mode", "must be MIN or MAX when best_metric is set")
    if policy.keep_best and not policy.best_metric:
        raise errors.InvalidArgument(f"{prefix}.best_metric", "must be set when keep_best is set")
    return RetentionPolicy(
        keep_last=policy.keep_last, best_metric=policy.best_metric, best_mode=mode or "max", keep_best=policy.keep_best
    )
