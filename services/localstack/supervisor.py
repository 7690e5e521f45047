"""Keeps one service of the local stack running: a dead one is started again, on its old ports,
after a bounded backoff, and each restart is logged, as Kubernetes does for the manifests'
containers (restartPolicy Always, with its crash-loop backoff).

    python -m paddleray.services.localstack.supervisor SERVICE    (with the service's environment)

runs the service (`python -m paddleray.services.<service>`) as its child and is what `paddleray up` starts (and
`paddleray down` stops: SIGTERM is passed on to the service, which drains, and the supervisor
exits with it instead of restarting it). The service writes its ready file as before; the
ports it bound there are given to every later start (PADDLERAY_<SERVICE>_PORT and
_METRICS_PORT), so clients, the stack's state file and Prometheus keep the same addresses.

Why a process of its own: the exporter ends itself when its Ray cluster is lost
(entry.EXIT_RAY_LOST) so that it reconnects in a fresh process, without any state of the dead
cluster's driver; a native crash (SIGSEGV) or an OOM kill ends a service as well. Without a
supervisor such a service stayed dead (no inference answered for the 285 s watched, issue 21).

A service that exits before it was ever ready (a bad setting: exit 2 with one line) is not
restarted: the supervisor exits with its code, and `paddleray up` reports the log's last line.

Backoff: a start that ran less than STABLE_S counts as a failure; the n-th failure in a row
waits min(BACKOFF_CAP_S, BACKOFF_S * 2 ** (n - 1)). An exit on a lost Ray cluster is no failure
(the service asked for the fresh process): it is started again after BACKOFF_S.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from paddleray.services.common.entry import EXIT_RAY_LOST

log = logging.getLogger("paddleray.supervisor")

BACKOFF_S = 0.5
BACKOFF_CAP_S = 30.0
STABLE_S = 60.0
_PR_SET_PDEATHSIG = 1


def backoff_s(failures: int) -> float:
    """The wait before the next start after `failures` short-lived starts in a row (0: none)."""
    if failures <= 0:
        return BACKOFF_S
    return min(BACKOFF_CAP_S, BACKOFF_S * 2 ** (failures - 1))


def describe_exit(code: int) -> str:
    if code == EXIT_RAY_LOST:
        return f"exited with {code}: its Ray cluster was lost, so it reconnects in a fresh process"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def _die_with_supervisor() -> None:
    """In the child before exec: SIGTERM it when the supervisor dies (even of SIGKILL), so that no
    service outlives the supervisor that `paddleray down` stops."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    def __init__(self, service: str, environ: dict[str, str] | None = None) -> None:
        self.service = service
        self.prefix = f"PADDLERAY_{service.upper()}_"
        self.env = dict(os.environ if environ is None else environ)
        ready = self.env.get(self.prefix + "READY_FILE", "")
        self.ready_file = Path(ready) if ready else None
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.restarts = 0
        self.ready_once = False  # a start wrote its ready file: from then on every exit is restarted

    def stop(self, signum: int, _frame: object = None) -> None:
        """SIGTERM/SIGINT: passed on to the service, which is then not started again."""
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        failures = 0
        while True:
            started = time.monotonic()
            self.child = subprocess.Popen([sys.executable, "-m", f"paddleray.services.{self.service}"], env=self.env,
                                          preexec_fn=_die_with_supervisor)
            code = self.child.wait()
            ran_s = time.monotonic() - started
            if self.stopping:
                return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else code
            if not self._keep_ports(self.child.pid) and not self.ready_once:
                # It never came up (a bad setting exits 2 with one line): that is `paddleray up`'s
                # to report (StartUpFailed with the log's last line), not a restart's to repeat.
                log.warning("supervisor: %s (pid %d) %s before it was ever ready; not restarting it",
                            self.service, self.child.pid, describe_exit(code))
                return code if code > 0 else 1
            failures = 0 if code == EXIT_RAY_LOST or ran_s >= STABLE_S else failures + 1
            wait_s = backoff_s(failures)
            self.restarts += 1
            log.warning("supervisor: %s (pid %d) %s after %.1f s; restart %d in %.1f s on port %s",
                        self.service, self.child.pid, describe_exit(code), ran_s, self.restarts, wait_s,
                        self.env.get(self.prefix + "PORT", "?"))
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.stopping:
                    return 0
                time.sleep(0.05)

    def _keep_ports(self, pid: int) -> bool:
        """The ports the child bound (its ready file), for every later start; whether it wrote one
        (without a ready file configured, every start counts as ready)."""
        if self.ready_file is None:
            self.ready_once = True
            return True
        try:
            document = json.loads(self.ready_file.read_text())
        except (OSError, ValueError):
            return False
        if document.get("pid") != pid:
            return False
        self.ready_once = True
        self.env[self.prefix + "PORT"] = str(document["port"])
        if document.get("metrics_port"):
            self.env[self.prefix + "METRICS_PORT"] = str(document["metrics_port"])
        return True


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(sys.argv) != 2:
        sys.exit("usage: python -m paddleray.services.localstack.supervisor SERVICE")
    supervisor = Supervisor(sys.argv[1])
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, supervisor.stop)
    sys.exit(supervisor.run())


if __name__ == "__main__":
    main()
