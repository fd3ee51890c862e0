#!/bin/bash
# mem.sh BIN [N]: resident memory of `BIN serve --cores 2` holding N idle 1-byte streams
# (default 100,000) that ../s21/fill.py creates over 8 keep-alive connections, 5 s after.
BIN=$(realpath "$1"); N=${2:-100000}
FILL="$(cd "$(dirname "$0")/../s21" && pwd)/fill.py"
DIR=$(mktemp -d); cd "$DIR"
$BIN serve --listen 127.0.0.1:4791 --data-dir d --cores 2 >log 2>&1 & P=$!
for i in $(seq 50); do curl -s -o /dev/null localhost:4791/v1/health/ready && break; sleep 0.1; done
curl -s -X PUT localhost:4791/memb >/dev/null
python3 "$FILL" 4791 streams $N
sleep 5; echo "$(basename $BIN) $N streams: $(grep -E 'VmRSS' /proc/$P/status | tr -s ' ')"
kill $P; wait $P 2>/dev/null; cd /; rm -rf "$DIR"
