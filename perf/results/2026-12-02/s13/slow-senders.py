import socket,subprocess,time,sys,os,shutil
BIN=sys.argv[1]; PORT=int(sys.argv[2]); D=f"/tmp/rill-rss-{PORT}"
shutil.rmtree(D,ignore_errors=True)
p=subprocess.Popen([BIN,"serve","--listen",f"127.0.0.1:{PORT}","--data-dir",D,"--cores","2"],stderr=subprocess.DEVNULL)
time.sleep(1.0)
def rss(): return int([l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split()[1])//1024
def vsz(): return int([l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmSize")][0].split()[1])//1024
s=socket.create_connection(("127.0.0.1",PORT)); s.sendall(b"PUT /v1/stream/r HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\nContent-Length: 0\r\n\r\n"); s.recv(1000)
print("before: rss MiB", rss(), "vsz MiB", vsz())
conns=[]
for i in range(300):
    c=socket.create_connection(("127.0.0.1",PORT))
    c.sendall(b"POST /v1/stream/r HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\nContent-Length: 33554432\r\n\r\n"+b"x"*1024)
    conns.append(c)
time.sleep(1.5)
print("300 slow 32 MiB senders: rss MiB", rss(), "vsz MiB", vsz())
big=socket.create_connection(("127.0.0.1",PORT)); big.settimeout(10)
t=time.time(); big.sendall(b"POST /v1/stream/r HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\nContent-Length: 33554432\r\n\r\n"+b"y"*33554432)
print("a fast 32 MiB append beside them:", big.recv(200).split(b"\r\n")[0], round(time.time()-t,2),"s")
p.terminate(); p.wait(); shutil.rmtree(D,ignore_errors=True)
