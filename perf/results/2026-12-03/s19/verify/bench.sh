#!/bin/bash
# Regression benches, binaries interleaved (order alternates per round). usage: bench.sh ROUNDS
cd /work/verify19; R=${1:-5}; P=4830
for r in $(seq 1 $R); do
  if (( r % 2 )); then order="s18b s19b"; else order="s19b s18b"; fi
  for b in $order; do
    D=/work/verify19/data-bench-$b; rm -rf $D
    PID=$(./runsrv.sh $b $P $D bench/srv-$b.log) || { echo start failed; exit 1; }
    for c in 1 4; do
      /work/bin/rill-bench catchup --url http://127.0.0.1:$P --stream-bytes 268435456 --clients $c --label $b-c$c-r$r --json bench/catchup-$b-c$c-r$r.json >/dev/null 2>>bench/bench.err
    done
    /work/bin/rill-bench fanout --url http://127.0.0.1:$P --subscribers 500 --rate 50 --duration 10 --server-pid $PID --label $b-r$r --json bench/fanout-$b-r$r.json >/dev/null 2>>bench/bench.err
    echo "$b r$r hwm $(grep VmHWM /proc/$PID/status)" >> bench/hwm.txt
    kill -TERM $PID; while kill -0 $PID 2>/dev/null; do sleep 0.1; done
    rm -rf $D
  done
done
