"""ServeOwnership on the real shared Ray head: one paddleray installation manages Ray Serve on a
cluster while its exporter's driver lives; another is refused, and takes over once it has ended."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paddleray.services.common import errors, ray_private
from paddleray.services.exporter.serving.control.ownership import ServeOwnership
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Another installation's exporter: a driver of the same cluster that claims Serve and stays.
OTHER_DRIVER = textwrap.dedent("""
    import sys, time, ray
    from paddleray.services.exporter.serving.control.ownership import ServeOwnership
    ray.init(address=sys.argv[1], log_to_driver=False)
    ServeOwnership("other-installation").claim()
    print("claimed", flush=True)
    time.sleep(600)
""")


def test_another_live_installation_is_refused_and_an_ended_one_taken_over(ray_cluster):
    # From none (an exporter of an earlier test in this process may have claimed it).
    ray_private.gcs_client().internal_kv_del(b"paddleray/serve-owner", False, b"paddleray", timeout=10)
    mine = ServeOwnership("my-installation")
    other = subprocess.Popen([sys.executable, "-c", OTHER_DRIVER, ray_cluster], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "claimed"
        with pytest.raises(errors.FailedPrecondition) as refused:
            mine.claim()
        assert "another paddleray installation" in str(refused.value)
    finally:
        other.kill()
        other.wait(30)
    # Its driver's job ends with the process (the GCS notices): Serve is this installation's now.
    wait_until(lambda: _claims(mine), timeout=120, interval=1, message="the ended installation to be taken over")
    mine.claim()  # again: still mine


def test_an_earlier_exporter_of_this_same_driver_is_taken_over(ray_cluster):
    # In-process exporters of successive tests share the test process's driver, not a Redis.
    ServeOwnership("first").claim()
    ServeOwnership("second").claim()


def _claims(ownership: ServeOwnership) -> bool:
    try:
        ownership.claim()
    except errors.FailedPrecondition:
        return False
    return True
