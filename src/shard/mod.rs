//! Shards: one pinned thread per core, each with its own io_uring runtime,
//! SO_REUSEPORT listener, connections, stream table and waiters (DESIGN.md).
//! This is the only layer that ties protocol decisions to sockets.

pub mod audience;
pub mod batch;
pub mod blobs;
pub mod body;
pub mod bootstrap;
pub mod buckets;
pub mod cleaner;
pub mod commit;
pub mod conn;
pub mod dispatch;
pub mod fd_spare;
pub mod fork;
pub mod fork_lease;
pub mod guard;
pub mod listener;
pub mod live;
pub mod mesh;
pub mod metrics;
pub mod placement;
pub mod replies;
pub mod reserve;
pub mod signal;
pub mod slices;
pub mod snapshot;
pub mod sse_live;
pub mod startup;
pub mod store;
pub mod turns;
pub mod writer;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use crate::config::Config;
use crate::stream::codec::Entry;
use crate::stream::{Command, Table};
use audience::Waiters;
use commit::{CommitError, Commits, Effect, Ticket};
use mesh::{Mesh, MeshMsg};
use signal::Signal;

/// Everything one shard owns. Lives in an `Rc` on its thread; never shared.
pub struct Shard {
    pub index: usize,
    pub config: Arc<Config>,
    pub table: RefCell<Table>,
    pub waiters: Waiters,
    pub mesh: Mesh,
    /// Replicated bucket registry: id -> creation time (extensions §1).
    pub buckets: RefCell<BTreeMap<String, buckets::Bucket>>,
    /// Buckets this shard (their owner) is creating or deleting: a bucket
    /// enters the registry only when its create commits, so a concurrent
    /// PUT or DELETE waits here.
    pub bucket_changes: RefCell<BTreeSet<String>>,
    pub stopping: Cell<bool>,
    pub stop: Rc<Signal>,
    pub commits: Commits,
    /// Segment files, for reads of data no longer cached.
    pub segments: store::Segments,
    /// The segment the log appends to (the cleaner leaves it alone).
    pub head_segment: Cell<u64>,
    /// Snapshot blobs written whose SNAPSHOT record is not committed yet:
    /// the blob sweep must leave them alone.
    pub pending_blobs: RefCell<HashSet<PathBuf>>,
    /// Streams whose latest access record (`touch`) may not be committed,
    /// with its sequence number: a read meanwhile waits for it too.
    pending_access: RefCell<HashMap<String, u64>>,
    /// This shard's counters, gauges and histograms (`/v1/metrics`).
    pub metrics: crate::metrics::Metrics,
    /// Reply bytes held for clients still to read them (`replies.rs`).
    pub replies: Rc<replies::ReplyBudget>,
    /// Request body bytes held while they arrive and are handled.
    pub bodies: Rc<replies::ReplyBudget>,
    /// Forks planned from this shard's streams and not yet applied.
    pub fork_leases: fork_lease::Leases,
    /// Collections of soft-deleted sources in progress, by incarnation,
    /// with the askers waiting for each (`fork::collect_now`).
    pub fork_collections: RefCell<HashMap<u64, Vec<flume::Sender<()>>>>,
    /// Turns of live readers woken together (`turns.rs`).
    pub turns: Rc<turns::Gate>,
}

/// Ends the process when dropped by a panic. A panic inside `apply` (a bug)
/// leaves the head state half changed with its record queued; contained to
/// its connection, the writer would log a record whose effect no one holds,
/// and the next start could refuse the log. Ending the process before the
/// writer runs again keeps the log to what applied whole.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            crate::error!("a command panicked while it applied; aborting the process");
            std::process::abort();
        }
    }
}

impl Shard {
    pub fn new(
        index: usize,
        config: Arc<Config>,
        mesh: Mesh,
        table: Table,
        next_seq: u64,
        segments: store::Segments,
    ) -> Shard {
        let segment_bytes = config.segment_bytes;
        Shard {
            index,
            config,
            table: RefCell::new(table),
            waiters: Waiters::default(),
            mesh,
            buckets: RefCell::new(BTreeMap::new()),
            bucket_changes: RefCell::new(BTreeSet::new()),
            stopping: Cell::new(false),
            stop: Rc::new(Signal::default()),
            commits: Commits::new(next_seq, segment_bytes),
            segments,
            head_segment: Cell::new(0),
            pending_blobs: RefCell::new(HashSet::new()),
            pending_access: RefCell::default(),
            metrics: crate::metrics::Metrics::default(),
            replies: Rc::default(),
            bodies: Rc::default(),
            fork_leases: fork_lease::Leases::default(),
            fork_collections: RefCell::default(),
            turns: Rc::default(),
        }
    }

    pub fn shards(&self) -> usize {
        self.mesh.len()
    }

    /// A lease on `bytes` of this shard's share of `--max-reply-bytes`.
    pub fn lease_reply(&self, bytes: u64) -> Option<replies::ReplyLease> {
        self.replies.lease(bytes, self.reply_limit())
    }

    /// This shard's share of `--max-reply-bytes`.
    fn reply_limit(&self) -> u64 {
        self.config.max_reply_bytes / self.config.cores as u64
    }

    /// The lease counting a reply body of `bytes` already in memory while
    /// it is written: none under `replies::COUNTED_BYTES`; never refused
    /// (reading it was leased, if at all, before).
    pub fn hold_reply(&self, bytes: usize) -> Option<replies::ReplyLease> {
        (bytes >= replies::COUNTED_BYTES).then(|| self.replies.hold(bytes as u64))
    }

    /// The lease a reply that cannot be refused (an SSE response under
    /// way) takes on `bytes`: none under `replies::COUNTED_BYTES`; past the
    /// budget, a turn in its queue to wait with (`turn`, when it waited
    /// already, keeps its place).
    pub fn lease_in_turn(
        &self,
        bytes: usize,
        turn: Option<replies::Turn>,
    ) -> Result<Option<replies::ReplyLease>, replies::Turn> {
        if bytes < replies::COUNTED_BYTES {
            return Ok(None);
        }
        let bytes = bytes as u64;
        match turn {
            Some(turn) => turn.lease(bytes, self.reply_limit()).map(Some),
            None => self
                .lease_reply(bytes)
                .map(Some)
                .ok_or_else(|| self.replies.queue()),
        }
    }

    /// The lease a reply body of `bytes` takes: none under
    /// `replies::COUNTED_BYTES`; `Err` with the 503 when the budget is spent.
    pub fn lease_counted_reply(
        &self,
        bytes: usize,
    ) -> Result<Option<replies::ReplyLease>, crate::protocol::Response> {
        if bytes < replies::COUNTED_BYTES {
            return Ok(None);
        }
        self.lease_reply(bytes as u64)
            .map(Some)
            .ok_or_else(replies::busy)
    }

    /// A lease on `bytes` more of request body (`--max-request-bytes` ÷
    /// shards) for a request that holds `mine` already.
    pub fn lease_body(&self, bytes: u64, mine: u64) -> Option<replies::ReplyLease> {
        let limit = self.config.max_request_bytes / self.config.cores as u64;
        self.bodies.lease_more(bytes, limit, mine)
    }

    /// Lets the shard's other tasks run: work that would otherwise hold the
    /// thread for a large request or a pass over much data pauses here.
    pub async fn yield_to_others() {
        monoio::time::sleep(std::time::Duration::ZERO).await;
    }

    /// Applies decided commands to the head state and queues their log
    /// records; the ticket completes once all of them are committed. A
    /// command whose record no segment could hold is neither applied nor
    /// queued: the ticket fails at once (413). (Requests submit one command;
    /// several come only from reaping, as small deletes, and from a legacy
    /// start's access records, so none before a refused one is left applied
    /// behind a failed ticket.)
    pub fn submit(&self, commands: Vec<Command>) -> Ticket {
        assert!(!commands.is_empty(), "nothing to commit");
        if !commands.iter().all(reserve::frees_space) && reserve::refuses_data(self) {
            return Ticket::failed(reserve::refusal());
        }
        let _whole = AbortOnPanic;
        for command in commands {
            let entry = Entry::Stream(command);
            let seq = match self.commits.enqueue(&entry) {
                Ok(seq) => seq,
                Err(too_large) => return Ticket::failed(too_large),
            };
            let Entry::Stream(command) = entry else {
                unreachable!("built above")
            };
            let (applied, undo) = self.table.borrow_mut().apply(command);
            self.commits.track(seq, Effect::Stream { applied, undo });
        }
        self.commits.ticket().expect("entries were just submitted")
    }

    /// Logs a bucket registry change; it applies once committed.
    pub fn submit_bucket(&self, entry: Entry) -> Ticket {
        // A bucket record is far smaller than a segment: only a closed
        // log refuses it, and a full disk a create.
        if matches!(entry, Entry::BucketCreate { .. }) && reserve::refuses_data(self) {
            return Ticket::failed(reserve::refusal());
        }
        let queued = match self.commits.enqueue(&entry) {
            Ok(queued) => queued,
            Err(stopped) => return Ticket::failed(stopped),
        };
        self.commits.track(queued, Effect::Bucket(entry));
        self.commits.ticket().expect("entry was just submitted")
    }

    /// Submits the delete of `key` if its TTL or Expires-At has passed, and
    /// returns the time the request is decided at. Not awaited: whatever the
    /// request answers is committed after it.
    pub fn reap_if_expired(&self, key: &str) -> u64 {
        let now_ms = crate::clock::now_ms();
        // PROTOCOL.md §5.1: "a stream with active live readers will not
        // expire": a reader waiting here slides the TTL window as a new
        // read would (an absolute Stream-Expires-At still ends it).
        if self.waiters.has_readers(key) {
            drop(self.slide(key, now_ms));
        }
        let expired = crate::protocol::reap_expired(&self.table.borrow(), key, now_ms);
        if let Some(command) = expired {
            drop(self.submit(vec![command]));
        }
        now_ms
    }

    /// Whether `stream` (at `key`) has expired at `now_ms`, a live read
    /// waiting on it counting as a read now (PROTOCOL.md §5.1).
    pub fn has_expired(&self, key: &str, stream: &crate::stream::Stream, now_ms: u64) -> bool {
        match self.waiters.has_readers(key) {
            true => stream.past_expires_at(now_ms),
            false => stream.is_expired(now_ms),
        }
    }

    /// Records a read or write of `key` at `now_ms` (`Stream-TTL` slides
    /// from it), logs one a restart must know of
    /// (`protocol::access_record`), and waits for that record or a pending
    /// one of the same stream. None is queued while the commit queue is
    /// full: the disk is behind, and requests are not held for it. A
    /// failed record (a disk fault, undone) fails no request: only a
    /// restart's bound on the stream's idle window is the looser for it.
    pub async fn touch(&self, key: &str, now_ms: u64) {
        if let Some(ticket) = self.slide(key, now_ms) {
            let _ = ticket.await;
        }
    }

    /// `touch` by a read that waited on incarnation `id`: nothing when the
    /// key holds another stream now (an old reader keeps no new one alive).
    pub async fn touch_incarnation(&self, key: &str, id: u64, now_ms: u64) {
        let same = self.table.borrow().get(key).is_some_and(|s| s.id == id);
        if same {
            self.touch(key, now_ms).await;
        }
    }

    /// `touch` without the wait: slides `key`'s window to `now_ms` and
    /// returns the ticket of the access record that covers it, if any.
    fn slide(&self, key: &str, now_ms: u64) -> Option<Ticket> {
        let record = match self.commit_queue_full() {
            true => None,
            false => crate::protocol::access_record(&self.table.borrow(), key, now_ms),
        };
        self.table.borrow_mut().touch(key, now_ms);
        match record {
            Some(command) => Some(self.log_access(key, command)),
            None => self.pending_access_record(key),
        }
    }

    /// Submits `key`'s access record and remembers it as pending.
    fn log_access(&self, key: &str, command: Command) -> Ticket {
        let ticket = self.submit(vec![command]);
        let mut pending = self.pending_access.borrow_mut();
        let acknowledged = |&seq: &u64| self.commits.acknowledged_through(seq);
        pending.retain(|_, seq| !acknowledged(seq));
        pending.insert(key.to_string(), self.commits.submitted_seq());
        ticket
    }

    /// A ticket covering `key`'s latest access record while it may not be
    /// committed (with everything else submitted by now).
    fn pending_access_record(&self, key: &str) -> Option<Ticket> {
        let mut pending = self.pending_access.borrow_mut();
        if pending.is_empty() {
            return None;
        }
        let seq = *pending.get(key)?;
        if self.commits.acknowledged_through(seq) {
            pending.remove(key);
            return None;
        }
        self.commits.ticket()
    }

    /// Streams a pass over many streams visits between two yields.
    pub const KEY_CHUNK: usize = 4096;

    /// Visits the next [`Self::KEY_CHUNK`] streams whose key starts with
    /// `prefix` and sorts after `after`, in key order; returns the last key
    /// visited (`None`: none left). A long pass calls it again from there
    /// after a yield, so no pass holds the shard for the whole table.
    pub fn visit_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        mut visit: impl FnMut(&String, &crate::stream::Stream),
    ) -> Option<String> {
        let table = self.table.borrow();
        let mut last = None;
        for (key, stream) in table.keys_after(prefix, after).take(Self::KEY_CHUNK) {
            visit(key, stream);
            last = Some(key);
        }
        last.cloned()
    }

    /// Whether the commit queue is full (`--max-commit-queue-bytes`): new
    /// writes are then refused with 503 rather than queued without bound.
    pub fn commit_queue_full(&self) -> bool {
        self.commits.queued_bytes() >= self.config.max_commit_queue_bytes
    }

    /// Logs entries that change nothing decided (the cleaner's copies, a
    /// fork's inherited pieces). One no segment could hold is `Err` (413)
    /// and is not queued, nor are those after it; those before it are.
    pub fn submit_entries(
        &self,
        entries: Vec<(Entry, Effect)>,
    ) -> Result<Option<Ticket>, CommitError> {
        // A fork's inherited pieces add data; the cleaner's copies free room.
        let adds = entries
            .iter()
            .any(|(_, e)| matches!(e, Effect::Stage { .. }));
        if adds && reserve::refuses_data(self) {
            return Err(reserve::refusal());
        }
        for (entry, effect) in entries {
            let queued = self.commits.enqueue(&entry)?;
            self.commits.track(queued, effect);
        }
        Ok(self.commits.ticket())
    }

    /// `reply`, built on the head state, once everything decided so far is
    /// committed (or the commit's error instead).
    pub async fn when_committed(
        &self,
        reply: crate::protocol::Response,
    ) -> crate::protocol::Response {
        self.barrier()
            .await
            .map_or_else(|e| e.response(), |()| reply)
    }

    /// Waits until everything decided so far is committed: a reply built
    /// on the head state may go out only then.
    pub async fn barrier(&self) -> Result<(), CommitError> {
        match self.commits.ticket() {
            Some(ticket) => ticket.await,
            None => Ok(()),
        }
    }

    /// Publishes a committed batch (written at `base`) to readers, evicts
    /// cached data over the budget, and completes its tickets.
    pub fn on_committed(&self, seq: u64, base: (u64, u64), synced: bool) {
        let committed = self.commits.committed(seq, base, synced);
        let mut woken: Vec<&str> = Vec::new();
        for done in &committed {
            match &done.effect {
                Effect::Stream { applied, undo } => {
                    metrics::count_committed(&self.metrics, applied, undo);
                    self.metrics
                        .commit_seconds
                        .observe(done.waited.as_secs_f64());
                    let wake = self.table.borrow_mut().publish(applied, done.location);
                    if wake && woken.last() != Some(&applied.key.as_str()) {
                        woken.push(&applied.key);
                    }
                    if let crate::stream::table::Undo::Delete {
                        stream: Some(deleted),
                        ..
                    } = undo
                        && let Some(origin) = &deleted.fork
                    {
                        fork::released(self, origin);
                    }
                }
                Effect::Stage {
                    stream_id,
                    start,
                    len,
                    ends,
                } => {
                    if let Some((segment, pos)) = done.location {
                        let extent = crate::stream::data::Extent {
                            start: *start,
                            len: *len,
                            segment,
                            pos,
                        };
                        self.table.borrow_mut().stage(*stream_id, extent, ends);
                    }
                }
                Effect::Bucket(entry) => buckets::apply_entry(self, entry.clone()),
                Effect::Relocate {
                    key,
                    stream_id,
                    start,
                } => {
                    if let Some(location) = done.location {
                        self.table
                            .borrow_mut()
                            .relocate(key, *stream_id, *start, location);
                    }
                }
                Effect::Nothing => {}
            }
        }
        self.table.borrow_mut().enforce_cache_budget();
        // Writers' acknowledgements first, then readers: a stream's readers
        // (thousands of SSE subscribers, say) must not delay the answer to
        // the append they are woken for (tasks run in wake order).
        for done in &committed {
            commit::complete(&done.tickets, &Ok(()));
        }
        for key in woken {
            self.waiters.notify(key);
        }
    }

    /// Rolls back everything uncommitted after a failed batch.
    pub fn on_failed(&self, error: &std::io::Error) {
        let failed = self.commits.failed();
        self.roll_back(failed, Err(CommitError::from_io(error)));
    }

    /// Once the writer has ended at shutdown: fails what is still
    /// uncommitted (submitted during a final sync) and refuses later
    /// submits, so no ticket waits for a writer that is gone.
    pub fn close_log(&self) {
        let unwritten = self.commits.close();
        self.roll_back(unwritten, Err(CommitError::stopped()));
    }

    fn roll_back(
        &self,
        uncommitted: Vec<(Effect, Vec<Rc<commit::Slot>>)>,
        failure: Result<(), CommitError>,
    ) {
        for (effect, tickets) in uncommitted {
            if let Effect::Stream { undo, .. } = effect {
                self.table.borrow_mut().undo(undo);
            }
            commit::complete(&tickets, &failure);
        }
    }

    /// Stops accepting, wakes waiters so live reads end.
    pub fn begin_stop(&self) {
        crate::health::mark_stopping();
        self.stopping.set(true);
        self.stop.notify();
        self.waiters.notify_all();
    }
}

/// Shard threads and the mesh senders that reach them (to deliver shutdown).
pub type Started = (
    Vec<std::thread::JoinHandle<()>>,
    Vec<flume::Sender<MeshMsg>>,
);

/// Starts `config.cores` shard threads, waits until every shard recovered
/// its log, and returns their join handles and mesh senders. `Err` carries
/// what stopped startup (the threads have ended then).
pub fn start(config: Arc<Config>, data: &crate::datadir::DataDir) -> Result<Started, String> {
    let listeners = listener::bind_all(config.listen, config.cores)
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..config.cores).map(|_| flume::unbounded()).unzip();
    let (report_tx, reports) = std::sync::mpsc::channel();
    let mut unions = Vec::new();
    let mut handles = Vec::new();
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (index, (listener, inbox)) in listeners.into_iter().zip(receivers).enumerate() {
        let (union_tx, union) = std::sync::mpsc::channel();
        unions.push(union_tx);
        let startup = startup::Startup {
            report: report_tx.clone(),
            union,
        };
        let (config, mesh, dir) = (
            config.clone(),
            Mesh::new(index, senders.clone(), closed.clone()),
            data.shard_dir(index),
        );
        let handle = std::thread::Builder::new()
            .name(format!("rill-shard-{index}"))
            .spawn(move || {
                let run =
                    || listener::run_shard(index, config, mesh, listener, inbox, dir, startup);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
                    // A panic outside a connection (the writer, a commit, the
                    // cleaner) leaves the shard's state unknown and its
                    // clients hanging: end the process so the supervisor
                    // restarts it and recovery rebuilds from the log.
                    crate::error!(shard = index, "shard panicked; aborting the process");
                    std::process::abort();
                }
            })
            .map_err(|e| format!("cannot start shard {index}: {e}"))?;
        handles.push(handle);
    }
    drop(report_tx);
    if let Err(message) = startup::coordinate(reports, &unions) {
        for handle in handles {
            let _ = handle.join();
        }
        return Err(message);
    }
    Ok((handles, senders))
}
