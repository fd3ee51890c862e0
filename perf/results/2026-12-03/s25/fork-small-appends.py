# Fork cost of a source of many small appends (session 25): PORT N SIZE.
# Writes N appends of SIZE bytes to /v1/stream/src, then times three forks
# (fork0..fork2: their names land on either shard).
import http.client, time, sys
port=int(sys.argv[1]); n=int(sys.argv[2]); size=int(sys.argv[3])
c=http.client.HTTPConnection("127.0.0.1",port)
def req(m,p,body=None,h={}):
    c.request(m,p,body=body,headers=h); r=c.getresponse(); d=r.read(); return r.status,dict(r.getheaders()),d
ct={"Content-Type":"application/octet-stream"}
print(req("PUT","/v1/stream/src",h=ct)[0])
body=b"x"*size
# use append-batch? plain posts
t=time.time()
for i in range(n):
    s,_,_=req("POST","/v1/stream/src",body,ct)
    assert s in (200,204),s
print("write",n,"in",round(time.time()-t,2))
for k in range(3):
    t=time.time(); s,h,_=req("PUT",f"/v1/stream/fork{k}",h={**ct,"Stream-Forked-From":"/v1/stream/src"}); print("fork",s,round(time.time()-t,3))
