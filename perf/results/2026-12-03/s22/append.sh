#!/bin/bash
# append.sh BIN PAYLOAD STREAMS SECS [RATE]: one `rill-bench append` run against a fresh
# `BIN serve --cores 2 --fsync always`; prints appends/s, MB/s, p50/p99 µs, errors, the
# server's CPU seconds over the run (from /proc) and its CPU ms per MB appended.
# RATE (appends/s, all streams) makes the load open-loop, for CPU per append at equal work.
# RILL_BENCH names the generator (default: rill-bench on PATH); MESSAGES=json sends JSON objects.
BIN=$1; P=$2; N=$3; D=$4; RATE=${5:+--rate $5}
PORT=4811; BENCH=${RILL_BENCH:-rill-bench}
DIR=$(mktemp -d)
$BIN serve --listen 127.0.0.1:$PORT --data-dir $DIR/data --cores 2 --fsync always >/dev/null 2>&1 &
PID=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:$PORT/v1/health/ready >/dev/null && break; sleep 0.1; done
$BENCH append --url http://127.0.0.1:$PORT --streams $N --payload $P --duration $D $RATE --messages ${MESSAGES:-text} \
  --json $DIR/run.json >/dev/null 2>&1
CPU=$(awk '{print ($14+$15)/100}' /proc/$PID/stat)
kill $PID; wait $PID 2>/dev/null
python3 - "$DIR/run.json" "$CPU" "$(basename $BIN)" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
lat, cpu = j['latency_us'], float(sys.argv[2])
mb = j['mb_per_s'] * j['elapsed_s']
print(sys.argv[3], 'appends/s %.0f MB/s %.1f p50 %d p99 %d errors %d server_cpu_s %.2f cpu_ms_per_MB %.2f'
      % (j['appends_per_s'], j['mb_per_s'], lat['p50'], lat['p99'], j['errors'], cpu, cpu * 1000 / mb))
PY
rm -rf $DIR
