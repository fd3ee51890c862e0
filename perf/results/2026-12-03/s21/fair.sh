#!/bin/bash
# usage: fair.sh BIN SUBS RATE  -> bystander append latency while one stream fans out (one shard)
BIN=$1; SUBS=$2; RATE=$3
rm -rf /tmp/fair && mkdir /tmp/fair
$BIN serve --listen 127.0.0.1:4710 --data-dir /tmp/fair --cores 1 --fsync interval:50 >/tmp/fair.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null -w "%{http_code}" localhost:4710/v1/health/ready | grep -q 200 && break; sleep 0.1; done
/work/bin/rill-bench fanout --url http://127.0.0.1:4710 --subscribers $SUBS --rate $RATE --duration 12 --threads 1 > fan.out 2>&1 &
F=$!
sleep 5
/work/bin/rill-bench append --url http://127.0.0.1:4710 --streams 10 --payload 256 --rate 1000 --duration 5 --threads 1 2>&1 | tail -3
wait $F; tail -3 fan.out
kill $PID; wait $PID 2>/dev/null
