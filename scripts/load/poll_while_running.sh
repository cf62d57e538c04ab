#!/usr/bin/env bash
# Start a throwaway vaebox on loopback (its own data dir, removed afterwards), then run
# `vaebox bench load` against it: the same job with 1 and with N pollers on GET /v1/jobs/{id}.
# Usage: scripts/load/poll_while_running.sh [bench load flags, e.g. --pollers 200 --job 'op=upscale&scale=2']
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh
port=${VAEBOX_LOAD_PORT:-18431}
data=$(mktemp -d)
log="$data/server.log"
VAEBOX_LISTEN="127.0.0.1:$port" VAEBOX_DATA_DIR="$data" VAEBOX_DATABASE="" \
  timeout 3600 target/release/vaebox serve >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
timeout 1800 target/release/vaebox bench load --server "127.0.0.1:$port" "$@"
