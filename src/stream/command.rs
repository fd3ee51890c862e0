//! Commands: the only way stream state changes. Each is decided by `protocol`,
//! committed by the shard, then applied by `Table::apply`.

use bytes::Bytes;

/// Idempotent-producer coordinates carried inside the write they guard
/// (PROTOCOL.md §5.2.1), so data and dedup state change together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerWrite {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Where a fork came from (PROTOCOL.md §4.2): kept to compare a re-create
/// and to count the source's forks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkOrigin {
    /// The source's stream key and incarnation.
    pub source: String,
    pub source_id: u64,
    /// The divergence point (`Stream-Fork-Offset`, resolved) and the
    /// requested `Stream-Fork-Sub-Offset` (0 when absent).
    pub offset: u64,
    pub sub: u64,
    /// Whether the fork asked for a TTL or Expires-At of its own rather
    /// than inheriting its source's (§4.2): a re-PUT that asks for none
    /// then configures it differently (§5.1 idempotency).
    pub own_lifetime: bool,
}

/// What a create logs, and a fork starts with: the new stream's
/// configuration and its first data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewStream {
    pub key: String,
    pub content_type: String,
    pub ttl_secs: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<u64>,
    pub closed: bool,
    /// Canonical bytes (JSON streams: one normalized message per line).
    pub data: Vec<u8>,
    pub now_ms: u64,
    /// Stream attributes (extensions §5), canonical JSON or empty.
    pub attrs: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// PUT: create a stream, optionally with initial data and closed.
    Create(NewStream),
    /// POST with a body: append canonical bytes, optionally closing.
    Append {
        key: String,
        /// The incarnation appended to, and where its data starts: recovery
        /// places data by these even when records come out of order.
        stream_id: u64,
        start: u64,
        data: Bytes,
        producer: Option<ProducerWrite>,
        stream_seq: Option<String>,
        close: bool,
        now_ms: u64,
    },
    /// POST `Stream-Closed: true` with an empty body.
    Close {
        key: String,
        stream_id: u64,
        producer: Option<ProducerWrite>,
        now_ms: u64,
    },
    /// PUT `/snapshot/{offset}`: make a snapshot (its blob already synced)
    /// the latest visible one.
    Snapshot {
        key: String,
        stream_id: u64,
        snapshot: crate::stream::Snapshot,
    },
    /// PUT `/retention/{offset}`: data before `offset` is no longer kept.
    Retain {
        key: String,
        stream_id: u64,
        offset: u64,
        /// The ordinal of the message starting at `offset`: the first
        /// retained record F (extensions §6.1, §6.10).
        first_record: u64,
    },
    /// PUT `/attrs`: replace the stream attributes (empty clears them).
    SetAttrs {
        key: String,
        stream_id: u64,
        attrs: Vec<u8>,
    },
    /// PUT with `Stream-Forked-From`: create a fork. Its inherited bytes
    /// `[retained, start)` were logged before it, as RELOCATE records of its
    /// incarnation, one per source append (so message boundaries follow:
    /// newlines on JSON streams, record ends otherwise); `data` (the
    /// sub-offset prefix then the initial body) starts at `start`.
    Fork {
        /// The fork's configuration; its `data` is its own, at `start`.
        new: NewStream,
        start: u64,
        origin: ForkOrigin,
        /// The source's retention point and the record ordinal there.
        retained: u64,
        first_record: u64,
        /// The source's snapshot at or before `start`, the fork's own from
        /// here (its blob was linked first): what covers `[0, retained)`
        /// (extensions §3.4). In the FORK record, so that a fork is never
        /// logged without it.
        snapshot: Option<Box<super::state::Snapshot>>,
    },
    /// DELETE of a stream that forks still read from: its URL answers 410
    /// until the last fork goes (PROTOCOL.md §4.2 soft delete).
    SoftDelete { key: String, stream_id: u64 },
    /// DELETE, or expiry reaped on access. Deletes only this incarnation.
    Delete { key: String, stream_id: u64 },
    /// A read of a `Stream-TTL` stream at `now_ms`, logged once per half
    /// window so that a restart knows the idle window's bounds (PROTOCOL.md
    /// §5.1 sliding TTL; `Stream::logged_access_ms`).
    Touch {
        key: String,
        stream_id: u64,
        now_ms: u64,
    },
}

impl Command {
    pub fn key(&self) -> &str {
        match self {
            Command::Create(NewStream { key, .. })
            | Command::Fork {
                new: NewStream { key, .. },
                ..
            }
            | Command::Append { key, .. }
            | Command::Close { key, .. }
            | Command::SetAttrs { key, .. }
            | Command::Snapshot { key, .. }
            | Command::Retain { key, .. }
            | Command::SoftDelete { key, .. }
            | Command::Delete { key, .. }
            | Command::Touch { key, .. } => key,
        }
    }
}

#[cfg(test)]
impl NewStream {
    /// `key` with nothing but a content type and initial data, as unit
    /// tests need one.
    pub fn plain(key: &str, content_type: &str, data: &[u8], now_ms: u64) -> NewStream {
        NewStream {
            key: key.into(),
            content_type: content_type.into(),
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            data: data.to_vec(),
            now_ms,
            attrs: Vec::new(),
        }
    }
}

#[cfg(test)]
impl Command {
    /// A create of [`NewStream::plain`].
    pub fn plain_create(key: &str, content_type: &str, data: &[u8], now_ms: u64) -> Command {
        Command::Create(NewStream::plain(key, content_type, data, now_ms))
    }
}
