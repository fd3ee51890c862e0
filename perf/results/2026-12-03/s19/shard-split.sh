#!/bin/bash
# usage: shardrun.sh BIN [extra args]; prints total appends/s and per-shard appends + mean commit ms
BIN=$1; shift
rm -rf /tmp/cm && mkdir /tmp/cm
$BIN serve --listen 127.0.0.1:4700 --data-dir /tmp/cm --cores 2 --fsync always "$@" >/tmp/cm.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null localhost:4700/v1/health/ready && break; sleep 0.1; done
${TASKSET:-} /work/bin/rill-bench append --url http://127.0.0.1:4700 --api v1 --streams 100 --payload 256 --duration 5 2>&1 | tail -1 | awk '{printf "total %s/s p99 %s ", $1, $5}'
curl -s localhost:4700/v1/metrics | awk '/^rill_appends_total/{printf "%s ", $0} /^rill_commit_seconds_sum/{s[$1]=$2} /^rill_commit_seconds_count/{c[$1]=$2} END{print ""}'
curl -s localhost:4700/v1/metrics | grep -E "^rill_commit_seconds_(sum|count)" | paste - - | awk '{printf "commit_ms %.3f ", $2/$4*1000} END{print ""}'
kill $PID; wait $PID 2>/dev/null
