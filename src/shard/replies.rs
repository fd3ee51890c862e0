//! The budget of reply bytes a shard holds while clients take them: a
//! reply is built whole in memory (a catch-up window, a snapshot blob) and
//! stays there until its client has read it, so clients that ask and never
//! read could otherwise make a shard hold gigabytes. Large replies take a
//! lease on `--max-reply-bytes` ÷ shards; past it they are answered 503
//! with Retry-After (and a stalled write ends after `--idle-timeout-ms`,
//! `conn::write_bytes`). Request bodies take leases on a budget of their
//! own (`--max-request-bytes`) while they arrive and are handled: a client
//! could otherwise open many connections and send each a large body slowly.

use std::cell::Cell;
use std::rc::Rc;

use crate::protocol::Response;
use crate::protocol::response::retry_soon;

/// Replies smaller than this are not counted: error bodies and small
/// reads must always get through.
pub const COUNTED_BYTES: usize = 64 << 10;

#[derive(Default)]
pub struct ReplyBudget {
    held: Cell<u64>,
}

/// Bytes of one reply held until it is written (or its client is gone);
/// owned, so that a body shared by several responses can carry it.
pub struct ReplyLease {
    budget: Rc<ReplyBudget>,
    bytes: u64,
}

impl ReplyBudget {
    /// A lease on `bytes`, unless that would take the held bytes past
    /// `limit` (a reply larger than the whole limit still goes out alone).
    pub fn lease(self: &Rc<Self>, bytes: u64, limit: u64) -> Option<ReplyLease> {
        self.lease_more(bytes, limit, 0)
    }

    /// A further lease for a holder of `mine` bytes already: when it alone
    /// holds the budget it may grow past `limit`, as one large reply may.
    pub fn lease_more(self: &Rc<Self>, bytes: u64, limit: u64, mine: u64) -> Option<ReplyLease> {
        let held = self.held.get();
        debug_assert!(held >= mine, "a holder holds more than the budget");
        if held > mine && held + bytes > limit {
            return None;
        }
        self.held.set(held + bytes);
        Some(ReplyLease {
            budget: self.clone(),
            bytes,
        })
    }
}

impl Drop for ReplyLease {
    fn drop(&mut self) {
        let held = self.budget.held.get();
        debug_assert!(held >= self.bytes, "reply budget underflow");
        self.budget.held.set(held.saturating_sub(self.bytes));
    }
}

/// The answer when request bodies already hold the shard's share.
pub fn bodies_busy() -> Response {
    retry_soon(
        "requests_backlogged",
        "too many request bytes are arriving at once; retry shortly",
    )
}

/// The answer when the budget is spent: clients are slow to read.
pub fn busy() -> Response {
    retry_soon(
        "replies_backlogged",
        "too many reply bytes wait for their clients to read them; retry shortly",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_stop_at_the_limit_and_come_back_when_dropped() {
        let budget = Rc::new(ReplyBudget::default());
        let big = budget.lease(100, 60).expect("alone it goes out");
        assert!(budget.lease(1, 60).is_none(), "past the limit");
        drop(big);
        let a = budget.lease(40, 60).unwrap();
        let b = budget.lease(20, 60).unwrap();
        assert!(budget.lease(1, 60).is_none());
        drop((a, b));
        assert!(budget.lease(60, 60).is_some(), "all given back");
        let mine = budget.lease(50, 60).unwrap();
        let more = budget.lease_more(50, 60, 50).expect("alone it grows");
        let other = budget.lease(1, 60);
        assert!(other.is_none(), "others wait for it");
        drop((mine, more));
        let other = budget.lease(30, 60).unwrap();
        assert!(budget.lease_more(40, 60, 0).is_none());
        drop(other);
    }
}
