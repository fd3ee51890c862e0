//! The budget of reply bytes a shard holds while clients take them: a
//! reply is built whole in memory (a catch-up window, a snapshot blob) and
//! stays there until its client has read it, so clients that ask and never
//! read could otherwise make a shard hold gigabytes. Large replies take a
//! lease on `--max-reply-bytes` ÷ shards; past it they are answered 503
//! with Retry-After (and a stalled write ends after `--idle-timeout-ms`,
//! `conn::write_bytes`). Request bodies take leases on a budget of their
//! own (`--max-request-bytes`) while they arrive and are handled: a client
//! could otherwise open many connections and send each a large body slowly.
//! Leases are taken before the bytes are read (a gate: refused past the
//! budget); bytes already in memory are only counted (`hold`). An SSE
//! response under way cannot be answered 503: it queues for the budget
//! (`Turn`), first come first served, and while one waits, new leases that
//! would leave no room for what the queue's head asks are refused, so that
//! a run of catch-ups cannot starve it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use super::signal::{Changed, Signal};
use crate::protocol::Response;
use crate::protocol::response::retry_soon;

/// Replies smaller than this are not counted: error bodies and small
/// reads must always get through.
pub const COUNTED_BYTES: usize = 64 << 10;

#[derive(Default)]
pub struct ReplyBudget {
    held: Cell<u64>,
    /// The tickets of the turns waiting, oldest first.
    queue: RefCell<VecDeque<u64>>,
    next_ticket: Cell<u64>,
    /// What the queue's head last asked for and did not get.
    head_need: Cell<u64>,
    /// Moves on when bytes come back or the queue's head leaves.
    moved: Rc<Signal>,
}

/// A place in the queue for the budget; leaving it (dropped) lets the
/// next one go.
pub struct Turn {
    budget: Rc<ReplyBudget>,
    ticket: u64,
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
        let queued = !self.queue.borrow().is_empty();
        if queued && self.held.get() + bytes + self.head_need.get() > limit {
            return None;
        }
        self.grant(bytes, limit, mine)
    }

    fn grant(self: &Rc<Self>, bytes: u64, limit: u64, mine: u64) -> Option<ReplyLease> {
        let held = self.held.get();
        debug_assert!(held >= mine, "a holder holds more than the budget");
        if held > mine && held + bytes > limit {
            return None;
        }
        Some(self.hold(bytes))
    }

    /// A lease on `bytes` already in memory: counted whatever the limit,
    /// so that others wait for them.
    pub fn hold(self: &Rc<Self>, bytes: u64) -> ReplyLease {
        self.held.set(self.held.get() + bytes);
        ReplyLease {
            budget: self.clone(),
            bytes,
        }
    }

    /// A place at the end of the queue.
    pub fn queue(self: &Rc<Self>) -> Turn {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        self.queue.borrow_mut().push_back(ticket);
        Turn {
            budget: self.clone(),
            ticket,
        }
    }

    /// How many turns wait.
    pub fn queued(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Wakes the turns waiting, if any, to look again: bytes came back, or
    /// another response shared the step they wait to fetch.
    pub fn nudge(&self) {
        if self.queued() > 0 {
            self.moved.notify();
        }
    }
}

impl Turn {
    /// The lease on `bytes` once this turn heads the queue and they fit
    /// (as `ReplyBudget::lease` would); the turn is then over. `Err` gives
    /// the turn back, still in its place.
    pub fn lease(self, bytes: u64, limit: u64) -> Result<ReplyLease, Turn> {
        let head = self.budget.queue.borrow().front() == Some(&self.ticket);
        if !head {
            return Err(self);
        }
        match self.budget.grant(bytes, limit, 0) {
            Some(lease) => Ok(lease),
            None => {
                self.budget.head_need.set(bytes);
                Err(self)
            }
        }
    }

    /// Completes once bytes came back or the queue moved since now.
    pub fn moved(&self) -> Changed {
        let moved = &self.budget.moved;
        moved.changed(moved.generation())
    }
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Turn({})", self.ticket)
    }
}

impl std::fmt::Debug for ReplyLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplyLease({} bytes)", self.bytes)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut queue = self.budget.queue.borrow_mut();
        let at = queue.iter().position(|&t| t == self.ticket);
        debug_assert!(at.is_some(), "a turn left the queue twice");
        queue.remove(at.unwrap_or(usize::MAX));
        drop(queue);
        // Only the head's leaving lets another go.
        if at == Some(0) {
            self.budget.head_need.set(0);
            self.budget.moved.notify();
        }
    }
}

impl ReplyLease {
    /// Counts the lease as `bytes` when it holds more now (a rendered
    /// event larger than the window it was leased for).
    pub fn grow_to(&mut self, bytes: u64) {
        let more = bytes.saturating_sub(self.bytes);
        self.budget.held.set(self.budget.held.get() + more);
        self.bytes += more;
    }
}

impl Drop for ReplyLease {
    fn drop(&mut self) {
        let held = self.budget.held.get();
        debug_assert!(held >= self.bytes, "reply budget underflow");
        self.budget.held.set(held.saturating_sub(self.bytes));
        self.budget.nudge();
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

    #[test]
    fn turns_are_served_in_order_and_hold_off_new_leases() {
        let budget = Rc::new(ReplyBudget::default());
        let first = budget.lease(50, 60).unwrap();
        assert!(budget.lease(20, 60).is_none());
        let a = budget.queue();
        let b = budget.queue();
        let b = b.lease(5, 60).expect_err("b is not the head");
        let a = a.lease(20, 60).expect_err("20 do not fit yet");
        assert!(budget.lease(5, 60).is_none(), "turns wait: no cutting in");
        let small = budget.lease(5, 60);
        assert!(small.is_none(), "50 + 5 + the head's 20 pass 60");
        let seen = budget.moved.generation();
        drop(first);
        assert_ne!(budget.moved.generation(), seen, "bytes came back");
        let beside = budget.lease(10, 60).expect("10 + the head's 20 fit");
        let a_lease = a.lease(20, 60).expect("a heads and fits");
        drop(beside);
        assert_eq!(budget.queued(), 1);
        let b_lease = b.lease(40, 60).expect("b heads now and fits");
        assert_eq!(budget.queued(), 0);
        assert!(budget.lease(1, 60).is_none(), "60 held");
        drop((a_lease, b_lease));
        assert!(budget.lease(60, 60).is_some(), "all given back");
    }

    #[test]
    fn a_turn_that_leaves_lets_the_next_head_go() {
        let budget = Rc::new(ReplyBudget::default());
        let held = budget.lease(60, 60).unwrap();
        let (a, b, c) = (budget.queue(), budget.queue(), budget.queue());
        let seen = budget.moved.generation();
        drop(b);
        assert_eq!(budget.queued(), 2);
        assert_eq!(budget.moved.generation(), seen, "not the head: no wake-up");
        let seen = budget.moved.generation();
        drop(a);
        assert_ne!(budget.moved.generation(), seen, "the head left");
        drop(held);
        let mut lease = c.lease(10, 60).expect("c heads");
        lease.grow_to(30);
        assert!(budget.lease(31, 60).is_none(), "the growth is counted");
        let rest = budget.lease(30, 60).expect("30 are left");
        let counted = budget.hold(100);
        assert!(budget.lease(1, 60).is_none());
        drop((lease, rest, counted));
        assert!(budget.lease(60, 60).is_some(), "all given back");
    }
}
