// Entry file for the official Durable Streams server conformance suite.
// Run through scripts/conformance.sh, which starts rill and sets RILL_URL.
// (The package's own CLI finds no test files, hence this file and our config.)
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.RILL_URL
if (!baseUrl) {
  throw new Error(`RILL_URL is not set (run scripts/conformance.sh)`)
}

runConformanceTests({
  baseUrl,
  // Sizes the suite's long-poll test timeouts (longPollTimeoutMs + 1000 ms each);
  // must exceed the server's --long-poll-timeout-ms.
  longPollTimeoutMs: Number(process.env.LONG_POLL_MS || 20000),
})
