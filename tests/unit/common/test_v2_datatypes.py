"""One v2 datatype table: every service's view of the datatypes is derived from
common.v2_datatypes, and they agree on BF16 and UINT16-UINT64 (they did not: the manifest took
BF16, which the codec could not decode, and refused UINT16-UINT64, which it could)."""

from __future__ import annotations

import numpy as np
import pytest

from paddleray.exporter.v1 import model_pb2
from paddleray.services.client import tensors
from paddleray.services.common import v2_datatypes
from paddleray.services.common.model_manifest import Manifest, TensorSpec
from paddleray.services.exporter.export.task import datatypes
from paddleray.services.exporter.serving import dtypes
from paddleray.services.exporter.serving.replica import codec

# The Open Inference Protocol's tensor datatypes (KServe's v2 spec), BYTES aside: no fixed dtype.
V2_PROTOCOL = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
               "FP64", "BF16"}


def test_the_table_is_the_protocols():
    assert set(v2_datatypes.TABLE) == V2_PROTOCOL


def test_servable_is_what_numpy_holds():
    assert set(v2_datatypes.SERVABLE) == V2_PROTOCOL - {"BF16"}
    for name, dtype in v2_datatypes.NUMPY.items():
        assert v2_datatypes.from_dtype(np.dtype(dtype)) == name


def test_the_serving_codec_and_the_client_read_the_one_table():
    assert set(dtypes.NUMPY_DTYPES) == set(tensors.V2_DTYPES) == set(v2_datatypes.SERVABLE)
    assert codec.CONTENTS_FIELD == tensors.CONTENTS_FIELD == v2_datatypes.CONTENTS_FIELD
    assert set(v2_datatypes.CONTENTS_FIELD) == set(v2_datatypes.SERVABLE) - {"FP16"}  # FP16: raw bytes only
    for name, field in v2_datatypes.CONTENTS_FIELD.items():
        assert field in codec.pb.InferTensorContents.DESCRIPTOR.fields_by_name, name


def test_the_exporters_enum_is_the_paddle_types():
    names = {n.removeprefix("DATA_TYPE_") for n in model_pb2.DataType.keys()} - {"UNSPECIFIED"}
    assert set(datatypes.V2_NAMES) == names == set(v2_datatypes.PADDLE)
    assert datatypes.dtype_name("BF16") == "bfloat16" and datatypes.from_dtype("paddle.bfloat16") == "BF16"
    with pytest.raises(ValueError, match="UINT32"):
        datatypes.from_dtype(np.uint32)


@pytest.mark.parametrize("name", sorted(V2_PROTOCOL))
def test_a_manifest_takes_exactly_the_servable_types(tmp_path, name):
    manifest = Manifest("models/m", "models/m/versions/1", (TensorSpec("x", name, (-1,)),),
                        (TensorSpec("y", "FP32", (-1,)),))
    if name in v2_datatypes.SERVABLE:
        manifest.write(tmp_path)
        assert Manifest.load(tmp_path) == manifest
    else:
        with pytest.raises(ValueError, match=f"datatype {name}"):
            manifest.write(tmp_path)
