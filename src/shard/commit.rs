//! The commit pipeline (issue 3 "Group commit"): decided commands are
//! applied to the head state at once and their records queued; one writer
//! task per shard takes everything queued, writes it as one batch and syncs
//! it, then publishes the batch to readers and completes its tickets.
//! Requests arriving meanwhile form the next batch.
//!
//! Positions, by record sequence number, in the order the invariant names
//! them: `submitted >= written >= synced >= acknowledged`. A ticket (and so
//! a response) completes only once its record is synced (`--fsync always`)
//! or written (`--fsync interval:MS`, which bounds the loss window).
//! When a batch fails, every uncommitted command is rolled back (later ones
//! were decided on top of the failed ones) and their tickets fail.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::signal::Signal;
use crate::log::format;
use crate::protocol::Response;
use crate::stream::codec::{self, Entry};
use crate::stream::table::{Applied, Undo};

/// Whether `e` says the disk (or the user's quota on it) is full: 507.
fn out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Why a commit failed, as the client will be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitError {
    pub no_space: bool,
    /// The record would not fit a segment: it was never queued.
    pub too_large: bool,
    pub message: String,
}

impl CommitError {
    pub fn from_io(e: &io::Error) -> CommitError {
        CommitError {
            no_space: out_of_space(e),
            too_large: false,
            message: e.to_string(),
        }
    }

    /// The shard's log is closed: it is stopping (503, retryable).
    pub fn stopped() -> CommitError {
        CommitError {
            no_space: false,
            too_large: false,
            message: "the shard is stopping".to_string(),
        }
    }

    fn too_large(framed: usize, most: usize) -> CommitError {
        CommitError {
            no_space: false,
            too_large: true,
            message: format!("its log record of {framed} bytes exceeds a segment's {most}"),
        }
    }

    /// What the client is told: 413 when the record cannot fit a segment,
    /// 507 when the disk is full, else 503 (both retryable), with a JSON
    /// error body.
    pub fn response(&self) -> Response {
        let (status, code) = self.status();
        if self.too_large {
            let message = format!("the write was refused: {}", self.message);
            return Response::error(status, code, &message);
        }
        let message = format!("the write was not committed: {}", self.message);
        Response::error(status, code, &message).header("retry-after", "1")
    }

    /// The status and error code the client is told (an append-batch frame
    /// too, in its acknowledgement).
    pub fn status(&self) -> (u16, &'static str) {
        match (self.too_large, self.no_space) {
            (true, _) => (413, "record_too_large"),
            (false, true) => (507, "insufficient_storage"),
            (false, false) => (503, "storage_unavailable"),
        }
    }
}

/// Where a ticket's outcome lands.
#[derive(Default)]
pub struct Slot {
    result: RefCell<Option<Result<(), CommitError>>>,
    waker: RefCell<Option<Waker>>,
}

impl Slot {
    fn complete(&self, result: Result<(), CommitError>) {
        *self.result.borrow_mut() = Some(result);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// Completes when the commands it covers are committed (or failed).
pub struct Ticket(Rc<Slot>);

impl Ticket {
    /// A ticket that failed before anything was queued.
    pub fn failed(error: CommitError) -> Ticket {
        let slot = Slot::default();
        *slot.result.borrow_mut() = Some(Err(error));
        Ticket(Rc::new(slot))
    }
}

impl Future for Ticket {
    type Output = Result<(), CommitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(result) = self.0.result.borrow_mut().take() {
            return Poll::Ready(result);
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// One submitted entry not yet committed.
struct Uncommitted {
    seq: u64,
    effect: Effect,
    tickets: Vec<Rc<Slot>>,
    /// Offset of the stream data inside the framed record, if any.
    data_at: Option<usize>,
    /// Offset of the framed record inside its batch, once batched.
    batch_rel: Option<usize>,
    /// When the write was decided (for the commit-latency histogram).
    queued_at: std::time::Instant,
}

/// A record queued by `enqueue`, to be tracked with its effect.
pub struct Queued {
    seq: u64,
    data_at: Option<usize>,
}

/// A committed entry: its effect, where its data landed (segment, file
/// position), and the tickets to complete.
pub struct Committed {
    pub effect: Effect,
    pub location: Option<(u64, u64)>,
    pub tickets: Vec<Rc<Slot>>,
    /// From decision to commit: queueing, the write and the sync.
    pub waited: std::time::Duration,
}

/// What to do with an entry once committed, or how to take it back.
pub enum Effect {
    Stream {
        applied: Applied,
        undo: Undo,
    },
    Bucket(Entry),
    /// The cleaner copied stream bytes: their extent moves once committed.
    Relocate {
        key: String,
        stream_id: u64,
        start: u64,
    },
    /// A fork's inherited bytes: staged for its FORK command once committed.
    Stage {
        stream_id: u64,
        start: u64,
        len: u64,
        /// Message ends inside the bytes.
        ends: Vec<u64>,
    },
    /// Nothing changes in memory (a metadata image).
    Nothing,
}

#[derive(Default)]
struct Queue {
    /// Framed records not yet handed to the writer.
    bytes: Vec<u8>,
    /// Start offset (in `bytes`) and seq of each queued record.
    records: Vec<(usize, u64)>,
    /// A written batch's buffer, empty, for the next batch (`recycle`).
    spare: Vec<u8>,
}

pub struct Commits {
    /// The largest framed record a segment holds: a larger one is refused
    /// before it is queued (queued, it would fail every write behind it).
    max_record_bytes: usize,
    queue: RefCell<Queue>,
    uncommitted: RefCell<VecDeque<Uncommitted>>,
    next_seq: Cell<u64>,
    /// The log positions the invariant names, as record sequence numbers:
    /// `written >= synced >= acknowledged` under `--fsync always`, and
    /// `written >= acknowledged` (synced trailing) under `interval:MS`.
    written_seq: Cell<u64>,
    synced_seq: Cell<u64>,
    acknowledged_seq: Cell<u64>,
    /// Set once the writer has ended at shutdown: nothing queued would be
    /// written, so nothing more is queued.
    closed: Cell<bool>,
    pub wake_writer: Rc<Signal>,
}

/// A batch taken by the writer: framed records, the last marked batch-end.
pub struct Batch {
    pub bytes: Vec<u8>,
    pub last_seq: u64,
    /// How many records it holds.
    pub records: usize,
}

impl Commits {
    /// `max_record_bytes`: the largest framed record a segment holds.
    pub fn new(next_seq: u64, max_record_bytes: u64) -> Commits {
        assert!(next_seq >= 1);
        Commits {
            max_record_bytes: usize::try_from(max_record_bytes).unwrap_or(usize::MAX),
            queue: RefCell::default(),
            uncommitted: RefCell::default(),
            next_seq: Cell::new(next_seq),
            written_seq: Cell::new(next_seq - 1),
            synced_seq: Cell::new(next_seq - 1),
            acknowledged_seq: Cell::new(next_seq - 1),
            closed: Cell::new(false),
            wake_writer: Rc::new(Signal::default()),
        }
    }

    /// Queues the record of `entry`; `track` must follow with its effect.
    /// A record no segment could hold is refused, and nothing is queued;
    /// so is every record once the log is closed.
    pub fn enqueue(&self, entry: &Entry) -> Result<Queued, CommitError> {
        if self.closed.get() {
            return Err(CommitError::stopped());
        }
        let seq = self.next_seq.get();
        let mut queue = self.queue.borrow_mut();
        let start = queue.bytes.len();
        // Encoded straight behind its header: a 32 MiB append is not built
        // apart and copied once more.
        let most = self.max_record_bytes;
        let (_, data_at) = format::encode_within(seq, most, &mut queue.bytes, |out| {
            codec::encode_located(entry, out)
        })
        .map_err(|framed| CommitError::too_large(framed, self.max_record_bytes))?;
        self.next_seq.set(seq + 1);
        queue.records.push((start, seq));
        self.wake_writer.notify();
        Ok(Queued {
            seq,
            data_at: data_at.map(|at| at + format::HEADER_BYTES),
        })
    }

    /// Remembers what committing (or failing) a queued record means.
    pub fn track(&self, queued: Queued, effect: Effect) {
        let mut uncommitted = self.uncommitted.borrow_mut();
        debug_assert!(uncommitted.back().is_none_or(|u| u.seq < queued.seq));
        let Queued { seq, data_at } = queued;
        uncommitted.push_back(Uncommitted {
            seq,
            effect,
            tickets: Vec::new(),
            data_at,
            batch_rel: None,
            queued_at: std::time::Instant::now(),
        });
    }

    /// A ticket for everything submitted so far; `None` when all of it is
    /// already committed.
    pub fn ticket(&self) -> Option<Ticket> {
        let mut uncommitted = self.uncommitted.borrow_mut();
        let last = uncommitted.back_mut()?;
        let slot = Rc::new(Slot::default());
        last.tickets.push(slot.clone());
        Some(Ticket(slot))
    }

    /// Whether everything submitted is committed (or failed and undone):
    /// the head state is then the durable one.
    pub fn settled(&self) -> bool {
        self.uncommitted.borrow().is_empty()
    }

    /// Whether a bucket registry change is submitted but not committed
    /// (the registry shows a change only once it commits).
    pub fn bucket_change_pending(&self) -> bool {
        let uncommitted = self.uncommitted.borrow();
        uncommitted
            .iter()
            .any(|u| matches!(u.effect, Effect::Bucket(_)))
    }

    pub fn has_queued(&self) -> bool {
        !self.queue.borrow().records.is_empty()
    }

    /// Bytes of records waiting for the writer (the commit queue).
    pub fn queued_bytes(&self) -> usize {
        self.queue.borrow().bytes.len()
    }

    /// Takes queued records, at most `max_bytes` of them (at least one).
    pub fn take_batch(&self, max_bytes: usize) -> Option<Batch> {
        let mut queue = self.queue.borrow_mut();
        if queue.records.is_empty() {
            return None;
        }
        let total = queue.bytes.len();
        let ends = queue
            .records
            .iter()
            .skip(1)
            .map(|(start, _)| *start)
            .chain([total]);
        let count = ends.take_while(|&end| end <= max_bytes).count().max(1);
        let cut = queue.records.get(count).map_or(total, |(start, _)| *start);
        let (last_start, last_seq) = queue.records[count - 1];
        let mut bytes = std::mem::take(&mut queue.spare);
        if cut == total {
            // The whole queue is the batch: trade buffers instead of copying.
            std::mem::swap(&mut bytes, &mut queue.bytes);
        } else {
            bytes.extend_from_slice(&queue.bytes[..cut]);
            queue.bytes.drain(..cut);
        }
        self.note_batch_offsets(&queue.records[..count]);
        queue.records.drain(..count);
        for record in queue.records.iter_mut() {
            record.0 -= cut;
        }
        format::set_flags(&mut bytes[last_start..], format::FLAG_BATCH_END);
        Some(Batch {
            bytes,
            last_seq,
            records: count,
        })
    }

    /// Takes back a written batch's buffer for a later batch.
    pub fn recycle(&self, mut bytes: Vec<u8>) {
        if crate::log::worth_keeping(bytes.capacity(), bytes.len()) {
            bytes.clear();
            self.queue.borrow_mut().spare = bytes;
        }
    }

    /// Remembers where in the batch each of its records starts.
    fn note_batch_offsets(&self, records: &[(usize, u64)]) {
        let mut uncommitted = self.uncommitted.borrow_mut();
        for &(rel, seq) in records {
            let at = uncommitted.partition_point(|u| u.seq < seq);
            if let Some(u) = uncommitted.get_mut(at).filter(|u| u.seq == seq) {
                u.batch_rel = Some(rel);
            }
        }
    }

    /// The sequence number the latest submitted record got.
    pub fn submitted_seq(&self) -> u64 {
        self.next_seq.get() - 1
    }

    /// Whether record `seq` is committed and acknowledged (or failed, and
    /// a later one was).
    pub fn acknowledged_through(&self, seq: u64) -> bool {
        self.acknowledged_seq.get() >= seq
    }

    /// Whether record `seq` is written and synced (at once under `--fsync
    /// always`; under `interval:MS` once the writer synced).
    pub fn synced_through(&self, seq: u64) -> bool {
        self.synced_seq.get() >= seq
    }

    /// Marks everything written by now as synced (`--fsync interval`).
    pub fn synced_all(&self) {
        self.synced_seq.set(self.written_seq.get());
    }

    /// Entries up to `seq` are committed, their batch written at `base`
    /// (segment, file position): returns their effects and where their
    /// data is, for the caller to publish before completing the tickets.
    pub fn committed(&self, seq: u64, base: (u64, u64), synced: bool) -> Vec<Committed> {
        assert!(seq >= self.acknowledged_seq.get(), "commits go forward");
        self.written_seq.set(seq);
        if synced {
            self.synced_seq.set(seq);
        }
        self.acknowledged_seq.set(seq);
        let (written, synced_to, acked) = (self.written_seq.get(), self.synced_seq.get(), seq);
        assert!(
            written >= synced_to && written >= acked,
            "written >= synced, acknowledged"
        );
        assert!(!synced || synced_to >= acked, "synced >= acknowledged");
        let mut uncommitted = self.uncommitted.borrow_mut();
        let mut done = Vec::new();
        while uncommitted.front().is_some_and(|u| u.seq <= seq) {
            let u = uncommitted.pop_front().expect("checked");
            let location = u
                .batch_rel
                .zip(u.data_at)
                .map(|(rel, at)| (base.0, base.1 + (rel + at) as u64));
            done.push(Committed {
                effect: u.effect,
                location,
                tickets: u.tickets,
                waited: u.queued_at.elapsed(),
            });
        }
        done
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// The writer has ended: later records are refused. Returns what was
    /// submitted and not written, as `failed` does, for the caller to undo.
    pub fn close(&self) -> Vec<(Effect, Vec<Rc<Slot>>)> {
        self.closed.set(true);
        self.failed()
    }

    /// The batch failed: every uncommitted entry is taken back, newest
    /// first. Returns their effects (to undo) and tickets (to fail).
    pub fn failed(&self) -> Vec<(Effect, Vec<Rc<Slot>>)> {
        let mut queue = self.queue.borrow_mut();
        queue.bytes.clear();
        queue.records.clear();
        self.next_seq.set(self.acknowledged_seq.get() + 1);
        let mut uncommitted = self.uncommitted.borrow_mut();
        uncommitted
            .drain(..)
            .rev()
            .map(|u| (u.effect, u.tickets))
            .collect()
    }
}

/// Completes tickets.
pub fn complete(tickets: &[Rc<Slot>], result: &Result<(), CommitError>) {
    for slot in tickets {
        slot.complete(result.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(name: &str) -> Entry {
        Entry::BucketCreate {
            bucket: name.to_string(),
            created_at_ms: 1,
        }
    }

    /// The records of a batch, decoded: (seq, flags, bucket name).
    fn records(mut bytes: &[u8]) -> Vec<(u64, u8, String)> {
        let mut out = Vec::new();
        while let format::Decoded::Record { record, framed_len } = format::decode(bytes) {
            let Ok(Entry::BucketCreate { bucket, .. }) = codec::decode(record.kind, record.payload)
            else {
                panic!("not the entry queued");
            };
            out.push((record.seq, record.flags, bucket));
            bytes = &bytes[framed_len..];
        }
        assert!(bytes.is_empty(), "a batch is whole records");
        out
    }

    #[test]
    fn batches_are_cut_at_records_and_end_flagged() {
        let commits = Commits::new(1, 1 << 20);
        for name in ["a", "b", "c"] {
            commits.enqueue(&bucket(name)).unwrap();
        }
        let one = commits.queue.borrow().records[1].0;
        let first = commits.take_batch(2 * one).unwrap();
        let end = format::FLAG_BATCH_END;
        assert_eq!((first.records, first.last_seq), (2, 2));
        assert_eq!(
            records(&first.bytes),
            [(1, 0, "a".into()), (2, end, "b".into())]
        );
        commits.recycle(first.bytes);
        commits.enqueue(&bucket("d")).unwrap();
        let rest = commits.take_batch(usize::MAX).unwrap();
        assert_eq!(
            records(&rest.bytes),
            [(3, 0, "c".into()), (4, end, "d".into())]
        );
        assert!(commits.take_batch(usize::MAX).is_none());
        commits.recycle(rest.bytes);
        // A batch larger than the limit still takes its first record.
        commits.enqueue(&bucket("e")).unwrap();
        let alone = commits.take_batch(1).unwrap();
        assert_eq!(records(&alone.bytes), [(5, end, "e".into())]);
    }

    #[test]
    fn large_batch_buffers_are_kept_only_while_batches_fill_them() {
        let commits = Commits::new(1, 1 << 20);
        let spare = |c: &Commits| c.queue.borrow().spare.capacity();
        commits.recycle(Vec::with_capacity(1 << 10));
        assert_eq!(spare(&commits), 1 << 10, "small buffers are kept");
        commits.recycle(vec![0; 5 << 20]);
        assert!(spare(&commits) >= 5 << 20, "a full large one is kept");
        let mut mostly_empty = Vec::with_capacity(64 << 20);
        mostly_empty.resize(1 << 20, 0);
        commits.recycle(mostly_empty);
        assert!(
            spare(&commits) < 64 << 20,
            "a large one a small batch used is not"
        );
    }
}
