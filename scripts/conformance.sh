#!/usr/bin/env bash
# Run the official Durable Streams conformance suite
# (@durable-streams/server-conformance-tests, pinned in tests/conformance/)
# against a freshly started rill server.
#
#   scripts/conformance.sh [--cores N] [--forks] [--only REGEX] [extra vitest args...]
#
# Options:
#   --cores N      start the server with --cores N (default 1)
#   --forks        also run the `Fork - *` blocks (left out by default)
#   --only REGEX   run only the tests whose full name matches REGEX (JS regex,
#                  unanchored; full name = describe names + title, space-joined)
#   anything else is passed to `vitest run` as is.
#
# Environment:
#   RILL_BIN                     use this binary instead of `cargo build --release`
#   CONFORMANCE_TEST_TIMEOUT_MS  per-test/hook timeout (vitest.config.mjs, default 60000)
#   LONG_POLL_MS                 suite option longPollTimeoutMs (default 10000; the
#                                server runs with --long-poll-timeout-ms 1500)
#   CONFORMANCE_RUN_TIMEOUT_S    kill vitest after this long (default 1800)
#
# The `Reserved subscription APIs` block is always left out. The last line
# printed is `conformance: N passed, M failed, K skipped`. Exit status is 1 if
# M > 0 or if no test ran, 2 on a setup error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE="$ROOT/tests/conformance"
SERVER_LONG_POLL_MS=1500

die() {
  echo "conformance.sh: error: $*" >&2
  exit 2
}

CORES=1 FORKS=0 ONLY=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
  --cores)
    [ $# -ge 2 ] || die "--cores needs a number"
    CORES="$2"
    shift 2
    ;;
  --cores=*)
    CORES="${1#*=}"
    shift
    ;;
  --forks)
    FORKS=1
    shift
    ;;
  --only)
    [ $# -ge 2 ] || die "--only needs a REGEX"
    ONLY="$2"
    shift 2
    ;;
  --only=*)
    ONLY="${1#*=}"
    shift
    ;;
  -h | --help)
    sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    EXTRA+=("$1")
    shift
    ;;
  esac
done
case "$CORES" in '' | *[!0-9]*) die "--cores must be a positive integer (got '$CORES')" ;; esac

for tool in node npm python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required but not on PATH"
done

# ---- test name filter (one JS regex for vitest -t) ---------------------------
SKIP='Reserved subscription APIs '
[ "$FORKS" = 1 ] || SKIP="Fork - |$SKIP"
FILTER="^(?!(?:$SKIP))"
[ -z "$ONLY" ] || FILTER+="(?=[\\s\\S]*(?:$ONLY))"
node -e 'new RegExp(process.argv[1])' "$FILTER" </dev/null >/dev/null 2>&1 ||
  die "invalid --only regular expression: '$ONLY'"

# ---- server binary -------------------------------------------------------------
if [ -n "${RILL_BIN:-}" ]; then
  BIN="$RILL_BIN"
else
  echo "==> cargo build --release"
  (cd "$ROOT" && cargo build --release </dev/null) || die "cargo build --release failed"
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rill"
fi
[ -x "$BIN" ] || die "server binary not found or not executable: $BIN"

# ---- pinned suite install --------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rill-conformance.XXXXXX")"
STAMP="$SUITE/node_modules/.rill-lock-stamp"
LOCK_SUM="$(cat "$SUITE/package.json" "$SUITE/package-lock.json" | sha256sum | cut -c1-64)"
if [ ! -x "$SUITE/node_modules/.bin/vitest" ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$LOCK_SUM" ]; then
  echo "==> npm ci --no-audit --no-fund (tests/conformance)"
  if ! (cd "$SUITE" && npm ci --no-audit --no-fund </dev/null >"$WORK/npm.log" 2>&1); then
    # npm ci refuses this lockfile when the registry lacks an optional,
    # other-platform dependency (vite's napi-windows-process-start-time), which
    # then is not in the lockfile. `npm install --no-save` installs the same
    # locked versions and leaves package-lock.json untouched.
    echo "conformance.sh: npm ci failed ($(grep -m1 -E 'Missing|error' "$WORK/npm.log" || true)); falling back to npm install --no-save"
    if ! (cd "$SUITE" && npm install --no-save --no-audit --no-fund </dev/null >>"$WORK/npm.log" 2>&1); then
      cat "$WORK/npm.log" >&2
      die "npm install in tests/conformance failed (is the npm registry reachable?)"
    fi
  fi
  [ -x "$SUITE/node_modules/.bin/vitest" ] || die "vitest missing after npm install (log: $WORK/npm.log)"
  echo "$LOCK_SUM" >"$STAMP"
fi

# ---- start the server -------------------------------------------------------------
DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/rill-data.XXXXXX")"
SERVER_LOG="$WORK/server.stderr.log"
JSON="$WORK/vitest.json"
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
      echo "conformance.sh: server did not stop within 5 s of SIGTERM; sending SIGKILL" >&2
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
cleanup() {
  stop_server
  rm -rf "$DATA_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

PORT=""
for attempt in 1 2 3; do
  PORT="$(free_port)"
  echo "==> starting $BIN serve --listen 127.0.0.1:$PORT --cores $CORES (attempt $attempt)"
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA_DIR" --cores "$CORES" \
    --long-poll-timeout-ms "$SERVER_LONG_POLL_MS" </dev/null >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  up=0
  for _ in $(seq 100); do # 10 s
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      up=1
      break
    fi
    sleep 0.1
  done
  [ "$up" = 1 ] && break
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "conformance.sh: server did not accept connections within 10 s" >&2
    tail -n 50 "$SERVER_LOG" >&2 || true
    echo "conformance.sh: server stderr log: $SERVER_LOG" >&2
    exit 2
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  echo "conformance.sh: server exited early; its output:" >&2
  tail -n 50 "$SERVER_LOG" >&2 || true
done
[ -n "$SERVER_PID" ] || {
  echo "conformance.sh: server stderr log: $SERVER_LOG" >&2
  die "server failed to start 3 times"
}
URL="http://127.0.0.1:$PORT"

# ---- run the suite ------------------------------------------------------------------
echo "==> vitest: conformance suite against $URL (cores=$CORES, forks=$FORKS${ONLY:+, only=$ONLY})"
set +e
(
  cd "$SUITE" && env CI="${CI:-true}" NO_COLOR=1 RILL_URL="$URL" \
    LONG_POLL_MS="${LONG_POLL_MS:-10000}" \
    timeout -k 10 "${CONFORMANCE_RUN_TIMEOUT_S:-1800}" ./node_modules/.bin/vitest run \
    --config vitest.config.mjs --root . --no-coverage --no-color \
    --reporter=default --reporter=json "--outputFile.json=$JSON" \
    "--testNamePattern=$FILTER" ${EXTRA[@]+"${EXTRA[@]}"} </dev/null
)
RC=$?
set -e
SERVER_DIED=0
if ! kill -0 "$SERVER_PID" 2>/dev/null; then SERVER_DIED=1; fi
stop_server

# ---- summary ------------------------------------------------------------------------
set +e
CLOSING="$WORK/closing-line"
python3 - "$JSON" "$RC" "$SERVER_DIED" "$CLOSING" <<'EOF'
import json, sys

path, rc, server_died, closing = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
passed = failed = skipped = 0
errors = []
try:
    with open(path, encoding="utf-8") as fh:
        report = json.load(fh)
except (OSError, ValueError) as e:
    report = None
    errors.append(f"no readable vitest JSON report ({e})")

failures = []
if report is not None:
    for file_result in report.get("testResults", []):
        assertions = file_result.get("assertionResults", [])
        for t in assertions:
            status = t.get("status")
            if status == "passed":
                passed += 1
            elif status == "failed":
                failed += 1
                msg = (t.get("failureMessages") or [""])[0].strip().splitlines()
                failures.append((t.get("fullName") or t.get("title"), msg[0] if msg else ""))
            else:  # skipped, pending, todo, disabled
                skipped += 1
        if file_result.get("status") == "failed" and not any(
            t.get("status") == "failed" for t in assertions
        ):
            msg = (file_result.get("message") or "").strip().splitlines()
            errors.append("test file failed: " + (msg[0] if msg else file_result.get("name", "?")))
if rc in (124, 137):
    errors.append(f"vitest was killed after CONFORMANCE_RUN_TIMEOUT_S (exit {rc})")
elif rc != 0 and failed == 0 and not errors:
    errors.append(f"vitest exited with status {rc} but reported no failed test")
if server_died:
    errors.append("the server exited during the run")

if failures:
    print(f"\nFailed tests ({len(failures)}):")
    for name, msg in failures[:100]:
        print(f"  FAIL {name}\n       {msg[:200]}")
for e in errors:
    print(f"run error: {e}")
failed += len(errors)
with open(closing, "w", encoding="utf-8") as fh:
    fh.write(f"conformance: {passed} passed, {failed} failed, {skipped} skipped\n")
if failed > 0:
    sys.exit(1)
if passed == 0:
    print("conformance.sh: no test ran (check --only / the filter)")
    sys.exit(1)
EOF
SRC=$?
set -e
if [ "$SRC" -ne 0 ]; then
  echo "conformance.sh: server stderr log: $SERVER_LOG"
  echo "conformance.sh: vitest JSON report: $JSON"
  [ -s "$CLOSING" ] || echo "conformance: 0 passed, 1 failed, 0 skipped" >"$CLOSING"
  cat "$CLOSING"
  [ "$SRC" -eq 1 ] || SRC=1
else
  cat "$CLOSING"
  rm -rf "$WORK"
fi
exit "$SRC"
