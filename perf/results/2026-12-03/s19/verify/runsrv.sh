#!/bin/bash
# usage: runsrv.sh BIN PORT DATADIR LOG [flags...]  -> starts server, waits ready, prints pid
B=$1; P=$2; D=$3; L=$4; shift 4
mkdir -p "$D"
/work/bin/rill-$B serve --listen 127.0.0.1:$P --data-dir "$D" --cores 2 --fsync always "$@" >>"$L" 2>&1 &
echo $! 
for i in $(seq 1 100); do curl -sf 127.0.0.1:$P/v1/health/ready >/dev/null && exit 0; sleep 0.1; done
exit 1
