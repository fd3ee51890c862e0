//! Record framing of the per-shard write-ahead segment log, on-disk format
//! version 1 (issue 3, "segment log"; DESIGN.md "Storage"). This file owns the
//! bytes of one record: its header, checksum and padding. It knows nothing of
//! streams: the kind is an opaque non-zero `u8` and the payload opaque bytes
//! (`stream::codec` gives them meaning).
//!
//! A record, all integers little-endian:
//!
//! ```text
//! offset size field
//! 0      4    magic  b"RLG1"
//! 4      2    format version, u16 LE (1)
//! 6      1    kind (opaque to the log, never 0)
//! 7      1    flags: bit 0 FLAG_BATCH_END (last record of a group-commit
//!             batch); other bits 0 (reserved)
//! 8      8    seq, u64 LE: per-shard record sequence number, strictly increasing
//!             across the log (lets recovery recognize records copied twice by
//!             the cleaner)
//! 16     4    payload length, u32 LE (<= MAX_PAYLOAD_BYTES)
//! 20     4    reserved (0)
//! 24     8    checksum, u64 LE: xxh3_64 over bytes 0..24 followed by the payload
//! 32     n    payload
//! 32+n   p    zero padding to the next multiple of 8 (RECORD_ALIGN)
//! ```
//!
//! `encode` writes flags 0; the appender marks the last record of each batch
//! with `set_flags(.., FLAG_BATCH_END)` before writing it, so recovery can tell
//! a batch written whole from a torn one.
//!
//! Records follow each other without gaps, each starting at a multiple of
//! `RECORD_ALIGN`. A position whose first 8 bytes are all zero is zero-filled
//! space: the end of a segment's data (segments are preallocated with zeros;
//! a record never starts with zeros because of its magic).
//!
//! The decoder reads any bytes without panicking. It reports a record, the end
//! of the data, a buffer too short to tell, or corruption. The padding is not
//! covered by the checksum but must be zero, so that every flipped bit of a
//! framed record is detected. Version 1 is frozen: the fixture under
//! `tests/fixtures/log-v1/` must keep decoding.

use xxhash_rust::xxh3::Xxh3;

pub const MAGIC: [u8; 4] = *b"RLG1";
pub const VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 32;
pub const RECORD_ALIGN: usize = 8;
pub const MAX_PAYLOAD_BYTES: usize = 1 << 30;
/// Flag of the last record of a group-commit batch.
pub const FLAG_BATCH_END: u8 = 1 << 0;
/// Every flag this version knows; any other bit is corruption.
const FLAGS_KNOWN: u8 = FLAG_BATCH_END;

/// Bytes of the header covered by the checksum (everything before it).
const CHECKED_HEADER_BYTES: usize = 24;
/// Bytes that tell a record (magic) from zero-filled space.
const PROBE_BYTES: usize = 8;

/// Bytes a record with this payload occupies, header and padding included.
/// Panics if `payload_len > MAX_PAYLOAD_BYTES`.
pub fn framed_len(payload_len: usize) -> usize {
    assert!(payload_len <= MAX_PAYLOAD_BYTES, "payload over the max");
    (HEADER_BYTES + payload_len).next_multiple_of(RECORD_ALIGN)
}

/// Appends one framed record to `out`; returns the framed length. Asserts
/// kind != 0 and payload <= MAX.
pub fn encode(kind: u8, seq: u64, payload: &[u8], out: &mut Vec<u8>) -> usize {
    encode_with(seq, out, |out| {
        out.extend_from_slice(payload);
        (kind, ())
    })
    .0
}

/// `encode` of the payload `write` appends to `out` (returning the record's
/// kind), written in place behind the header rather than built apart and
/// copied; returns the framed length and what `write` returned besides.
pub fn encode_with<T>(
    seq: u64,
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> (u8, T),
) -> (usize, T) {
    let most = framed_len(MAX_PAYLOAD_BYTES);
    encode_within(seq, most, out, write).expect("payload over the max")
}

/// `encode_with` of a record that must frame to at most `most` bytes (and
/// hold at most `MAX_PAYLOAD_BYTES`): a larger one is taken back out of
/// `out` and `Err` gives its framed length.
pub fn encode_within<T>(
    seq: u64,
    most: usize,
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> (u8, T),
) -> Result<(usize, T), usize> {
    let start = out.len();
    out.resize(start + HEADER_BYTES, 0);
    let (kind, returned) = write(out);
    assert_ne!(kind, 0, "record kind 0 is reserved for zero-filled space");
    let payload_len = out.len() - start - HEADER_BYTES;
    // `framed_len` without its assert: a payload past the max is an `Err`.
    let framed = (HEADER_BYTES + payload_len).next_multiple_of(RECORD_ALIGN);
    if payload_len > MAX_PAYLOAD_BYTES || framed > most {
        out.truncate(start);
        return Err(framed);
    }
    let header = checked_header(kind, seq, payload_len);
    let sum = checksum(&header, &out[start + HEADER_BYTES..]);
    out[start..start + CHECKED_HEADER_BYTES].copy_from_slice(&header);
    out[start + CHECKED_HEADER_BYTES..start + HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
    out.resize(start + framed, 0);
    debug_assert!(matches!(
        decode(&out[start..]),
        Decoded::Record { record, framed_len }
            if record.kind == kind && record.seq == seq && framed_len == framed
    ));
    Ok((framed, returned))
}

/// Sets the flags of the encoded record at the start of `frame` (which holds
/// the whole record) and updates its checksum.
pub fn set_flags(frame: &mut [u8], flags: u8) {
    assert_eq!(flags & !FLAGS_KNOWN, 0, "unknown flags {flags:#x}");
    // The frame's structure, not its checksum: that would hash the payload
    // a third time (encode, here, and the new sum below) on every batch.
    let header = frame.get(..HEADER_BYTES).expect("a whole record header");
    let payload_len = check_probe(&header[..PROBE_BYTES])
        .and_then(|()| check_header(header))
        .expect("set_flags on a record header");
    let framed_len = framed_len(payload_len);
    assert!(frame.len() >= framed_len, "set_flags on a partial record");
    debug_assert!(matches!(decode(frame), Decoded::Record { .. }));
    frame[7] = flags;
    let payload_end = HEADER_BYTES + payload_len;
    let sum = checksum(
        &frame[..CHECKED_HEADER_BYTES],
        &frame[HEADER_BYTES..payload_end],
    );
    frame[24..32].copy_from_slice(&sum.to_le_bytes());
    debug_assert!(matches!(
        decode(frame),
        Decoded::Record { record, framed_len: n } if record.flags == flags && n == framed_len
    ));
}

/// The payload length field of a header.
fn payload_len(header: &[u8]) -> usize {
    let len = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
    usize::try_from(len).unwrap_or(usize::MAX)
}

/// The first 24 header bytes: everything but the checksum.
fn checked_header(kind: u8, seq: u64, payload_len: usize) -> [u8; CHECKED_HEADER_BYTES] {
    let len = u32::try_from(payload_len).expect("payload length fits u32");
    let mut header = [0u8; CHECKED_HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&VERSION.to_le_bytes());
    header[6] = kind;
    header[8..16].copy_from_slice(&seq.to_le_bytes());
    header[16..20].copy_from_slice(&len.to_le_bytes());
    header
}

/// xxh3_64 of `header ++ payload`.
fn checksum(header: &[u8], payload: &[u8]) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(header);
    hasher.update(payload);
    hasher.digest()
}

#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub kind: u8,
    pub flags: u8,
    pub seq: u64,
    pub payload: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    Record {
        record: Record<'a>,
        framed_len: usize,
    },
    /// The next 8 bytes are zero: no more records at this position.
    End,
    /// `buf` ends before the record does (or before 8 bytes).
    Incomplete,
    /// Not a valid record: bad magic, unknown version, kind 0, nonzero
    /// flags or reserved, length over the max, or checksum mismatch.
    Corrupt(&'static str),
}

/// Decodes the record starting at buf[0].
pub fn decode(buf: &[u8]) -> Decoded<'_> {
    let Some(probe) = buf.get(..PROBE_BYTES) else {
        return Decoded::Incomplete;
    };
    if probe.iter().all(|&b| b == 0) {
        return Decoded::End;
    }
    if let Err(why) = check_probe(probe) {
        return Decoded::Corrupt(why);
    }
    let Some(header) = buf.get(..HEADER_BYTES) else {
        return Decoded::Incomplete;
    };
    let payload_len = match check_header(header) {
        Ok(len) => len,
        Err(why) => return Decoded::Corrupt(why),
    };
    let framed = framed_len(payload_len);
    let Some(frame) = buf.get(..framed) else {
        return Decoded::Incomplete;
    };
    match check_frame(frame, payload_len) {
        Ok(record) => Decoded::Record {
            record,
            framed_len: framed,
        },
        Err(why) => Decoded::Corrupt(why),
    }
}

/// Whether `buf` holds enough bytes for [`decode`] to decide: anything
/// but `Incomplete`. Checks the header only (no checksum), so a reader can
/// ask before it decodes.
pub fn decidable(buf: &[u8]) -> bool {
    let Some(probe) = buf.get(..PROBE_BYTES) else {
        return false;
    };
    if probe.iter().all(|&b| b == 0) || check_probe(probe).is_err() {
        return true;
    }
    let Some(header) = buf.get(..HEADER_BYTES) else {
        return false;
    };
    check_header(header).map_or(true, |len| buf.len() >= framed_len(len))
}

/// Checks magic, version, kind and flags (the first 8 bytes).
fn check_probe(probe: &[u8]) -> Result<(), &'static str> {
    if probe[0..4] != MAGIC {
        return Err("bad magic");
    }
    if u16::from_le_bytes([probe[4], probe[5]]) != VERSION {
        return Err("unknown format version");
    }
    if probe[6] == 0 {
        return Err("record kind 0");
    }
    if probe[7] & !FLAGS_KNOWN != 0 {
        return Err("unknown flags");
    }
    Ok(())
}

/// Checks the length and reserved fields; returns the payload length.
fn check_header(header: &[u8]) -> Result<usize, &'static str> {
    if header[20..24] != [0; 4] {
        return Err("nonzero reserved field");
    }
    let len = payload_len(header);
    if len > MAX_PAYLOAD_BYTES {
        return Err("payload length over the max");
    }
    Ok(len)
}

/// Checks padding and checksum of a whole frame whose header is valid.
fn check_frame(frame: &[u8], payload_len: usize) -> Result<Record<'_>, &'static str> {
    let (header, rest) = frame.split_at(HEADER_BYTES);
    let (payload, padding) = rest.split_at(payload_len);
    if padding.iter().any(|&b| b != 0) {
        return Err("nonzero padding");
    }
    let stored = u64::from_le_bytes(header[24..32].try_into().expect("8 bytes"));
    if checksum(&header[..CHECKED_HEADER_BYTES], payload) != stored {
        return Err("checksum mismatch");
    }
    let seq = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    Ok(Record {
        kind: header[6],
        flags: header[7],
        seq,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    fn framed(kind: u8, seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let n = encode(kind, seq, payload, &mut out);
        assert_eq!(n, out.len());
        out
    }

    /// Payloads of sizes 0..=17 and a few larger ones.
    fn payloads() -> Vec<Vec<u8>> {
        let sizes = (0..=17).chain([63, 64, 65, 1000]);
        sizes
            .map(|n| (0..n).map(|i| (i * 7 + 1) as u8).collect())
            .collect()
    }

    #[test]
    fn round_trip() {
        for (i, payload) in payloads().iter().enumerate() {
            for kind in [1u8, 2, 6, 0x7f, 0xff] {
                let seq = (i as u64) << 40 | kind as u64;
                let buf = framed(kind, seq, payload);
                let want = Decoded::Record {
                    record: Record {
                        kind,
                        flags: 0,
                        seq,
                        payload,
                    },
                    framed_len: buf.len(),
                };
                assert_eq!(decode(&buf), want);
            }
        }
    }

    #[test]
    fn a_record_past_the_bound_is_taken_back() {
        let mut out = b"queued".to_vec();
        let write = |payload: &'static [u8]| {
            move |out: &mut Vec<u8>| {
                out.extend_from_slice(payload);
                (4, ())
            }
        };
        // 32 header bytes and 9 of payload frame to 48.
        let refused = encode_within(1, 40, &mut out, write(b"123456789"));
        assert_eq!(refused, Err(48));
        assert_eq!(out, b"queued");
        let (len, ()) = encode_within(1, 48, &mut out, write(b"123456789")).unwrap();
        assert_eq!(len, 48);
        assert_eq!(&out[6..], framed(4, 1, b"123456789"));
    }

    #[test]
    fn layout_matches_the_byte_table() {
        let buf = framed(3, 0x0102_0304_0506_0708, b"hello");
        assert_eq!(&buf[0..4], b"RLG1");
        assert_eq!(&buf[4..6], &[1, 0]);
        assert_eq!(buf[6], 3);
        assert_eq!(buf[7], 0);
        assert_eq!(&buf[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&buf[16..20], &[5, 0, 0, 0]);
        assert_eq!(&buf[20..24], &[0; 4]);
        let mut checked = buf[0..24].to_vec();
        checked.extend_from_slice(b"hello");
        assert_eq!(&buf[24..32], &xxh3_64(&checked).to_le_bytes());
        assert_eq!(&buf[32..37], b"hello");
        assert_eq!(&buf[37..], &[0; 3]);
    }

    #[test]
    fn checksum_is_xxh3_of_header_then_payload() {
        for payload in payloads() {
            let buf = framed(9, 1, &payload);
            let mut checked = buf[0..24].to_vec();
            checked.extend_from_slice(&payload);
            assert_eq!(&buf[24..32], &xxh3_64(&checked).to_le_bytes());
        }
    }

    #[test]
    fn set_flags_marks_a_batch_end() {
        for payload in payloads() {
            let mut buf = framed(2, 77, &payload);
            buf.extend_from_slice(&[0; 8]);
            set_flags(&mut buf, FLAG_BATCH_END);
            let Decoded::Record { record, framed_len } = decode(&buf) else {
                panic!("flagged record does not decode");
            };
            assert_eq!(
                (record.flags, record.seq, record.payload),
                (1, 77, &payload[..])
            );
            assert_eq!(framed_len, buf.len() - 8);
            set_flags(&mut buf, 0);
            assert_eq!(buf[..framed_len], framed(2, 77, &payload)[..]);
        }
    }

    #[test]
    #[should_panic(expected = "unknown flags")]
    fn set_flags_rejects_unknown_flags() {
        set_flags(&mut framed(1, 1, b"x"), 2);
    }

    #[test]
    fn framed_len_is_aligned_and_tight() {
        for n in 0..100 {
            let len = framed_len(n);
            assert_eq!(len % RECORD_ALIGN, 0);
            assert!(len >= HEADER_BYTES + n && len < HEADER_BYTES + n + RECORD_ALIGN);
        }
        assert_eq!(framed_len(0), 32);
        assert_eq!(framed_len(1), 40);
        assert_eq!(framed_len(8), 40);
        assert_eq!(framed_len(9), 48);
        assert_eq!(
            framed_len(MAX_PAYLOAD_BYTES),
            HEADER_BYTES + MAX_PAYLOAD_BYTES
        );
    }

    #[test]
    fn records_follow_each_other() {
        let mut log = Vec::new();
        for (seq, payload) in payloads().iter().enumerate() {
            encode(1, seq as u64, payload, &mut log);
        }
        log.resize(log.len() + 64, 0);
        let mut pos = 0;
        for (seq, payload) in payloads().iter().enumerate() {
            let Decoded::Record { record, framed_len } = decode(&log[pos..]) else {
                panic!("no record at {pos}");
            };
            assert_eq!((record.seq, record.payload), (seq as u64, &payload[..]));
            assert_eq!(pos % RECORD_ALIGN, 0);
            pos += framed_len;
        }
        assert_eq!(decode(&log[pos..]), Decoded::End);
    }

    #[test]
    #[should_panic(expected = "kind 0")]
    fn encode_rejects_kind_zero() {
        framed(0, 1, b"x");
    }

    #[test]
    fn a_flipped_payload_bit_fails_the_checksum() {
        let mut buf = framed(2, 9, b"abc");
        buf[32] ^= 1;
        assert_eq!(decode(&buf), Decoded::Corrupt("checksum mismatch"));
    }

    /// A flip in the length field can claim more bytes than `buf` holds
    /// (Incomplete); given those bytes as zero-filled space, it is Corrupt.
    fn decode_with_room(buf: &[u8]) -> Decoded<'static> {
        match decode(buf) {
            Decoded::Incomplete => {
                let len = u32::from_le_bytes(buf[16..20].try_into().unwrap()) as usize;
                let mut room = vec![0u8; framed_len(len)];
                room[..buf.len()].copy_from_slice(buf);
                match decode(&room) {
                    Decoded::Corrupt(why) => Decoded::Corrupt(why),
                    other => panic!("not corrupt with room: {other:?}"),
                }
            }
            Decoded::Corrupt(why) => Decoded::Corrupt(why),
            other => panic!("flipped record decoded as {other:?}"),
        }
    }

    #[test]
    fn every_single_bit_flip_is_corrupt() {
        for payload in [&b""[..], b"hello, world"] {
            let mut buf = framed(5, 42, payload);
            set_flags(&mut buf, FLAG_BATCH_END);
            for bit in 0..buf.len() * 8 {
                let mut flipped = buf.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                let got = decode_with_room(&flipped);
                assert!(matches!(got, Decoded::Corrupt(_)), "bit {bit}: {got:?}");
            }
        }
    }

    #[test]
    fn every_truncation_is_incomplete() {
        for payload in payloads() {
            let buf = framed(4, 7, &payload);
            for len in 0..buf.len() {
                assert_eq!(decode(&buf[..len]), Decoded::Incomplete, "len {len}");
            }
        }
    }

    #[test]
    fn zero_filled_space_is_the_end() {
        assert_eq!(decode(&[0; 8]), Decoded::End);
        assert_eq!(decode(&[0; 4096]), Decoded::End);
        for len in 0..8 {
            assert_eq!(decode(&[0; 8][..len]), Decoded::Incomplete);
        }
    }

    #[test]
    fn garbage_is_corrupt() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            let buf: Vec<u8> = (0..64)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            assert!(matches!(decode(&buf), Decoded::Corrupt(_)));
        }
        assert_eq!(decode(b"RLG2\x01\0\x01\0"), Decoded::Corrupt("bad magic"));
    }

    #[test]
    fn header_fields_are_checked() {
        let good = framed(1, 1, b"payload");
        let cases: [(usize, u8, &str); 7] = [
            (4, 2, "unknown format version"),
            (5, 1, "unknown format version"),
            (6, 0, "record kind 0"),
            (7, 2, "unknown flags"),
            (7, 0x80, "unknown flags"),
            (20, 1, "nonzero reserved field"),
            (19, 0x40, "payload length over the max"),
        ];
        for (at, value, why) in cases {
            let mut buf = good.clone();
            buf[at] = value;
            assert_eq!(decode(&buf), Decoded::Corrupt(why), "byte {at}");
        }
        let mut padded = good.clone();
        *padded.last_mut().unwrap() = 1;
        assert_eq!(decode(&padded), Decoded::Corrupt("nonzero padding"));
    }
}
