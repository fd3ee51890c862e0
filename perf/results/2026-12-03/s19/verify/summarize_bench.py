import json, glob, statistics as st
def load(p): return json.load(open(p))
print("catchup GB/s per round (r1..r5), median, ratio s19b/s18b; errors")
for c in (1, 4):
    med = {}
    for b in ("s18b", "s19b"):
        xs = [load(f"bench/catchup-{b}-c{c}-r{r}.json") for r in range(1, 6)]
        g = [x["gb_per_s"] for x in xs]; med[b] = st.median(g)
        print(f" c={c} {b}: {[round(v,2) for v in g]} median {med[b]:.2f} errors {sum(x['errors'] for x in xs)} reqs {[x['requests'] for x in xs]} p99ms {[round(x['request_latency_us']['p99']/1000) for x in xs]}")
    print(f" c={c} ratio {med['s19b']/med['s18b']:.3f}")
print("fanout 500 subs 50/s 10s: p50/p99/max ms, lost, dup, reconnects, errors, server cpu%")
meds = {}
for b in ("s18b", "s19b"):
    xs = [load(f"bench/fanout-{b}-r{r}.json") for r in range(1, 9)]
    for x in xs:
        l = x["latency_us"]
        print(f" {x['label']}: {l['p50']/1000:.1f}/{l['p99']/1000:.1f}/{l['max']/1000:.1f} lost {x['lost']} dup {x['duplicated']} inv {x['invalid']} reconn {x['reconnects']} err {x['errors']} recv {x['deliveries_received']}/{x['deliveries_expected']} cpu {x['server_cpu_pct']:.1f}")
    meds[b] = st.median(x["latency_us"]["p99"] for x in xs)
    print(f" {b} median p99 {meds[b]/1000:.2f} ms")
print(f" p99 ratio s19b/s18b {meds['s19b']/meds['s18b']:.3f}")
