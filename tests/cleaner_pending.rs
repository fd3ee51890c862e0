//! The cleaner against changes still waiting for the disk, in process (the
//! real shard, writer and cleaner over a `FaultyStorage` whose writes are
//! frozen): a victim segment goes only once what made its data dead is
//! durable, and it never logs a bucket's create after a pending delete of
//! that bucket (issue 3 "Space comes back", extensions §1).

mod inproc;

use std::collections::BTreeSet;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use inproc::{NOW_MS, TempDir, create, faulty, run, start};
use rill::log::storage::{DirectStorage, Fault, Storage};
use rill::shard::Shard;
use rill::shard::cleaner::clean_victims;
use rill::stream::Command;
use rill::stream::codec::Entry;
use rill::stream::rebuild::Rebuild;
use rill::stream::table::incarnation_id;

/// Small segments, so a few appends seal one.
const SEGMENT: u64 = 128 << 10;

/// An append of `len` bytes to `key`'s current incarnation, at its tail.
fn append(shard: &Shard, key: &str, len: usize) -> Command {
    let table = shard.table.borrow();
    let stream = table.get(key).expect("created");
    Command::Append {
        key: key.to_string(),
        stream_id: stream.id,
        start: stream.head_tail(),
        data: vec![b'x'; len].into(),
        producer: None,
        stream_seq: None,
        close: false,
        now_ms: NOW_MS + 1,
    }
}

fn delete(key: &str) -> Command {
    let stream_id = incarnation_id(key, NOW_MS);
    Command::Delete {
        key: key.to_string(),
        stream_id,
    }
}

async fn commit(shard: &Shard, commands: Vec<Command>) {
    for command in commands {
        shard.submit(vec![command]).await.expect("committed");
    }
}

/// `keep` with 30 KB in segment 1, `junk` filling the rest of it, then
/// segment 2 begun: deleting `junk` leaves segment 1 mostly dead.
async fn fill_first_segment(shard: &Shard) {
    commit(shard, vec![create("keep"), create("junk")]).await;
    commit(shard, vec![append(shard, "keep", 30_000)]).await;
    for _ in 0..3 {
        commit(shard, vec![append(shard, "junk", 30_000)]).await;
    }
    commit(shard, vec![append(shard, "keep", 30_000)]).await;
    assert!(shard.head_segment.get() > 1, "segment 1 is sealed");
}

fn segment_exists(dir: &Path, index: u64) -> bool {
    DirectStorage::new(dir)
        .unwrap()
        .list()
        .unwrap()
        .contains(&index)
}

/// The registry and streams a fresh recovery of `dir` finds.
async fn recovered(dir: &Path) -> (Vec<String>, Vec<String>) {
    let storage = DirectStorage::new(dir).unwrap();
    let mut rebuild = Rebuild::default();
    rill::log::recovery::recover(&storage, SEGMENT, |kind, payload, at| {
        rill::shard::startup::replay(&mut rebuild, kind, payload, at)
    })
    .await
    .expect("recovery");
    let (table, registry) = rebuild.finish(u64::MAX, NOW_MS).expect("a consistent log");
    let streams = table.iter().map(|(k, _)| k.clone()).collect();
    (registry.into_keys().collect(), streams)
}

/// One cleaning pass, spawned; the disk stays frozen meanwhile.
fn clean_in_background(dir: &Path, shard: &Rc<Shard>) -> monoio::task::JoinHandle<usize> {
    let (shard, storage) = (shard.clone(), DirectStorage::new(dir).unwrap());
    monoio::spawn(async move { clean_victims(&shard, &storage, &mut BTreeSet::new()).await })
}

#[test]
fn a_victim_goes_only_once_the_delete_that_killed_its_data_is_durable() {
    let tmp = TempDir::new("cleaner-pending-delete");
    run(async {
        let (storage, plan) = faulty(&tmp.0);
        let shard = start(storage, SEGMENT).await;
        fill_first_segment(&shard).await;
        commit(&shard, vec![delete("junk")]).await;
        // `keep`'s delete is decided (the head no longer has it) but the
        // disk is frozen: nothing of `keep` is copied, and its create and
        // first append are in segment 1.
        plan.set_writes(Fault::Stall);
        let pending = shard.submit(vec![delete("keep")]);
        let pass = clean_in_background(&tmp.0, &shard);
        monoio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            segment_exists(&tmp.0, 1),
            "segment 1 went while the delete that made it dead was not durable"
        );
        plan.set_writes(Fault::None);
        pending.await.expect("the delete commits");
        assert_eq!(pass.await, 1, "segment 1 is cleaned once it is");
        assert!(!segment_exists(&tmp.0, 1));
        let (_, streams) = recovered(&tmp.0).await;
        assert!(streams.is_empty(), "{streams:?}");
    });
}

#[test]
fn a_bucket_deleted_while_the_cleaner_copies_its_create_stays_deleted() {
    let tmp = TempDir::new("cleaner-pending-bucket");
    run(async {
        let (storage, plan) = faulty(&tmp.0);
        let shard = start(storage, SEGMENT).await;
        let bucket = Entry::BucketCreate {
            bucket: "bkt1".into(),
            created_at_ms: NOW_MS,
        };
        shard.submit_bucket(bucket).await.expect("created");
        // Segment 1: the bucket's create and dead data only, so the
        // cleaner has no stream to copy (and await) before that create.
        commit(&shard, vec![create("junk")]).await;
        for _ in 0..5 {
            commit(&shard, vec![append(&shard, "junk", 30_000)]).await;
        }
        assert!(shard.head_segment.get() > 1, "segment 1 is sealed");
        commit(&shard, vec![delete("junk")]).await;
        plan.set_writes(Fault::Stall);
        let gone = shard.submit_bucket(Entry::BucketDelete {
            bucket: "bkt1".into(),
        });
        let pass = clean_in_background(&tmp.0, &shard);
        monoio::time::sleep(Duration::from_millis(300)).await;
        plan.set_writes(Fault::None);
        gone.await.expect("the bucket delete commits");
        assert_eq!(pass.await, 1);
        let (registry, streams) = recovered(&tmp.0).await;
        assert!(
            registry.is_empty(),
            "a deleted bucket came back: {registry:?}"
        );
        assert!(streams.is_empty(), "{streams:?}");
    });
}
