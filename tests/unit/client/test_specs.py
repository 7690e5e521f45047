"""Job and experiment spec files: what they become, and one-line errors naming file:line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.client import SpecError, load_experiment, load_job
from paddleray.services.common import structs

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).parents[3] / "examples"


def test_the_example_job_spec(tmp_path):
    job, job_id = load_job(EXAMPLES / "job.yaml")
    assert job_id == ""
    assert job.spec.entrypoint.endswith("digits_mlp:train") and job.spec.num_workers == 2
    assert structs.to_python(job.spec.config) == {"epochs": 3, "lr": 0.05, "hidden_sizes": [64]}
    assert job.retry_policy.max_retries == 1 and job.timeout.seconds == 600


def test_every_field_of_a_job_spec(tmp_path):
    (tmp_path / "project").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: my-job\nentrypoint: pkg.mod:fn\nworking_dir: project\nnum_workers: 3\n"
        "resources: {cpus: 0.5, gpus: 0, memory: 2Gi, custom: {accel: 1}}\n"
        "retries: {max_retries: 2, initial_backoff: 2s, max_backoff: 1m, backoff_multiplier: 3}\n"
        "timeout: 1h30m\npriority: 5\ntenant: team-a\nlabels: {a: b}\nenv: {X: '1'}\nplacement: SPREAD\n"
        "datasets: [{name: train, uri: data/train.parquet, format: parquet}]\n"
        "checkpoints: {keep_last: 2, keep_best: 1, best_metric: accuracy, best_mode: max}\n"
    )
    job, job_id = load_job(spec)
    assert job_id == "my-job"
    assert job.spec.runtime_env.working_dir == str(tmp_path / "project")  # relative to the spec file
    assert job.spec.resources_per_worker.memory_bytes == 2 << 30
    assert dict(job.spec.resources_per_worker.custom) == {"accel": 1.0}
    assert job.retry_policy.initial_backoff.seconds == 2 and job.retry_policy.max_backoff.seconds == 60
    assert job.timeout.seconds == 5400
    assert job.spec.placement_strategy == common_pb2.PLACEMENT_STRATEGY_SPREAD
    assert job.spec.datasets[0].format == common_pb2.DATASET_FORMAT_PARQUET
    # A dataset's local path is the spec file's, as working_dir's (CreateJob then checks that
    # it lies under the storage root).
    assert job.spec.datasets[0].uri == str(tmp_path / "data" / "train.parquet")
    assert job.spec.checkpoint_policy.best_mode == common_pb2.METRIC_MODE_MAX
    assert dict(job.spec.runtime_env.env_vars) == {"X": "1"}


def test_uris_in_a_spec_are_left_as_they_are(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("entrypoint: pkg.mod:fn\nworking_dir: paddleray://packages/sha256-" + "a" * 64 + "\n"
                    "datasets: [{name: a, uri: s3://bucket/train.parquet}, {name: b, uri: /abs/b.csv},"
                    " {name: c, uri: 'file://rel/c.csv'}]\n")
    job, _ = load_job(spec)
    assert job.spec.runtime_env.working_dir == "paddleray://packages/sha256-" + "a" * 64
    assert [d.uri for d in job.spec.datasets] == ["s3://bucket/train.parquet", "/abs/b.csv", str(tmp_path / "rel/c.csv")]


@pytest.mark.parametrize("text, expected", [
    ("entrypoint: a.b:c\nnum_workers: two\n", ":2: num_workers: Input should be a valid integer"),
    ("entrypoint: a.b:c\ntimeout: .nan\n", ":2: timeout: must be a finite duration >= 0, got nan"),
    ("entrypoint: a.b:c\ntimeout: soon\n", ":2: timeout: expected a duration"),
    ("entrypoint: a.b:c\nresources:\n  cpus: 1\n  gpu: 2\n", ":4: resources.gpu: Extra inputs are not permitted"),
    ("entrypoint: a.b:c\nresources: {cpus: 0}\n", ":2: resources.cpus: Input should be greater than 0"),
    ("entrypoint: a.b:c\nnum_workers: 0\n", ":2: num_workers: Input should be greater than or equal to 1"),
    ("entrypoint: a.b:c\nretries: {max_retries: -1}\n", ":2: retries.max_retries: Input should be greater than"),
    ("entrypoint: a.b:c\nconfig: {epochs: 3\n", ":3: not valid YAML"),
    ("num_workers: 2\n", ":1: entrypoint: Field required"),
    ("- a\n- b\n", ":1: expected a mapping"),
])
def test_job_spec_errors_are_one_line_with_file_and_line(tmp_path, text, expected):
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    with pytest.raises(SpecError) as raised:
        load_job(spec)
    message = str(raised.value)
    assert message.startswith(str(spec)) and expected in message and "\n" not in message


def test_the_example_sweep_keeps_integers(tmp_path):
    experiment, _ = load_experiment(EXAMPLES / "sweep.yaml")
    assert experiment.algorithm == experiment_pb2.SEARCH_ALGORITHM_GRID
    choice = experiment.search_space.parameters["hidden_sizes"].choice.values
    assert [structs.to_python(v) for v in choice] == [[32], [128]]
    assert experiment.early_stopping.asha.max_t == 4 and experiment.max_concurrent_trials == 2


def test_sweep_errors_name_the_parameter(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text("trial: {entrypoint: a.b:c}\nmetric: acc\nsearch_space:\n  lr: {grid: [1], choice: [2]}\n")
    with pytest.raises(SpecError, match=r"sweep.yaml:4: search_space.lr: give exactly one of"):
        load_experiment(spec)
    spec.write_text("trial: {entrypoint: a.b:c}\nsearch_space: {lr: {grid: [1]}}\n")
    with pytest.raises(SpecError, match=r"sweep.yaml:1: metric: Field required"):
        load_experiment(spec)
