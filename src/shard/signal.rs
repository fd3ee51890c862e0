//! Wake-ups within a shard (single-threaded: `Rc`/`Cell`, no locks): a
//! generation counter and the wakers of the futures waiting for it to move
//! (a stream's readers, the log writer, the stop signal).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Wakers>,
}

/// The pending futures' wakers, one slot each (a slot freed when its
/// future is dropped early is reused), so registering is O(1) however
/// large the audience and the slots never outnumber the pending futures.
#[derive(Default)]
struct Wakers {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Wakers {
    fn insert(&mut self, waker: Waker) -> usize {
        match self.free.pop() {
            Some(at) => {
                self.slots[at] = Some(waker);
                at
            }
            None => {
                self.slots.push(Some(waker));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, at: usize) {
        debug_assert!(self.slots[at].is_some());
        self.slots[at] = None;
        self.free.push(at);
    }
}

impl Signal {
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        let wakers = self.wakers.take();
        for waker in wakers.slots.into_iter().flatten() {
            waker.wake();
        }
    }

    /// Completes once `notify` was called after `seen` was read.
    pub fn changed(self: &Rc<Self>, seen: u64) -> Changed {
        Changed {
            signal: self.clone(),
            seen,
            slot: None,
        }
    }
}

pub struct Changed {
    signal: Rc<Signal>,
    seen: u64,
    /// This future's slot in `wakers`: valid while the generation is still
    /// `seen` (`notify` takes every slot and moves the generation on).
    slot: Option<usize>,
}

impl Drop for Changed {
    fn drop(&mut self) {
        if let Some(at) = self.slot
            && self.signal.generation() == self.seen
        {
            self.signal.wakers.borrow_mut().remove(at);
        }
    }
}

impl Future for Changed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.signal.generation() != this.seen {
            return Poll::Ready(());
        }
        let mut wakers = this.signal.wakers.borrow_mut();
        match this.slot {
            Some(at) => {
                let slot = wakers.slots[at].as_mut().expect("a registered slot");
                if !slot.will_wake(cx.waker()) {
                    *slot = cx.waker().clone();
                }
            }
            None => this.slot = Some(wakers.insert(cx.waker().clone())),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(future: &mut Changed, waker: &Waker) -> Poll<()> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn notify_wakes_each_pending_future_once() {
        let signal = Rc::new(Signal::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut futures: Vec<Changed> = (0..100).map(|_| signal.changed(0)).collect();
        for future in &mut futures {
            assert!(poll(future, &waker).is_pending());
            assert!(poll(future, &waker).is_pending());
        }
        signal.notify();
        assert_eq!(count.0.load(Ordering::SeqCst), 100);
        assert!(futures.iter_mut().all(|f| poll(f, &waker).is_ready()));
    }

    #[test]
    fn futures_dropped_early_free_their_slots() {
        let signal = Rc::new(Signal::default());
        let waker = Waker::noop();
        let mut kept = signal.changed(0);
        assert!(poll(&mut kept, waker).is_pending());
        for _ in 0..1000 {
            let mut early = signal.changed(0);
            assert!(poll(&mut early, waker).is_pending());
        }
        assert_eq!(signal.wakers.borrow().slots.len(), 2);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        assert!(poll(&mut kept, &Waker::from(count.clone())).is_pending());
        signal.notify();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the re-polled waker replaced the old one"
        );
    }
}
