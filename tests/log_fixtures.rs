//! Old-format fixtures of the segment log (issue 3; DESIGN.md "Storage"): the
//! committed version-1 segment in `tests/fixtures/log-v1/` must decode, with
//! `log::format` and `stream::codec`, to exactly the entries listed here.
//! `regenerate_fixture` (ignored) rebuilds the file; run it only on purpose,
//! since version 1 must never change (see the fixture's README.md).

use rill::log::format::{self, Decoded, FLAG_BATCH_END, RECORD_ALIGN};
use rill::stream::codec::{self, Entry, StreamImage};
use rill::stream::table::incarnation_id;
use rill::stream::{Command, NewStream, ProducerWrite};
use std::path::PathBuf;

const SEGMENT_BYTES: usize = 8192;
const NOW_MS: u64 = 1_700_000_000_000;
/// Seqs of the records that end a group-commit batch (`FLAG_BATCH_END`).
const BATCH_ENDS: [u64; 6] = [1, 4, 7, 8, 10, 13];

fn flags_of(seq: u64) -> u8 {
    if BATCH_ENDS.contains(&seq) {
        FLAG_BATCH_END
    } else {
        0
    }
}

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log-v1/00000000000000000001.seg")
}

fn producer(id: &str, epoch: u64, seq: u64) -> Option<ProducerWrite> {
    Some(ProducerWrite {
        id: id.to_string(),
        epoch,
        seq,
    })
}

/// The incarnation id of a stream created at `NOW_MS`.
fn id(key: &str) -> u64 {
    incarnation_id(key, NOW_MS)
}

fn append(key: &str, start: u64, data: &[u8], producer: Option<ProducerWrite>) -> Command {
    append_with(key, start, data, producer, None, false)
}

fn append_with(
    key: &str,
    start: u64,
    data: &[u8],
    producer: Option<ProducerWrite>,
    stream_seq: Option<&str>,
    close: bool,
) -> Command {
    Command::Append {
        key: key.to_string(),
        stream_id: id(key),
        start,
        data: data.to_vec().into(),
        producer,
        stream_seq: stream_seq.map(str::to_string),
        close,
        now_ms: NOW_MS + 1_000,
    }
}

/// The fixture's content, record by record (seq 1, 2, ...).
fn expected() -> Vec<Entry> {
    vec![
        Entry::BucketCreate {
            bucket: "demo".to_string(),
            created_at_ms: NOW_MS,
        },
        Entry::Stream(Command::Create(NewStream {
            key: "demo/events".to_string(),
            content_type: "application/json".to_string(),
            ttl_secs: Some(3600),
            expires_at: None,
            expires_at_ms: Some(NOW_MS + 3_600_000),
            closed: false,
            data: b"{\"id\":1}\n{\"id\":2,\"tags\":[\"a\",\"b\"]}\n".to_vec(),
            now_ms: NOW_MS,
            attrs: Vec::new(),
        })),
        Entry::Stream(Command::Create(NewStream {
            key: "/v1/stream/logs/app".to_string(),
            content_type: "text/plain".to_string(),
            ttl_secs: None,
            expires_at: Some("2030-01-01T00:00:00Z".to_string()),
            expires_at_ms: Some(1_893_456_000_000),
            closed: false,
            data: Vec::new(),
            now_ms: NOW_MS,
            attrs: Vec::new(),
        })),
        Entry::Stream(Command::Create(NewStream {
            key: "/v1/stream/blob".to_string(),
            content_type: "application/octet-stream".to_string(),
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: true,
            data: vec![0x00, 0xff, 0x80, 0x0a],
            now_ms: NOW_MS,
            attrs: Vec::new(),
        })),
        Entry::Stream(append("/v1/stream/logs/app", 0, b"hello\n", None)),
        Entry::Stream(append_with(
            "demo/events",
            35,
            b"{\"id\":3}\n",
            producer("p1", 0, 0),
            Some("0000000000000001"),
            false,
        )),
        Entry::Stream(append_with(
            "/v1/stream/logs/app",
            6,
            b"bye\n",
            producer("p-log", 1, 0),
            None,
            true,
        )),
        Entry::Stream(Command::Close {
            key: "demo/events".to_string(),
            stream_id: id("demo/events"),
            producer: producer("p1", 0, 1),
            now_ms: NOW_MS + 2_000,
        }),
        Entry::Relocate {
            key: "/v1/stream/blob".to_string(),
            stream_id: id("/v1/stream/blob"),
            start: 0,
            data: vec![0x00, 0xff, 0x80, 0x0a],
        },
        Entry::Image(Box::new(StreamImage {
            key: "/v1/stream/blob".to_string(),
            stream_id: id("/v1/stream/blob"),
            content_type: "application/octet-stream".to_string(),
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            created_at_ms: NOW_MS,
            last_write_ms: NOW_MS,
            closed: true,
            closed_by: None,
            stream_seq: None,
            producers: vec![ProducerWrite {
                id: "p0".to_string(),
                epoch: 2,
                seq: 5,
            }],
            tail: 4,
            attrs: Vec::new(),
            snapshot: None,
            retained: 0,
            first_record: 0,
            fork: None,
            soft_deleted: false,
            // Version 1 images carry no producer rings nor a logged access
            // (later tail fields).
            recent: Vec::new(),
            logged_access_ms: 0,
        })),
        Entry::Stream(Command::Delete {
            key: "/v1/stream/logs/app".to_string(),
            stream_id: id("/v1/stream/logs/app"),
        }),
        Entry::Stream(Command::Delete {
            key: "demo/events".to_string(),
            stream_id: id("demo/events"),
        }),
        Entry::BucketDelete {
            bucket: "demo".to_string(),
        },
    ]
}

/// The segment as the current encoder writes it: records, then zeros.
fn encode_segment(entries: &[Entry]) -> Vec<u8> {
    let mut segment = Vec::new();
    let mut payload = Vec::new();
    for (seq, entry) in (1u64..).zip(entries) {
        payload.clear();
        let kind = codec::encode(entry, &mut payload);
        let start = segment.len();
        format::encode(kind, seq, &payload, &mut segment);
        format::set_flags(&mut segment[start..], flags_of(seq));
    }
    assert!(
        segment.len() <= SEGMENT_BYTES,
        "fixture outgrew its segment"
    );
    segment.resize(SEGMENT_BYTES, 0);
    segment
}

/// Decodes every record of `segment`, checking its flags; returns (seq,
/// entry) pairs and the position of the end of the data.
fn decode_segment(segment: &[u8]) -> (Vec<(u64, Entry)>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    loop {
        assert_eq!(pos % RECORD_ALIGN, 0, "record at an unaligned position");
        match format::decode(&segment[pos..]) {
            Decoded::Record { record, framed_len } => {
                let entry = codec::decode(record.kind, record.payload)
                    .unwrap_or_else(|e| panic!("payload at {pos}: {e}"));
                assert_eq!(record.flags, flags_of(record.seq), "flags at {pos}");
                records.push((record.seq, entry));
                pos += framed_len;
            }
            Decoded::End => return (records, pos),
            other => panic!("at position {pos}: {other:?}"),
        }
    }
}

#[test]
fn v1_fixture_reads_back() {
    let segment = std::fs::read(fixture_path()).expect("read the v1 fixture");
    assert_eq!(segment.len(), SEGMENT_BYTES);
    let (records, end) = decode_segment(&segment);
    let seqs: Vec<u64> = records.iter().map(|(seq, _)| *seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs {seqs:?}");
    assert_eq!(seqs, (1..=expected().len() as u64).collect::<Vec<_>>());
    let entries: Vec<Entry> = records.into_iter().map(|(_, entry)| entry).collect();
    assert_eq!(entries, expected());
    assert!(segment[end..].iter().all(|&b| b == 0), "padding not zero");
    for pos in (end..SEGMENT_BYTES).step_by(RECORD_ALIGN) {
        assert_eq!(format::decode(&segment[pos..]), Decoded::End, "at {pos}");
    }
}

#[test]
#[ignore = "rewrites the frozen v1 fixture; run only on purpose"]
fn regenerate_fixture() {
    let segment = encode_segment(&expected());
    std::fs::write(fixture_path(), &segment).expect("write the v1 fixture");
}
