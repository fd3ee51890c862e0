BIN=$1
rm -rf /tmp/cm && mkdir /tmp/cm
$BIN serve --listen 127.0.0.1:4700 --data-dir /tmp/cm --cores 2 --fsync always >/tmp/cm.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null localhost:4700/v1/health/ready && break; sleep 0.1; done
[ -n "$SLICE" ] && python3 /work/exp20/slice.py $PID $SLICE >/dev/null
/work/bin/rill-bench append --url http://127.0.0.1:4700 --api v1 --streams ${STREAMS:-100} --payload 256 --duration 5 ${EXTRA:---shared-connections 20} 2>&1 | tail -1 | awk '{printf "total %s/s p50 %s p99 %s ", $1, $3, $5}'
curl -s localhost:4700/v1/metrics | grep -E "^rill_commit_seconds_(sum|count)" | paste - - | awk '{printf "commits %d mean_ms %.3f ", $4, $2/$4*1000} END{print ""}'; curl -s localhost:4700/v1/metrics | grep -E "^rill_group_commits_total|^rill_handoffs_total" | tr "\n" " "; echo
kill $PID; wait $PID 2>/dev/null
