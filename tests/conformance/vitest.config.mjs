// Isolated Vitest config for the conformance suite: only our entry file, and
// per-test / hook timeouts of 60 s (CONFORMANCE_TEST_TIMEOUT_MS overrides both).
import { defineConfig } from "vitest/config"

const ms = (name, fallback) => {
  const v = Number(process.env[name])
  return Number.isFinite(v) && v > 0 ? v : fallback
}

export default defineConfig({
  test: {
    include: [`conformance.test.mjs`],
    exclude: [],
    watch: false,
    testTimeout: ms(`CONFORMANCE_TEST_TIMEOUT_MS`, 60_000),
    hookTimeout: ms(`CONFORMANCE_HOOK_TIMEOUT_MS`, ms(`CONFORMANCE_TEST_TIMEOUT_MS`, 60_000)),
  },
})
