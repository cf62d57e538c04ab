#!/usr/bin/env bash
# Set up what is missing, then serve on the embedded defaults (config.toml; VAEBOX_* overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec target/release/vaebox serve "$@"
