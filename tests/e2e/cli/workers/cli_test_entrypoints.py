"""User code for the CLI tests, shipped to the workers through PYTHONPATH (not a built-in example)."""

from __future__ import annotations

import time


def typed(config, ctx):
    """Prints the Python types of its config: integers must arrive as ints."""
    print("types:", {key: type(value).__name__ for key, value in sorted(config.items())}, flush=True)
    print("hidden[0] type:", type(config["hidden_sizes"][0]).__name__, flush=True)
    for epoch in range(1, config["epochs"] + 1):
        ctx.report({"epoch": epoch, "loss": 1.0 / epoch})


def fail(config, ctx):
    ctx.report({"epoch": 1})
    raise RuntimeError("cli test: this job fails on purpose")


def slow(config, ctx):
    """One epoch every `sleep_s` seconds, printing a line per epoch, until `epochs` or a stop."""
    for epoch in range(1, config.get("epochs", 1000) + 1):
        if ctx.should_stop():
            return
        print(f"slow epoch {epoch}", flush=True)
        ctx.report({"epoch": epoch, "accuracy": epoch / 100})
        time.sleep(config.get("sleep_s", 0.5))
