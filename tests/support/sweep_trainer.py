"""The scheduler tests' scripted trainer, with runs that behave like sweep trials.

A trial run reports {"epoch": e, "acc": acc} once per epoch for config["epochs"] epochs,
config["epoch_s"] seconds apart, with a checkpoint after each epoch. Its accuracy comes from
its config: acc = trial_score(lr) * e / epochs with trial_score(lr) = 1 - |lr - 0.3|, so trials
rank by lr the same way at every epoch and ASHA has something to cut; with config["overfit_after"]
= k, accuracy falls by 0.1 per epoch after epoch k; with config["plateau_after"] = k, it stays at
its epoch-k value (ties). The trainer also counts
the runs in flight at once (what max_concurrent_trials bounds) and the epochs run in all (the
compute ASHA saves).
"""

from __future__ import annotations

import asyncio

from google.protobuf import json_format

from paddleray.common.v1 import common_pb2
from paddleray.trainer.v1 import run_pb2
from support.fake_trainer import TERMINAL, FakeRun, FakeTrainer

R = run_pb2.RunState


def trial_score(lr: float) -> float:
    return 1.0 - abs(lr - 0.3)


class SweepTrainer(FakeTrainer):
    def __init__(self, cpus: float = 16) -> None:
        super().__init__(cpus=cpus)
        self.max_in_flight = 0
        self.epochs_run = 0

    async def StartRun(self, request, context):
        response = await super().StartRun(request, context)
        self.max_in_flight = max(self.max_in_flight, len(self.live()))
        return response

    async def _script(self, fake: FakeRun, script: dict, attempt: int) -> None:
        config = json_format.MessageToDict(fake.run.spec.config)
        epochs = int(config.get("epochs", 3))
        epoch_s = float(config.get("epoch_s", 0.05))
        score = trial_score(float(config.get("lr", 0.3)))
        await fake.set_state(R.RUN_STATE_STARTING)
        await fake.set_state(R.RUN_STATE_RUNNING)
        for epoch in range(1, epochs + 1):
            await asyncio.sleep(epoch_s)
            if fake.run.state in TERMINAL:
                return
            self.epochs_run += 1
            acc = score * epoch / epochs
            overfit_after = config.get("overfit_after")
            if overfit_after is not None and epoch > overfit_after:
                acc = score * overfit_after / epochs - 0.1 * (epoch - overfit_after)
            plateau_after = config.get("plateau_after")
            if plateau_after is not None and epoch > plateau_after:
                acc = score * plateau_after / epochs
            report = common_pb2.MetricsReport(step=epoch, metrics={"epoch": float(epoch), "acc": acc})
            fake.run.latest_metrics.CopyFrom(report)
            await fake.emit(metrics=report)
            checkpoint = common_pb2.Checkpoint(uri=f"mem://{fake.run.name}/epoch-{epoch}", step=epoch, epoch=epoch,
                                               metrics={"acc": acc})
            fake.run.latest_checkpoint.CopyFrom(checkpoint)
            await fake.emit(checkpoint=checkpoint)
        await fake.set_state(R.RUN_STATE_SUCCEEDED, "all ranks returned")
