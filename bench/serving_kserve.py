"""The peer: KServe's Python model server around the same artifact and the same predictor code.

Run in KServe's own virtual env (bench/kserve_env.py makes it: KServe pins a protobuf older
than the project's generated code), with the repository's serving modules importable through
a package shim (kserve_env.shim_path) -- predictor.py and artifact.py import no protobuf:

    PADDLERAY_KSERVE_ARTIFACT=DIR PADDLERAY_KSERVE_MODEL=NAME [PADDLERAY_KSERVE_MKLDNN=1] \\
    python bench/serving_kserve.py --http_port P --grpc_port Q

KServe serves the v2 gRPC API on --grpc_port (all interfaces: KServe has no host option) and
v2 REST on --http_port. `predict` is async and calls the predictor on the server's loop, as
the Serve replica does; the benchmark turns KServe's per-request latency log line off
(--enable_latency_logging False), the rest of its request handling (InferRequest /
InferResponse conversions, Prometheus timers) is as it ships.
"""

from __future__ import annotations

import os

import kserve  # type: ignore[import-not-found]  # in KServe's venv only
import numpy as np
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse  # type: ignore[import-not-found]

from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica.predictor import load_predictor
from paddleray.services.exporter.serving.spec import PredictorOptions


class PaddleModel(kserve.Model):
    def __init__(self, name: str, artifact_dir: str, mkldnn: bool) -> None:
        super().__init__(name)
        self._artifact_dir, self._mkldnn = artifact_dir, mkldnn
        self.load()

    def load(self) -> bool:
        artifact = load_artifact(self._artifact_dir)
        self._predictor = load_predictor(artifact, "paddle", PredictorOptions(enable_mkldnn=self._mkldnn))
        self._outputs = [t.name for t in artifact.signature.outputs]
        self.ready = True
        return self.ready

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        inputs = {i.name: i.as_numpy() for i in payload.inputs}
        outputs = self._predictor.predict(inputs)
        results = []
        for name in self._outputs:
            array = np.asarray(outputs[name])
            out = InferOutput(name=name, shape=list(array.shape), datatype="FP32")
            out.set_data_from_numpy(array)
            results.append(out)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=results, from_grpc=payload.from_grpc)


if __name__ == "__main__":
    model = PaddleModel(os.environ["PADDLERAY_KSERVE_MODEL"], os.environ["PADDLERAY_KSERVE_ARTIFACT"],
                        os.environ.get("PADDLERAY_KSERVE_MKLDNN") == "1")
    kserve.ModelServer().start([model])
