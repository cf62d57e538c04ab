"""Files written by torch.save, each with its expected tensors written by safetensors, for tests/it/torch_file.rs.

Usage: make_torch_save_fixtures.py OUT_DIR MARKER_PATH
  OUT_DIR/<case>.pt and OUT_DIR/<case>.safetensors (the same tensors, contiguous, under the same names;
  a bare tensor is stored as "t"). Float8 has no safetensors dtype everywhere, so its expected tensor is
  its bytes (uint8). Files that must be refused have no .safetensors. MARKER_PATH is the file the
  `evil` pickle would create if anything ran it.
"""
import collections
import os
import sys
import zipfile

import torch
from safetensors.torch import save_file

out, marker = sys.argv[1], sys.argv[2]
torch.manual_seed(20240607)


def case(name, saved, expected):
    torch.save(saved, os.path.join(out, f"{name}.pt"))
    if expected is not None:
        save_file({k: v.contiguous() for k, v in expected.items()}, os.path.join(out, f"{name}.safetensors"))


# SeedVR2's positive text embedding has this shape and dtype.
pos_emb = torch.randn(58, 5120).to(torch.bfloat16)
case("pos_emb", pos_emb, {"t": pos_emb})

fp32 = torch.randn(3, 4)
case("fp32", fp32, {"t": fp32})

# A view with an offset and a stride: torch.save writes the whole 6x10 storage and the view's geometry.
base = torch.randn(6, 10).to(torch.float16)
view = base[1:, 1::2]
assert not view.is_contiguous() and view.storage_offset() == 11
case("fp16_view", view, {"t": view})

pair = {"a": torch.randn(2, 3).to(torch.bfloat16), "b": torch.randn(5)}
case("dict", pair, pair)

# Two entries viewing one storage: it is read once and each view taken from it.
whole = torch.randn(4, 6, dtype=torch.float64)
shared = {"whole": whole, "tail": whole[2:, ::3]}
case("shared", shared, shared)

linear = torch.nn.Linear(4, 3)
case("state_dict", linear.state_dict(), dict(linear.state_dict()))

# torch.save writes float8 with _rebuild_tensor_v3 and an untyped storage.
fp8 = torch.randn(7, 5).to(torch.float8_e4m3fn)
case("fp8", fp8, {"t": fp8.view(torch.uint8)})

ints = torch.randint(-(2**40), 2**40, (3, 5), dtype=torch.int64)
case("int64", ints, {"t": ints})

# Refused: a value that is not a tensor, and a pickle that would run a shell command.
case("ordered_dict", {"x": collections.OrderedDict()}, None)


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {marker}",))


case("evil", {"t": fp32, "evil": Evil()}, None)

torch.save(fp32, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)

# A pickle over the 16 MiB bound (torch.save pickles the string inline).
torch.save({"t": fp32, "s": "x" * (17 << 20)}, os.path.join(out, "big_pickle.pt"))

# The same file as pos_emb.pt with the storage entry two bytes short.
with zipfile.ZipFile(os.path.join(out, "pos_emb.pt")) as src, \
        zipfile.ZipFile(os.path.join(out, "short_storage.pt"), "w", zipfile.ZIP_STORED) as dst:
    for info in src.infolist():
        data = src.read(info.filename)
        dst.writestr(info.filename, data[:-2] if info.filename.endswith("/data/0") else data)

print("fixtures written to", out)
