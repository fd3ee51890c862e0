//! The mesh: bounded-latency message passing between shards (flume channels
//! woken through monoio's cross-thread unpark). Carries connection handoffs,
//! bucket registry replication, scatter-gather queries (bucket listings,
//! metrics), fork copies and shutdown.

use std::net::TcpStream as StdTcpStream;

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
    /// Freeze (or thaw) a bucket against stream creation and report how
    /// many streams of it this shard holds, in one step (None when the
    /// bucket is not in this shard's registry).
    BucketFreeze {
        bucket: String,
        frozen: bool,
        reply: flume::Sender<Option<usize>>,
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
    /// Summaries of this shard's streams of `bucket` whose id starts with `prefix`.
    ScanBucket {
        bucket: String,
        prefix: String,
        reply: flume::Sender<Vec<StreamSummary>>,
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
}

impl Mesh {
    pub fn new(index: usize, senders: Vec<flume::Sender<MeshMsg>>) -> Mesh {
        Mesh { index, senders }
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
    pub async fn gather<T>(&self, make: impl Fn(flume::Sender<T>) -> MeshMsg) -> Vec<T> {
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
        replies
    }

    pub fn index(&self) -> usize {
        self.index
    }
}
