"""Exporter test support: records for store tests, an in-process exporter, a client, checkpoints."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import states
from paddleray.services.common.checkpoints import CheckpointStore
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.exporter.__main__ import registrations
from paddleray.services.exporter.app import ExporterApp
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import read_ready_file
from support import free_port, wait_until
from support.manifests import write_exported
from support.paddle_modes import import_on_main_thread

# Its helpers may run Paddle on a service's event-loop thread: Paddle's first import must not be there.
import_on_main_thread()

WORKERS = Path(__file__).parent.parent / "integration" / "exporter" / "workers"
BUILDERS = "exporter_test_builders"
EXAMPLES = "paddleray.services.trainer.examples"
TERMINAL = states.MODEL_VERSION_TERMINAL


def new_model(model_id: str, create_ms: int = 1_000) -> model_pb2.Model:
    model = model_pb2.Model(name=f"models/{model_id}", display_name=model_id)
    model.create_time.FromMilliseconds(create_ms)
    return model


def new_version(builder: str = "paddleray.services.trainer.examples.digits_mlp:build_model") -> model_pb2.ModelVersion:
    return model_pb2.ModelVersion(model_builder=builder, state=model_pb2.MODEL_VERSION_STATE_EXPORTING)


class AppThread:
    """A service app and its gRPC server on their own event loop (both bind to the loop that
    makes them): make_app(settings) builds the app, registrations(app) its services."""

    def __init__(self, settings, make_app, registrations) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = self.run(self._make(make_app, settings))
        self.server = self.run(start_server(settings, registrations(self.app)))
        self.run(self.app.start())
        self.address = f"127.0.0.1:{self.server.port}"

    @staticmethod
    async def _make(make_app, settings):
        return make_app(settings)

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.run(stop_server(self.server, 0.5))
        self.run(self.app.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()


def exporter_thread(settings: ExporterSettings) -> AppThread:
    return AppThread(settings, ExporterApp, registrations)


class ExporterClient:
    def __init__(self, stub) -> None:
        self.stub = stub

    def export(self, **request) -> model_pb2.ModelVersion:
        return self.stub.ExportModel(es.ExportModelRequest(**request), timeout=30).model_version

    def get(self, name: str) -> model_pb2.ModelVersion:
        return self.stub.GetModelVersion(es.GetModelVersionRequest(name=name), timeout=10).model_version

    def wait_done(self, name: str, timeout: float = 180) -> model_pb2.ModelVersion:
        def ended():
            version = self.get(name)
            return version if version.state in TERMINAL else None

        return wait_until(ended, timeout=timeout, interval=0.1, message=f"{name} to end")

    def watch(self, name: str, timeout: float = 180) -> list[model_pb2.ModelVersion]:
        request = es.WatchModelVersionRequest(name=name)
        return [r.model_version for r in self.stub.WatchModelVersion(request, timeout=timeout)]


def linear_checkpoint(storage_root: Path | str, builder: str = "build_linear", seed: int = 0) -> str:
    """A complete checkpoint (model.pdparams + manifest) of one of the test builders, under
    storage_root (a path: settings.storage_root is its text since object-store roots)."""
    import importlib
    import sys

    import paddle

    sys.path.insert(0, str(WORKERS))
    try:
        module = importlib.import_module(BUILDERS)
    finally:
        sys.path.remove(str(WORKERS))
    paddle.seed(seed)
    storage_root = Path(storage_root)
    staged = storage_root / "staged" / f"{builder}-{seed}"
    staged.mkdir(parents=True, exist_ok=True)
    paddle.save(getattr(module, builder)({}).state_dict(), str(staged / "model.pdparams"))
    info = CheckpointStore(storage_root / "checkpoints" / builder).commit(staged, step=seed, epoch=1, metrics={})
    return str(info.path)


async def ready_version(store, storage_root: Path, model_id: str, backends=("paddle",), tenant: str = "default") -> int:
    """A READY version (validated for `backends`) of `tenant`'s model with a manifest on disk;
    returns its number."""
    _, record = await store.create_version(new_model(model_id), new_version(), "owner", "", tenant)
    version = model_pb2.ModelVersion()
    version.CopyFrom(record.version)
    version.state = model_pb2.MODEL_VERSION_STATE_READY
    for i, backend in enumerate(backends):
        check = version.validation.backends.add(
            backend={"paddle": model_pb2.BACKEND_PADDLE_INFERENCE, "onnx": model_pb2.BACKEND_ONNX_RUNTIME}[backend],
            passed=True)
        check.median_latency.FromMicroseconds(100 - 50 * i)
    await store.update_version(record, version)
    directory = Path(storage_root) / "models" / model_id / "versions" / str(record.number)
    write_exported(directory, model_id, record.number, tenant)
    return record.number


class ExporterProcess:
    """`python -m paddleray.services.exporter` as a child process, killable with SIGKILL, under the
    local stack's supervisor as production runs it (services/localstack/supervisor.py: started
    again on its old ports when it exits, which it does on a lost Ray cluster). `proc` is the
    supervisor, the leader of the process group of both; `kill()` SIGKILLs both."""

    def __init__(self, redis_url: str, ray_address: str, storage_root: Path, log_dir: Path, port: int = 0,
                 **settings) -> None:
        """Port 0 (the default) is read back from the ready file: a port chosen here could be
        taken before the child binds it. The ready file comes once start-up is done, though,
        so a test of the start-up window (a dependency down) gives a port of its own."""
        name = f"exporter-{uuid.uuid4().hex[:8]}"
        self.log = log_dir / f"{name}.log"
        self.ready_file = log_dir / f"{name}.ready.json"
        self._address: str | None = f"127.0.0.1:{port}" if port else None
        env = {
            **os.environ,
            "PADDLERAY_EXPORTER_PORT": str(port),
            "PADDLERAY_EXPORTER_READY_FILE": str(self.ready_file),
            "PADDLERAY_EXPORTER_REDIS_URL": redis_url,
            "PADDLERAY_EXPORTER_RAY_ADDRESS": ray_address,
            "PADDLERAY_EXPORTER_STORAGE_ROOT": str(storage_root),
            "PADDLERAY_EXPORTER_SCHEDULER_ADDRESS": "",
            "PADDLERAY_EXPORTER_BUILDER_ALLOWLIST": f'["{EXAMPLES}", "{BUILDERS}"]',
            "PADDLERAY_EXPORTER_EXPORT_NUM_CPUS": "0.5",
            "PADDLERAY_EXPORTER_OWNER_LEASE_S": "2",
            "PADDLERAY_EXPORTER_SWEEP_INTERVAL_S": "0.5",
            "PADDLERAY_EXPORTER_HEALTH_INTERVAL_S": "0.5",
            "PADDLERAY_EXPORTER_GRACE_PERIOD_S": "0",
            "PADDLERAY_EXPORTER_SERVING_GRPC_PORT": str(free_port()),
            "PADDLERAY_EXPORTER_SERVING_HTTP_PORT": str(free_port()),
            **{f"PADDLERAY_EXPORTER_{k}": str(v) for k, v in settings.items()},
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "paddleray.services.localstack.supervisor", "exporter"],
                                         env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def address(self) -> str:
        """host:port once the server has bound it (waits for the ready file, which comes before
        SERVING: health then says whether it serves)."""
        if self._address is None:
            def bound():
                assert self.proc.poll() is None, self.log.read_text()
                return read_ready_file(self.ready_file)

            ready = wait_until(bound, timeout=120, interval=0.1, message=f"the exporter's ready file (log: {self.log})")
            self._address = f"127.0.0.1:{ready['port']}"
        return self._address

    def wait_serving(self, timeout: float = 120) -> None:
        def up():
            assert self.proc.poll() is None, self.log.read_text()
            return serving(self.address)

        wait_until(up, timeout=timeout, interval=0.2, message=f"the exporter to serve (log: {self.log})")

    def service_pid(self) -> int | None:
        """The exporter's own pid (the supervisor's child), from its ready file."""
        ready = read_ready_file(self.ready_file)
        return ready["pid"] if ready else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):  # nothing of the group outlives the test
            os.killpg(self.proc.pid, signal.SIGKILL)


async def servable_version(store, storage_root: Path, model_id: str) -> str:
    """A READY version validated for Paddle Inference, with a real (tiny MLP) artifact on disk
    that Serve's replicas load; returns its name."""
    from paddleray.services.exporter.export.exports import artifact_dir
    from support.serving import export_model

    _, record = await store.create_version(new_model(model_id), new_version(), "owner", "")
    version = model_pb2.ModelVersion()
    version.CopyFrom(record.version)
    version.state = model_pb2.MODEL_VERSION_STATE_READY
    version.validation.backends.add(backend=model_pb2.BACKEND_PADDLE_INFERENCE, passed=True)
    await store.update_version(record, version)
    export_model(artifact_dir(storage_root, model_id, record.number), "mlp")
    return record.version.name
