"""Run by the tests in .venv-triton (stock tritonclient[grpc]), never in the project's env:
tritonclient's and our v2 stubs both define inference.* and cannot share one process.

argv: URL, MODEL, INPUT name, OUTPUT name, then a JSON file with {"x": [[...]]} (FP32 rows);
prints one JSON object: the model's readiness and the output as nested lists.
"""

import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    url, model, input_name, output_name, case_path = sys.argv[1:6]
    with open(case_path) as file:
        x = np.asarray(json.load(file)["x"], dtype=np.float32)
    client = grpcclient.InferenceServerClient(url=url)
    tensor = grpcclient.InferInput(input_name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    # Serve's HAProxy routes gRPC between applications by this header (the model's app is its name).
    app = {"application": model}
    result = client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput(output_name)], headers=app)
    ready = client.is_model_ready(model, headers=app)
    print(json.dumps({"model_ready": ready, "output": result.as_numpy(output_name).tolist()}))


if __name__ == "__main__":
    main()
