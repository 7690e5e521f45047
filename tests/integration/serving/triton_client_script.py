"""Run by the tests in .venv-triton (stock tritonclient[grpc]), never in the project's env:
tritonclient's and our v2 stubs both define inference.* and cannot share one process.

argv: URL, then a JSON file with {"x": [[...]], "expected": [[...]]}; prints one JSON result.
"""

import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def main() -> None:
    url, case_path = sys.argv[1], sys.argv[2]
    case = json.load(open(case_path))
    x = np.asarray(case["x"], dtype=np.float32)
    client = grpcclient.InferenceServerClient(url=url)
    result = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("mlp"),
        "server_name": client.get_server_metadata(as_json=True)["name"],
        "metadata": client.get_model_metadata("mlp", as_json=True),
    }
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = client.infer("mlp", [inp], outputs=[grpcclient.InferRequestedOutput("fetch_name_0")], request_id="t1")
    result["infer"] = out.as_numpy("fetch_name_0").tolist()
    result["infer_id"] = out.get_response().id
    try:
        client.infer("nope", [inp])
        result["unknown_model"] = "no error"
    except InferenceServerException as exc:
        result["unknown_model"] = exc.status()
    bad = grpcclient.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    try:
        client.infer("mlp", [bad])
        result["bad_shape"] = "no error"
    except InferenceServerException as exc:
        result["bad_shape"] = [exc.status(), exc.message()]

    answers: queue.Queue = queue.Queue()
    # tritonclient calls back with keywords: callback(result=..., error=...).
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    for i in range(20):
        client.async_stream_infer("mlp", [inp], request_id=f"s{i}")
    stream = [answers.get(timeout=30) for _ in range(20)]
    client.stop_stream()
    result["stream_ids"] = [r.get_response().id for r, e in stream if e is None]
    result["stream_errors"] = [str(e) for r, e in stream if e is not None]
    result["stream_first"] = stream[0][0].as_numpy("fetch_name_0").tolist() if stream[0][1] is None else None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
