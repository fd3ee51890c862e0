//! Payload encoding of the commands the segment log stores (issue 3, "segment
//! log"; DESIGN.md "Storage" and "Layers"). This file owns what one log record
//! carries, an [`Entry`], and its bytes; `log::format` frames and checksums
//! them without looking inside. Recovery decodes entries and replays them
//! through the same `Table::apply` as live commits.
//!
//! Encoding, version 1 (frozen: `tests/fixtures/log-v1/` must keep decoding):
//! integers little-endian; `u64` as 8 bytes; `str`/`bytes` as a u32 length then
//! the bytes (strings UTF-8); `opt<T>` as a u8 tag (0 none, 1 some, else bad)
//! then `T` if some; `bool` as a u8 (0 or 1, else bad). Fields in enum order,
//! nothing after the last field:
//!
//! ```text
//! kind              fields
//! 1 CREATE          key str, content_type str, ttl_secs opt<u64>,
//!                   expires_at opt<str>, expires_at_ms opt<u64>, closed bool,
//!                   data bytes, now_ms u64, attrs bytes
//! 2 APPEND          key str, stream_id u64, start u64, data bytes,
//!                   producer opt<producer>, stream_seq opt<str>, close bool,
//!                   now_ms u64
//! 3 CLOSE           key str, stream_id u64, producer opt<producer>, now_ms u64
//! 4 DELETE          key str, stream_id u64
//! 5 BUCKET_CREATE   bucket str, created_at_ms u64
//! 6 BUCKET_DELETE   bucket str
//! 7 RELOCATE        key str, stream_id u64, start u64, data bytes
//! 8 IMAGE           key str, stream_id u64, content_type str,
//!                   ttl_secs opt<u64>, expires_at opt<str>,
//!                   expires_at_ms opt<u64>, created_at_ms u64,
//!                   last_write_ms u64, closed bool, closed_by opt<producer>,
//!                   stream_seq opt<str>, producers list<producer>, tail u64,
//!                   attrs bytes
//! 9 ATTRS           key str, stream_id u64, attrs bytes
//! 10 SNAPSHOT       key str, stream_id u64, snapshot
//! 11 RETENTION      key str, stream_id u64, offset u64,
//!                   first_record tail<u64>
//! 12 FORK           the CREATE fields, then start u64, fork, retained u64,
//!                   first_record u64
//! 13 SOFT_DELETE    key str, stream_id u64
//! 14 TOUCH          key str, stream_id u64, now_ms u64
//!
//! fork              source str, source_id u64, offset u64, sub u64
//! snapshot          offset u64, content_type str, digest str, len u64
//!                   (IMAGE ends with opt<snapshot>, retained u64,
//!                   first_record tail<u64>, fork tail<opt<fork>>,
//!                   soft_deleted tail<bool>, recent tail<list<ring>>,
//!                   logged_access_ms tail<u64>: `codec_image.rs`)
//! tail<T>           an optional last field added after version 1 was
//!                   frozen: absent in older records (decoded as 0)
//!
//! producer          id str, epoch u64, seq u64
//! list<T>           u32 count, then the items
//! ```
//!
//! Every record of a stream names its incarnation (`stream_id`, derived from
//! key and creation time) and appends say where their data starts, so
//! recovery can place data and apply deletes correctly even after the
//! cleaner moved records: RELOCATE carries bytes copied out of a segment
//! being cleaned, IMAGE the stream's whole metadata at that point.
//!
//! An append's producer coordinates travel in the same record as the data they
//! guard, so data and dedup state commit atomically (PROTOCOL.md §5.2.1).
//! Decoding never panics and never allocates more than the payload's length:
//! every length is checked against the bytes that remain before copying.

use bytes::Bytes;

use crate::stream::command::{Command, ForkOrigin, NewStream, ProducerWrite};
use crate::stream::state::Snapshot;
use std::fmt;

/// What one log record carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Stream(Command),
    BucketCreate {
        bucket: String,
        created_at_ms: u64,
    },
    BucketDelete {
        bucket: String,
    },
    /// Stream bytes moved out of a segment being cleaned.
    Relocate {
        key: String,
        stream_id: u64,
        start: u64,
        data: Vec<u8>,
    },
    /// A stream's complete metadata, superseding its earlier records'.
    Image(Box<StreamImage>),
}

/// A stream's metadata as of one point of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamImage {
    pub key: String,
    pub stream_id: u64,
    pub content_type: String,
    pub ttl_secs: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<u64>,
    pub created_at_ms: u64,
    pub last_write_ms: u64,
    pub closed: bool,
    pub closed_by: Option<ProducerWrite>,
    pub stream_seq: Option<String>,
    pub producers: Vec<ProducerWrite>,
    pub tail: u64,
    /// Stream attributes (canonical JSON object, empty when none).
    pub attrs: Vec<u8>,
    pub snapshot: Option<Snapshot>,
    pub retained: u64,
    /// The record ordinal at `retained` (extensions §6.1 F).
    pub first_record: u64,
    pub fork: Option<ForkOrigin>,
    pub soft_deleted: bool,
    /// Each producer's latest appends, in `producers` order (empty in
    /// images written before they were added; `codec_image.rs`).
    pub recent: Vec<crate::stream::state::RecentWrites>,
    /// `Stream::logged_access_ms` (0 in images written before it was
    /// added: then the creation and the last write bound it).
    pub logged_access_ms: u64,
}

/// Record kinds (the log's opaque, non-zero `u8`).
pub mod kind {
    pub const CREATE: u8 = 1;
    pub const APPEND: u8 = 2;
    pub const CLOSE: u8 = 3;
    pub const DELETE: u8 = 4;
    pub const BUCKET_CREATE: u8 = 5;
    pub const BUCKET_DELETE: u8 = 6;
    pub const RELOCATE: u8 = 7;
    pub const IMAGE: u8 = 8;
    pub const ATTRS: u8 = 9;
    pub const SNAPSHOT: u8 = 10;
    pub const RETENTION: u8 = 11;
    pub const FORK: u8 = 12;
    pub const SOFT_DELETE: u8 = 13;
    pub const TOUCH: u8 = 14;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    UnknownKind(u8),
    Truncated,
    TrailingBytes,
    InvalidUtf8,
    BadTag,
    /// A producer's writes not in ring order (one encoding per ring).
    BadRing,
    /// Data placed past the end of the offset space (`start + len` > u64).
    BadRange,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::UnknownKind(kind) => write!(f, "unknown record kind {kind}"),
            CodecError::Truncated => f.write_str("payload ends inside a field"),
            CodecError::TrailingBytes => f.write_str("bytes after the last field"),
            CodecError::InvalidUtf8 => f.write_str("string is not UTF-8"),
            CodecError::BadRing => f.write_str("producer writes out of ring order"),
            CodecError::BadTag => f.write_str("option or bool tag is not 0 or 1"),
            CodecError::BadRange => f.write_str("data ends past the offset space"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Appends the payload of `entry` to `out` and returns its record kind.
pub fn encode(entry: &Entry, out: &mut Vec<u8>) -> u8 {
    encode_located(entry, out).0
}

/// Like `encode`, and also says where in the payload the stream data of a
/// create or append starts (the log locates stream bytes by it).
pub fn encode_located(entry: &Entry, out: &mut Vec<u8>) -> (u8, Option<usize>) {
    let base = out.len();
    let mut w = Writer {
        out,
        base,
        data_at: None,
    };
    let kind = encode_entry(entry, &mut w);
    (kind, w.data_at)
}

/// Payload offset of a create's or append's stream data, from the decoded
/// entry (recovery locates replayed data without re-encoding it).
pub fn data_offset(entry: &Entry) -> Option<usize> {
    let blob = |len: usize| 4 + len;
    let opt = |present: bool, len: usize| 1 + if present { len } else { 0 };
    match entry {
        Entry::Stream(Command::Append { key, .. }) | Entry::Relocate { key, .. } => {
            Some(blob(key.len()) + 16 + 4)
        }
        Entry::Stream(Command::Create(new) | Command::Fork { new, .. }) => Some(
            blob(new.key.len())
                + blob(new.content_type.len())
                + opt(new.ttl_secs.is_some(), 8)
                + opt(
                    new.expires_at.is_some(),
                    blob(new.expires_at.as_ref().map_or(0, String::len)),
                )
                + opt(new.expires_at_ms.is_some(), 8)
                + 1
                + 4,
        ),
        _ => None,
    }
}

/// The bit of a FORK's encoded sub-offset that says the fork's lifetime is
/// its own (`ForkOrigin::own_lifetime`).
const OWN_LIFETIME: u64 = 1 << 63;

fn encode_entry(entry: &Entry, w: &mut Writer<'_>) -> u8 {
    match entry {
        Entry::Stream(command) => encode_command(command, w),
        Entry::BucketCreate {
            bucket,
            created_at_ms,
        } => {
            w.str(bucket);
            w.u64(*created_at_ms);
            kind::BUCKET_CREATE
        }
        Entry::BucketDelete { bucket } => {
            w.str(bucket);
            kind::BUCKET_DELETE
        }
        Entry::Relocate {
            key,
            stream_id,
            start,
            data,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.u64(*start);
            w.data(data);
            kind::RELOCATE
        }
        Entry::Image(image) => image::encode(image, w),
    }
}

fn encode_command(command: &Command, w: &mut Writer<'_>) -> u8 {
    match command {
        Command::Create(new) => {
            encode_new_stream(new, w);
            kind::CREATE
        }
        Command::Append { .. } => encode_append(command, w),
        Command::Close {
            key,
            stream_id,
            producer,
            now_ms,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.producer(producer.as_ref());
            w.u64(*now_ms);
            kind::CLOSE
        }
        Command::Delete { key, stream_id } => {
            w.str(key);
            w.u64(*stream_id);
            kind::DELETE
        }
        Command::SoftDelete { key, stream_id } => {
            w.str(key);
            w.u64(*stream_id);
            kind::SOFT_DELETE
        }
        Command::Touch {
            key,
            stream_id,
            now_ms,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.u64(*now_ms);
            kind::TOUCH
        }
        Command::Fork { .. } => encode_fork(command, w),
        Command::Retain {
            key,
            stream_id,
            offset,
            first_record,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.u64(*offset);
            w.u64(*first_record);
            kind::RETENTION
        }
        Command::Snapshot {
            key,
            stream_id,
            snapshot,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.snapshot(snapshot);
            kind::SNAPSHOT
        }
        Command::SetAttrs {
            key,
            stream_id,
            attrs,
        } => {
            w.str(key);
            w.u64(*stream_id);
            w.bytes(attrs);
            kind::ATTRS
        }
    }
}

/// The fields CREATE carries, which FORK starts with too.
fn encode_new_stream(new: &NewStream, w: &mut Writer<'_>) {
    let NewStream {
        key,
        content_type,
        ttl_secs,
        expires_at,
        expires_at_ms,
        closed,
        data,
        now_ms,
        attrs,
    } = new;
    w.str(key);
    w.str(content_type);
    w.opt_u64(*ttl_secs);
    w.opt_str(expires_at.as_deref());
    w.opt_u64(*expires_at_ms);
    w.bool(*closed);
    w.data(data);
    w.u64(*now_ms);
    w.bytes(attrs);
}

fn encode_fork(command: &Command, w: &mut Writer<'_>) -> u8 {
    let Command::Fork {
        new,
        start,
        origin,
        retained,
        first_record,
        snapshot,
    } = command
    else {
        unreachable!("encode_fork of a non-fork");
    };
    encode_new_stream(new, w);
    w.u64(*start);
    w.fork(origin);
    w.u64(*retained);
    w.u64(*first_record);
    // An optional tail field (session 6): FORK records without it decode.
    if let Some(snapshot) = snapshot {
        w.snapshot(snapshot);
    }
    kind::FORK
}

/// A FORK record: the CREATE fields, then the fork's own.
fn decode_fork(r: &mut Reader<'_>) -> Result<Command, CodecError> {
    Ok(Command::Fork {
        new: decode_new_stream(r)?,
        start: r.u64()?,
        origin: r.fork()?,
        retained: r.u64()?,
        first_record: r.u64()?,
        snapshot: match r.rest.is_empty() {
            true => None,
            false => Some(Box::new(r.snapshot()?)),
        },
    })
}

fn encode_append(command: &Command, w: &mut Writer<'_>) -> u8 {
    let Command::Append {
        key,
        stream_id,
        start,
        data,
        producer,
        stream_seq,
        close,
        now_ms,
    } = command
    else {
        unreachable!("encode_append of a non-append");
    };
    w.str(key);
    w.u64(*stream_id);
    w.u64(*start);
    w.data(data);
    w.producer(producer.as_ref());
    w.opt_str(stream_seq.as_deref());
    w.bool(*close);
    w.u64(*now_ms);
    kind::APPEND
}

/// Appends fields to a payload.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    /// Where this payload starts in `out`.
    base: usize,
    /// Payload offset of the stream data bytes, once written.
    data_at: Option<usize>,
}

impl Writer<'_> {
    /// The stream data field: a blob whose position is remembered.
    fn data(&mut self, value: &[u8]) {
        self.data_at = Some(self.out.len() - self.base + 4);
        self.bytes(value);
    }

    fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    fn u64(&mut self, value: u64) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    fn bytes(&mut self, value: &[u8]) {
        let len = u32::try_from(value.len()).expect("field longer than u32::MAX bytes");
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(value);
    }

    fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }

    fn bool(&mut self, value: bool) {
        self.u8(u8::from(value));
    }

    fn opt_u64(&mut self, value: Option<u64>) {
        self.bool(value.is_some());
        if let Some(value) = value {
            self.u64(value);
        }
    }

    fn opt_str(&mut self, value: Option<&str>) {
        self.bool(value.is_some());
        if let Some(value) = value {
            self.str(value);
        }
    }

    fn snapshot(&mut self, value: &Snapshot) {
        self.u64(value.offset);
        self.str(&value.content_type);
        self.str(&value.digest);
        self.u64(value.len);
    }

    fn fork(&mut self, origin: &ForkOrigin) {
        self.str(&origin.source);
        self.u64(origin.source_id);
        self.u64(origin.offset);
        // `own_lifetime` rides in the sub-offset's top bit, which a sub-offset
        // inside a message never has: records from before it (session 9)
        // decode as inheriting.
        assert_eq!(
            origin.sub & OWN_LIFETIME,
            0,
            "a sub-offset within a message"
        );
        let own = if origin.own_lifetime { OWN_LIFETIME } else { 0 };
        self.u64(origin.sub | own);
    }

    fn producer(&mut self, value: Option<&ProducerWrite>) {
        self.bool(value.is_some());
        if let Some(p) = value {
            self.str(&p.id);
            self.u64(p.epoch);
            self.u64(p.seq);
        }
    }
}

/// Decodes the payload of a record of `kind`.
pub fn decode(kind: u8, payload: &[u8]) -> Result<Entry, CodecError> {
    let mut r = Reader { rest: payload };
    let entry = match kind {
        kind::CREATE => Entry::Stream(Command::Create(decode_new_stream(&mut r)?)),
        kind::APPEND => Entry::Stream(decode_append(&mut r)?),
        kind::CLOSE => Entry::Stream(Command::Close {
            key: r.string()?,
            stream_id: r.u64()?,
            producer: r.producer()?,
            now_ms: r.u64()?,
        }),
        kind::DELETE => Entry::Stream(Command::Delete {
            key: r.string()?,
            stream_id: r.u64()?,
        }),
        kind::SOFT_DELETE => Entry::Stream(Command::SoftDelete {
            key: r.string()?,
            stream_id: r.u64()?,
        }),
        kind::TOUCH => Entry::Stream(Command::Touch {
            key: r.string()?,
            stream_id: r.u64()?,
            now_ms: r.u64()?,
        }),
        kind::FORK => Entry::Stream(decode_fork(&mut r)?),
        kind::RELOCATE => Entry::Relocate {
            key: r.string()?,
            stream_id: r.u64()?,
            start: r.u64()?,
            data: r.bytes()?.to_vec(),
        },
        kind::IMAGE => Entry::Image(Box::new(image::decode(&mut r)?)),
        kind::RETENTION => Entry::Stream(Command::Retain {
            key: r.string()?,
            stream_id: r.u64()?,
            offset: r.u64()?,
            first_record: r.tail_u64()?,
        }),
        kind::SNAPSHOT => Entry::Stream(Command::Snapshot {
            key: r.string()?,
            stream_id: r.u64()?,
            snapshot: r.snapshot()?,
        }),
        kind::ATTRS => Entry::Stream(Command::SetAttrs {
            key: r.string()?,
            stream_id: r.u64()?,
            attrs: r.bytes()?.to_vec(),
        }),
        kind::BUCKET_CREATE => Entry::BucketCreate {
            bucket: r.string()?,
            created_at_ms: r.u64()?,
        },
        kind::BUCKET_DELETE => Entry::BucketDelete {
            bucket: r.string()?,
        },
        other => return Err(CodecError::UnknownKind(other)),
    };
    r.finish()?;
    Ok(entry)
}

fn decode_new_stream(r: &mut Reader<'_>) -> Result<NewStream, CodecError> {
    Ok(NewStream {
        key: r.string()?,
        content_type: r.string()?,
        ttl_secs: r.opt_u64()?,
        expires_at: r.opt_string()?,
        expires_at_ms: r.opt_u64()?,
        closed: r.bool()?,
        data: r.bytes()?.to_vec(),
        now_ms: r.u64()?,
        attrs: r.bytes()?.to_vec(),
    })
}

fn decode_append(r: &mut Reader<'_>) -> Result<Command, CodecError> {
    let (key, stream_id, start, data) = (r.string()?, r.u64()?, r.u64()?, r.bytes()?);
    // Recovery places the data at `start..start + len`: a record no writer
    // could have made must not overflow it (a damaged log with a valid
    // checksum is refused like any other damage).
    if start.checked_add(data.len() as u64).is_none() {
        return Err(CodecError::BadRange);
    }
    Ok(Command::Append {
        key,
        stream_id,
        start,
        data: Bytes::copy_from_slice(data),
        producer: r.producer()?,
        stream_seq: r.opt_string()?,
        close: r.bool()?,
        now_ms: r.u64()?,
    })
}

/// Reads fields from a payload; every read checks the bytes that remain.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], CodecError> {
        if len > self.rest.len() {
            return Err(CodecError::Truncated);
        }
        let (head, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A u32 length then that many bytes, borrowed: nothing is allocated
    /// before the length is known to fit in the payload.
    fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = u32::from_le_bytes(self.array()?);
        let len = usize::try_from(len).map_err(|_| CodecError::Truncated)?;
        self.take(len)
    }

    fn string(&mut self) -> Result<String, CodecError> {
        let bytes = self.bytes()?;
        let text = std::str::from_utf8(bytes).map_err(|_| CodecError::InvalidUtf8)?;
        Ok(text.to_owned())
    }

    fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CodecError::BadTag),
        }
    }

    fn opt_u64(&mut self) -> Result<Option<u64>, CodecError> {
        if !self.bool()? {
            return Ok(None);
        }
        self.u64().map(Some)
    }

    fn opt_string(&mut self) -> Result<Option<String>, CodecError> {
        if !self.bool()? {
            return Ok(None);
        }
        self.string().map(Some)
    }

    fn producer(&mut self) -> Result<Option<ProducerWrite>, CodecError> {
        if !self.bool()? {
            return Ok(None);
        }
        Ok(Some(ProducerWrite {
            id: self.string()?,
            epoch: self.u64()?,
            seq: self.u64()?,
        }))
    }

    fn fork(&mut self) -> Result<ForkOrigin, CodecError> {
        let (source, source_id, offset) = (self.string()?, self.u64()?, self.u64()?);
        let sub = self.u64()?;
        Ok(ForkOrigin {
            source,
            source_id,
            offset,
            sub: sub & !OWN_LIFETIME,
            own_lifetime: sub & OWN_LIFETIME != 0,
        })
    }

    fn snapshot(&mut self) -> Result<Snapshot, CodecError> {
        Ok(Snapshot {
            offset: self.u64()?,
            content_type: self.string()?,
            digest: self.string()?,
            len: self.u64()?,
        })
    }

    /// A last field that records written before it existed lack.
    fn tail_u64(&mut self) -> Result<u64, CodecError> {
        match self.rest.is_empty() {
            true => Ok(0),
            false => self.u64(),
        }
    }

    fn finish(&self) -> Result<(), CodecError> {
        if !self.rest.is_empty() {
            return Err(CodecError::TrailingBytes);
        }
        Ok(())
    }
}

#[path = "codec_image.rs"]
mod image;
pub use image::MAX_RING_BYTES;

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
