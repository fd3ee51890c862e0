#!/bin/bash
# Session 19: start (b87bba0, rill-s18a) against end (rill-s19b), interleaved, 100 streams x 256 B, 10 s.
for r in 1 2 3 4; do
 for b in rill-s18a rill-s19b; do
  echo "run $r $b $(bash /work/main/perf/results/2026-12-02/s13/append-pair.sh /work/bin/$b 4601 256 100 10 | tr '\n' ' ')"
 done
done
