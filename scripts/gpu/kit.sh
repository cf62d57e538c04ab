#!/usr/bin/env bash
# Assembles the GPU kit in .cache/gpu/kit (ignored; carried to the lent machine, see docs/gpu.md):
# the binary from scripts/gpu/build.sh and a static ffmpeg (both xz-compressed: 30 + 76 MiB as they
# are), the wheels the machine lacks for diffusers, the SeedVR2 VAE's key list (full-size weights are
# made there), the Real-ESRGAN files and check.sh. Refuses a kit over 60 MiB (a call carries 64 MiB in
# all, the working tree included).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.cache/gpu/kit
MAX_MIB=60
say() { printf '\033[1m[gpu kit]\033[0m %s\n' "$*"; }

# The static ffmpeg of PyPI's imageio-ffmpeg (7.0.2; it has no ffprobe, so inputs cannot be probed there).
FFMPEG_WHEEL_VERSION=0.7.0
scripts/gpu/build.sh
mkdir -p "$KIT/keys" "$KIT/wheels" "$KIT/realesrgan"
rm -f "$KIT/vaebox"
if [[ ! -f $KIT/vaebox.xz || .cache/gpu/vaebox -nt $KIT/vaebox.xz ]]; then
  say "compressing the binary"
  xz -9 -T0 -c .cache/gpu/vaebox > "$KIT/vaebox.xz.partial" && mv "$KIT/vaebox.xz.partial" "$KIT/vaebox.xz"
fi
if [[ ! -f $KIT/ffmpeg.xz ]]; then
  say "fetching a static ffmpeg (PyPI imageio-ffmpeg==$FFMPEG_WHEEL_VERSION)"
  mkdir -p .cache/pip
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.12 -d .cache/pip "imageio-ffmpeg==$FFMPEG_WHEEL_VERSION"
  python3 - "$KIT/ffmpeg.xz" <<'PY'
import glob, lzma, sys, zipfile
wheel = glob.glob(".cache/pip/imageio_ffmpeg-*-manylinux2014_x86_64.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if "/binaries/ffmpeg-linux" in n)
    data = z.read(name)
with lzma.open(sys.argv[1] + ".partial", "wb", preset=9) as out:
    out.write(data)
PY
  mv "$KIT/ffmpeg.xz.partial" "$KIT/ffmpeg.xz"
fi
cp -f ../shared/reference/seedvr2/full_keys.txt "$KIT/keys/seedvr2_full_keys.txt"
scripts/gpu/wheels.sh "$KIT/wheels"
# animevideov3 only: x4plus's 64 MiB of weights would not fit (and without ffprobe there the upscale
# pipeline does not run anyway).
if compgen -G "models/realesrgan/REALESRGAN_ANIMAVIDEOV3_*" >/dev/null; then
  cp -f models/realesrgan/REALESRGAN_ANIMAVIDEOV3_* "$KIT/realesrgan/"
fi
cp -f scripts/gpu/check.sh "$KIT/check.sh"
size=$(du -sm "$KIT" | cut -f1)
du -sh "$KIT"/* | sed 's/^/  /'
if (( size > MAX_MIB )); then
  echo "the kit is $size MiB, over $MAX_MIB MiB" >&2
  exit 1
fi
say "$KIT: $size MiB (at most $MAX_MIB)"
