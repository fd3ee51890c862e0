import http.client, sys, threading
port=int(sys.argv[1]); kind=sys.argv[2]; n=int(sys.argv[3])
def worker(lo, hi):
    c=http.client.HTTPConnection("127.0.0.1", port)
    for i in range(lo, hi):
        if kind=="streams":
            c.request("PUT", f"/memb/s{i}", body=b"x", headers={"Content-Type":"text/plain"})
        elif kind=="buckets":
            c.request("PUT", f"/bk{i:06d}")
        elif kind=="producers":
            c.request("POST", "/memb/p", body=b"x", headers={"Content-Type":"text/plain","Producer-Id":f"prod-{i}","Producer-Epoch":"0","Producer-Seq":"0"})
        r=c.getresponse(); r.read()
        if r.status >= 300: print(kind, i, r.status); return
ts=[threading.Thread(target=worker, args=(k*n//8,(k+1)*n//8)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
