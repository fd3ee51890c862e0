"""V1b: an SSE response waiting for budget held by stalled readers: keep-alives, clean end at its cycle;
a plain catch-up meanwhile. usage: v1b.py BIN PORT"""
import http.client, json, shutil, socket, sys, threading, time
from common import *

binname, port = sys.argv[1], int(sys.argv[2])
TOTAL = 16 << 20
dd = f"{ROOT}/data-v1b-{binname}"; shutil.rmtree(dd, ignore_errors=True)
log = f"{ROOT}/v1b-{binname}.log"; open(log, "w").close()
LP = sys.argv[3] if len(sys.argv) > 3 else "2000"; CY = sys.argv[4] if len(sys.argv) > 4 else "10000"
flags = ["--max-reply-bytes", "1048576", "--long-poll-timeout-ms", LP, "--sse-cycle-ms", CY,
         "--idle-timeout-ms", "30000"]
srv = Server(binname, port, dd, flags, log); srv.start()
fill(port, "b", "application/octet-stream", TOTAL)
srv.stop(); srv.start()
expected, period = pattern(TOTAL)
stalled = []
for k in range(4):  # never read: their leases stay held until --idle-timeout-ms
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); s.connect(("127.0.0.1", port))
    s.sendall(f"GET /v1/stream/b?offset=0000000000000000_{(k * 3 + 1) << 20:016d}&live=sse HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    stalled.append(s)
time.sleep(2)
T0 = time.time()
r = SseResponse(port, "b", "-1", expected, period, True, deadline=T0 + 40)
th = threading.Thread(target=r.run); th.start()
time.sleep(3)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/v1/stream/b?offset=0000000000000000_0000000008388608"); pr = c.getresponse(); pbody = pr.read()
plain = {"status": pr.status, "retry_after": pr.getheader("retry-after"), "body": pbody[:200].decode("latin1") if pr.status != 200 else len(pbody)}
th.join()
for s in stalled: s.close()
rc, ts = srv.stop()
res = {"bin": binname, "end": r.end, "duration_s": round(r.t_end - r.t_start, 2), "decoded": r.decoded,
       "keepalives": r.keepalives, "max_silence_s": round(r.max_silence, 2), "mismatch": r.mismatch, "gaps": r.gaps,
       "dups": r.dups,
       "controls": [(round(t - T0, 2), parse_offset(c["streamNextOffset"]) if "streamNextOffset" in c else None,
                     c.get("upToDate", False)) for t, c in r.controls],
       "plain_catchup_while_waiting": plain, "stop": [rc, round(ts, 2)]}
print(json.dumps(res))
json.dump(res, open(f"{ROOT}/v1b-{binname}-{LP}-{CY}.json", "w"))
shutil.rmtree(dd, ignore_errors=True)
