"""Starts and stops the local stack: Redis, a Ray head and the three services.

`up` starts every part as a detached background process (they outlive the command), waits
until each service reports SERVING over gRPC health, and writes one state file with every
address, pid and log path; `down` reads it and stops exactly what `up` started.

No port is chosen here for a service: each binds port 0 and writes the ports it bound to a
ready file (`<service>.ready.json`, see services/common/server.py), from which the addresses
are read. A port chosen ahead and bound seconds later is taken in between often enough, by
Ray's workers among others, to fail one start in a few.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import free_port, pid_alive, read_ready_file, stop_process, wait_until
from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead, stop_ray_head
from paddleray.services.localstack.redis_process import INSTALL_HINT, RedisProcess, redis_reachable

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".paddleray") / "stack"
SERVICES = ("trainer", "scheduler", "exporter")
LOCAL_POOL_IDLE_TTL_S = 15


@dataclass
class ServiceProcess:
    name: str
    address: str
    pid: int
    log_file: str
    metrics_address: str = ""


@dataclass
class StackState:
    state_dir: str
    redis_url: str
    redis_pid: int | None
    ray_address: str
    ray_pid: int | None
    storage_root: str
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    tls_ca: str = ""  # CA of the services' certificate when they serve TLS

    def address(self, service: str) -> str:
        return self.services[service].address

    def serving(self, service: str) -> bool:
        return serving(self.address(service), tls_ca=self.tls_ca or None)

    def save(self) -> Path:
        # 0600 from the first byte: a Redis URL the user gave may carry a password.
        path = state_file(Path(self.state_dir))
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, state_dir: Path = DEFAULT_STATE_DIR) -> StackState | None:
        path = state_file(state_dir)
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        raw["services"] = {k: ServiceProcess(**v) for k, v in raw["services"].items()}
        return cls(**raw)


def state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def _ensure_redis_server_binary() -> None:
    # Installing is `make setup`'s job (it installs redis-server), not a library's at run time.
    if not shutil.which("redis-server"):
        raise RuntimeError(f"redis-server is not installed; run: {INSTALL_HINT}")


def _start_redis(state_dir: Path, redis_url: str | None) -> tuple[str, int | None]:
    """The Redis the user named (it must answer), else one of the stack's own: never whatever
    happens to answer at the default address (on a shared host, someone else's)."""
    if redis_url:
        if not redis_reachable(redis_url):
            raise RuntimeError(f"the Redis named by REDIS_URL / --redis-url ({redact_url(redis_url)}) does not answer")
        return redis_url, None
    _ensure_redis_server_binary()
    # Durable: the scheduler's promise that nothing accepted is lost needs an fsync'd AOF.
    redis = RedisProcess(state_dir / "redis", durable=True).start()
    assert redis.process is not None  # start() returns with the server running
    return redis.url, redis.process.pid


def redact_url(url: str) -> str:
    """The URL without its password, to show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}***@{host}"))


def _auth_env(environ: dict[str, str], auth_token: str) -> dict[str, str]:
    """Tokens, consistently: `auth_token` (if given) for every service, else what the
    environment sets per service (never blanked); the scheduler gets a credential the trainer
    accepts, and the exporter one the scheduler accepts (the callee's token, or a generated
    admin token added to a callee with only a token file)."""
    env = {f"PADDLERAY_{s.upper()}_AUTH_TOKEN": auth_token for s in SERVICES} if auth_token else {}
    for caller, callee in (("scheduler", "trainer"), ("exporter", "scheduler")):
        own = f"PADDLERAY_{callee.upper()}_AUTH_TOKEN"
        token = env.get(own) or environ.get(own, "")
        if not token and environ.get(f"PADDLERAY_{callee.upper()}_AUTH_TOKENS_FILE"):
            token = env[own] = secrets.token_urlsafe(32)
        given = f"PADDLERAY_{caller.upper()}_{callee.upper()}_AUTH_TOKEN"
        if token and not environ.get(given):
            env[given] = token
    return env


@dataclass(frozen=True)
class StackTls:
    """One certificate for every service (it must name 127.0.0.1), and the CA that signed it."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def _tls_env(tls: StackTls | None) -> dict[str, str]:
    if tls is None:
        return {}
    env = {}
    for service in SERVICES:
        prefix = f"PADDLERAY_{service.upper()}_"
        env[prefix + "TLS_CERT_FILE"], env[prefix + "TLS_KEY_FILE"] = str(tls.cert_file), str(tls.key_file)
    env["PADDLERAY_SCHEDULER_TRAINER_TLS_CA_FILE"] = str(tls.ca_file)
    return env


def _service_env(service: str, state: StackState, ready_file: Path, auth: dict[str, str]) -> dict[str, str]:
    prefix = f"PADDLERAY_{service.upper()}_"
    env = {**os.environ, **auth, **AUTH_ENV, "GLOG_v": "0", "GLOG_minloglevel": "2"}
    env.update({
        # Port 0: the service binds a free port itself and reports it in its ready file.
        prefix + "PORT": "0",
        prefix + "METRICS_PORT": "0",
        prefix + "READY_FILE": str(ready_file),
        prefix + "STORAGE_ROOT": state.storage_root,
        prefix + "REDIS_URL": state.redis_url,
        prefix + "RAY_ADDRESS": state.ray_address,
    })
    if service == "scheduler":
        env[prefix + "TRAINER_ADDRESS"] = state.address("trainer")
        # The scheduler checks the trainer's allowlist at CreateJob: keep the two in step.
        if "PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST" in os.environ:
            env.setdefault(prefix + "ENTRYPOINT_ALLOWLIST", os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"])
    if service == "trainer":
        # A stack on one small machine: an idle warm worker group holds its CPUs, and exports and
        # serving replicas waited the pool's 5 minutes for them (seen: an export 369 s after the
        # retrain ended). Back-to-back runs, such as a sweep's trials, still reuse warm groups.
        env.setdefault(prefix + "POOL_IDLE_TTL_S", str(LOCAL_POOL_IDLE_TTL_S))
    if service == "exporter":
        # Ray Serve's proxies (the v2 inference endpoint) on free ports, not 9000 / 8000: a
        # second stack or another program on the host may hold those. Serve binds a port it is
        # given (no port 0 and ready file), so these are chosen ahead, unlike the services' own.
        env.setdefault(prefix + "SERVING_GRPC_PORT", str(free_port()))
        env.setdefault(prefix + "SERVING_HTTP_PORT", str(free_port()))
        # Exports from a job read the job (its checkpoints, entrypoint, config) from the scheduler.
        env[prefix + "SCHEDULER_ADDRESS"] = state.address("scheduler")
    return env


def ready_file(state_dir: Path, service: str) -> Path:
    return state_dir / f"{service}.ready.json"


def _start_service(service: str, state: StackState, auth: dict[str, str]) -> ServiceProcess:
    """Starts the service's process; its address is known once it is ready (_wait_ready)."""
    state_dir = Path(state.state_dir)
    ready = ready_file(state_dir, service)
    ready.unlink(missing_ok=True)
    log_file = state_dir / f"{service}.log"
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", f"paddleray.services.{service}"],
            env=_service_env(service, state, ready, auth),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    return ServiceProcess(service, "", process.pid, str(log_file))


def _wait_ready(process: ServiceProcess, state: StackState, timeout: float) -> None:
    """Waits for the service's ready file, takes its addresses from it, then waits for SERVING."""
    state_dir = Path(state.state_dir)

    def ready() -> dict | None:
        if not pid_alive(process.pid):
            raise RuntimeError(f"{process.name} exited during start-up; see {process.log_file}")
        document = read_ready_file(ready_file(state_dir, process.name))
        # A file left by an earlier process of the same name does not count.
        return document if document is not None and document["pid"] == process.pid else None

    document = wait_until(ready, timeout=timeout, interval=0.1, message=f"{process.name}'s ready file (log: {process.log_file})")
    process.address = f"{document['host']}:{document['port']}"
    process.metrics_address = f"{document['host']}:{document['metrics_port']}"
    wait_until(
        lambda: _serving_or_dead(process, state), timeout=timeout, interval=0.2,
        message=f"{process.name} to report SERVING (log: {process.log_file})",
    )


def up(
    state_dir: Path = DEFAULT_STATE_DIR,
    redis_url: str | None = None,
    num_cpus: int | None = None,
    auth_token: str = "",
    ray_address: str | None = None,
    timeout: float = 180,
    tls: StackTls | None = None,
) -> StackState:
    """Starts the stack in the background and returns its state once every service serves.

    With redis_url, the services use that Redis (which must answer), else one of the stack's
    own; with ray_address, that Ray cluster instead of a head of the stack's own; with tls, the
    services serve TLS (the scheduler dials the trainer, and the stack checks health, with its CA).
    """
    existing = StackState.load(state_dir)
    if existing is not None and set(existing.services) == set(SERVICES) and all(
        existing.serving(name) for name in existing.services
    ):
        return existing
    if existing is not None:
        down(state_dir)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o700)
    url, redis_pid = _start_redis(state_dir, redis_url)
    ray_pid = None
    if ray_address is None:
        head = RayHead(num_cpus=num_cpus or os.cpu_count() or 2, log_file=state_dir / "ray.log").start()
        assert head.process is not None  # start() returns with the head running
        ray_address, ray_pid = head.address, head.process.pid
    state = StackState(
        state_dir=str(state_dir), redis_url=url, redis_pid=redis_pid, ray_address=ray_address,
        ray_pid=ray_pid, storage_root=str(state_dir / "storage"), tls_ca=str(tls.ca_file) if tls else "",
    )
    state.save()  # saved before the services start, so that `down` can clean up a failed `up`
    auth = {**_auth_env(dict(os.environ), auth_token), **_tls_env(tls)}
    try:
        # Each starts once the one whose address it needs is ready: the scheduler dials the
        # trainer, the exporter the scheduler (SERVICES is that order).
        for service in SERVICES:
            state.services[service] = _start_service(service, state, auth)
            state.save()
            _wait_ready(state.services[service], state, timeout)
        state.save()
    except BaseException:
        down(state_dir)
        raise
    write_prometheus_config(state)
    return state


def write_prometheus_config(state: StackState) -> Path:
    """A Prometheus config scraping the stack's services (`prometheus --config.file=...`)."""
    jobs = [
        f"  - job_name: paddleray-{p.name}\n    static_configs:\n      - targets: ['{p.metrics_address}']\n"
        for p in state.services.values()
    ]
    path = Path(state.state_dir) / "prometheus.yml"
    path.write_text("global:\n  scrape_interval: 5s\nscrape_configs:\n" + "".join(jobs))
    return path


def _serving_or_dead(process: ServiceProcess, state: StackState) -> bool:
    if not pid_alive(process.pid):
        raise RuntimeError(f"{process.name} exited during start-up; see {process.log_file}")
    return state.serving(process.name)


def down(state_dir: Path = DEFAULT_STATE_DIR, grace_period_s: float = 15) -> bool:
    """Stops everything `up` started; returns False when no stack was running."""
    state = StackState.load(state_dir)
    if state is None:
        return False
    for process in reversed(list(state.services.values())):
        stop_process(process.pid, grace_period_s)
    if state.ray_pid is not None:
        stop_ray_head(state.ray_pid)
    if state.redis_pid is not None:
        stop_process(state.redis_pid, 10)
    state_file(state_dir).unlink(missing_ok=True)
    return True

