//! The mesh: bounded-latency message passing between shards (flume channels
//! woken through monoio's cross-thread unpark). Carries connection handoffs,
//! bucket registry replication, scatter-gather queries (bucket listings,
//! metrics), fork copies and shutdown, and the stop barrier that keeps
//! every shard answering the mesh until all have closed their logs.

use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::commit::CommitError;
use crate::protocol::buckets::StreamSummary;

pub enum MeshMsg {
    /// A connection whose next request belongs to this shard: the socket and
    /// the bytes already read from it.
    Handoff {
        socket: StdTcpStream,
        buffered: Vec<u8>,
    },
    /// Replicate a bucket creation; acknowledge whether it committed.
    BucketCreated {
        bucket: String,
        created_at_ms: u64,
        ack: flume::Sender<Result<(), CommitError>>,
    },
    /// Freeze (or thaw) a bucket against stream creation and report
    /// whether this shard holds streams of it, in one step (None when the
    /// bucket is not in this shard's registry).
    BucketFreeze {
        bucket: String,
        frozen: bool,
        reply: flume::Sender<Option<bool>>,
    },
    /// Replicate a bucket deletion; acknowledge whether it committed.
    BucketDeleted {
        bucket: String,
        ack: flume::Sender<Result<(), CommitError>>,
    },
    /// Lend the stream `key` to a fork (PROTOCOL.md §4.2): its plan, then
    /// its inherited bytes, through `tx`.
    ForkSource {
        key: String,
        spec: crate::protocol::fork::ForkSpec,
        tx: flume::Sender<super::fork::Lent>,
    },
    /// How many forks of source incarnation `source_id` this shard holds.
    ForkRefs {
        source_id: u64,
        reply: flume::Sender<usize>,
    },
    /// A fork of `source` was deleted: delete the source if it is
    /// soft-deleted and has no fork left.
    ForkReleased {
        source: String,
        source_id: u64,
    },
    /// A fork of `source` was deleted by a client: collect the source now
    /// if it is soft-deleted with no fork left (and its own source in
    /// turn), then answer on `done`.
    ForkSettle {
        source: String,
        source_id: u64,
        done: flume::Sender<()>,
    },
    /// A fork planned from `source` applied or failed: its lease ends
    /// (`fork_lease`), and a soft-deleted source may be collected.
    ForkLeaseEnded {
        source: String,
        source_id: u64,
    },
    /// Summaries of this shard's streams of `bucket` whose id starts with
    /// `prefix` and sorts after `after`: the first `limit`, in id order.
    ScanBucket {
        bucket: String,
        prefix: String,
        after: Option<String>,
        limit: usize,
        reply: flume::Sender<Vec<StreamSummary>>,
    },
    /// How many streams of `bucket` this shard holds (as listed).
    CountBucket {
        bucket: String,
        reply: flume::Sender<usize>,
    },
    /// This shard's metrics snapshot, for a scrape of `/v1/metrics`.
    Metrics {
        reply: flume::Sender<crate::metrics::Snapshot>,
    },
    Shutdown,
}

/// Senders to every shard, this shard's included.
#[derive(Clone)]
pub struct Mesh {
    index: usize,
    senders: Vec<flume::Sender<MeshMsg>>,
    /// How many shards closed their log at shutdown (shared by all).
    closed: Arc<AtomicUsize>,
}

/// The replies of a gather: `complete` unless some shard gave none (its
/// runtime ended, at shutdown or after a failed start).
pub struct Gathered<T> {
    pub replies: Vec<T>,
    pub complete: bool,
}

impl<T> Gathered<T> {
    /// Every shard's reply, or `None` when some shard's is missing.
    pub fn all(self) -> Option<Vec<T>> {
        self.complete.then_some(self.replies)
    }
}

/// How often a closed shard looks whether every shard has closed.
const CLOSED_POLL: Duration = Duration::from_millis(2);

impl Mesh {
    /// The mesh of shard `index`; `closed` is one counter shared by all.
    pub fn new(
        index: usize,
        senders: Vec<flume::Sender<MeshMsg>>,
        closed: Arc<AtomicUsize>,
    ) -> Mesh {
        Mesh {
            index,
            senders,
            closed,
        }
    }

    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    pub fn send(&self, shard: usize, msg: MeshMsg) -> bool {
        debug_assert!(shard < self.senders.len());
        self.senders[shard].send(msg).is_ok()
    }

    /// Sends one message per shard (built by `make`) and awaits every reply.
    pub async fn gather<T>(&self, make: impl Fn(flume::Sender<T>) -> MeshMsg) -> Gathered<T> {
        let (tx, rx) = flume::bounded(self.senders.len());
        let mut sent = 0;
        for sender in &self.senders {
            if sender.send(make(tx.clone())).is_ok() {
                sent += 1;
            }
        }
        drop(tx);
        let mut replies = Vec::with_capacity(sent);
        while let Ok(reply) = rx.recv_async().await {
            replies.push(reply);
        }
        let complete = replies.len() == self.senders.len();
        Gathered { replies, complete }
    }

    /// Called once this shard's log is closed at shutdown: waits until
    /// every shard's is. Until then this shard keeps serving its inbox, so a
    /// shard still draining connections gets answers (failures, for
    /// writes) rather than waiting on a runtime that ended.
    pub async fn closed_everywhere(&self) {
        let closed = self.closed.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(closed <= self.senders.len(), "each shard closes once");
        while self.closed.load(Ordering::Acquire) < self.senders.len() {
            monoio::time::sleep(CLOSED_POLL).await;
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }
}
