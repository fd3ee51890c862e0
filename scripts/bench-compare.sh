#!/usr/bin/env bash
# Run the same `rill-bench` scenario (append, fanout or catchup) against rill,
# the Node reference server (@durable-streams/server, file-backed) and
# rill-bench's null server (not for catchup, which needs a stream to read),
# one after the other, and print a ratio table.
#
#   scripts/bench-compare.sh [--scenario append|fanout|catchup] [--duration S]
#                            [--streams N] [--payload B] [--shared-connections K]
#                            [--messages text|json]
#                            [--subscribers S] [--rate R] [--stream-bytes N]
#                            [--clients C] [--cores N] [--out DIR]
#
# Options:
#   --scenario NAME          append (default), fanout (one stream, a writer
#                            at R events/s, S SSE subscribers) or catchup (one
#                            stream of N bytes, C clients read it from the start)
#   --duration S             seconds per server (default 10)
#   --streams N              append: streams, one connection each (default 100)
#   --payload B              append: bytes per append (default 256)
#   --shared-connections K   append: K connections cycling over the streams
#   --messages text|json     append: opaque text (default) or one JSON object
#                            per append to application/json streams
#   --subscribers S          fanout: SSE subscribers (default 1000)
#   --rate R                 fanout: events per second (default 50)
#   --stream-bytes N         catchup: bytes in the stream (default 268435456)
#   --clients C              catchup: concurrent readers (default 1)
#   --cores N                rill --cores (default: nproc)
#   --out DIR                keep the JSON results and server logs here
#                            (default: a new temp dir, printed at the end)
#
# Environment:
#   RILL_BIN        use this rill binary instead of `cargo build --release`
#   BENCH_BIN       use this rill-bench binary instead of building it
#   REFERENCE_DIR   npm cache dir for @durable-streams/server@0.3.7
#                   (default ~/.cache/rill-bench/reference-0.3.7)
#   URSULA_BIN      also run the scenario against this `ursula` binary (crates.io
#                   `ursula`): one node, disk WAL on a fresh temp dir with
#                   `raft.wal.fsync = "always"` (a one-voter Raft group per
#                   core), --cores cores, bucket API, logging at warn
#   DSS_BIN         also run it against this `durable-streams-server` binary
#                   (crates.io): storage mode `file-durable` on a fresh temp dir,
#                   its payload capacity limits raised above the workload
#   OTHER_SERVERS   extra servers, already running, to run the scenario
#                   against with --api v1: space-separated NAME=URL pairs,
#                   e.g. OTHER_SERVERS="caddy=http://127.0.0.1:8080". They
#                   get a row each (ratio rill/NAME). The script does not
#                   start or stop them.
#
# rill runs with --fsync always on a fresh temp data dir; the reference server
# runs file-backed on a fresh temp dir. Everything started is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION=10 STREAMS=100 PAYLOAD=256 SHARED="" MESSAGES=text CORES="$(nproc)" OUT=""
SCENARIO=append SUBSCRIBERS=1000 RATE=50 STREAM_BYTES=268435456 CLIENTS=1
REF_VERSION=0.3.7
REFERENCE_DIR="${REFERENCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rill-bench/reference-$REF_VERSION}"

die() {
  echo "bench-compare.sh: error: $*" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
  --scenario | --duration | --streams | --payload | --shared-connections | --subscribers | \
    --rate | --stream-bytes | --clients | --cores | --out | --messages)
    [ $# -ge 2 ] || die "$1 needs a value"
    case "$1" in
    --scenario) SCENARIO="$2" ;;
    --subscribers) SUBSCRIBERS="$2" ;;
    --rate) RATE="$2" ;;
    --stream-bytes) STREAM_BYTES="$2" ;;
    --clients) CLIENTS="$2" ;;
    --duration) DURATION="$2" ;;
    --streams) STREAMS="$2" ;;
    --payload) PAYLOAD="$2" ;;
    --shared-connections) SHARED="$2" ;;
    --messages) MESSAGES="$2" ;;
    --cores) CORES="$2" ;;
    --out) OUT="$2" ;;
    esac
    shift 2
    ;;
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$SCENARIO" in append | fanout | catchup) ;; *) die "--scenario is append, fanout or catchup, got '$SCENARIO'" ;; esac
case "$MESSAGES" in text | json) ;; *) die "--messages is text or json, got '$MESSAGES'" ;; esac
[ "$MESSAGES" = text ] || [ "$SCENARIO" = append ] || die "--messages is for --scenario append"
for n in "$STREAMS" "$PAYLOAD" "$CORES" "$SUBSCRIBERS" ${SHARED:+"$SHARED"}; do
  case "$n" in '' | *[!0-9]*) die "expected a positive integer, got '$n'" ;; esac
done
for tool in node npm python3 curl; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required but not on PATH"
done

# ---- binaries ---------------------------------------------------------------
if [ -z "${RILL_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  echo "==> cargo build --release (rill, rill-bench)"
  (cd "$ROOT" && cargo build --release </dev/null && cargo build --release -p rill-bench </dev/null) ||
    die "cargo build failed"
fi
RILL_BIN="${RILL_BIN:-$ROOT/target/release/rill}"
BENCH_BIN="${BENCH_BIN:-$ROOT/target/release/rill-bench}"
[ -x "$RILL_BIN" ] || die "rill binary not found: $RILL_BIN"
[ -x "$BENCH_BIN" ] || die "rill-bench binary not found: $BENCH_BIN"

# ---- reference server install (cached) ----------------------------------------
if [ ! -f "$REFERENCE_DIR/node_modules/@durable-streams/server/package.json" ]; then
  echo "==> npm install @durable-streams/server@$REF_VERSION into $REFERENCE_DIR"
  mkdir -p "$REFERENCE_DIR"
  (cd "$REFERENCE_DIR" && npm install --no-audit --no-fund --no-save \
    "@durable-streams/server@$REF_VERSION" </dev/null >npm.log 2>&1) ||
    die "npm install failed; see $REFERENCE_DIR/npm.log"
fi
cp "$ROOT/perf/reference-server.mjs" "$REFERENCE_DIR/reference-server.mjs"

# ---- bookkeeping ----------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rill-bench-compare.XXXXXX")"
[ -n "$OUT" ] || OUT="$WORK/results"
mkdir -p "$OUT"
SERVER_PID=""

stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "bench-compare.sh: pid $SERVER_PID ignored SIGTERM for 5 s; sending SIGKILL" >&2
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
cleanup() {
  stop_server
  rm -rf "$WORK/data"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_port PORT: until something accepts on 127.0.0.1:PORT (20 s).
wait_port() {
  for _ in $(seq 200); do
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# wait_creates URL: until a bucket and a stream in it can be created (30 s):
# a node that listens may still be electing its groups' leaders.
wait_creates() {
  for _ in $(seq 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    if curl -sf -o /dev/null -X PUT "$1/bench-ready" &&
      curl -sf -o /dev/null -X PUT -H 'content-type: text/plain' "$1/bench-ready/probe"; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# bench NAME URL [PID [API]]: the scenario against URL, JSON to $OUT/NAME.json.
bench() {
  local name="$1" url="$2" pid="${3:-}" api="${4:-v1}"
  echo "==> $SCENARIO against $name ($url, --api $api)"
  local common=(--url "$url" --api "$api" --duration "$DURATION" --label "$name"
    --json "$OUT/$name.json" ${pid:+--server-pid "$pid"})
  case "$SCENARIO" in
  append)
    "$BENCH_BIN" append "${common[@]}" --streams "$STREAMS" --payload "$PAYLOAD" \
      --messages "$MESSAGES" ${SHARED:+--shared-connections "$SHARED"} </dev/null
    ;;
  fanout)
    "$BENCH_BIN" fanout "${common[@]}" --subscribers "$SUBSCRIBERS" --rate "$RATE" </dev/null
    ;;
  catchup)
    "$BENCH_BIN" catchup --url "$url" --api "$api" --label "$name" --json "$OUT/$name.json" \
      --stream-bytes "$STREAM_BYTES" --clients "$CLIENTS" </dev/null
    ;;
  esac
}

# measure NAME [API]: once the server just started on $PORT is ready, the
# scenario against it (a row in the table), then stop it. Ready: it accepts
# connections and, on the bucket API (a Raft node may still be electing its
# leaders when it listens), creates a bucket and a stream.
measure() {
  local name="$1" api="${2:-v1}" url="http://127.0.0.1:$PORT"
  wait_port "$PORT" && { [ "$api" = v1 ] || wait_creates "$url"; } || {
    tail -n 20 "$OUT/$name.log" >&2
    die "$name did not start"
  }
  bench "$name" "$url" "$SERVER_PID" "$api"
  NAMES+=("$name")
  stop_server
}

# start NAME CMD...: start a server in the background, logs in $OUT/NAME.log.
start() {
  local name="$1"
  shift
  "$@" </dev/null >"$OUT/$name.log" 2>&1 &
  SERVER_PID=$!
}

NAMES=()

# ---- rill --------------------------------------------------------------------------
mkdir -p "$WORK/data"
PORT="$(free_port)"
start rill "$RILL_BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data/rill" \
  --cores "$CORES" --fsync always
measure rill

# ---- reference server ----------------------------------------------------------------
PORT="$(free_port)"
start reference node "$REFERENCE_DIR/reference-server.mjs" "$PORT" "$WORK/data/reference"
measure reference

# ---- null server ------------------------------------------------------------------------
if [ "$SCENARIO" != catchup ]; then
  PORT="$(free_port)"
  start null "$BENCH_BIN" null-server --listen "127.0.0.1:$PORT"
  measure null
fi

# ---- peers built from crates.io, when their binaries are given ------------------------------
if [ -n "${URSULA_BIN:-}" ]; then
  PORT="$(free_port)"
  mkdir -p "$WORK/data/ursula"
  cat >"$WORK/ursula.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$(free_port)"
cluster_id = "bench-compare"
[runtime]
core_count = $CORES
[raft]
node_id = 1
[[raft.peers]]
node_id = 1
url = "http://127.0.0.1:$PORT"
[raft.wal]
path = "$WORK/data/ursula"
fsync = "always"
EOF
  RUST_LOG=warn start ursula "$URSULA_BIN" server --config "$WORK/ursula.toml"
  measure ursula bucket
fi
if [ -n "${DSS_BIN:-}" ]; then
  PORT="$(free_port)"
  DS_SERVER__BIND_ADDRESS="127.0.0.1:$PORT" DS_STORAGE__MODE=file-durable \
    DS_STORAGE__DATA_DIR="$WORK/data/dss" DS_OBSERVABILITY__RUST_LOG=warn \
    DS_LIMITS__MAX_MEMORY_BYTES=$((8 << 30)) DS_LIMITS__MAX_STREAM_BYTES=$((1 << 30)) \
    start durable-streams-server "$DSS_BIN"
  measure durable-streams-server
fi

# ---- other servers (already running) -------------------------------------------------------
for pair in ${OTHER_SERVERS:-}; do
  name="${pair%%=*}" url="${pair#*=}"
  [ -n "$name" ] && [ "$name" != "$pair" ] || die "OTHER_SERVERS entry '$pair' is not NAME=URL"
  bench "$name" "$url"
  NAMES+=("$name")
done

# ---- ratio table ------------------------------------------------------------------------------
python3 - "$OUT" "${NAMES[@]}" <<'PY' | tee "$OUT/summary.md"
import json, sys
out, names = sys.argv[1], sys.argv[2:]
r = {n: json.load(open(f"{out}/{n}.json")) for n in names}
first = r[names[0]]
def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"
def cpu(x):
    srv = "-" if x.get("server_cpu_pct") is None else f"{x['server_cpu_pct']:.0f} %"
    return f"{x['client_cpu_pct']:.0f} % | {srv}"
def lat(l):
    return f"{l['p50']} | {l['p90']} | {l['p99']} | {l['p999']} | {l['max']}"
def table(columns, cells):
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in cells:
        print("| " + " | ".join(row) + " |")
def ratios(columns, figures):
    rill = r["rill"]
    table(["ratio"] + columns, ([f"rill/{n}"] + [ratio(f(rill), f(r[n])) for f in figures]
                                for n in names[1:]))
p50 = lambda x: x["latency_us"]["p50"]
p99 = lambda x: x["latency_us"]["p99"]
latency_columns = ["p50 µs", "p90 µs", "p99 µs", "p999 µs", "max µs"]
if first["scenario"] == "fanout":
    print(f"\n{first['subscribers']} SSE subscribers, {first['rate']} events/s, "
          f"{first['duration_s']} s each; latency per delivery, publish to receive\n")
    table(["server", "delivered / expected", "lost", "dup"] + latency_columns
          + ["errors", "client CPU", "server CPU"],
          ([n, f"{x['deliveries_received']} / {x['deliveries_expected']}", f"{x['lost']}",
            f"{x['duplicated']}", lat(x["latency_us"]), f"{x['errors']}", cpu(x)]
           for n, x in r.items()))
    print()
    ratios(["p50 latency", "p99 latency"], [p50, p99])
    sys.exit(0)
if first["scenario"] == "catchup":
    print(f"\n{first['clients']} client(s) reading a {first['stream_bytes']} B stream "
          "from the start, page after page to the tail\n")
    table(["server", "GB/s", "requests", "errors", "client CPU"],
          ([n, f"{x['gb_per_s']:.3f}", f"{x['requests']}", f"{x['errors']}",
            f"{x['client_cpu_pct']:.0f} %"] for n, x in r.items()))
    print()
    ratios(["GB/s"], [lambda x: x["gb_per_s"]])
    sys.exit(0)
print(f"\n{first['streams']} streams x {first['payload_bytes']} B "
      f"{first.get('messages', 'text')} messages, "
      f"{first['connections']} connections, {first['duration_s']} s each\n")
table(["server", "appends/s", "MB/s"] + latency_columns + ["errors", "client CPU", "server CPU"],
      ([n, f"{x['appends_per_s']:.0f}", f"{x['mb_per_s']:.2f}", lat(x["latency_us"]),
        f"{x['errors']}", cpu(x)] for n, x in r.items()))
print()
ratios(["appends/s", "p50 latency", "p99 latency"], [lambda x: x["appends_per_s"], p50, p99])
PY
echo "bench-compare.sh: results in $OUT"
