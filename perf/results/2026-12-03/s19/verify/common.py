"""Shared helpers: server lifecycle, stream fill, raw SSE client with own chunked parsing."""
import base64, http.client, json, os, shutil, signal, socket, subprocess, time

BINS = {"s18b": "/work/bin/rill-s18b", "s19b": "/work/bin/rill-s19b"}
ROOT = "/work/verify19"


class Server:
    def __init__(self, binary, port, data_dir, flags, log):
        self.binary, self.port, self.data_dir, self.flags, self.log = binary, port, data_dir, flags, log
        self.proc = None

    def start(self):
        os.makedirs(self.data_dir, exist_ok=True)
        cmd = [BINS[self.binary], "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir,
               "--cores", "2", "--fsync", "always"] + self.flags
        self.logf = open(self.log, "ab")
        self.logf.write(("### " + " ".join(cmd) + "\n").encode()); self.logf.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 60:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/v1/health/ready"); r = c.getresponse(); r.read(); c.close()
                if r.status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited at start")
            time.sleep(0.1)
        raise RuntimeError("server not ready")

    def hwm_kb(self):
        return proc_kb(self.proc.pid, "VmHWM")

    def rss_kb(self):
        return proc_kb(self.proc.pid, "VmRSS")

    def stop(self, timeout=30):
        """SIGTERM; returns (exit code, seconds to exit)."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None, 0.0)
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill(); rc = self.proc.wait()
        self.logf.close()
        return rc, time.time() - t0


def proc_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None


def pattern(n, text=False):
    """Position-dependent payload: byte i = (i*7)%251 (binary) or 32+(i*7)%95 (text)."""
    period = 95 if text else 251
    unit = bytes(((32 + (i * 7) % 95) if text else (i * 7) % 251) for i in range(period))
    return (unit * (n // period + 2))[: n + period], period


def fill(port, name, ctype, total, piece=1 << 20, text=False):
    data, _ = pattern(total, text)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("PUT", f"/v1/stream/{name}", headers={"Content-Type": ctype}); r = c.getresponse(); r.read()
    assert r.status in (200, 201), r.status
    for off in range(0, total, piece):
        c.request("POST", f"/v1/stream/{name}", body=data[off:off + piece], headers={"Content-Type": ctype})
        r = c.getresponse(); r.read()
        assert r.status in (200, 204), (r.status, off)
    c.close()


def parse_offset(tok):
    return int(tok.split("_")[1])


class SseResponse:
    """One SSE request. Tracks clean end (0-length chunk) vs cut, verifies data against the pattern."""

    def __init__(self, port, name, offset_tok, expected, period, binary, rate=None, rcvbuf=None, deadline=None,
                 stop_at=None, on_event=None):
        self.port, self.name, self.offset_tok = port, name, offset_tok
        self.expected, self.period, self.binary = expected, period, binary
        self.rate, self.rcvbuf, self.deadline, self.stop_at = rate, rcvbuf, deadline, stop_at
        self.on_event = on_event
        self.pos = 0 if offset_tok == "-1" else parse_offset(offset_tok)  # confirmed position
        self.pending = 0        # decoded bytes since the last control
        self.status = None; self.headers = {}; self.end = None  # 'clean' | 'cut' | 'client' | 'http'
        self.wire = 0; self.decoded = 0; self.mismatch = 0; self.gaps = 0; self.dups = 0
        self.controls = []; self.keepalives = 0; self.last_ctrl = None
        self.t_start = None; self.t_end = None; self.max_silence = 0.0; self.t_last = None; self.retry_after = None; self.body_err = b""

    def run(self):
        self.t_start = time.time()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        s.settimeout(1.0)
        s.connect(("127.0.0.1", self.port))
        s.sendall(f"GET /v1/stream/{self.name}?offset={self.offset_tok}&live=sse HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        buf = bytearray(); head_done = False
        cstate = "size"; csize = 0; sse = bytearray(); scan = 0
        t0 = time.time(); readsz = 16384 if self.rate else 262144
        try:
            while True:
                now = time.time()
                if self.deadline and now >= self.deadline:
                    self.end = "client"; break
                if self.stop_at and self.stop_at(self):
                    self.end = "client"; break
                if self.rate:
                    ahead = self.wire / self.rate - (now - t0)
                    if ahead > 0:
                        time.sleep(min(ahead, 0.2)); continue
                try:
                    d = s.recv(readsz)
                except socket.timeout:
                    continue
                except OSError:
                    self.end = "cut"; break
                if not d:
                    self.end = "cut"; break
                tn = time.time()
                if self.t_last is not None: self.max_silence = max(self.max_silence, tn - self.t_last)
                self.t_last = tn
                self.wire += len(d); buf += d
                if not head_done:
                    i = buf.find(b"\r\n\r\n")
                    if i < 0:
                        continue
                    lines = bytes(buf[:i]).decode().split("\r\n")
                    self.status = int(lines[0].split()[1])
                    for l in lines[1:]:
                        k, _, v = l.partition(":"); self.headers[k.strip().lower()] = v.strip()
                    del buf[:i + 4]; head_done = True
                    if self.status != 200:
                        self.retry_after = self.headers.get("retry-after")
                        self.end = "http"
                        # read the (small) body if any
                        try:
                            s.settimeout(0.5); self.body_err = bytes(buf) + s.recv(4096)
                        except OSError:
                            pass
                        break
                # chunked decoding
                done = False
                while True:
                    if cstate == "size":
                        i = buf.find(b"\r\n")
                        if i < 0: break
                        csize = int(bytes(buf[:i]).split(b";")[0], 16); del buf[:i + 2]
                        cstate = "data" if csize else "trailer"
                    elif cstate == "data":
                        if len(buf) < csize + 2: break
                        sse += buf[:csize]; del buf[:csize + 2]; cstate = "size"
                    elif cstate == "trailer":
                        i = buf.find(b"\r\n")
                        if i < 0: break
                        line = buf[:i]; del buf[:i + 2]
                        if not line:
                            done = True; break
                # SSE events
                while True:
                    i = sse.find(b"\n\n", max(0, scan - 1))
                    if i < 0:
                        scan = len(sse); break
                    ev = bytes(sse[:i]); del sse[:i + 2]; scan = 0
                    self._event(ev)
                if done:
                    self.end = "clean"; break
        finally:
            s.close(); self.t_end = time.time()
        return self

    def _event(self, ev):
        etype = "message"; data = []
        for line in ev.split(b"\n"):
            if line.startswith(b"event:"):
                etype = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                v = line[5:]
                if v.startswith(b" "): v = v[1:]
                data.append(v)
        if etype == "data":
            raw = base64.b64decode(b"".join(data)) if self.binary else b"\n".join(data)
            p = self.pos + self.pending
            off = p % self.period
            if self.expected[off:off + len(raw)] != raw or p + len(raw) > len(self.expected):
                self.mismatch += 1
            self.pending += len(raw); self.decoded += len(raw)
        elif etype == "control":
            c = json.loads(b"\n".join(data))
            self.controls.append((time.time(), c))
            nxt = c.get("streamNextOffset")
            if nxt is not None:
                n = parse_offset(nxt)
                if n > self.pos + self.pending: self.gaps += 1
                elif n < self.pos + self.pending: self.dups += 1
                if self.pending == 0 and n == self.pos and not c.get("upToDate"):
                    self.keepalives += 1
                self.pos = n; self.pending = 0; self.offset_tok = nxt
            self.last_ctrl = c
        if self.on_event: self.on_event(self, etype)
