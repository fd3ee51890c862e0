#!/bin/bash
BIN=$1; shift
rm -rf /tmp/cm && mkdir /tmp/cm
$BIN serve --listen 127.0.0.1:4700 --data-dir /tmp/cm --cores 2 --fsync always "$@" >/tmp/cm.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null localhost:4700/v1/health/ready && break; sleep 0.1; done
/work/bin/rill-bench append --url http://127.0.0.1:4700 --api v1 --streams 100 --payload 256 --duration 5 > bench.out 2>&1 &
B=$!
sleep 2
perf record -a -o perf.data -e sched:sched_switch,sched:sched_wakeup,block:block_rq_issue,block:block_rq_complete,workqueue:workqueue_execute_start,workqueue:workqueue_execute_end,io_uring:io_uring_submit_req,io_uring:io_uring_complete,iomap:iomap_dio_rw_begin,iomap:iomap_dio_complete,irq:irq_handler_entry -- sleep 0.3 2>&1 | tail -2
wait $B
tail -1 bench.out
kill $PID; wait $PID 2>/dev/null
