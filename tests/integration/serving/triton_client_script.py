"""Run by the tests in .venv-triton (stock tritonclient[grpc,http]), never in the project's env:
tritonclient's and our v2 stubs both define inference.* and cannot share one process.

argv: gRPC address, REST address (host:port), then a JSON file with {"x": [[...]]}; prints one
JSON result. gRPC calls carry `application: mlp` (Serve's HAProxy routes between apps by it,
as KServe's gateways route by Host), and the same calls go again with no metadata at all
("bare", what a stock client does unchanged: paddleray-haproxy routes them by the model the
request names, haproxy_routes.py); REST needs nothing: the path names the model.
"""

import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

APP = {"application": "mlp"}


def grpc_part(url: str, x: np.ndarray) -> dict:
    client = grpcclient.InferenceServerClient(url=url)
    result = {
        "live": client.is_server_live(headers=APP),
        "ready": client.is_server_ready(headers=APP),
        "model_ready": client.is_model_ready("mlp", headers=APP),
        "server_name": client.get_server_metadata(headers=APP, as_json=True)["name"],
        "metadata": client.get_model_metadata("mlp", headers=APP, as_json=True),
    }
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = client.infer("mlp", [inp], outputs=[grpcclient.InferRequestedOutput("fetch_name_0")], request_id="t1",
                       headers=APP)
    result["infer"] = out.as_numpy("fetch_name_0").tolist()
    result["infer_id"] = out.get_response().id
    try:
        client.infer("nope", [inp], headers=APP)
        result["unknown_model"] = "no error"
    except InferenceServerException as exc:
        result["unknown_model"] = exc.status()
    bad = grpcclient.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    try:
        client.infer("mlp", [bad], headers=APP)
        result["bad_shape"] = "no error"
    except InferenceServerException as exc:
        result["bad_shape"] = [exc.status(), exc.message()]

    answers: queue.Queue = queue.Queue()
    # tritonclient calls back with keywords: callback(result=..., error=...).
    client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=APP)
    for i in range(20):
        client.async_stream_infer("mlp", [inp], request_id=f"s{i}")
    stream = [answers.get(timeout=30) for _ in range(20)]
    client.stop_stream()
    result["stream_ids"] = [r.get_response().id for r, e in stream if e is None]
    result["stream_errors"] = [str(e) for r, e in stream if e is not None]
    result["stream_first"] = stream[0][0].as_numpy("fetch_name_0").tolist() if stream[0][1] is None else None
    return result


def bare_part(url: str, x: np.ndarray) -> dict:
    client = grpcclient.InferenceServerClient(url=url)
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = {
        "live": client.is_server_live(), "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("mlp"),
        "server_name": client.get_server_metadata(as_json=True)["name"],
        "metadata": client.get_model_metadata("mlp", as_json=True),
        "infer": client.infer("mlp", [inp]).as_numpy("fetch_name_0").tolist(),
    }
    try:
        client.infer("nope", [inp])
        result["unknown_model"] = "no error"
    except InferenceServerException as exc:
        result["unknown_model"] = [exc.status(), exc.message()]
    return result


def http_part(url: str, x: np.ndarray) -> dict:
    client = httpclient.InferenceServerClient(url=url)
    result = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("mlp"),
        "server_name": client.get_server_metadata()["name"],
        "metadata": client.get_model_metadata("mlp"),
    }
    for binary in (True, False):
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        out = client.infer("mlp", [inp], outputs=[httpclient.InferRequestedOutput("fetch_name_0", binary_data=binary)],
                           request_id="h1")
        result[f"infer_binary_{binary}"] = out.as_numpy("fetch_name_0").tolist()
    result["infer_id"] = out.get_response()["id"]
    try:
        client.infer("nope", [inp])
        result["unknown_model"] = "no error"
    except InferenceServerException as exc:
        result["unknown_model"] = [exc.status(), exc.message()]
    return result


def main() -> None:
    grpc_url, http_url, case_path = sys.argv[1], sys.argv[2], sys.argv[3]
    x = np.asarray(json.load(open(case_path))["x"], dtype=np.float32)
    print(json.dumps({"grpc": grpc_part(grpc_url, x), "bare": bare_part(grpc_url, x), "http": http_part(http_url, x)}))


if __name__ == "__main__":
    main()
