//! Turns in a shard's delivery bursts (PROTOCOL.md §5.7 long-poll, §5.8
//! SSE; STATUS Next 2b). One append wakes every live reader of its stream
//! at once, and monoio runs every woken task before it reaps the ring's
//! completions again, so without turns a hot stream's readers all wrote
//! before any other client of the shard was served (4,000 SSE readers held
//! the others 8-80 ms a burst).
//!
//! A woken reader passes the gate before it writes. Up to `SLICE` pass at
//! once; the rest wait, and a pump task lets the next `SLICE` through after
//! each turn of the I/O driver, so the runtime reaps completions (and runs
//! the clients they wake) every slice rather than once a burst. Waiting
//! readers are admitted round-robin by audience (in arrival order within
//! one), so the readers of a quiet stream woken during a hot stream's burst
//! go in the next slice, not after the burst. Waiting costs a reader one
//! wake-up, so a burst of N readers costs O(N).
//!
//! An audience's step (or long-poll body) is rendered once for all its
//! readers, shared while some reader holds it (`audience.rs`). Readers of
//! one slice drop it once written, before the next slice runs, so the gate
//! keeps anchors of what the audience rendered while its readers wait, and
//! one turn more (until the last slice ran).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Readers let through at a time: ~1.4 ms of deliveries on loopback at
/// ~11 µs each.
pub const SLICE: usize = 128;

pub struct Gate {
    /// Passes left before the gate must wait for the pump again.
    left: Cell<usize>,
    waiting: RefCell<Waiting>,
    pumping: Cell<bool>,
    /// Anchors of audiences whose last readers were admitted: dropped
    /// after the next turn.
    retiring: RefCell<Vec<Anchor>>,
}

/// What keeps an audience's rendered step or body alive while its readers
/// wait.
pub type Anchor = Rc<dyn Any>;

/// The waiting readers: a queue per audience, and the audiences with
/// readers waiting in the order they take turns.
#[derive(Default)]
struct Waiting {
    by_audience: HashMap<usize, Queue>,
    ring: VecDeque<usize>,
    len: usize,
}

/// One audience's waiting readers and the anchors kept for them.
#[derive(Default)]
struct Queue {
    places: VecDeque<Rc<Place>>,
    anchors: Vec<Anchor>,
}

impl Waiting {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `place`; a new queue of `audience` keeps `anchors`.
    fn push(&mut self, audience: usize, place: Rc<Place>, anchors: Vec<Anchor>) {
        let queue = self.by_audience.entry(audience).or_default();
        if queue.places.is_empty() {
            self.ring.push_back(audience);
            queue.anchors = anchors;
        }
        queue.places.push_back(place);
        self.len += 1;
    }

    /// The next audience's first reader, and that audience's anchors when
    /// it was its last; the audience goes to the back of the ring.
    fn pop(&mut self) -> Option<(Rc<Place>, Vec<Anchor>)> {
        let audience = self.ring.pop_front()?;
        let queue = self
            .by_audience
            .get_mut(&audience)
            .expect("an audience in the ring has a queue");
        let place = (queue.places.pop_front()).expect("queues in the ring are not empty");
        let mut anchors = Vec::new();
        if queue.places.is_empty() {
            anchors = self
                .by_audience
                .remove(&audience)
                .unwrap_or_default()
                .anchors;
        } else {
            self.ring.push_back(audience);
        }
        self.len -= 1;
        Some((place, anchors))
    }
}

/// A reader's place in the queue, shared by its `Pass` and the pump.
#[derive(Default)]
struct Place {
    admitted: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            left: Cell::new(SLICE),
            waiting: RefCell::default(),
            pumping: Cell::new(false),
            retiring: RefCell::default(),
        }
    }
}

impl Gate {
    /// Completes when this reader's turn has come. `audience` tells whose
    /// reader it is (any value the same for one stream's readers);
    /// `anchors` is what that audience has rendered, kept while its readers
    /// wait.
    pub fn pass(self: &Rc<Self>, audience: usize, anchors: Vec<Anchor>) -> Pass {
        Pass {
            gate: self.clone(),
            audience,
            anchors,
            place: None,
        }
    }

    /// Keeps `anchor` (a step or body just rendered) while readers of
    /// `audience` wait.
    pub fn anchor(&self, audience: usize, anchor: Anchor) {
        if let Some(queue) = self.waiting.borrow_mut().by_audience.get_mut(&audience) {
            queue.anchors.push(anchor);
        }
    }

    /// Readers waiting for their turn.
    pub fn waiting(&self) -> usize {
        self.waiting.borrow().len()
    }

    fn queue(self: &Rc<Self>, audience: usize, place: Rc<Place>, anchors: Vec<Anchor>) {
        self.waiting.borrow_mut().push(audience, place, anchors);
        if !self.pumping.replace(true) {
            monoio::spawn(pump(self.clone()));
        }
    }

    /// Lets the next `SLICE` waiting readers through; whether any wait on.
    fn admit_slice(&self) -> bool {
        let mut waiting = self.waiting.borrow_mut();
        let mut admitted = 0;
        while admitted < SLICE {
            let Some((place, anchors)) = waiting.pop() else {
                break;
            };
            self.retiring.borrow_mut().extend(anchors);
            // A reader that left (its `Pass` dropped) takes no turn.
            if Rc::strong_count(&place) == 1 {
                continue;
            }
            place.admitted.set(true);
            if let Some(waker) = place.waker.take() {
                waker.wake();
            }
            admitted += 1;
        }
        if waiting.is_empty() {
            // The passes left until the pump runs again (it refills them).
            self.left.set(SLICE - admitted);
            return false;
        }
        true
    }
}

/// Waits one turn of the I/O driver, then admits a slice, until no reader
/// waits and no anchor is left. The admitted readers write meanwhile, and
/// the turn reaps the completions of other clients too.
async fn pump(gate: Rc<Gate>) {
    let turn = DriverTurn::new();
    loop {
        let retired = gate.retiring.take();
        let taken = match &turn {
            Ok(turn) => turn.take().await,
            Err(_) => Err(io::ErrorKind::Unsupported.into()),
        };
        if taken.is_err() {
            YieldOnce(false).await;
        }
        // The readers admitted with them have run by now.
        drop(retired);
        if !gate.admit_slice() && gate.retiring.borrow().is_empty() {
            gate.pumping.set(false);
            return;
        }
    }
}

/// A wait that ends once the runtime has reaped the ring's completions: a
/// read of an eventfd just written completes through the ring. Yielding
/// in the run queue would not do it (monoio runs up to twice the queue's
/// length before it reaps, so a whole audience) and a timer waits for the
/// next millisecond tick.
struct DriverTurn {
    eventfd: monoio::fs::File,
    raw: RawFd,
}

impl DriverTurn {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) with valid flags; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(raw) };
        Ok(DriverTurn {
            eventfd: monoio::fs::File::from_std(file)?,
            raw,
        })
    }

    /// One turn; an error when the eventfd could not be used (the pump
    /// then yields in the run queue instead).
    async fn take(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this
        // value owns.
        let written = unsafe { libc::write(self.raw, one.as_ptr().cast(), one.len()) };
        // Without the write the read would wait for good.
        if written != one.len() as isize {
            return Err(io::Error::last_os_error());
        }
        let (result, _) = self.eventfd.read_at(vec![0u8; 8], 0).await;
        result.map(|_| ())
    }
}

/// Yields once in the run queue.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

pub struct Pass {
    gate: Rc<Gate>,
    audience: usize,
    anchors: Vec<Anchor>,
    place: Option<Rc<Place>>,
}

impl Future for Pass {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(place) = &self.place {
            if place.admitted.get() {
                return Poll::Ready(());
            }
            *place.waker.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let gate = &self.gate;
        if gate.waiting.borrow().is_empty() && gate.left.get() > 0 {
            gate.left.set(gate.left.get() - 1);
            return Poll::Ready(());
        }
        let place = Rc::new(Place::default());
        *place.waker.borrow_mut() = Some(cx.waker().clone());
        let anchors = std::mem::take(&mut self.anchors);
        self.gate.queue(self.audience, place.clone(), anchors);
        self.place = Some(place);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>> {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
    }

    /// A burst larger than a slice goes through in slices, each admitted
    /// only after the tasks that were ready before it ran.
    #[test]
    fn a_burst_passes_in_slices_with_others_in_between() {
        runtime().block_on(async {
            let gate = Rc::new(Gate::default());
            let log = Rc::new(RefCell::new(Vec::new()));
            let burst = 3 * SLICE + 5;
            let mut readers = Vec::new();
            for i in 0..burst {
                let (gate, log) = (gate.clone(), log.clone());
                readers.push(monoio::spawn(async move {
                    gate.pass(1, Vec::new()).await;
                    log.borrow_mut().push(Some(i));
                }));
            }
            // Another client that becomes ready while the burst waits.
            let other = log.clone();
            let bystander = monoio::spawn(async move {
                YieldOnce(false).await;
                other.borrow_mut().push(None);
            });
            for reader in readers {
                reader.await;
            }
            bystander.await;
            let log = log.borrow();
            let order: Vec<usize> = log.iter().flatten().copied().collect();
            assert_eq!(order, (0..burst).collect::<Vec<_>>(), "arrival order");
            let at = log.iter().position(Option::is_none).unwrap();
            assert!(
                at <= 2 * SLICE,
                "the other client ran after {at} readers of {burst}"
            );
            assert_eq!(gate.waiting(), 0);
            assert!(!gate.pumping.get(), "the pump stops once no one waits");
        });
    }

    /// A quiet stream's reader woken during a hot stream's burst goes in
    /// the next slice, not after the burst.
    #[test]
    fn audiences_take_turns_round_robin() {
        runtime().block_on(async {
            let gate = Rc::new(Gate::default());
            let log = Rc::new(RefCell::new(Vec::new()));
            let burst = 4 * SLICE;
            let mut readers = Vec::new();
            for i in 0..=burst {
                let (gate, log) = (gate.clone(), log.clone());
                // The last reader is the quiet stream's.
                let audience = if i == burst { 2 } else { 1 };
                readers.push(monoio::spawn(async move {
                    gate.pass(audience, Vec::new()).await;
                    log.borrow_mut().push(i);
                }));
            }
            for reader in readers {
                reader.await;
            }
            let at = log.borrow().iter().position(|&i| i == burst).unwrap();
            assert!(at <= SLICE + 1, "the quiet reader went {at}th of {burst}");
        });
    }

    /// What an audience rendered stays alive while its readers wait, for
    /// the last slice too, and goes once they all ran.
    #[test]
    fn anchors_live_until_the_last_reader_ran() {
        runtime().block_on(async {
            let gate = Rc::new(Gate::default());
            let rendered: Anchor = Rc::new("a step");
            let weak = Rc::downgrade(&rendered);
            let saw = Rc::new(Cell::new(0));
            let mut readers = Vec::new();
            for _ in 0..3 * SLICE + 1 {
                let (gate, anchors) = (gate.clone(), vec![rendered.clone()]);
                let (weak, saw) = (weak.clone(), saw.clone());
                readers.push(monoio::spawn(async move {
                    gate.pass(7, anchors).await;
                    saw.set(saw.get() + weak.upgrade().is_some() as usize);
                }));
            }
            drop(rendered);
            for reader in readers {
                reader.await;
            }
            assert_eq!(saw.get(), 3 * SLICE + 1, "every reader found it");
            while gate.pumping.get() {
                monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            assert!(weak.upgrade().is_none(), "kept after the last reader");
        });
    }

    /// The pump's turn goes through the ring: the eventfd read completes.
    #[test]
    fn a_driver_turn_completes_through_the_ring() {
        runtime().block_on(async {
            let turn = DriverTurn::new().unwrap();
            for _ in 0..3 {
                turn.take().await.unwrap();
            }
        });
    }

    /// A reader that leaves while it waits takes no turn.
    #[test]
    fn a_reader_that_left_takes_no_turn() {
        let gate = Rc::new(Gate::default());
        gate.left.set(0);
        let kept = Rc::new(Place::default());
        gate.waiting
            .borrow_mut()
            .push(1, Rc::new(Place::default()), Vec::new());
        gate.waiting.borrow_mut().push(1, kept.clone(), Vec::new());
        assert!(!gate.admit_slice());
        assert!(kept.admitted.get());
        assert_eq!(gate.left.get(), SLICE - 1, "one admitted");
    }
}
