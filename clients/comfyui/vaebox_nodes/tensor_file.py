"""safetensors in and out, by hand (a length, a JSON header, raw little-endian bytes): a latent sent to the box
and the float frames it answers, with no dependency beyond numpy."""
import json
import struct

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
# A header is a few hundred bytes; anything near this is not a tensor file.
MAX_HEADER_BYTES = 100 << 20


def write(name, array, metadata=None):
    """One float32 tensor `name` with string `metadata`, as the bytes of a .safetensors file."""
    array = np.ascontiguousarray(array, dtype="<f4")
    header = {name: {"dtype": "F32", "shape": list(array.shape), "data_offsets": [0, array.nbytes]}}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the format wants the data 8-byte aligned
    return struct.pack("<Q", len(encoded)) + encoded + array.tobytes()


def read(data, name):
    """Tensor `name` of a .safetensors file's bytes, as float32."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than its header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(MAX_HEADER_BYTES, len(data) - 8):
        raise ValueError(f"not a safetensors file: header length {length}")
    header = json.loads(data[8 : 8 + length].decode("utf-8"))
    if name not in header:
        raise ValueError(f"the file has no tensor {name!r} (it has {sorted(k for k in header if k != '__metadata__')})")
    entry = header[name]
    dtype = DTYPES.get(entry["dtype"])
    if dtype is None:
        raise ValueError(f"tensor {name!r} is {entry['dtype']}, not F32, F16 or BF16")
    start, end = (8 + length + offset for offset in entry["data_offsets"])
    values = np.frombuffer(data[start:end], dtype=dtype)
    if entry["dtype"] == "BF16":
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32).reshape(entry["shape"])
