//! Process health for `/v1/health/*`: liveness and readiness.
//!
//! Liveness (`/v1/health`, `/v1/health/live`) is 200 whenever a shard
//! answers at all. Readiness (`/v1/health/ready`) is one process-wide state:
//! `Starting` until `main` sees `shard::start` return, which happens only
//! after every shard recovered its log (startup's registry exchange waits
//! for all of them); `Ready` then; `Stopping` once shutdown began.
//!
//! The listeners are bound before recovery, but a shard accepts only after
//! its own recovery (and the registry exchange, which waits for every
//! shard) finished, so no request is served from a half-recovered shard.
//! Readiness therefore means exactly "recovery is done on every shard". A
//! shard can accept a moment before `main` marks the process ready; it then
//! answers 503 for that moment. A connection reaching a shard that finished
//! recovering but is still opening its log waits in the listen backlog.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::protocol::Response;

const STARTING: u8 = 0;
const READY: u8 = 1;
const STOPPING: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(STARTING);

/// Every shard recovered its log and serves: called once by `main`.
pub fn mark_ready() {
    // Never from Stopping back to Ready.
    let _ = STATE.compare_exchange(STARTING, READY, Ordering::AcqRel, Ordering::Acquire);
}

/// Shutdown began: readiness answers 503 from now on.
pub fn mark_stopping() {
    STATE.store(STOPPING, Ordering::Release);
}

pub fn is_ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

/// `GET /v1/health`, `/v1/health/live`.
pub fn live() -> Response {
    ok()
}

/// `GET /v1/health/ready`: 200 when ready, else 503 with `Retry-After`.
pub fn ready() -> Response {
    let why = match STATE.load(Ordering::Acquire) {
        READY => return ok(),
        STARTING => "startup recovery has not finished",
        _ => "the server is shutting down",
    };
    crate::protocol::response::retry_soon("not_ready", why).header("cache-control", "no-store")
}

fn ok() -> Response {
    Response::new(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .with_body(br#"{"status":"ok"}"#.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state is process-wide: one test walks through all of it.
    #[test]
    fn readiness_follows_startup_and_shutdown() {
        assert_eq!(live().status, 200);
        assert_eq!(ready().status, 503);
        assert!(String::from_utf8_lossy(&ready().body).contains("not_ready"));
        assert_eq!(ready().get_header("retry-after"), Some("1"));
        mark_ready();
        assert!(is_ready());
        assert_eq!(ready().status, 200);
        mark_stopping();
        mark_ready();
        assert!(!is_ready(), "stopping is final");
        assert_eq!(ready().status, 503);
        assert_eq!(live().status, 200);
    }
}
