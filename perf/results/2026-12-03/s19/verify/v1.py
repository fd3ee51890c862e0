"""V1: budget starvation. usage: v1.py BIN PORT [readers] [seconds]"""
import json, shutil, statistics, sys, threading, time
from common import *

binname, port = sys.argv[1], int(sys.argv[2])
NREAD = int(sys.argv[3]) if len(sys.argv) > 3 else 40
DUR = float(sys.argv[4]) if len(sys.argv) > 4 else 90
STAGGER = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0   # seconds between reader starts
SPREAD = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0    # rate of reader k = 1 MB/s * (1 - SPREAD + 2*SPREAD*k/(N-1))
TAG = sys.argv[7] if len(sys.argv) > 7 else ""
TOTAL = 64 << 20
dd = f"{ROOT}/data-v1-{binname}"; shutil.rmtree(dd, ignore_errors=True)
log = f"{ROOT}/v1-{binname}.log"; open(log, "w").close()
flags = ["--max-reply-bytes", "8388608", "--idle-timeout-ms", "30000", "--sse-cycle-ms", "60000"]
srv = Server(binname, port, dd, flags, log); srv.start()
fill(port, "v1", "application/octet-stream", TOTAL)
print("filled; restart", srv.stop()); srv.start()
expected, period = pattern(TOTAL)
hwm_restart = srv.hwm_kb()
open(f"/proc/{srv.proc.pid}/clear_refs", "w").write("5")  # reset VmHWM after recovery
print("hwm after recovery (reset now):", hwm_restart, "->", srv.hwm_kb())

readers = []
T0 = time.time(); deadline = T0 + DUR


def reader(k):
    time.sleep(k * STAGGER)
    deadline = time.time() + DUR
    rate = 1_000_000 * (1 - SPREAD + 2 * SPREAD * k / max(1, NREAD - 1))
    st = {"k": k, "resp": [], "done": False, "pos": 0, "t0": time.time()}
    readers.append(st)
    tok = "-1"
    while time.time() < deadline and not st["done"]:
        r = SseResponse(port, "v1", tok, expected, period, True, rate=rate, rcvbuf=262144, deadline=deadline,
                        stop_at=lambda r: r.pos >= TOTAL and r.last_ctrl and r.last_ctrl.get("upToDate"))
        try:
            r.run()
        except OSError as e:
            r.end = "connerr:" + str(e)
        st["resp"].append(r); tok = r.offset_tok; st["pos"] = r.pos
        if r.pos >= TOTAL:
            st["done"] = True; st["t_done"] = time.time() - st["t0"]
        if r.end == "http":
            time.sleep(float(r.retry_after or 1))


ths = [threading.Thread(target=reader, args=(k,)) for k in range(NREAD)]
for t in ths: t.start()
rss = []
while any(t.is_alive() for t in ths):
    rss.append((round(time.time() - T0, 1), srv.rss_kb())); time.sleep(1)
hwm = srv.hwm_kb()
rc, tstop = srv.stop()

allr = [r for st in readers for r in st["resp"]]
ends = {}
for r in allr: ends[r.end] = ends.get(r.end, 0) + 1
statuses = {}
for r in allr: statuses[r.status] = statuses.get(r.status, 0) + 1
prog = sorted(st["pos"] for st in readers)
byt = sorted(sum(r.decoded for r in st["resp"]) for st in readers)
wire = sorted(sum(r.wire for r in st["resp"]) for st in readers)
first_resp_end = {}
for st in readers:
    e = st["resp"][0].end; first_resp_end[e] = first_resp_end.get(e, 0) + 1
cut_durs = sorted(round(r.t_end - r.t_start, 1) for r in allr if r.end == "cut")
clean_durs = sorted(round(r.t_end - r.t_start, 1) for r in allr if r.end == "clean")
clean_tail = sum(1 for r in allr if r.end == "clean" and r.pos >= TOTAL)
res = {
    "bin": binname, "stagger": STAGGER, "spread": SPREAD, "readers": NREAD, "dur": DUR, "responses": len(allr), "ends": ends, "statuses": statuses,
    "first_response_end": first_resp_end,
    "readers_with_cut": sum(1 for st in readers if any(r.end == "cut" for r in st["resp"])),
    "done": sum(1 for st in readers if st["done"]),
    "t_done": sorted(round(st.get("t_done", 0), 1) for st in readers if st["done"]),
    "progress_MiB_min_med_max": [round(prog[0] / 2**20, 1), round(statistics.median(prog) / 2**20, 1), round(prog[-1] / 2**20, 1)],
    "decoded_MiB_min_med_max": [round(byt[0] / 2**20, 1), round(statistics.median(byt) / 2**20, 1), round(byt[-1] / 2**20, 1)],
    "decoded_total_MiB": round(sum(byt) / 2**20, 1), "wire_total_MB": round(sum(wire) / 1e6, 1),
    "mismatch_events": sum(r.mismatch for r in allr), "gaps": sum(r.gaps for r in allr), "dups": sum(r.dups for r in allr),
    "keepalives": sum(r.keepalives for r in allr), "max_silence_s": round(max(r.max_silence for r in allr), 1),
    "resp_with_keepalive": sum(1 for r in allr if r.keepalives),
    "cut_durations_s": cut_durs, "clean_durations_s": clean_durs,
    "hwm_MB": round(hwm / 1024, 1), "hwm_recovery_MB": round(hwm_restart / 1024, 1), "rss_max_MB": round(max(x[1] or 0 for x in rss) / 1024, 1),
    "rss_end_MB": round((rss[-1][1] or 0) / 1024, 1), "stop": [rc, round(tstop, 2)],
    "per_reader_MiB": [round(st["pos"] / 2**20, 1) for st in readers],
}
print(json.dumps(res, indent=1))
json.dump(res, open(f"{ROOT}/v1-{binname}{TAG}.json", "w"), indent=1)
json.dump(rss, open(f"{ROOT}/v1-{binname}{TAG}-rss.json", "w"))
shutil.rmtree(dd, ignore_errors=True)
