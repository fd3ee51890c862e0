#!/bin/bash
BIN=$1; PORT=$2; CLIENTS=$3; D=/tmp/rill-catch-$PORT
rm -rf $D; mkdir -p $D
$BIN serve --listen 127.0.0.1:$PORT --data-dir $D --cores 2 --fsync always >/tmp/catch-$PORT.log 2>&1 &
PID=$!
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/health/ready && break; sleep 0.1; done
/work/bin/rill-bench catchup --url http://127.0.0.1:$PORT --api v1 --stream-bytes 268435456 --clients $CLIENTS --json /tmp/catch-$PORT.json >/tmp/catch-$PORT.out 2>&1
kill $PID; wait $PID 2>/dev/null
echo "$BIN clients=$CLIENTS $(grep -A1 "GB/s" /tmp/catch-$PORT.out | tail -1)"
rm -rf $D
