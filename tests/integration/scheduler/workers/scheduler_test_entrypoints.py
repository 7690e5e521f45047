"""User functions the scheduler's tests run on the real trainer (allowlisted by the tests).

Small on purpose: the shared test Ray head has 2 CPUs.
"""

from __future__ import annotations

import json
import time


def flaky_epochs(config, ctx):
    """Checkpoints every epoch; the first attempt (not resumed) raises at fail_at_epoch."""
    resumed = ctx.checkpoint_manifest
    start = resumed["epoch"] + 1 if resumed else 1
    print(f"starting at epoch {start}", flush=True)
    for epoch in range(start, int(config["epochs"]) + 1):
        if epoch == config.get("fail_at_epoch") and resumed is None:
            raise RuntimeError(f"injected failure at epoch {epoch}")
        directory = ctx.make_checkpoint_dir()
        (directory / "state.json").write_text(json.dumps({"epoch": epoch}))
        ctx.report({"epoch": epoch, "started_at_epoch": start}, checkpoint=directory)


def until_stopped(config, ctx):
    print("running until stopped", flush=True)
    while not ctx.should_stop():
        ctx.report({"alive": 1.0})
        time.sleep(0.1)


def burst(config, ctx):
    """Reports `count` metrics as fast as it can: the scheduler's follower falls behind and takes them in batches."""
    for step in range(1, int(config["count"]) + 1):
        ctx.report({"step": step, "value": step * 0.5})
