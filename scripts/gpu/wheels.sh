#!/usr/bin/env bash
# Downloads into DIR ($1) the wheels that the lent GPU machine lacks for running diffusers there
# (Python 3.12, manylinux x86_64, no network on that machine): diffusers itself and every runtime
# Requires-Dist of it (recursively) that the machine does not already have. Already there: torch,
# filelock, huggingface-hub, numpy, regex, requests, safetensors, pillow, zipp, httpx (and their own
# dependencies).
#
#   scripts/gpu/wheels.sh DIR
#
# diffusers is pinned to the version installed in .venv when there is one (so the kit runs what the
# tests here ran), else the latest release; the others to the .venv's version too when it has them,
# else their latest. Idempotent: a wheel already in DIR is not fetched again. Prints the wheels, the
# total size, and the version ranges diffusers needs of the packages taken as present (to check on the
# lent machine with `python3 -m pip check` or by hand). On the lent machine:
#   python3 -m pip install --no-index --no-deps DIR/*.whl
set -euo pipefail

DIR=${1:?usage: scripts/gpu/wheels.sh DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV_PY="$ROOT/.venv/bin/python"
PY=${PYTHON:-python3}
# Normalised names (PEP 503) of what the lent machine has.
PRESENT="torch filelock huggingface-hub numpy regex requests safetensors pillow zipp httpx"

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

say() { echo "wheels: $*" >&2; }

normalise() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g'; }

# The version of $1 in .venv, or nothing.
venv_version() {
  [[ -x "$VENV_PY" ]] || return 0
  "$VENV_PY" - "$1" <<'PY' 2>/dev/null || true
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    print(version(sys.argv[1]))
except PackageNotFoundError:
    pass
PY
}

# The wheel in DIR for normalised name $1 (at version $2 if given), or nothing.
wheel_in_dir() {
  local name=$1 version=${2:-} file base
  for file in "$DIR"/*.whl; do
    [[ -e "$file" ]] || continue
    base=$(basename "$file")
    [[ "$(normalise "${base%%-*}")" == "$name" ]] || continue
    if [[ -z "$version" || "$(echo "$base" | cut -d- -f2)" == "$version" ]]; then
      echo "$file"
      return 0
    fi
  done
}

# Runtime requirements of wheel $1 for CPython 3.12 on Linux x86_64, one "name<TAB>specifier" a line.
requirements() {
  "$PY" - "$1" <<'PY'
import sys, zipfile
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
env = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "sys_platform": "linux", "os_name": "posix",
       "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    text = wheel.read(meta).decode("utf-8", "replace")
for line in text.split("\n\n", 1)[0].splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate(env):
        continue
    print(f"{req.name}\t{req.specifier}")
PY
}

download() {
  local spec=$1
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DIR" "$spec" >&2
}

# Breadth first from diffusers; `seen` holds normalised names already handled.
declare -A seen=()
queue=(diffusers)
needs_of_present=()
while ((${#queue[@]})); do
  name=${queue[0]}
  queue=("${queue[@]:1}")
  key=$(normalise "$name")
  [[ -z "${seen[$key]:-}" ]] || continue
  seen[$key]=1
  version=$(venv_version "$name")
  wheel=$(wheel_in_dir "$key" "$version")
  if [[ -n "$wheel" ]]; then
    say "have $(basename "$wheel")"
  else
    spec=$name${version:+==$version}
    if [[ -n "$version" ]]; then say "downloading $spec (the version in .venv)"; else say "downloading $name (latest)"; fi
    download "$spec"
    wheel=$(wheel_in_dir "$key" "$version")
    [[ -n "$wheel" ]] || { say "pip download $spec left no wheel of $key in $DIR"; exit 1; }
  fi
  while IFS=$'\t' read -r dep specifier; do
    [[ -n "$dep" ]] || continue
    dep_key=$(normalise "$dep")
    if [[ " $PRESENT " == *" $dep_key "* ]]; then
      needs_of_present+=("$(basename "$wheel" | cut -d- -f1-2) needs $dep${specifier:+ $specifier}")
    else
      queue+=("$dep")
    fi
  done < <(requirements "$wheel")
done

echo "wheels in $DIR:"
for key in "${!seen[@]}"; do
  wheel=$(wheel_in_dir "$key" "")
  printf '  %-60s %10d bytes\n' "$(basename "$wheel")" "$(stat -c %s "$wheel")"
done | sort
for key in "${!seen[@]}"; do
  stat -c %s "$(wheel_in_dir "$key" "")"
done | awk '{ s += $1 } END { printf "total: %d bytes (%.1f MiB)\n", s, s / 1048576 }'
if ((${#needs_of_present[@]})); then
  echo "taken as present on the lent machine (check these ranges there):"
  printf '  %s\n' "${needs_of_present[@]}"
fi
