"""Starts and stops the local stack: Redis, a Ray head and the three services.

`up` starts every part as a detached background process (they outlive the command; each
service under a supervisor that starts it again when it dies, supervisor.py), waits
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

from paddleray.services.common.redis_client import RedisSettings
from paddleray.services.common.storage import check_root, is_uri
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import free_port, pid_alive, read_ready_file, stop_process, wait_until
from paddleray.services.localstack.ray_cluster import LocalCluster
from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead, reap_haproxy, stop_ray_head
from paddleray.services.localstack.redis_process import INSTALL_HINT, RedisProcess, redis_reachable

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".paddleray") / "stack"
SERVICES = ("trainer", "scheduler", "exporter")
LOCAL_POOL_IDLE_TTL_S = 15


@dataclass
class ServiceProcess:
    name: str
    address: str
    pid: int  # its supervisor's, the leader of the process group of both
    log_file: str
    metrics_address: str = ""


@dataclass
class NodeProcess:
    """A worker node of the stack's own Ray cluster (`paddleray up --nodes N`)."""

    name: str
    pid: int  # the blocking `ray start`, and the id of the node's process group
    num_cpus: int
    log_file: str


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
    redis_tls_ca_file: str = ""  # CA of a rediss:// Redis the stack was given (its password is kept nowhere)
    haproxy_dir: str = ""  # the head's HAProxy state folder: a crashed head's HAProxy is ended by `down`
    ray_nodes: list[NodeProcess] = field(default_factory=list)  # worker nodes, when up started them

    def address(self, service: str) -> str:
        return self.services[service].address

    def serving(self, service: str) -> bool:
        return serving(self.address(service), tls_ca=self.tls_ca or None)

    def redis(self, password: str | None = None) -> RedisSettings:
        """The stack's Redis as settings; its password, which the stack keeps nowhere, is the caller's to give."""
        return RedisSettings(redis_url=self.redis_url, redis_password=password,
                             redis_tls_ca_file=self.redis_tls_ca_file or None)

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
        raw["ray_nodes"] = [NodeProcess(**n) for n in raw.get("ray_nodes", [])]
        return cls(**raw)


def state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def _ensure_redis_server_binary() -> None:
    # Installing is `make setup`'s job (it installs redis-server), not a library's at run time.
    if not shutil.which("redis-server"):
        raise RuntimeError(f"redis-server is not installed; run: {INSTALL_HINT}")


def _start_redis(state_dir: Path, given: RedisSettings | None) -> tuple[RedisSettings, int | None]:
    """The Redis the user named (it must answer, to its credentials), else one of the stack's
    own: never whatever happens to answer at the default address (on a shared host, someone else's)."""
    if given is not None:
        if not redis_reachable(given):
            raise RuntimeError(f"the Redis named by REDIS_URL / --redis-url ({redact_url(given.redis_url)}) does not "
                               "answer, or refuses its password")
        return given, None
    _ensure_redis_server_binary()
    # Durable: the scheduler's promise that nothing accepted is lost needs an fsync'd AOF.
    redis = RedisProcess(state_dir / "redis", durable=True).start()
    assert redis.process is not None  # start() returns with the server running
    return RedisSettings(redis_url=redis.url), redis.process.pid


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
    # Each service-to-service client checks its peer's certificate with the stack's CA.
    env["PADDLERAY_SCHEDULER_TRAINER_TLS_CA_FILE"] = str(tls.ca_file)
    env["PADDLERAY_EXPORTER_SCHEDULER_TLS_CA_FILE"] = str(tls.ca_file)
    return env


def _redis_password_env(redis: RedisSettings) -> dict[str, str]:
    """The password of a Redis the stack was given, for the two services that keep state in it."""
    if redis.redis_password is None:
        return {}
    return {f"PADDLERAY_{s.upper()}_REDIS_PASSWORD": redis.redis_password.get_secret_value()
            for s in ("scheduler", "exporter")}


def _service_env(service: str, state: StackState, ready_file: Path, given: dict[str, str]) -> dict[str, str]:
    prefix = f"PADDLERAY_{service.upper()}_"
    env = {**os.environ, **given, **AUTH_ENV, "GLOG_v": "0", "GLOG_minloglevel": "2"}
    env.update({
        # Port 0: the service binds a free port itself and reports it in its ready file.
        prefix + "PORT": "0",
        prefix + "METRICS_PORT": "0",
        prefix + "READY_FILE": str(ready_file),
        prefix + "STORAGE_ROOT": state.storage_root,
        prefix + "RAY_ADDRESS": state.ray_address,
        **state.redis().redis_env(prefix),  # URL and CA; a password comes with `given`
    })
    if service == "trainer" and is_uri(state.storage_root):  # its own records stay with the stack
        env[prefix + "RECORDS_DIR"] = str(Path(state.state_dir) / "trainer-records")
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


def _start_service(service: str, state: StackState, given: dict[str, str]) -> ServiceProcess:
    """Starts the service's process; its address is known once it is ready (_wait_ready)."""
    state_dir = Path(state.state_dir)
    ready = ready_file(state_dir, service)
    ready.unlink(missing_ok=True)
    log_file = state_dir / f"{service}.log"
    with open(log_file, "ab") as out:
        # Under a supervisor of its own, which starts it again if it dies (supervisor.py).
        process = subprocess.Popen(
            [sys.executable, "-m", "paddleray.services.localstack.supervisor", service],
            env=_service_env(service, state, ready, given),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    return ServiceProcess(service, "", process.pid, str(log_file))


def _wait_ready(process: ServiceProcess, state: StackState, timeout: float) -> None:
    """Waits for the service's ready file, takes its addresses from it, then waits for SERVING."""
    state_dir = Path(state.state_dir)

    def ready() -> dict | None:
        if not pid_alive(process.pid):
            raise exited_during_start_up(process)
        document = read_ready_file(ready_file(state_dir, process.name))
        # A file left by an earlier process of the same name does not count: this one's is
        # written by the service, the supervisor's child (process.pid is the supervisor's).
        return document if document is not None and process.pid in (document["pid"], document.get("parent_pid")) \
            else None

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
    redis_password: str | None = None,
    redis_tls_ca_file: Path | None = None,
    nodes: int = 0,
    ray_env: dict[str, str] | None = None,
    storage_root: str | None = None,
) -> StackState:
    """Starts the stack in the background and returns its state once every service serves.

    With redis_url, the services use that Redis (which must answer; redis_password and, for a
    rediss:// URL, redis_tls_ca_file are passed to them as settings of their own, and the
    password is written nowhere), else one of the stack's own; with ray_address, that Ray
    cluster instead of a head of the stack's own; with nodes, the stack's own cluster is a head
    without CPUs and that many worker nodes of num_cpus each (default: this host's CPUs shared
    out, at least 1), each a raylet of its own (ray_cluster.py); ray_env is more environment
    for its Ray processes (Ray system config); storage_root is the services' storage root (a
    directory or an object-store URI, checked first; default: state_dir/storage); with tls, the services serve TLS (the scheduler
    dials the trainer, the exporter the scheduler, and the stack checks health, with its CA).
    """
    if not redis_url and (redis_password or redis_tls_ca_file):
        raise ValueError("redis_password and redis_tls_ca_file are for a Redis named by redis_url")
    if storage_root is not None:
        storage_root = check_root(storage_root)  # ValueError: before anything starts
    named_redis = RedisSettings(redis_url=redis_url, redis_password=redis_password,
                                redis_tls_ca_file=redis_tls_ca_file) if redis_url else None
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
    redis, redis_pid = _start_redis(state_dir, named_redis)
    ray_pid, haproxy_dir = None, ""
    ray_nodes: list[NodeProcess] = []
    if ray_address is None and nodes:
        per_node = num_cpus or max(1, (os.cpu_count() or 2) // nodes)
        cluster = LocalCluster(node_cpus=[per_node] * nodes, head_cpus=0, log_dir=state_dir / "ray",
                               env=dict(ray_env or {})).start()
        assert cluster.head is not None and cluster.head.process is not None
        ray_address, ray_pid = cluster.address, cluster.head.process.pid
        haproxy_dir = str(cluster.head.haproxy_dir)
        ray_nodes = [NodeProcess(n.name, n.pid, n.num_cpus, str(n.log_file)) for n in cluster.nodes.values()]
    elif ray_address is None:
        head = RayHead(num_cpus=num_cpus or os.cpu_count() or 2, log_file=state_dir / "ray.log",
                       env=dict(ray_env or {})).start()
        assert head.process is not None  # start() returns with the head running
        ray_address, ray_pid = head.address, head.process.pid
        haproxy_dir = str(head.haproxy_dir)
    state = StackState(
        state_dir=str(state_dir), redis_url=redis.redis_url, redis_pid=redis_pid, ray_address=ray_address,
        ray_pid=ray_pid, haproxy_dir=haproxy_dir, storage_root=storage_root or str(state_dir / "storage"), tls_ca=str(tls.ca_file) if tls else "",
        redis_tls_ca_file=str(redis.redis_tls_ca_file or ""), ray_nodes=ray_nodes,
    )
    state.save()  # saved before the services start, so that `down` can clean up a failed `up`
    # Tokens, certificates and the Redis credentials: passed in each service's environment, never saved.
    given = {**_auth_env(dict(os.environ), auth_token), **_tls_env(tls), **_redis_password_env(redis)}
    try:
        # Each starts once the one whose address it needs is ready: the scheduler dials the
        # trainer, the exporter the scheduler (SERVICES is that order).
        for service in SERVICES:
            state.services[service] = _start_service(service, state, given)
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
        raise exited_during_start_up(process)
    return state.serving(process.name)


class StartUpFailed(RuntimeError):
    """A service of the stack exited before it served."""


def exited_during_start_up(process: ServiceProcess) -> StartUpFailed:
    """The error, with the log's last line: a bad setting is one line there (ServiceSettings.for_main)."""
    try:
        lines = [line for line in Path(process.log_file).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    last = f": {lines[-1].strip()}" if lines else ""
    return StartUpFailed(f"{process.name} exited during start-up{last} (log: {process.log_file})")


def down(state_dir: Path = DEFAULT_STATE_DIR, grace_period_s: float = 15) -> bool:
    """Stops everything `up` started; returns False when no stack was running."""
    state = StackState.load(state_dir)
    if state is None:
        return False
    for process in reversed(list(state.services.values())):
        stop_process(process.pid, grace_period_s)
    for node in reversed(state.ray_nodes):
        stop_ray_head(node.pid)
    if state.ray_pid is not None:
        stop_ray_head(state.ray_pid)
    if state.haproxy_dir:
        reap_haproxy(Path(state.haproxy_dir))
    if state.redis_pid is not None:
        stop_process(state.redis_pid, 10)
    state_file(state_dir).unlink(missing_ok=True)
    return True

