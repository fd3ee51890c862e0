"""Append latency while the cleaner reclaims segments of deleted streams that
are interleaved with long streams (many extents). usage: stall.py BIN PORT DIR"""
import http.client, shutil, signal, struct, subprocess, sys, threading, time
BIN, PORT, DIR = sys.argv[1], int(sys.argv[2]), sys.argv[3]
shutil.rmtree(DIR, ignore_errors=True)
p = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", DIR, "--cores", "2",
                      "--segment-bytes", "8388608", "--max-body-bytes", "4194304", "--clean-interval-ms", "500"],
                     stderr=open(DIR + ".log", "w"), stdout=subprocess.DEVNULL)
time.sleep(1)
def conn(): return http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
def rq(c, m, path, body=b"", ct="application/octet-stream"):
    c.request(m, path, body=body, headers={"Content-Type": ct}); r = c.getresponse(); r.read(); return r.status
c = conn()
assert rq(c, "PUT", "/bk01") == 201
BIG = 6
for b in range(BIG): assert rq(c, "PUT", f"/bk01/big{b}") == 201
frames = b"".join(struct.pack(">I", 48) + b"x" * 48 for _ in range(512))
junk = 0
for rnd in range(600):
    for b in range(BIG):
        assert rq(c, "POST", f"/bk01/big{b}/append-batch", frames) == 200
    if rnd % 5 == 0: rq(c, "PUT", f"/v1/stream/junk{junk}", b"j" * 900_000); junk += 1
print("extents per big stream ~", 600 * 512, "junk streams", junk, flush=True)
lat = []; stop = False
def writer():
    w = conn(); rq(w, "PUT", "/v1/stream/probe")
    while not stop:
        t = time.perf_counter(); rq(w, "POST", "/v1/stream/probe", b"p" * 64); lat.append(time.perf_counter() - t)
        time.sleep(0.005)
th = threading.Thread(target=writer); th.start(); time.sleep(1)
for j in range(junk): rq(c, "DELETE", f"/v1/stream/junk{j}")
time.sleep(15); stop = True; th.join()
lat.sort()
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000
log = open(DIR + ".log").read()
print(f"appends {len(lat)} p50 {q(.5):.1f} ms p99 {q(.99):.1f} ms p999 {q(.999):.1f} ms max {lat[-1]*1000:.1f} ms; cleaned {log.count('cleaned segment')}", flush=True)
p.send_signal(signal.SIGTERM); p.wait(); shutil.rmtree(DIR, ignore_errors=True)
