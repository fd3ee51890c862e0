//! A stream's live readers on its owning shard (PROTOCOL.md §5.6, §5.7): the
//! signal that wakes its long-poll and SSE responses after each commit, and
//! the SSE step and the long-poll body rendered last, which every response
//! at the same position takes instead of fetching and rendering its own
//! (one render and one buffer per event, however large the audience).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use bytes::Bytes;

use super::replies::ReplyLease;
use super::signal::Signal;
use super::turns::{Anchor, Gate, Pass};
use crate::protocol::Surface;
use crate::protocol::records::RecordView;
use crate::protocol::sse::{SseCursor, StepKey};
use crate::protocol::window::Cut;

/// One rendered SSE step, framed as a chunk: what a response whose cursor
/// has `key` writes, and where its cursor stands afterwards.
pub struct SharedStep {
    pub key: StepKey,
    pub chunk: Bytes,
    pub after: SseCursor,
    pub done: bool,
    /// The reply bytes its window holds (`--max-reply-bytes`), while some
    /// response still writes it.
    pub lease: Option<ReplyLease>,
}

/// What a long-poll body depends on: the stream incarnation, the window
/// fetched and where it may be cut, and how it is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyKey {
    pub id: u64,
    pub start: u64,
    pub fetch_end: u64,
    pub cut: Cut,
    pub surface: Surface,
    pub records: Option<RecordView>,
}

/// One rendered long-poll body, with the lease on the reply bytes it holds.
pub struct SharedBody {
    pub key: BodyKey,
    /// Where its window ends (`Stream-Next-Offset`).
    pub end: u64,
    /// Its bytes: one rendered piece, or the cache's chunks as they are.
    pub body: Vec<Bytes>,
    pub lease: Option<ReplyLease>,
}

#[derive(Default)]
pub struct Audience {
    pub signal: Rc<Signal>,
    /// Weak: the step lives while some response is still writing it (a
    /// burst), not until the next event, so an idle audience holds no chunk.
    step: Latest<SharedStep>,
    /// Likewise the long-poll body rendered last.
    body: Latest<SharedBody>,
}

/// What was rendered last, alive while some response still writes it.
struct Latest<T>(RefCell<Weak<T>>);

impl<T> Default for Latest<T> {
    fn default() -> Self {
        Latest(RefCell::new(Weak::new()))
    }
}

impl<T> Latest<T> {
    /// The value, when some response still holds it and it is `wanted`.
    fn get(&self, wanted: impl FnOnce(&T) -> bool) -> Option<Rc<T>> {
        let value = self.0.borrow().upgrade()?;
        wanted(&value).then_some(value)
    }

    fn set(&self, value: T) -> Rc<T> {
        let value = Rc::new(value);
        *self.0.borrow_mut() = Rc::downgrade(&value);
        value
    }
}

impl Audience {
    /// The step rendered last, when it was rendered for `key` and some
    /// response is still writing it.
    pub fn step(&self, key: &StepKey) -> Option<Rc<SharedStep>> {
        self.step.get(|step| step.key == *key)
    }

    /// Shares `step` with this audience's readers, kept for those waiting
    /// their turn at `turns`.
    pub fn share(&self, step: SharedStep, turns: &Gate) -> Rc<SharedStep> {
        let step = self.step.set(step);
        turns.anchor(self.id(), step.clone());
        step
    }

    /// The long-poll body rendered last, when it was rendered for `key`
    /// and some response is still writing it.
    pub fn body(&self, key: &BodyKey) -> Option<Rc<SharedBody>> {
        self.body.get(|body| body.key == *key)
    }

    /// Shares `body` with this audience's waiters, kept for those waiting
    /// their turn at `turns`.
    pub fn share_body(&self, body: SharedBody, turns: &Gate) -> Rc<SharedBody> {
        let body = self.body.set(body);
        turns.anchor(self.id(), body.clone());
        body
    }

    /// A woken reader's turn at `turns` (the whole audience woke with it),
    /// its renders kept for it meanwhile.
    pub fn turn(&self, turns: &Rc<Gate>) -> Pass {
        turns.pass(self.id(), self.rendered())
    }

    /// Names this audience at the turns gate.
    fn id(&self) -> usize {
        self as *const Audience as usize
    }

    /// The step and body rendered last, while some reader holds them: the
    /// turns gate keeps them for this audience's waiting readers.
    fn rendered(&self) -> Vec<Anchor> {
        let step = self.step.0.borrow().upgrade().map(|s| s as Anchor);
        let body = self.body.0.borrow().upgrade().map(|b| b as Anchor);
        step.into_iter().chain(body).collect()
    }
}

/// Audiences by stream key, created on demand and dropped when unused.
#[derive(Default)]
pub struct Waiters {
    audiences: RefCell<HashMap<String, Rc<Audience>>>,
}

impl Waiters {
    pub fn join(&self, key: &str) -> Rc<Audience> {
        let mut map = self.audiences.borrow_mut();
        map.entry(key.to_string()).or_default().clone()
    }

    pub fn notify(&self, key: &str) {
        let mut map = self.audiences.borrow_mut();
        if let Some(audience) = map.get(key) {
            audience.signal.notify();
            if Rc::strong_count(audience) == 1 {
                map.remove(key);
            }
        }
    }

    /// Drops the map's entry for `key` when `held` is its last other user.
    pub fn release(&self, key: &str, held: Rc<Audience>) {
        let mut map = self.audiences.borrow_mut();
        if Rc::strong_count(&held) == 2 {
            map.remove(key);
        }
    }

    /// Whether a live read of `key` is waiting (the map's own reference
    /// aside, someone holds its audience).
    pub fn has_readers(&self, key: &str) -> bool {
        let map = self.audiences.borrow();
        map.get(key).is_some_and(|a| Rc::strong_count(a) > 1)
    }

    /// Wakes every waiter (shutdown).
    pub fn notify_all(&self) {
        for audience in self.audiences.borrow().values() {
            audience.signal.notify();
        }
    }

    pub fn len(&self) -> usize {
        self.audiences.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.audiences.borrow().is_empty()
    }
}
