# usage: run.sh KIND N
rm -rf d && mkdir d
$BIN serve --listen 127.0.0.1:4790 --data-dir d --cores 2 >log 2>&1 & P=$!
sleep 0.5; curl -s -X PUT localhost:4790/memb >/dev/null; curl -s -X PUT -H 'Content-Type: text/plain' localhost:4790/memb/p >/dev/null
python3 fill.py 4790 $1 $2
sleep 1; echo "$1 $2 running: $(grep -E 'VmRSS|VmHWM' /proc/$P/status | tr -s ' ' | tr '\n' ' ')"
kill $P; wait $P
$BIN serve --listen 127.0.0.1:4790 --data-dir d --cores 2 >log2 2>&1 & P=$!
for i in $(seq 300); do curl -s -o /dev/null -w "%{http_code}" localhost:4790/v1/health/ready | grep -q 200 && break; sleep 0.1; done
echo "$1 $2 restarted: $(grep -E 'VmRSS|VmHWM' /proc/$P/status | tr -s ' ' | tr '\n' ' ') disk $(du -sm d | cut -f1) MB"
sleep 12; echo "  after 12s: $(grep -E 'VmRSS' /proc/$P/status | tr -s ' ')"
kill $P; wait $P
