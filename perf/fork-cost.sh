#!/usr/bin/env bash
# The cost of copy-on-fork (issue 5, docs/ARCHITECTURE.md "Forks"): starts a
# release rill (--fsync always) on a fresh data dir, writes a source of
# SOURCE_MIB 1 MiB appends, then times FORKS fork creations at the tail
# (curl's time_total; fork names land on either shard) and a full catch-up
# read of the source and of one fork (4 MiB pages), and prints disk use.
#
#   perf/fork-cost.sh [SOURCE_MIB=100] [FORKS=6]
#
# Needs curl and python3. Prints one line per measurement.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOURCE_MIB="${1:-100}"
FORKS="${2:-6}"
PORT="${PORT:-47411}"
BASE="http://127.0.0.1:$PORT"
WORK="$(mktemp -d /tmp/rill-fork-cost.XXXXXX)"
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT

cargo build --release --quiet --bin rill --manifest-path "$ROOT/Cargo.toml"
head -c $((1 << 20)) /dev/urandom >"$WORK/chunk"
"$ROOT/target/release/rill" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" \
  --cores 2 --fsync always 2>"$WORK/server.log" &
PID=$!
for _ in $(seq 100); do
  curl -sf -o /dev/null "$BASE/v1/health" && break
  sleep 0.1
done

ct=(-H 'Content-Type: application/octet-stream')
curl -sf -o /dev/null -X PUT "${ct[@]}" "$BASE/v1/stream/source"
start=$(date +%s.%N)
for _ in $(seq "$SOURCE_MIB"); do
  curl -sf -o /dev/null -X POST "${ct[@]}" --data-binary @"$WORK/chunk" "$BASE/v1/stream/source"
done
end=$(date +%s.%N)
echo "source: ${SOURCE_MIB} MiB written in $(python3 -c "print(round($end - $start, 2))") s"

for i in $(seq "$FORKS"); do
  t=$(curl -sf -o /dev/null -w '%{time_total}' -X PUT -H "Stream-Forked-From: /v1/stream/source" \
    "$BASE/v1/stream/fork-$i")
  echo "fork-$i: created in ${t} s"
done

# Catch-up read of a whole stream, page by page: seconds and MiB/s.
read_all() {
  python3 - "$BASE/v1/stream/$1" <<'EOF'
import sys, time, urllib.request
url, offset, total = sys.argv[1], "-1", 0
t0 = time.time()
while True:
    with urllib.request.urlopen(f"{url}?offset={offset}") as r:
        total += len(r.read())
        offset = r.headers["Stream-Next-Offset"]
        if r.headers.get("Stream-Up-To-Date") == "true":
            break
dt = time.time() - t0
print(f"{total / 2**20:.0f} MiB in {dt:.2f} s ({total / 2**20 / dt:.0f} MiB/s)")
EOF
}
echo "read source: $(read_all source)"
echo "read fork-1: $(read_all fork-1)"
echo "disk use: $(du -sm "$WORK/data" | cut -f1) MiB for the source and ${FORKS} forks"
