#!/bin/bash
# usage: fair.sh BIN SUBS RATE [appends|longpoll]
# One stream fans out to SUBS SSE readers at RATE events/s on one shard; beside it a
# bystander measures its latency: `appends` (default) 10 streams appending 1,000/s in all,
# `longpoll` 20 long-poll waiters on another stream woken every 20 ms.
BIN=$1; SUBS=$2; RATE=$3; BYSTANDER=${4:-appends}
# The fan-out outlasts the bystander (12 s around 5 s of appends, 14 s around 6 s of waits).
FANOUT_S=12; [ "$BYSTANDER" = longpoll ] && FANOUT_S=14
URL=http://127.0.0.1:4710
rm -rf /tmp/fair && mkdir /tmp/fair
$BIN serve --listen 127.0.0.1:4710 --data-dir /tmp/fair --cores 1 --fsync interval:50 >/tmp/fair.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null -w "%{http_code}" localhost:4710/v1/health/ready | grep -q 200 && break; sleep 0.1; done
/work/bin/rill-bench fanout --url $URL --subscribers $SUBS --rate $RATE --duration $FANOUT_S --threads 1 > fan.out 2>&1 &
F=$!
sleep 5
case $BYSTANDER in
  appends) /work/bin/rill-bench append --url $URL --streams 10 --payload 256 --rate 1000 --duration 5 --threads 1 ;;
  longpoll) /work/bin/rill-bench longpoll --url $URL --waiters 20 --interval-ms 20 --duration 6 --threads 1 ;;
esac 2>&1 | grep -E "^ +[0-9]"
wait $F; grep -E "^ +[0-9]" fan.out
kill $PID; wait $PID 2>/dev/null
