#!/bin/bash
for r in 1 2 3 4 5; do
 for b in rill-s16d rill-s16e rill-s18a; do
  echo "run $r $b $(bash /work/main/perf/results/2026-12-02/s13/append-pair.sh /work/bin/$b 4601 256 100 10 | tr '\n' ' ')"
 done
done
