#!/bin/bash
# usage: large.sh BIN PORT PAYLOAD STREAMS DUR
BIN=$1; PORT=$2; D=/tmp/rill-large-$PORT
rm -rf $D; mkdir -p $D
$BIN serve --listen 127.0.0.1:$PORT --data-dir $D --cores 2 --fsync ${FSYNC:-always} >/tmp/large-$PORT.log 2>&1 &
PID=$!
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/health/ready && break; sleep 0.1; done
T0=$(awk '{print $14+$15}' /proc/$PID/stat)
/work/bin/rill-bench append --url http://127.0.0.1:$PORT --api v1 --streams $4 --payload $3 --duration $5 --json /tmp/large-$PORT.json >/tmp/large-$PORT.out 2>&1
T1=$(awk '{print $14+$15}' /proc/$PID/stat)
kill $PID; wait $PID 2>/dev/null
python3 -c "
import json;j=json.load(open('/tmp/large-$PORT.json'))
r=j.get('throughput') or j.get('ops_per_sec') or j
print('$BIN', {k:v for k,v in j.items() if not isinstance(v,(dict,list))}, 'cpu_ticks', $T1-$T0)" 2>&1 | grep -o "appends.: [0-9]*\|mb_per_s.: [0-9.]*\|cpu_ticks.*"
rm -rf $D
