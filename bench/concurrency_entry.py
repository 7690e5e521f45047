"""The tiny function `python -m bench concurrency` runs many of at once, under paddleray and Ray Tune.

It reports a metric every `report_s` until the file `release` exists (or `max_s` passed), so
that every run of a level is live at the same time while the bench measures what each costs;
then it returns. `report(ctx, metrics)` is the only difference between the two sides.
"""

from __future__ import annotations

import time
from pathlib import Path


def hold(config: dict, ctx) -> None:
    release, interval = Path(config["release"]), float(config.get("report_s", 0.25))
    deadline = time.monotonic() + float(config.get("max_s", 900))
    step = 0
    while True:
        step += 1
        ctx.report({"step": step})
        if release.exists() or time.monotonic() > deadline:
            return
        time.sleep(interval)
