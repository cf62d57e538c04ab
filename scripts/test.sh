#!/usr/bin/env bash
# Set up what is missing (including test references and media), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export VAEBOX_PYTHON="$PWD/.venv/bin/python"
cargo test --release --no-fail-fast -- --test-threads=2 "$@"
