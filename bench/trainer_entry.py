"""The entrypoint `python -m bench trainer` runs under paddleray: a digits example, timed inside the rank.

Measuring inside the rank times the same span the bare script times (the training function,
data loading to last checkpoint), so the ratio shows what paddleray costs while training
(ctx.report, checkpoint commits, stop checks, the actor) and not the one-off start of a run.
"""

from __future__ import annotations

import importlib
import time


def digits(config: dict, ctx) -> None:
    example = importlib.import_module(f"paddleray.services.trainer.examples.{config['model']}")
    started = time.perf_counter()
    last = example.train(config, ctx)
    elapsed = time.perf_counter() - started
    ctx.report({"bench_elapsed_s": elapsed, "bench_samples": last["samples"] * int(config["epochs"])})
