#!/bin/bash
# usage: fair2.sh BIN SUBS RATE -> long-poll wake-up latency of a quiet stream while one stream fans out (one shard)
BIN=$1; SUBS=$2; RATE=$3
rm -rf /tmp/fair && mkdir /tmp/fair
$BIN serve --listen 127.0.0.1:4710 --data-dir /tmp/fair --cores 1 --fsync interval:50 >/tmp/fair.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null -w "%{http_code}" localhost:4710/v1/health/ready | grep -q 200 && break; sleep 0.1; done
/work/bin/rill-bench fanout --url http://127.0.0.1:4710 --subscribers $SUBS --rate $RATE --duration 14 --threads 1 > fan.out 2>&1 &
F=$!
sleep 5
/work/bin/rill-bench longpoll --url http://127.0.0.1:4710 --waiters 20 --interval-ms 20 --duration 6 --threads 1 2>&1 | grep -E "^ +[0-9]"
wait $F; grep -E "^ +[0-9]" fan.out
kill $PID; wait $PID 2>/dev/null
