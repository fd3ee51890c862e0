import ctypes, os, sys, struct
libc = ctypes.CDLL(None, use_errno=True)
# struct sched_attr: u32 size, u32 policy, u64 flags, s32 nice, u32 prio, u64 runtime, u64 deadline, u64 period, u32 util_min, u32 util_max
def setslice(tid, slice_ns, nice=0):
    buf = struct.pack("IIQiIQQQII", 56, 0, 0, nice, 0, slice_ns, 0, 0, 0, 0)
    b = ctypes.create_string_buffer(buf, 56)
    r = libc.syscall(314, tid, b, 0)
    if r != 0:
        print("fail", tid, ctypes.get_errno()); 
pid = int(sys.argv[1]); slice_ns = int(sys.argv[2]); nice = int(sys.argv[3]) if len(sys.argv) > 3 else 0
for t in os.listdir(f"/proc/{pid}/task"):
    name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
    if name.startswith("rill-shard"):
        setslice(int(t), slice_ns, nice)
        print(name, open(f"/proc/{pid}/task/{t}/sched").read().split("se.slice")[1].split("\n")[0] if "se.slice" in open(f"/proc/{pid}/task/{t}/sched").read() else "?")
