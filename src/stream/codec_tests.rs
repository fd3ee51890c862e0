//! Unit tests of the record payload codec (`codec.rs`).
use super::*;
use crate::stream::state::{RecentWrites, WriteRange};

fn producer() -> Option<ProducerWrite> {
    Some(ProducerWrite {
        id: "writer-1".into(),
        epoch: 3,
        seq: u64::MAX,
    })
}

fn create(full: bool) -> Entry {
    Entry::Stream(Command::Create(NewStream {
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
        attrs: Vec::new(),
    }))
}

fn append(full: bool) -> Entry {
    Entry::Stream(Command::Append {
        key: "bkt1/s".into(),
        stream_id: 0xfeed_beef,
        start: if full { 1 << 40 } else { 0 },
        data: vec![0, 1, 2, 0xff].into(),
        producer: if full { producer() } else { None },
        stream_seq: full.then(|| "0007".into()),
        close: full,
        now_ms: 5,
    })
}

fn close(full: bool) -> Entry {
    Entry::Stream(Command::Close {
        key: "bkt1/s".into(),
        stream_id: 7,
        producer: if full { producer() } else { None },
        now_ms: 0,
    })
}

/// Every variant, with and without its optional fields.
fn origin() -> ForkOrigin {
    ForkOrigin {
        source: "bkt1/src".into(),
        source_id: 77,
        offset: 12,
        sub: 3,
        own_lifetime: true,
    }
}

fn fork() -> Entry {
    Entry::Stream(Command::Fork {
        new: NewStream {
            ttl_secs: Some(5),
            closed: true,
            ..NewStream::plain("bkt1/f", "text/plain", b"helXY", 9)
        },
        start: 12,
        origin: origin(),
        retained: 4,
        first_record: 2,
        snapshot: Some(Box::new(fork_snapshot())),
    })
}

/// The snapshot a fork inherits in `fork()`.
fn fork_snapshot() -> Snapshot {
    Snapshot {
        offset: 8,
        content_type: "application/x-state".into(),
        digest: "dd".into(),
        len: 3,
    }
}

fn entries() -> Vec<Entry> {
    let mut all = Vec::new();
    for full in [false, true] {
        all.extend([create(full), append(full), close(full)]);
    }
    all.extend([
        Entry::Stream(Command::Delete {
            key: "/v1/stream/ünïcode".into(),
            stream_id: u64::MAX,
        }),
        Entry::Relocate {
            key: "bkt1/s".into(),
            stream_id: 3,
            start: 9,
            data: b"moved".to_vec(),
        },
        Entry::Image(Box::new(StreamImage {
            key: "bkt1/s".into(),
            stream_id: 3,
            content_type: "text/plain".into(),
            ttl_secs: Some(60),
            expires_at: None,
            expires_at_ms: None,
            created_at_ms: 1,
            last_write_ms: 2,
            closed: true,
            closed_by: producer(),
            stream_seq: Some("9".into()),
            producers: vec![
                ProducerWrite {
                    id: "a".into(),
                    epoch: 1,
                    seq: 2,
                },
                ProducerWrite {
                    id: "b".into(),
                    epoch: 0,
                    seq: 0,
                },
            ],
            tail: 14,
            attrs: br#"{"title":"t"}"#.to_vec(),
            retained: 5,
            first_record: 1,
            fork: Some(origin()),
            soft_deleted: true,
            snapshot: Some(Snapshot {
                offset: 12,
                content_type: "application/x-loro".into(),
                digest: "d".into(),
                len: 99,
            }),
            recent: vec![recent_ring(), RecentWrites::EMPTY],
            logged_access_ms: 4,
        })),
        Entry::Stream(Command::Retain {
            key: "bkt1/s".into(),
            stream_id: 3,
            offset: 7,
            first_record: 2,
        }),
        fork(),
        Entry::Stream(Command::SoftDelete {
            key: "bkt1/s".into(),
            stream_id: 3,
        }),
        Entry::Stream(Command::Touch {
            key: "bkt1/s".into(),
            stream_id: 3,
            now_ms: 1_700_000_000_000,
        }),
        Entry::Stream(Command::Snapshot {
            key: "bkt1/s".into(),
            stream_id: 3,
            snapshot: Snapshot {
                offset: 0,
                content_type: String::new(),
                digest: "x".into(),
                len: 0,
            },
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
        let data = match &entry {
            Entry::Stream(Command::Append { data, .. }) => Some(&data[..]),
            Entry::Stream(
                Command::Create(NewStream { data, .. })
                | Command::Fork {
                    new: NewStream { data, .. },
                    ..
                },
            )
            | Entry::Relocate { data, .. } => Some(&data[..]),
            _ => None,
        };
        if let Some(data) = data {
            let at = at.expect("creates and appends carry data");
            assert_eq!(&payload[at..at + data.len()], data);
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
fn an_append_past_the_offset_space_is_refused() {
    let Entry::Stream(Command::Append { data, .. }) = append(false) else {
        unreachable!()
    };
    let at = |start: u64| {
        Entry::Stream(Command::Append {
            key: "k".into(),
            stream_id: 1,
            start,
            data: data.clone(),
            producer: None,
            stream_seq: None,
            close: false,
            now_ms: 0,
        })
    };
    let fits = at(u64::MAX - data.len() as u64);
    let (kind, payload) = encoded(&fits);
    assert_eq!(decode(kind, &payload), Ok(fits));
    let (kind, payload) = encoded(&at(u64::MAX - 1));
    assert_eq!(decode(kind, &payload), Err(CodecError::BadRange));
}

#[test]
fn kinds() {
    let kinds: Vec<u8> = entries().iter().map(|e| encoded(e).0).collect();
    assert_eq!(kinds, [1, 2, 3, 1, 2, 3, 4, 7, 8, 11, 12, 13, 14, 10, 5, 6]);
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
    want.extend_from_slice(&0xfeed_beef_u64.to_le_bytes());
    want.extend_from_slice(&(1u64 << 40).to_le_bytes());
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

/// Two writes, one whose record ordinals are not known yet.
fn recent_ring() -> RecentWrites {
    let mut ring = RecentWrites::EMPTY;
    let range = |start, end, records, records_next| WriteRange {
        start,
        end,
        records,
        records_next,
    };
    ring.record(1, range(0, 3, 1, None));
    ring.record(2, range(3, 9, 2, Some(5)));
    ring
}

/// Where records written before their optional last fields existed end,
/// shortest first (the IMAGE of `entries` has a fork, is soft-deleted and
/// has rings of two writes and of none).
fn without_tail_fields(kind: u8, payload: &[u8]) -> Vec<usize> {
    let len = payload.len();
    let fork = 1 + 4 + origin().source.len() + 24;
    let recent = 4 + (1 + 2 * 36) + 1;
    let snapshot = fork_snapshot();
    let snapshot_len = 8 + 4 + snapshot.content_type.len() + 4 + snapshot.digest.len() + 8;
    match kind {
        kind::RETENTION => vec![len - 8],
        kind::FORK => vec![len - snapshot_len],
        kind::IMAGE => {
            let before_access = len - 8;
            let before_recent = before_access - recent;
            let before_soft_delete = before_recent - 1;
            let before_fork = before_soft_delete - fork;
            vec![
                before_fork - 8,
                before_fork,
                before_soft_delete,
                before_recent,
                before_access,
            ]
        }
        _ => Vec::new(),
    }
}

#[test]
fn every_truncation_errors() {
    for entry in entries() {
        let (kind, payload) = encoded(&entry);
        let older = without_tail_fields(kind, &payload);
        for len in (0..payload.len()).filter(|len| !older.contains(len)) {
            let got = decode(kind, &payload[..len]);
            assert_eq!(got, Err(CodecError::Truncated), "{entry:?} at {len}");
        }
    }
}

#[test]
fn records_without_the_tail_fields_decode_as_before() {
    for entry in entries() {
        let (kind, payload) = encoded(&entry);
        let Some(&len) = without_tail_fields(kind, &payload).first() else {
            continue;
        };
        let decoded = decode(kind, &payload[..len]).expect("older records decode");
        let defaults = match decoded {
            Entry::Stream(Command::Retain { first_record, .. }) => {
                (first_record, None, false, true)
            }
            Entry::Stream(Command::Fork { snapshot, .. }) => (0, None, false, snapshot.is_none()),
            Entry::Image(image) => (
                image.first_record,
                image.fork,
                image.soft_deleted,
                image.recent.is_empty() && image.logged_access_ms == 0,
            ),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(defaults, (0, None, false, true));
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
    for kind in [0, 15, 0xff] {
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

#[test]
fn an_image_has_one_ring_per_producer_or_none() {
    let mut images = entries().into_iter().filter_map(|e| match e {
        Entry::Image(image) => Some(image),
        _ => None,
    });
    let mut image = images.next().expect("entries have an image");
    image.recent.pop();
    let (kind, payload) = encoded(&Entry::Image(image));
    assert_eq!(decode(kind, &payload), Err(CodecError::BadRing));
}

#[test]
fn an_image_carries_rings_only_within_its_budget() {
    use crate::stream::rebuild::image_of;
    use crate::stream::table::{Table, incarnation_id};
    let key = "/v1/stream/a/b";
    let mut table = Table::default();
    let Entry::Stream(create) = create(false) else {
        unreachable!("a create is a stream command")
    };
    table.apply(create);
    let append = Command::Append {
        key: key.into(),
        stream_id: incarnation_id(key, 1_700_000_000_000),
        start: 0,
        data: b"{\"a\":1}\n".to_vec().into(),
        producer: Some(ProducerWrite {
            id: "p".into(),
            epoch: 0,
            seq: 0,
        }),
        stream_seq: None,
        close: false,
        now_ms: 1,
    };
    table.apply(append);
    let stream = table.get(key).expect("created");
    assert_eq!(image_of(key, stream, MAX_RING_BYTES).recent.len(), 1);
    assert!(image_of(key, stream, MAX_RING_BYTES - 1).recent.is_empty());
}
