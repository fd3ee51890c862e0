#!/bin/bash
# run_f1.sh BIN MODE N: a fresh server, then the probe's F1 reproduction
BIN=$1; MODE=$2; N=$3; P=47391
rm -rf d; mkdir d
$BIN serve --listen 127.0.0.1:$P --data-dir d --cores 2 --fsync always >log 2>&1 & S=$!
echo $S > pid
for i in $(seq 50); do curl -s -o /dev/null localhost:$P/v1/health/ready && break; sleep 0.1; done
python3 /work/probe24/robust/repro_F1_readers_stall.py $P /work/probe24/mine/pid $N $MODE 2>&1 | tail -2
kill $S; wait $S 2>/dev/null; rm -rf d
