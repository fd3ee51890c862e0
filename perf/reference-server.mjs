// Starts the Node reference Durable Streams server (@durable-streams/server),
// file-backed, for scripts/bench-compare.sh. Run it from a directory where the
// package is installed (node resolves it from node_modules there or above).
//   node reference-server.mjs PORT DATA_DIR
// Prints "ready URL" once it listens; SIGTERM/SIGINT stop it cleanly.
import { DurableStreamTestServer } from "@durable-streams/server"

const [port, dataDir] = process.argv.slice(2)
if (!port || !dataDir) {
  console.error("usage: node reference-server.mjs PORT DATA_DIR")
  process.exit(2)
}
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: Number(port),
  dataDir,
})
await server.start()
console.log(`ready ${server.url}`)
let stopping = false
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, async () => {
    if (stopping) return
    stopping = true
    await server.stop()
    process.exit(0)
  })
}
