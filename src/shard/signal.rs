//! Per-stream wake-ups for long-poll and SSE waiters, held by the owning
//! shard (single-threaded: `Rc`/`Cell`, no locks).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        for waker in self.wakers.take() {
            waker.wake();
        }
    }

    /// Completes once `notify` was called after `seen` was read.
    pub fn changed(self: &Rc<Self>, seen: u64) -> Changed {
        Changed {
            signal: self.clone(),
            seen,
        }
    }
}

pub struct Changed {
    signal: Rc<Signal>,
    seen: u64,
}

impl Future for Changed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation() != self.seen {
            return Poll::Ready(());
        }
        let mut wakers = self.signal.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Signals by stream key, created on demand and dropped when unused.
#[derive(Default)]
pub struct Waiters {
    signals: RefCell<HashMap<String, Rc<Signal>>>,
}

impl Waiters {
    pub fn signal(&self, key: &str) -> Rc<Signal> {
        let mut map = self.signals.borrow_mut();
        map.entry(key.to_string()).or_default().clone()
    }

    pub fn notify(&self, key: &str) {
        let mut map = self.signals.borrow_mut();
        if let Some(signal) = map.get(key) {
            signal.notify();
            if Rc::strong_count(signal) == 1 {
                map.remove(key);
            }
        }
    }

    /// Drops the map's entry for `key` when `held` is its last other user.
    pub fn release(&self, key: &str, held: Rc<Signal>) {
        let mut map = self.signals.borrow_mut();
        if Rc::strong_count(&held) == 2 {
            map.remove(key);
        }
    }

    /// Wakes every waiter (shutdown).
    pub fn notify_all(&self) {
        for signal in self.signals.borrow().values() {
            signal.notify();
        }
    }

    pub fn len(&self) -> usize {
        self.signals.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.signals.borrow().is_empty()
    }
}
