"""Runs in: a Serve replica and the export Ray task.

v2 tensor datatypes <-> numpy dtypes (little-endian on the wire), from common.v2_datatypes.

Apart from codec.py so that the predictors import no protobuf: the benchmark runs them in
KServe's own virtual env, whose protobuf is older than the project's generated code needs.
"""

from __future__ import annotations

import numpy as np

from paddleray.services.common.v2_datatypes import CONTENTS_FIELD, NUMPY

NUMPY_DTYPES: dict[str, np.dtype] = {name: np.dtype(dtype).newbyteorder("<") for name, dtype in NUMPY.items()}
V2_DATATYPES: dict[np.dtype, str] = {dt.newbyteorder("="): name for name, dt in NUMPY_DTYPES.items()}
__all__ = ["CONTENTS_FIELD", "NUMPY_DTYPES", "V2_DATATYPES"]
