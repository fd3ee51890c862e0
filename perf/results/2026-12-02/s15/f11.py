import socket, sys, time, http.client, subprocess, os
port=int(sys.argv[2]); binp=sys.argv[1]; n=int(sys.argv[3])
d=f"/tmp/rill-f11-{port}"; subprocess.run(["rm","-rf",d]); os.makedirs(d)
p=subprocess.Popen([binp,"serve","--listen",f"127.0.0.1:{port}","--data-dir",d,"--cores","1"],stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        c=http.client.HTTPConnection("127.0.0.1",port); c.request("GET","/v1/health/ready"); r=c.getresponse(); r.read()
        if r.status==200: break
    except Exception: pass
    time.sleep(0.1)
c=http.client.HTTPConnection("127.0.0.1",port)
c.request("PUT","/v1/stream/big",headers={"Content-Type":"application/octet-stream"}); c.getresponse().read()
c.request("PUT","/v1/stream/small",headers={"Content-Type":"application/octet-stream"},body=b"x"); c.getresponse().read()
for i in range(12):
    c.request("POST","/v1/stream/big",headers={"Content-Type":"application/octet-stream"},body=bytes([65+i])*(2<<20)); c.getresponse().read()
def ticks(): 
    f=open(f"/proc/{p.pid}/stat").read().split(); return int(f[13])+int(f[14])
t0=ticks()
socks=[]
start=time.time()
for i in range(n):
    s=socket.create_connection(("127.0.0.1",port)); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /v1/stream/big?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n"); socks.append(s)
time.sleep(0.05)
lat=[]
for i in range(5):
    t=time.time(); c.request("GET","/v1/stream/small?offset=-1"); c.getresponse().read(); lat.append(time.time()-t)
time.sleep(2)
rss=[l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split()[1]
print(binp, "n",n,"small GET ms",[round(x*1000) for x in lat],"cpu ticks",ticks()-t0,"rss MB",int(rss)//1024)
for s in socks: s.close()
p.terminate(); p.wait()
subprocess.run(["rm","-rf",d])
