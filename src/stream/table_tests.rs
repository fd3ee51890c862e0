//! Unit tests of the stream table (`table.rs`): publishing, undo, relocation
//! accounting and incarnation stamps.
use super::*;

fn create(key: &str, data: &[u8]) -> Command {
    Command::plain_create(key, "text/plain", data, 5)
}

fn append(
    table: &Table,
    key: &str,
    data: &[u8],
    producer: Option<ProducerWrite>,
    close: bool,
) -> Command {
    let stream = table.get(key).unwrap();
    Command::Append {
        key: key.into(),
        stream_id: stream.id,
        start: stream.head_tail(),
        data: data.to_vec().into(),
        producer,
        stream_seq: Some("b".into()),
        close,
        now_ms: 9,
    }
}

#[test]
fn readers_see_only_published_state() {
    let mut table = Table::default();
    let (created, _) = table.apply(create("k", b"ab"));
    assert!(table.get_visible("k").is_none());
    let (appended, _) = table.apply(append(&table, "k", b"cd", None, false));
    assert!(table.publish(&created, None));
    assert_eq!(table.get_visible("k").unwrap().tail(), 2);
    assert!(table.publish(&appended, None));
    assert_eq!(table.get_visible("k").unwrap().tail(), 4);
}

#[test]
fn undo_restores_the_previous_state_exactly() {
    let mut table = Table::default();
    let (created, _) = table.apply(create("k", b"ab"));
    table.publish(&created, None);
    let before = table.get("k").unwrap().clone();
    let producer = ProducerWrite {
        id: "p".into(),
        epoch: 1,
        seq: 0,
    };
    let (_, undo_append) = table.apply(append(&table, "k", b"cd", Some(producer), true));
    let id = table.get("k").unwrap().id;
    let (_, undo_delete) = table.apply(Command::Delete {
        key: "k".into(),
        stream_id: id,
    });
    table.undo(undo_delete);
    table.undo(undo_append);
    assert_eq!(table.get("k").unwrap(), &before);
    let (_, undo_create) = table.apply(create("new", b""));
    table.undo(undo_create);
    assert!(table.get("new").is_none());
}

#[test]
fn a_relocation_that_unpacks_extents_is_counted() {
    let mut table = Table::default();
    let (created, _) = table.apply(create("k", b""));
    table.publish(&created, None);
    for i in 0..5000 {
        let (appended, _) = table.apply(append(&table, "k", b"x", None, false));
        table.publish(&appended, Some((1, i * 64)));
    }
    let id = table.get("k").unwrap().id;
    let packed = table.index_used();
    // Segment 70,000 is past what a packed chunk's 16-bit distances reach.
    assert!(table.relocate("k", id, 10, (70_000, 8)));
    assert!(table.index_used() > packed, "the unpacked chunk takes more");
    assert_eq!(table.index_used(), table.footprint_of("k"));
    let (deleted, _) = table.apply(Command::Delete {
        key: "k".into(),
        stream_id: id,
    });
    table.publish(&deleted, None);
    assert_eq!(table.index_used(), 0);
}

#[test]
fn publish_ignores_an_older_incarnation() {
    let mut table = Table::default();
    let (old, _) = table.apply(create("k", b"a"));
    let id = table.get("k").unwrap().id;
    table.apply(Command::Delete {
        key: "k".into(),
        stream_id: id,
    });
    let mut newer = create("k", b"");
    if let Command::Create(NewStream { now_ms, .. }) = &mut newer {
        *now_ms = 6;
    }
    table.apply(newer);
    assert!(!table.publish(&old, None));
    assert!(table.get_visible("k").is_none());
}

#[test]
fn a_re_create_in_its_predecessors_millisecond_is_stamped_later() {
    let mut table = Table::default();
    assert_eq!(table.create_stamp("k", 5), 5, "nothing retired");
    table.apply(create("k", b"a"));
    let id = table.get("k").unwrap().id;
    table.apply(Command::Delete {
        key: "k".into(),
        stream_id: id,
    });
    // The predecessor was created at 5: a create decided at 5 (or at an
    // earlier reading of the clock) is stamped 6, so its id differs.
    assert_eq!(table.create_stamp("k", 5), 6);
    assert_eq!(table.create_stamp("k", 4), 6);
    assert_eq!(table.create_stamp("k", 9), 9);
    assert_eq!(table.create_stamp("other", 5), 5);
    assert_ne!(incarnation_id("k", 6), id);
    // So is one decided while a fork of the key claims 6.
    table.reserve_stamp("k", 6);
    assert_eq!(table.create_stamp("k", 6), 7);
}

#[test]
fn a_create_over_a_live_or_expired_stream_of_the_same_millisecond_is_stamped_later() {
    let mut table = Table::default();
    table.apply(create("k", b"a"));
    let live = table.get("k").unwrap().created_at_ms;
    // A fork decided in that millisecond (the stream created while it
    // copied), or a create replacing it once expired, gets another id.
    assert_eq!(table.create_stamp("k", live), live + 1);
    assert_eq!(table.create_stamp("k", live + 3), live + 3);
}

#[test]
fn a_reservation_outlives_many_deletes_of_old_streams() {
    let mut table = Table::default();
    table.reserve_stamp("fork", 1_000_000);
    for i in 0..3 * RETIRED_KEEP {
        table.retire(&format!("old-{i}"), 5);
    }
    assert_eq!(table.create_stamp("fork", 1_000_000), 1_000_001);
    assert!(
        table.retired.len() < 2 * RETIRED_KEEP,
        "old stamps are pruned"
    );
}
