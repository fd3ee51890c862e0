"""F1: cycle bound for a reader far behind, and SIGTERM during catch-up. usage: f1.py BIN PORT"""
import json, shutil, sys, threading, time
from common import *

binname, port = sys.argv[1], int(sys.argv[2])
TOTAL = 32 << 20
dd = f"{ROOT}/data-f1-{binname}"; shutil.rmtree(dd, ignore_errors=True)
log = f"{ROOT}/f1-{binname}.log"; open(log, "w").close()
srv = Server(binname, port, dd, ["--sse-cycle-ms", "900"], log); srv.start()
fill(port, "f", "text/plain", TOTAL, text=True)
srv.stop(); srv.start()          # reads come from disk
expected, period = pattern(TOTAL, text=True)

def follow(rate):
    resp = []; tok = "-1"; T0 = time.time()
    while time.time() - T0 < 60:
        r = SseResponse(port, "f", tok, expected, period, False, rate=rate, rcvbuf=262144 if rate else None,
                        deadline=T0 + 60,
                        stop_at=lambda r: r.pos >= TOTAL and r.last_ctrl and r.last_ctrl.get("upToDate"))
        r.run(); resp.append(r); tok = r.offset_tok
        if r.pos >= TOTAL: break
    first = resp[0]
    return {"rate": rate, "first_duration_s": round(first.t_end - first.t_start, 3), "first_end": first.end,
         "first_last_next_offset": first.pos, "tail": TOTAL,
         "first_last_upToDate": bool(first.last_ctrl and first.last_ctrl.get("upToDate")),
         "first_MiB_per_s": round(first.decoded / 2**20 / (first.t_end - first.t_start), 1),
         "responses_to_tail": len(resp), "time_to_tail_s": round(resp[-1].t_end - T0, 2),
         "ends": [r.end for r in resp], "durations": [round(r.t_end - r.t_start, 2) for r in resp],
         "positions": [r.pos for r in resp],
         "mismatch": sum(r.mismatch for r in resp), "gaps": sum(r.gaps for r in resp), "dups": sum(r.dups for r in resp)}


# A: one reader as fast as it can; A2: one reader at 8 MB/s (catch-up longer than the cycle)
A = follow(None)
A2 = follow(8_000_000)
srv.stop()

# B: default cycle (60 s); a reader at 2 MB/s far behind; SIGTERM after 3 s
srv = Server(binname, port, dd, [], log); srv.start()
r = SseResponse(port, "f", "-1", expected, period, False, rate=2_000_000, rcvbuf=262144, deadline=time.time() + 40)
th = threading.Thread(target=r.run); th.start()
time.sleep(3)
rc, tstop = srv.stop(timeout=40)
th.join()
B = {"exit_code": rc, "time_to_exit_s": round(tstop, 2), "reader_end": r.end,
     "reader_response_s": round(r.t_end - r.t_start, 2), "reader_pos_MiB": round(r.pos / 2**20, 2),
     "reader_last_ctrl": r.last_ctrl, "mismatch": r.mismatch, "gaps": r.gaps}
res = {"bin": binname, "A": A, "A2": A2, "B": B}
print(json.dumps(res, indent=1))
json.dump(res, open(f"{ROOT}/f1-{binname}.json", "w"), indent=1)
shutil.rmtree(dd, ignore_errors=True)
