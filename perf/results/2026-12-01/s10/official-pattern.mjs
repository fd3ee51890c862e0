// Replays the official packages/benchmarks patterns (same-stream concurrency)
// against BASE (argv[2]); prints msgs/s per iteration.
import { DurableStream } from "@durable-streams/client"
const base = process.argv[2]
const iters = Number(process.argv[3] || 5)
async function run(size, count, concurrency) {
  const stream = await DurableStream.create({
    url: `${base}/v1/stream/ob-${Date.now()}-${Math.random()}`,
    contentType: `application/octet-stream`,
  })
  const msg = new Uint8Array(size).fill(42)
  const t0 = performance.now()
  for (let b = 0; b < count / concurrency; b++) {
    await Promise.all(Array.from({ length: concurrency }, () => stream.append(msg)))
  }
  const s = (performance.now() - t0) / 1000
  await stream.delete()
  return count / s
}
async function latency() {
  const stream = await DurableStream.create({
    url: `${base}/v1/stream/lat-${Date.now()}-${Math.random()}`,
    contentType: `application/octet-stream`,
  })
  const msg = new Uint8Array(100).fill(42)
  let offset = (await stream.head()).offset
  const once = async () => {
    const res = await stream.stream({ offset, live: `long-poll` })
    await new Promise((resolve) => {
      const unsub = res.subscribeBytes((chunk) => {
        if (chunk.data.length > 0) { offset = chunk.offset; unsub(); res.cancel(); resolve() }
      })
    })
  }
  const w = once(); await stream.append(msg); await w
  const r = once(); const t0 = performance.now(); await stream.append(msg); await r
  const ms = performance.now() - t0
  await stream.delete()
  return ms
}
const out = { small: [], large: [], lat: [] }
for (let i = 0; i < iters; i++) {
  out.small.push(Math.round(await run(100, 1000, 75)))
  out.large.push(Math.round(await run(1 << 20, 50, 15)))
  out.lat.push(+(await latency()).toFixed(2))
}
console.log(JSON.stringify(out))
