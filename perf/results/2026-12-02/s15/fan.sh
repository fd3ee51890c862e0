#!/bin/bash
BIN=$1; PORT=$2; D=/tmp/rill-fan-$PORT
rm -rf $D; mkdir -p $D
$BIN serve --listen 127.0.0.1:$PORT --data-dir $D --cores 2 --fsync always >/tmp/fan-$PORT.log 2>&1 &
PID=$!
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/health/ready && break; sleep 0.1; done
T0=$(awk '{print $14+$15}' /proc/$PID/stat)
/work/bin/rill-bench fanout --url http://127.0.0.1:$PORT --api v1 --subscribers ${SUBS:-1000} --rate 50 --duration ${DUR:-8} --json /tmp/fan-$PORT.json >/tmp/fan-$PORT.out 2>&1
T1=$(awk '{print $14+$15}' /proc/$PID/stat)
kill $PID; wait $PID 2>/dev/null
echo "$BIN cpu_ticks $((T1-T0)) $(grep -o '"p50[^,]*,\|"p99"[^,]*,\|"lost[^,]*,\|"received[^,]*,' /tmp/fan-$PORT.json | tr '\n' ' ')"
rm -rf $D
