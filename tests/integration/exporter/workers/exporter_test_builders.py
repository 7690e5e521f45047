"""Model builders the exporter tests export (shipped to the export task through PYTHONPATH)."""

from __future__ import annotations

import time

WIDTH = 8


def input_spec():
    from paddle.static import InputSpec

    return [InputSpec([None, WIDTH], "float32", "x")]


def build_linear(config):
    from paddle import nn

    return nn.Linear(WIDTH, 3)


class _Noisy:
    """Adds fresh noise on every call: static and dynamic runs can never agree."""

    @staticmethod
    def build():
        import paddle
        from paddle import nn

        class Noisy(nn.Layer):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(WIDTH, 3)

            def forward(self, x):
                return self.linear(x) + paddle.rand([3])

        return Noisy()


def build_noisy(config):
    return _Noisy.build()


def build_failing(config):
    raise ValueError("this builder cannot build anything")


def build_slow(config):
    """Takes long enough for a test to kill the exporter while the export runs."""
    time.sleep(float(config.get("sleep_s", 60)))
    return build_linear(config)
