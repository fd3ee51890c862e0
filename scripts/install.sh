#!/usr/bin/env bash
# Installs rill as a systemd service (see docs/OPERATIONS.md "Install"):
#   1. the binary to PREFIX/bin/rill (RILL_BIN, else target/release/rill,
#      built with `cargo build --release` when missing);
#   2. the system group and user `rill` (no login shell, no home);
#   3. the state directory /var/lib/rill (owned by rill, mode 0750);
#   4. deploy/rill.service to /etc/systemd/system/rill.service (ExecStart
#      pointed at PREFIX/bin/rill), then `systemctl daemon-reload`;
# and prints how to enable and start the service. Running it again changes
# only what differs. It does not start or restart the service.
#
# Usage: scripts/install.sh [--prefix DIR] [--dry-run]
#   --prefix DIR  install the binary to DIR/bin [default: /usr/local]
#   --dry-run     print the planned steps, change nothing (no root needed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=/usr/local
DRY_RUN=0
UNIT_SRC="$ROOT/deploy/rill.service"
UNIT_DEST=/etc/systemd/system/rill.service
STATE_DIR=/var/lib/rill
SERVICE_USER=rill

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --prefix) [[ $# -ge 2 ]] || die "--prefix needs a directory"; PREFIX="$2"; shift 2 ;;
      --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
      --dry-run) DRY_RUN=1; shift ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown option $1 (see --help)" ;;
    esac
  done
  [[ "$PREFIX" == /* ]] || die "--prefix must be an absolute path: $PREFIX"
  # It goes into the unit's ExecStart= (and a sed replacement) unquoted.
  [[ "$PREFIX" =~ ^[A-Za-z0-9._/+-]+$ ]] ||
    die "--prefix may hold only letters, digits and . _ / + -: $PREFIX"
}

# run CMD...: runs it, or under --dry-run prints it.
run() {
  if [[ $DRY_RUN -eq 1 ]]; then
    echo "    would run:$(printf ' %q' "$@")"
  else
    "$@"
  fi
}

step() {
  echo "==> $*"
}

# The binary to install: RILL_BIN, else the release build (built if missing).
find_binary() {
  if [[ -n "${RILL_BIN:-}" ]]; then
    [[ -x "$RILL_BIN" ]] || die "RILL_BIN=$RILL_BIN is not an executable file"
    BIN="$RILL_BIN"
    return
  fi
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rill"
  if [[ ! -x "$BIN" ]]; then
    step "build the release binary"
    command -v cargo >/dev/null || die "cargo not found: install Rust (rustup) or set RILL_BIN"
    run cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin rill
  fi
}

install_binary() {
  local dest="$PREFIX/bin/rill"
  step "install $BIN to $dest"
  if [[ -f "$dest" ]] && cmp -s "$BIN" "$dest"; then
    echo "    unchanged"
    return
  fi
  run install -D -m 0755 "$BIN" "$dest"
}

create_user() {
  step "system group and user $SERVICE_USER (no login, no home)"
  if getent group "$SERVICE_USER" >/dev/null; then
    echo "    group exists"
  else
    run groupadd --system "$SERVICE_USER"
  fi
  if getent passwd "$SERVICE_USER" >/dev/null; then
    echo "    user exists"
  else
    run useradd --system --gid "$SERVICE_USER" --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --comment "rill Durable Streams server" "$SERVICE_USER"
  fi
}

create_state_dir() {
  step "state directory $STATE_DIR"
  run install -d -o "$SERVICE_USER" -g "$SERVICE_USER" -m 0750 "$STATE_DIR"
}

# The unit with ExecStart pointed at the installed binary.
render_unit() {
  sed "s|^ExecStart=/usr/local/bin/rill |ExecStart=$PREFIX/bin/rill |" "$UNIT_SRC"
}

install_unit() {
  step "systemd unit $UNIT_DEST"
  [[ -f "$UNIT_SRC" ]] || die "missing $UNIT_SRC"
  if [[ -f "$UNIT_DEST" ]] && cmp -s <(render_unit) "$UNIT_DEST"; then
    echo "    unchanged"
  elif [[ $DRY_RUN -eq 1 ]]; then
    echo "    would write $UNIT_DEST from $UNIT_SRC ($(render_unit | grep '^ExecStart='))"
  else
    render_unit | install -D -m 0644 /dev/stdin "$UNIT_DEST"
  fi
  step "reload systemd"
  if [[ -d /run/systemd/system ]]; then
    run systemctl daemon-reload
  else
    echo "    systemd is not running here: run 'systemctl daemon-reload' where it is"
  fi
}

main() {
  parse_args "$@"
  if [[ $DRY_RUN -eq 0 && $EUID -ne 0 ]]; then
    die "must run as root (use --dry-run to see the planned steps)"
  fi
  if [[ $DRY_RUN -eq 1 ]]; then echo "dry run: nothing is changed"; fi
  find_binary
  install_binary
  create_user
  create_state_dir
  install_unit
  echo
  if [[ $DRY_RUN -eq 1 ]]; then
    echo "Dry run done. After a real run, enable and start rill (listens on 127.0.0.1:4437; see docs/OPERATIONS.md, Exposure):"
  else
    echo "Installed. Enable and start rill (listens on 127.0.0.1:4437; see docs/OPERATIONS.md, Exposure):"
  fi
  echo "    systemctl enable --now rill"
  echo "Status and logs:"
  echo "    systemctl status rill; journalctl -u rill"
}

main "$@"
