#!/usr/bin/env bash
# Short ids at 200,000 jobs (issue 53, docs/benchmarks.md): a real server's SQLite database of 200,001 jobs
# (one small upscale submitted, its row cloned with random v4 ids); an existing id's first 8 characters looked
# up with the statement before the fix (`substr(id, 1, n) = ?`, a scan) and the one after (an id range),
# alternately on one database in the sqlite3 shell; then over HTTP, by the short and by the whole id.
# Usage: scripts/bench/short_ids.sh [WORK_DIR]   (needs target/release/vaebox, sqlite3, ffmpeg, curl)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d)}
port=18089
mkdir -p "$work" && cd "$work" && rm -rf data && mkdir data
VAEBOX_DATA_DIR=$PWD/data VAEBOX_MODELS_DIR=$repo/models VAEBOX_LISTEN=127.0.0.1:$port VAEBOX_LOG=warn VAEBOX_THREADS=2 \
  "$repo/target/release/vaebox" serve > serve.out 2>&1 &
pid=$!
trap 'kill $pid' EXIT
until curl -sf http://127.0.0.1:$port/healthz > /dev/null; do sleep 0.2; done
ffmpeg -nostdin -v error -y -i "$repo/tests/media/carphone_pristine.mp4" -frames:v 2 clip.mp4
id=$(curl -sf -X POST --data-binary @clip.mp4 "http://127.0.0.1:$port/v1/jobs?op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
db=data/vaebox.db
cols=$(sqlite3 $db "SELECT group_concat(name, ', ') FROM pragma_table_info('jobs') WHERE name NOT IN ('seq', 'id')")
sqlite3 $db "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200000)
  INSERT INTO jobs (id, $cols)
  SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a'
               || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))), $cols
  FROM n, (SELECT * FROM jobs WHERE id = '$id')"
echo "jobs: $(sqlite3 $db 'SELECT count(*) FROM jobs')"
p=$(sqlite3 $db "SELECT substr(id, 1, 8) FROM jobs ORDER BY random() LIMIT 1")
u=$(python3 -c "p = '$p'; print(p[:-1] + chr(ord(p[-1]) + 1))")
echo "prefix $p (range $p .. $u)"
before="SELECT * FROM jobs WHERE substr(id, 1, length('$p')) = '$p' ORDER BY seq DESC LIMIT 16"
after="SELECT * FROM jobs WHERE id >= '$p' AND id < '$u' AND (NULL IS NULL OR owner = NULL) ORDER BY seq DESC LIMIT 16"
sqlite3 $db "EXPLAIN QUERY PLAN $before" "EXPLAIN QUERY PLAN $after"
{
  echo ".timer on"
  for _ in 1 2 3 4 5; do
    echo "SELECT 'before', count(*) FROM ($before);"
    echo "SELECT 'after', count(*) FROM ($after);"
  done
} | sqlite3 $db
whole=$(sqlite3 $db "SELECT id FROM jobs WHERE id >= '$p' LIMIT 1")
for what in "$p" "$whole"; do
  for _ in 1 2 3 4 5; do
    curl -s -o /dev/null -w "GET /v1/jobs/$what %{http_code} %{time_total}s\n" "http://127.0.0.1:$port/v1/jobs/$what"
  done
done
