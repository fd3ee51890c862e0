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
//!                   data bytes, now_ms u64
//! 2 APPEND          key str, data bytes, producer opt<producer>,
//!                   stream_seq opt<str>, close bool, now_ms u64
//! 3 CLOSE           key str, producer opt<producer>, now_ms u64
//! 4 DELETE          key str
//! 5 BUCKET_CREATE   bucket str, created_at_ms u64
//! 6 BUCKET_DELETE   bucket str
//!
//! producer          id str, epoch u64, seq u64
//! ```
//!
//! An append's producer coordinates travel in the same record as the data they
//! guard, so data and dedup state commit atomically (PROTOCOL.md §5.2.1).
//! Decoding never panics and never allocates more than the payload's length:
//! every length is checked against the bytes that remain before copying.

use crate::stream::command::{Command, ProducerWrite};
use std::fmt;

/// What one log record carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Stream(Command),
    BucketCreate { bucket: String, created_at_ms: u64 },
    BucketDelete { bucket: String },
}

/// Record kinds (the log's opaque, non-zero `u8`).
pub mod kind {
    pub const CREATE: u8 = 1;
    pub const APPEND: u8 = 2;
    pub const CLOSE: u8 = 3;
    pub const DELETE: u8 = 4;
    pub const BUCKET_CREATE: u8 = 5;
    pub const BUCKET_DELETE: u8 = 6;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    UnknownKind(u8),
    Truncated,
    TrailingBytes,
    InvalidUtf8,
    BadTag,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::UnknownKind(kind) => write!(f, "unknown record kind {kind}"),
            CodecError::Truncated => f.write_str("payload ends inside a field"),
            CodecError::TrailingBytes => f.write_str("bytes after the last field"),
            CodecError::InvalidUtf8 => f.write_str("string is not UTF-8"),
            CodecError::BadTag => f.write_str("option or bool tag is not 0 or 1"),
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
        Entry::Stream(Command::Append { key, .. }) => Some(blob(key.len()) + 4),
        Entry::Stream(Command::Create {
            key,
            content_type,
            ttl_secs,
            expires_at,
            expires_at_ms,
            ..
        }) => Some(
            blob(key.len())
                + blob(content_type.len())
                + opt(ttl_secs.is_some(), 8)
                + opt(
                    expires_at.is_some(),
                    blob(expires_at.as_ref().map_or(0, String::len)),
                )
                + opt(expires_at_ms.is_some(), 8)
                + 1
                + 4,
        ),
        _ => None,
    }
}

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
    }
}

fn encode_command(command: &Command, w: &mut Writer<'_>) -> u8 {
    match command {
        Command::Create { .. } => encode_create(command, w),
        Command::Append { .. } => encode_append(command, w),
        Command::Close {
            key,
            producer,
            now_ms,
        } => {
            w.str(key);
            w.producer(producer.as_ref());
            w.u64(*now_ms);
            kind::CLOSE
        }
        Command::Delete { key } => {
            w.str(key);
            kind::DELETE
        }
    }
}

fn encode_create(command: &Command, w: &mut Writer<'_>) -> u8 {
    let Command::Create {
        key,
        content_type,
        ttl_secs,
        expires_at,
        expires_at_ms,
        closed,
        data,
        now_ms,
    } = command
    else {
        unreachable!("encode_create of a non-create");
    };
    w.str(key);
    w.str(content_type);
    w.opt_u64(*ttl_secs);
    w.opt_str(expires_at.as_deref());
    w.opt_u64(*expires_at_ms);
    w.bool(*closed);
    w.data(data);
    w.u64(*now_ms);
    kind::CREATE
}

fn encode_append(command: &Command, w: &mut Writer<'_>) -> u8 {
    let Command::Append {
        key,
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
        kind::CREATE => Entry::Stream(decode_create(&mut r)?),
        kind::APPEND => Entry::Stream(decode_append(&mut r)?),
        kind::CLOSE => Entry::Stream(Command::Close {
            key: r.string()?,
            producer: r.producer()?,
            now_ms: r.u64()?,
        }),
        kind::DELETE => Entry::Stream(Command::Delete { key: r.string()? }),
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

fn decode_create(r: &mut Reader<'_>) -> Result<Command, CodecError> {
    Ok(Command::Create {
        key: r.string()?,
        content_type: r.string()?,
        ttl_secs: r.opt_u64()?,
        expires_at: r.opt_string()?,
        expires_at_ms: r.opt_u64()?,
        closed: r.bool()?,
        data: r.bytes()?.to_vec(),
        now_ms: r.u64()?,
    })
}

fn decode_append(r: &mut Reader<'_>) -> Result<Command, CodecError> {
    Ok(Command::Append {
        key: r.string()?,
        data: r.bytes()?.to_vec(),
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

    fn finish(&self) -> Result<(), CodecError> {
        if !self.rest.is_empty() {
            return Err(CodecError::TrailingBytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer() -> Option<ProducerWrite> {
        Some(ProducerWrite {
            id: "writer-1".into(),
            epoch: 3,
            seq: u64::MAX,
        })
    }

    fn create(full: bool) -> Entry {
        Entry::Stream(Command::Create {
            key: "/v1/stream/a/b".into(),
            content_type: "application/json".into(),
            ttl_secs: full.then_some(60),
            expires_at: full.then(|| "2030-01-01T00:00:00Z".into()),
            expires_at_ms: full.then_some(1_893_456_000_000),
            closed: full,
            data: if full {
                b"{\"a\":1}\n".to_vec()
            } else {
                vec![]
            },
            now_ms: 1_700_000_000_000,
        })
    }

    fn append(full: bool) -> Entry {
        Entry::Stream(Command::Append {
            key: "bkt1/s".into(),
            data: vec![0, 1, 2, 0xff],
            producer: if full { producer() } else { None },
            stream_seq: full.then(|| "0007".into()),
            close: full,
            now_ms: 5,
        })
    }

    fn close(full: bool) -> Entry {
        Entry::Stream(Command::Close {
            key: "bkt1/s".into(),
            producer: if full { producer() } else { None },
            now_ms: 0,
        })
    }

    /// Every variant, with and without its optional fields.
    fn entries() -> Vec<Entry> {
        let mut all = Vec::new();
        for full in [false, true] {
            all.extend([create(full), append(full), close(full)]);
        }
        all.extend([
            Entry::Stream(Command::Delete {
                key: "/v1/stream/ünïcode".into(),
            }),
            Entry::BucketCreate {
                bucket: "bkt1".into(),
                created_at_ms: 42,
            },
            Entry::BucketDelete {
                bucket: String::new(),
            },
        ]);
        all
    }

    #[test]
    fn data_offset_points_at_the_data() {
        for entry in entries() {
            let mut out = vec![7, 7];
            let (_, at) = encode_located(&entry, &mut out);
            assert_eq!(at, data_offset(&entry));
            let payload = &out[2..];
            if let Entry::Stream(Command::Create { data, .. } | Command::Append { data, .. }) =
                &entry
            {
                let at = at.expect("creates and appends carry data");
                assert_eq!(&payload[at..at + data.len()], data.as_slice());
            } else {
                assert_eq!(at, None);
            }
        }
    }

    fn encoded(entry: &Entry) -> (u8, Vec<u8>) {
        let mut out = Vec::new();
        let kind = encode(entry, &mut out);
        (kind, out)
    }

    #[test]
    fn round_trip() {
        for entry in entries() {
            let (kind, payload) = encoded(&entry);
            assert_eq!(decode(kind, &payload), Ok(entry));
        }
    }

    #[test]
    fn kinds() {
        let kinds: Vec<u8> = entries().iter().map(|e| encoded(e).0).collect();
        assert_eq!(kinds, [1, 2, 3, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn encode_appends() {
        let mut out = vec![9];
        encode(
            &Entry::BucketDelete {
                bucket: "ab".into(),
            },
            &mut out,
        );
        assert_eq!(out, [9, 2, 0, 0, 0, b'a', b'b']);
    }

    #[test]
    fn layout_of_an_append() {
        let (_, payload) = encoded(&append(true));
        let mut want = vec![6, 0, 0, 0];
        want.extend_from_slice(b"bkt1/s");
        want.extend_from_slice(&[4, 0, 0, 0, 0, 1, 2, 0xff]);
        want.extend_from_slice(&[1, 8, 0, 0, 0]);
        want.extend_from_slice(b"writer-1");
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(&u64::MAX.to_le_bytes());
        want.extend_from_slice(&[1, 4, 0, 0, 0]);
        want.extend_from_slice(b"0007");
        want.push(1);
        want.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(payload, want);
    }

    #[test]
    fn every_truncation_errors() {
        for entry in entries() {
            let (kind, payload) = encoded(&entry);
            for len in 0..payload.len() {
                let got = decode(kind, &payload[..len]);
                assert_eq!(got, Err(CodecError::Truncated), "{entry:?} at {len}");
            }
        }
    }

    #[test]
    fn trailing_bytes_error() {
        for entry in entries() {
            let (kind, mut payload) = encoded(&entry);
            payload.push(0);
            assert_eq!(decode(kind, &payload), Err(CodecError::TrailingBytes));
        }
    }

    #[test]
    fn unknown_kinds_error() {
        for kind in [0, 7, 0xff] {
            assert_eq!(decode(kind, &[]), Err(CodecError::UnknownKind(kind)));
        }
    }

    /// Offset of the `ttl_secs` tag in `create(_)`'s payload.
    const CREATE_TTL_TAG: usize = 4 + 14 + 4 + 16;

    #[test]
    fn bad_tags_error() {
        let (kind, payload) = encoded(&create(false));
        for tag in [2, 0x80, 0xff] {
            let mut bad = payload.clone();
            bad[CREATE_TTL_TAG] = tag;
            assert_eq!(decode(kind, &bad), Err(CodecError::BadTag));
        }
        let (kind, mut payload) = encoded(&close(false));
        let producer_tag = payload.len() - 9;
        payload[producer_tag] = 2;
        assert_eq!(decode(kind, &payload), Err(CodecError::BadTag));
    }

    #[test]
    fn bad_bools_error() {
        let (kind, mut payload) = encoded(&append(false));
        let close_flag = payload.len() - 9;
        assert_eq!(payload[close_flag], 0);
        payload[close_flag] = 2;
        assert_eq!(decode(kind, &payload), Err(CodecError::BadTag));
    }

    #[test]
    fn invalid_utf8_errors() {
        let (kind, mut payload) = encoded(&Entry::BucketCreate {
            bucket: "ab".into(),
            created_at_ms: 1,
        });
        payload[4] = 0xff;
        assert_eq!(decode(kind, &payload), Err(CodecError::InvalidUtf8));
    }

    #[test]
    fn huge_lengths_do_not_allocate() {
        let payload = [0xff, 0xff, 0xff, 0xff, b'a'];
        assert_eq!(decode(kind::DELETE, &payload), Err(CodecError::Truncated));
        assert_eq!(decode(kind::APPEND, &payload), Err(CodecError::Truncated));
    }

    /// Whatever decodes is canonical: it encodes back to the same bytes.
    fn assert_canonical(kind: u8, payload: &[u8]) {
        if let Ok(entry) = decode(kind, payload) {
            assert_eq!(encoded(&entry), (kind, payload.to_vec()), "{entry:?}");
        }
    }

    #[test]
    fn changed_bytes_never_panic_and_stay_canonical() {
        for entry in entries() {
            let (kind, payload) = encoded(&entry);
            for at in 0..payload.len() {
                for value in [0, 1, 2, 0x7f, 0x80, 0xff] {
                    let mut changed = payload.clone();
                    changed[at] = value;
                    assert_canonical(kind, &changed);
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_canonical() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20_000u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 24) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (state >> (i % 8 * 8)) as u8 % 4).collect();
            assert_canonical((round % 8) as u8, &bytes);
        }
    }
}
