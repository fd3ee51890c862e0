//! The IMAGE record of the log codec (`codec.rs` documents the encoding):
//! a stream's whole metadata, written when the cleaner copies a stream out
//! of a segment and when re-sharding moves it. Its last field, `recent`,
//! carries each producer's latest appends so that a retry answers its
//! original ranges (extensions §6.3) also after cleaning or re-sharding
//! dropped the APPEND records that had told them. After it comes the
//! stream's `logged_access_ms`, so its TTL window survives them too.

use super::{CodecError, Reader, StreamImage, Writer, kind};
use crate::stream::command::ProducerWrite;
use crate::stream::state::{RECENT_WRITES, RecentWrites, WriteRange};

/// `records_next` unknown (a range rebuilt before its index was).
const UNKNOWN: u64 = u64::MAX;

/// Encoded bytes of one write of a ring, and of a full ring.
const WRITE_BYTES: u64 = 8 + 8 + 8 + 4 + 8;
pub const MAX_RING_BYTES: u64 = 1 + RECENT_WRITES as u64 * WRITE_BYTES;

pub(super) fn encode(image: &StreamImage, w: &mut Writer<'_>) -> u8 {
    w.str(&image.key);
    w.u64(image.stream_id);
    w.str(&image.content_type);
    w.opt_u64(image.ttl_secs);
    w.opt_str(image.expires_at.as_deref());
    w.opt_u64(image.expires_at_ms);
    w.u64(image.created_at_ms);
    w.u64(image.last_write_ms);
    w.bool(image.closed);
    w.producer(image.closed_by.as_ref());
    w.opt_str(image.stream_seq.as_deref());
    let count = u32::try_from(image.producers.len()).expect("producer count fits u32");
    w.out.extend_from_slice(&count.to_le_bytes());
    for p in &image.producers {
        w.str(&p.id);
        w.u64(p.epoch);
        w.u64(p.seq);
    }
    w.u64(image.tail);
    w.bytes(&image.attrs);
    w.bool(image.snapshot.is_some());
    if let Some(snapshot) = &image.snapshot {
        w.snapshot(snapshot);
    }
    w.u64(image.retained);
    w.u64(image.first_record);
    w.bool(image.fork.is_some());
    if let Some(origin) = &image.fork {
        w.fork(origin);
    }
    w.bool(image.soft_deleted);
    encode_recent(&image.recent, w);
    w.u64(image.logged_access_ms);
    kind::IMAGE
}

/// `recent tail<list<ring>>`, one ring per producer in `producers` order;
/// ring: u8 count, then per write seq u64, start u64, end u64, records
/// u32, records_next u64 (`u64::MAX`: unknown).
fn encode_recent(recent: &[RecentWrites], w: &mut Writer<'_>) {
    let count = u32::try_from(recent.len()).expect("producer count fits u32");
    w.out.extend_from_slice(&count.to_le_bytes());
    for ring in recent {
        let writes: Vec<(u64, WriteRange)> = ring.writes().collect();
        w.u8(u8::try_from(writes.len()).expect("a ring holds few writes"));
        for (seq, range) in writes {
            w.u64(seq);
            w.u64(range.start);
            w.u64(range.end);
            w.out.extend_from_slice(&range.records.to_le_bytes());
            w.u64(range.records_next.unwrap_or(UNKNOWN));
        }
    }
}

pub(super) fn decode(r: &mut Reader<'_>) -> Result<StreamImage, CodecError> {
    Ok(StreamImage {
        key: r.string()?,
        stream_id: r.u64()?,
        content_type: r.string()?,
        ttl_secs: r.opt_u64()?,
        expires_at: r.opt_string()?,
        expires_at_ms: r.opt_u64()?,
        created_at_ms: r.u64()?,
        last_write_ms: r.u64()?,
        closed: r.bool()?,
        closed_by: r.producer()?,
        stream_seq: r.opt_string()?,
        producers: {
            let count = u32::from_le_bytes(r.array()?);
            let mut list = Vec::new();
            for _ in 0..count {
                let id = r.string()?;
                list.push(ProducerWrite {
                    id,
                    epoch: r.u64()?,
                    seq: r.u64()?,
                });
            }
            list
        },
        tail: r.u64()?,
        attrs: r.bytes()?.to_vec(),
        snapshot: match r.bool()? {
            true => Some(r.snapshot()?),
            false => None,
        },
        retained: r.u64()?,
        first_record: r.tail_u64()?,
        fork: match r.rest.is_empty() || !r.bool()? {
            true => None,
            false => Some(r.fork()?),
        },
        soft_deleted: !r.rest.is_empty() && r.bool()?,
        recent: Vec::new(),
        logged_access_ms: 0,
    })
    .and_then(|mut image| {
        if !r.rest.is_empty() {
            image.recent = decode_recent(r)?;
            // One ring per producer, or none (older images).
            if image.recent.len() != image.producers.len() {
                return Err(CodecError::BadRing);
            }
        }
        image.logged_access_ms = r.tail_u64()?;
        Ok(image)
    })
}

fn decode_recent(r: &mut Reader<'_>) -> Result<Vec<RecentWrites>, CodecError> {
    let count = u32::from_le_bytes(r.array()?);
    let mut recent = Vec::new();
    for _ in 0..count {
        let mut ring = RecentWrites::EMPTY;
        let mut last_slot = None;
        for _ in 0..r.u8()? {
            let seq = r.u64()?;
            // As `encode_recent` writes them: filled slots, in slot order.
            let slot = seq as usize % RECENT_WRITES;
            if seq == RecentWrites::NO_SEQ || last_slot.is_some_and(|last| slot <= last) {
                return Err(CodecError::BadRing);
            }
            last_slot = Some(slot);
            let range = WriteRange {
                start: r.u64()?,
                end: r.u64()?,
                records: u32::from_le_bytes(r.array()?),
                records_next: Some(r.u64()?).filter(|&next| next != UNKNOWN),
            };
            ring.record(seq, range);
        }
        recent.push(ring);
    }
    Ok(recent)
}
