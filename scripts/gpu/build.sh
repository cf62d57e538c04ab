#!/usr/bin/env bash
# The vaebox binary for the lent GPU machines (docs/gpu.md): a release build against the torch those
# machines carry (2.11, through tch 0.24), from its own virtual environment, source copy and target
# folder under .cache/gpu, so the normal build (torch 2.13, tch 0.26) is not touched. Then checks that
# the binary can start there: every NEEDED library is torch's or a stock Ubuntu 24.04 one, no symbol
# needs a newer glibc than 2.39, and it runs here against the torch 2.11 libraries. Prints the
# binary's path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TORCH_VERSION=2.11.0
TCH_VERSION=0.24
GPU=$ROOT/.cache/gpu
VENV=$GPU/venv
TREE=$GPU/tree
TARGET=$GPU/target
# Where the lent machines' image keeps torch (its python3 is /opt/torch/.venv/bin/python3).
DEVICE_TORCH_LIB=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib
MAX_GLIBC=2.39
say() { printf '\033[1m[gpu build]\033[0m %s\n' "$*"; }

[[ -x $VENV/bin/python ]] || { say "creating $VENV"; python3 -m venv "$VENV"; }
if ! "$VENV/bin/python" -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  say "installing torch==$TORCH_VERSION into $VENV (large download, once)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
TORCH_DIR=$("$VENV/bin/python" -c "import os, torch; print(os.path.dirname(torch.__file__))")

# The sources as they are now, with only the tch requirement changed; the lock file keeps every
# other crate at the version the normal build uses.
say "copying the sources to $TREE (tch $TCH_VERSION)"
mkdir -p "$TREE"
rm -rf "$TREE/src" "$TREE/static" "$TREE/migrations"
cp -r src static migrations build.rs Cargo.toml "$TREE/"
[[ -f $TREE/Cargo.lock ]] || cp Cargo.lock "$TREE/"
sed -i -E "s/^tch = \"[0-9.]+\"/tch = \"$TCH_VERSION\"/" "$TREE/Cargo.toml"
grep -q "^tch = \"$TCH_VERSION\"" "$TREE/Cargo.toml" || { echo "could not pin tch in $TREE/Cargo.toml" >&2; exit 1; }

say "building (release) against $TORCH_DIR"
# tch 0.24 and 0.26 differ only in functions vaebox does not call: the same code builds against both;
# `tch_0_24` marks this build, for a difference to come.
( cd "$TREE" && LIBTORCH="$TORCH_DIR" LIBTORCH_CXX11_ABI=1 CARGO_TARGET_DIR="$TARGET" \
    RUSTFLAGS="--cfg tch_0_24 -C link-arg=-Wl,-rpath,$DEVICE_TORCH_LIB" \
    cargo build --release --quiet --bin vaebox )
BIN=$GPU/vaebox
cp "$TARGET/release/vaebox" "$BIN"
strip "$BIN"

say "checking $BIN"
fail=0
# Libraries every Ubuntu 24.04 has (libc6, libgcc-s1, libstdc++6).
STOCK='^(libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libstdc\+\+\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
for lib in $(readelf -d "$BIN" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
  if [[ -f $TORCH_DIR/lib/$lib ]]; then where="torch $TORCH_VERSION lib/"
  elif [[ $lib =~ $STOCK ]]; then where="stock Ubuntu 24.04"
  else where="NOT on the lent machine"; fail=1; fi
  printf '  NEEDED %-24s %s\n' "$lib" "$where"
done
newest=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
if [[ $(printf '%s\n%s\n' "$newest" "$MAX_GLIBC" | sort -V | tail -1) != "$MAX_GLIBC" ]]; then
  echo "  newest glibc symbol version $newest is above $MAX_GLIBC"; fail=1
else
  echo "  newest glibc symbol version: $newest (at most $MAX_GLIBC)"
fi
echo "  newest libstdc++ symbol version: $(objdump -T "$BIN" | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1)"
echo "  runpath: $(readelf -d "$BIN" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')"
# Runs here, on this machine's CPU, against the torch 2.11 libraries it was linked with.
loaded=$(ldd "$BIN" | awk '/libtorch_cpu/ {print $3}')
[[ $loaded == "$TORCH_DIR/lib/libtorch_cpu.so" ]] || { echo "  libtorch_cpu resolves to '$loaded', not torch $TORCH_VERSION's"; fail=1; }
"$BIN" --version
"$BIN" bench parity --device cpu --dit 3b --dit-dim 256 --dit-blocks 2 --dit-grid 1,4,4 >/dev/null
echo "  ran here against $loaded: --version and a CPU parity of a small DiT"
echo "  size: $(du -m "$BIN" | cut -f1) MiB"
[[ $fail == 0 ]] || { echo "the binary would not start on the lent machine" >&2; exit 1; }
echo "$BIN"
