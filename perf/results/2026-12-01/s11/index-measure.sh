#!/bin/bash
# measure.sh BIN PORT LABEL EXTRA-BENCH-ARGS: index bytes per append after a run
BIN=$1; PORT=$2; LABEL=$3; shift 3
D=/work/probe12/idx/d-$LABEL; rm -rf $D
$BIN serve --data-dir $D --listen 127.0.0.1:$PORT --cores 2 >/work/probe12/idx/$LABEL.log 2>&1 &
PID=$!; sleep 1
/work/probe12/rill-bench append --url http://127.0.0.1:$PORT --duration 30 "$@" > /work/probe12/idx/$LABEL.bench 2>&1
M=$(curl -s http://127.0.0.1:$PORT/v1/metrics)
IDX=$(echo "$M" | awk '/^rill_index_bytes/{s+=$2} END{print s}')
RSS=$(grep VmRSS /proc/$PID/status | awk '{print $2}')
APP=$(grep -E "appends/s|ok" /work/probe12/idx/$LABEL.bench | head -3)
echo "$LABEL index_bytes=$IDX rss_kb=$RSS"; echo "$M" | grep -E "^rill_append" | head -4; grep -iE "total|appends" /work/probe12/idx/$LABEL.bench | head -4
kill $PID; wait $PID; rm -rf $D
