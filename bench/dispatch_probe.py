"""The user code of the dispatch benchmark: its first line records when it started.

Run by paddleray as the entrypoint `bench.dispatch_probe:train`, and by Ray Jobs as a script.
"""

import sys
import time


def _stamp(path: str) -> None:
    with open(path, "w") as out:
        out.write(repr(time.time()))


def train(config, ctx):
    _stamp(config["stamp_path"])


if __name__ == "__main__":
    _stamp(sys.argv[1])
