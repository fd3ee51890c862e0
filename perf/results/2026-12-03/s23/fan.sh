#!/bin/bash
# fan.sh BIN [SUBS]: rill-bench fanout (SUBS SSE subscribers, one writer at 50 events/s, 10 s)
# against a fresh `BIN serve --cores 2 --fsync always`; RILL_BENCH names the generator.
BIN=$1; SUBS=${2:-1000}
rm -rf /tmp/fan && mkdir /tmp/fan
$BIN serve --listen 127.0.0.1:4711 --data-dir /tmp/fan --cores 2 --fsync always >/tmp/fan.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null -w "%{http_code}" localhost:4711/v1/health/ready | grep -q 200 && break; sleep 0.1; done
${RILL_BENCH:-rill-bench} fanout --url http://127.0.0.1:4711 --subscribers $SUBS --rate 50 --duration 10 2>&1 | grep -E "^ +[0-9]"
kill $PID; wait $PID 2>/dev/null
