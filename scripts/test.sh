#!/usr/bin/env bash
# The project's single test command (see README):
#   1. cargo fmt --all -- --check
#   2. cargo clippy --all-targets -- -D warnings
#   3. cargo test --all-targets
#   4. scripts/conformance.sh --cores 1 --forks (the whole suite but subscriptions)
#   5. scripts/conformance.sh --cores 2 --forks
# then a summary. Stops at the first failing step.
# CONFORMANCE_ARGS (word-split) is passed to both conformance runs, e.g.
# CONFORMANCE_ARGS='--only=^HTTP.Protocol' scripts/test.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/rill-test.XXXXXX")"
trap 'rm -rf "$LOGDIR"' EXIT
STEPS=()
TOTAL_START=$(date +%s)

# step NAME LOGFILE CMD...: run CMD, echoing its name; output is shown and
# also kept in LOGFILE for the summary. Exit 1 with a clear message on failure.
step() {
  local name="$1" log="$2" start rc
  shift 2
  echo
  echo "==> [$((${#STEPS[@]} + 1))/5] $name"
  start=$(date +%s)
  set +e
  "$@" </dev/null 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    echo
    echo "test.sh: FAILED at step '$name' (exit status $rc)"
    local IFS=';'
    echo "test.sh: steps passed before it: ${STEPS[*]:-none}"
    exit 1
  fi
  STEPS+=("$name ($(($(date +%s) - start)) s)")
}

step "cargo fmt --all -- --check" "$LOGDIR/fmt.log" cargo fmt --all -- --check
step "cargo clippy --all-targets -- -D warnings" "$LOGDIR/clippy.log" \
  cargo clippy --all-targets -- -D warnings
step "cargo test --all-targets" "$LOGDIR/test.log" cargo test --all-targets
step "scripts/conformance.sh --cores 1 --forks" "$LOGDIR/conf1.log" "$ROOT/scripts/conformance.sh" --cores 1 --forks \
  ${CONFORMANCE_ARGS:-}
step "scripts/conformance.sh --cores 2 --forks" "$LOGDIR/conf2.log" "$ROOT/scripts/conformance.sh" --cores 2 --forks \
  ${CONFORMANCE_ARGS:-}

# ---- summary -------------------------------------------------------------------
sum_cargo() { # field index in "test result: ok. N passed; M failed; K ignored; ..."
  sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored;.*/\1 \2 \3/p' \
    "$LOGDIR/test.log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'
}
conf_line() { grep -E '^conformance: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$1" | tail -n 1; }
conf_field() { # conf_field LOG N: N-th number of the closing line
  conf_line "$1" | grep -oE '[0-9]+' | sed -n "${2}p"
}

CT_P=$(sum_cargo 1) CT_F=$(sum_cargo 2) CT_I=$(sum_cargo 3)
C1_P=$(conf_field "$LOGDIR/conf1.log" 1) C1_F=$(conf_field "$LOGDIR/conf1.log" 2) C1_S=$(conf_field "$LOGDIR/conf1.log" 3)
C2_P=$(conf_field "$LOGDIR/conf2.log" 1) C2_F=$(conf_field "$LOGDIR/conf2.log" 2) C2_S=$(conf_field "$LOGDIR/conf2.log" 3)

echo
echo "==> summary ($(($(date +%s) - TOTAL_START)) s)"
for s in "${STEPS[@]}"; do echo "  ok  $s"; done
echo "  cargo test:              $CT_P passed, $CT_F failed, $CT_I ignored"
echo "  conformance (--cores 1): ${C1_P:-?} passed, ${C1_F:-?} failed, ${C1_S:-?} skipped"
echo "  conformance (--cores 2): ${C2_P:-?} passed, ${C2_F:-?} failed, ${C2_S:-?} skipped"
echo "all: $((CT_P + ${C1_P:-0} + ${C2_P:-0})) passed, $((CT_F + ${C1_F:-0} + ${C2_F:-0})) failed, $((CT_I + ${C1_S:-0} + ${C2_S:-0})) skipped"
