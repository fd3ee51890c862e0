#!/bin/bash
# usage: run.sh BIN -> peak RSS while the cleaner reclaims 128 MiB segments (one shard, tiny cache)
BIN=$1
rm -rf d && mkdir d
$BIN serve --listen 127.0.0.1:4720 --data-dir d --cores 1 --segment-bytes 134217728 --max-body-bytes 4194304 --cache-bytes 1048576 --clean-interval-ms 200 >log 2>&1 & P=$!
for i in $(seq 50); do curl -s -o /dev/null -w "%{http_code}" localhost:4720/v1/health/ready | grep -q 200 && break; sleep 0.1; done
python3 - <<'PY'
import http.client
c=http.client.HTTPConnection("127.0.0.1",4720)
def rq(m,p,b=b""):
    c.request(m,p,body=b,headers={"Content-Type":"application/octet-stream"}); r=c.getresponse(); r.read(); return r.status
rq("PUT","/v1/stream/keep"); rq("PUT","/v1/stream/gone")
for i in range(100):
    assert rq("POST","/v1/stream/keep",bytes([i%256])*65536)==204
    assert rq("POST","/v1/stream/gone",bytes([i%256])*3000000)==204
print("delete", rq("DELETE","/v1/stream/gone"))
PY
echo "before cleaning: $(grep -E 'VmHWM|VmRSS' /proc/$P/status | tr -s ' ' | tr '\n' ' ')"
for i in $(seq 100); do n=$(curl -s localhost:4720/v1/metrics | grep '^rill_cleaner_segments_cleaned_total' | awk '{s+=$2} END{print s+0}'); [ "$n" -ge 2 ] && break; sleep 0.2; done
echo "cleaned $n: $(grep -E 'VmHWM|VmRSS' /proc/$P/status | tr -s ' ' | tr '\n' ' ')"
kill $P; wait $P
