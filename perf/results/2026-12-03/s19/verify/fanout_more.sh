#!/bin/bash
# extra fanout rounds 6..8, interleaved
cd /work/verify19; P=4831
for r in 6 7 8; do
  if (( r % 2 )); then order="s18b s19b"; else order="s19b s18b"; fi
  for b in $order; do
    D=/work/verify19/data-bench-$b; rm -rf $D
    PID=$(./runsrv.sh $b $P $D bench/srv-$b.log) || exit 1
    /work/bin/rill-bench fanout --url http://127.0.0.1:$P --subscribers 500 --rate 50 --duration 10 --server-pid $PID --label $b-r$r --json bench/fanout-$b-r$r.json >/dev/null 2>>bench/bench.err
    kill -TERM $PID; while kill -0 $PID 2>/dev/null; do sleep 0.1; done; rm -rf $D
  done
done
