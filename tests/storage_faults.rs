//! Issue 3 "Disk faults", in process: the real commit pipeline (`Shard`,
//! `Commits`, the writer task, `Appender`, `Table`) over a
//! `FaultyStorage<DirectStorage>` in a scratch directory. Affected appends
//! get a clear error (507 or 503 with a JSON body), nothing acknowledged is
//! lost, reads keep working, writes resume once the fault is gone, and a
//! fresh recovery replays exactly what was acknowledged.

mod inproc;

use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rill::log::aligned::{AlignedBuf, BLOCK};
use rill::log::recovery::{self, Recovered};
use rill::log::storage::{DirectStorage, Fault, FaultPlan, FaultyStorage, SegmentFile, Storage};
use rill::shard::Shard;
use rill::shard::commit::CommitError;
use rill::stream::codec::{self, Entry};
use rill::stream::table::incarnation_id;
use rill::stream::{Command, NewStream};

use inproc::{NOW_MS, TempDir, create, faulty, run, start};

const KEY: &str = "faulty";
/// Large enough that the tests' data never reaches an eighth of it (where
/// the appender starts preallocating a spare), so no spare is made.
const BIG_SEGMENT: u64 = 1 << 20;

/// An append to `KEY`; its incarnation and start offset are filled in from
/// the head state when it is submitted (`submit`).
fn append(data: &[u8]) -> Command {
    Command::Append {
        key: KEY.to_string(),
        stream_id: 0,
        start: 0,
        data: data.to_vec().into(),
        producer: None,
        stream_seq: None,
        close: false,
        now_ms: NOW_MS + 1,
    }
}

/// Data of `len` bytes, distinct per `tag`.
fn blob(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i % 251) as u8).collect()
}

/// Submits commands with their incarnation and start offsets filled in
/// from the head state, as the protocol decides them.
fn submit(shard: &Shard, mut commands: Vec<Command>) -> rill::shard::commit::Ticket {
    let head = shard.table.borrow().get(KEY).map(|s| (s.id, s.head_tail()));
    let (mut id, mut tail) = head.unwrap_or((0, 0));
    for command in &mut commands {
        match command {
            Command::Create(NewStream {
                key, now_ms, data, ..
            }) => {
                id = incarnation_id(key, *now_ms);
                tail = data.len() as u64;
            }
            Command::Append {
                stream_id,
                start,
                data,
                ..
            } => {
                (*stream_id, *start) = (id, tail);
                tail += data.len() as u64;
            }
            _ => {}
        }
    }
    shard.submit(commands)
}

/// Recorded incarnation and offset fields are checked by other tests; the
/// comparisons here are about which writes survive.
fn without_placement(entry: Entry) -> Entry {
    match entry {
        Entry::Stream(Command::Append {
            key,
            data,
            producer,
            stream_seq,
            close,
            now_ms,
            ..
        }) => Entry::Stream(Command::Append {
            key,
            stream_id: 0,
            start: 0,
            data,
            producer,
            stream_seq,
            close,
            now_ms,
        }),
        other => other,
    }
}

async fn commit(shard: &Shard, commands: Vec<Command>) -> Result<(), CommitError> {
    submit(shard, commands).await
}

/// Everything a fresh recovery (new `DirectStorage`, same directory) replays.
async fn recovered_entries(dir: &Path, segment_bytes: u64) -> (Vec<Entry>, Recovered) {
    let storage = DirectStorage::new(dir).unwrap();
    let mut entries = Vec::new();
    let recovered = recovery::recover(&storage, segment_bytes, |kind, payload, _| {
        entries.push(codec::decode(kind, payload).map_err(|e| e.to_string())?);
        Ok(())
    })
    .await
    .expect("a fresh recovery must succeed");
    (entries, recovered)
}

async fn assert_recovers(dir: &Path, segment_bytes: u64, acked: &[Command]) -> Recovered {
    let (entries, recovered) = recovered_entries(dir, segment_bytes).await;
    let expected: Vec<Entry> = acked.iter().cloned().map(Entry::Stream).collect();
    let entries: Vec<Entry> = entries.into_iter().map(without_placement).collect();
    assert_eq!(
        entries.len(),
        expected.len(),
        "recovery must replay exactly the acknowledged records"
    );
    assert!(
        entries == expected,
        "recovered records differ from the acknowledged ones"
    );
    assert_eq!(recovered.next_seq, acked.len() as u64 + 1);
    recovered
}

/// Every byte of a stream, all of it cached in these tests.
fn cached(stream: &rill::stream::Stream) -> Vec<u8> {
    let mut out = Vec::new();
    stream.data.copy_cached(0, stream.head_tail(), &mut out);
    out
}

/// Readers and writers both see exactly `data`: the visible tail and the
/// head state agree (failed writes were rolled back).
async fn assert_stream(shard: &Shard, data: &[u8]) {
    let id = {
        let table = shard.table.borrow();
        let stream = table.get_visible(KEY).expect("stream stays readable");
        assert_eq!(stream.tail(), data.len() as u64, "visible tail");
        assert_eq!(
            stream.head_tail(),
            data.len() as u64,
            "head tail rolled back"
        );
        assert_eq!(
            stream.messages.end(),
            data.len() as u64,
            "message index rolled back"
        );
        assert!(!stream.is_closed() && !stream.closed);
        stream.id
    };
    let read = rill::shard::store::fetch(shard, KEY, id, 0, data.len() as u64).await;
    assert!(read.expect("readable") == data, "stream data differs");
}

/// The reply a failed commit becomes: `status`, a JSON error body with
/// `code`, and Retry-After.
fn assert_reply(error: &CommitError, status: u16, code: &str) {
    let reply = error.response();
    assert_eq!(reply.status, status, "{error:?}");
    assert_eq!(reply.get_header("retry-after"), Some("1"));
    assert_eq!(reply.get_header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON body");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains(&error.message), "{message}");
}

/// EIO on a write or a sync: the same expectations.
fn io_fault_case(tag: &str, inject: fn(&FaultPlan)) {
    let tmp = TempDir::new(tag);
    run(async {
        let (storage, plan) = faulty(&tmp.0);
        let shard = start(storage, BIG_SEGMENT).await;
        let mut acked = vec![create(KEY), append(b"ab")];
        commit(&shard, acked.clone()).await.unwrap();
        acked.push(append(b"cd"));
        commit(&shard, vec![append(b"cd")]).await.unwrap();
        assert_stream(&shard, b"abcd").await;

        inject(&plan);
        let err = commit(&shard, vec![append(b"ef")]).await.unwrap_err();
        assert!(!err.no_space, "{err:?}");
        assert_reply(&err, 503, "storage_unavailable");
        assert_stream(&shard, b"abcd").await;
        // A restart right after the failure must not replay it.
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
        // A multi-record batch, one larger than a block, and a create.
        let err = commit(&shard, vec![append(b"gh"), append(&blob(1, 9000))])
            .await
            .unwrap_err();
        assert_reply(&err, 503, "storage_unavailable");
        commit(&shard, vec![create("other")]).await.unwrap_err();
        assert!(shard.table.borrow().get("other").is_none());
        assert_stream(&shard, b"abcd").await;

        // A restart now (the fault still on) must not resurrect any of them.
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;

        plan.clear();
        commit(&shard, vec![append(b"kl")]).await.unwrap();
        acked.push(append(b"kl"));
        assert_stream(&shard, b"abcdkl").await;
        commit(&shard, vec![create("other")]).await.unwrap();
        acked.push(create("other"));
        assert!(shard.table.borrow().get_visible("other").is_some());
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
    });
}

/// `--fsync always` opens segments write-through (O_DSYNC): a commit is
/// durable when its write completes, so it issues no fdatasync — with every
/// sync failing, commits still succeed; a write failure still fails them.
#[test]
fn write_through_segments_commit_without_fdatasync() {
    let tmp = TempDir::new("write-through");
    run(async {
        let plan = FaultPlan::default();
        let direct = DirectStorage::new(&tmp.0).unwrap().with_write_through(true);
        let shard = start(
            Rc::new(FaultyStorage::new(direct, plan.clone())),
            BIG_SEGMENT,
        )
        .await;
        plan.set_syncs(Fault::Eio);
        let mut acked = vec![create(KEY), append(b"ab")];
        commit(&shard, acked.clone()).await.unwrap();
        commit(&shard, vec![append(&blob(2, 9000))]).await.unwrap();
        acked.push(append(&blob(2, 9000)));
        plan.set_writes(Fault::Eio);
        let err = commit(&shard, vec![append(b"cd")]).await.unwrap_err();
        assert_reply(&err, 503, "storage_unavailable");
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
    });
}

#[test]
fn eio_on_write_fails_the_append_and_loses_nothing() {
    io_fault_case("eio-write", |plan| plan.set_writes(Fault::Eio));
}

#[test]
fn eio_on_sync_fails_the_append_and_loses_nothing() {
    io_fault_case("eio-sync", |plan| plan.set_syncs(Fault::Eio));
}

#[test]
fn enospc_on_sync_maps_to_507() {
    let tmp = TempDir::new("enospc-sync");
    run(async {
        let (storage, plan) = faulty(&tmp.0);
        let shard = start(storage, BIG_SEGMENT).await;
        let acked = vec![create(KEY), append(b"ab")];
        commit(&shard, acked.clone()).await.unwrap();
        plan.set_syncs(Fault::Enospc);
        let err = commit(&shard, vec![append(b"cd")]).await.unwrap_err();
        assert!(err.no_space);
        assert_reply(&err, 507, "insufficient_storage");
        assert_stream(&shard, b"ab").await;
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
    });
}

const SMALL_SEGMENT: u64 = 4 * BLOCK as u64;

fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:020}.seg"))
}

#[test]
fn enospc_when_rolling_to_a_new_segment_then_resume() {
    let tmp = TempDir::new("enospc-roll");
    run(async {
        let (storage, plan) = faulty(&tmp.0);
        let shard = start(storage, SMALL_SEGMENT).await;
        // Below an eighth of the segment: no spare segment is prepared.
        let first = blob(1, 1000);
        let mut acked = vec![create(KEY), append(&first)];
        commit(&shard, acked.clone()).await.unwrap();
        assert!(!segment_path(&tmp.0, 2).exists());

        plan.set_writes(Fault::Enospc);
        // Does not fit: the roll must preallocate segment 2, which fails.
        let big = blob(2, 15_500);
        let err = commit(&shard, vec![append(&big)]).await.unwrap_err();
        assert!(err.no_space, "{err:?}");
        assert_reply(&err, 507, "insufficient_storage");
        assert!(!segment_path(&tmp.0, 2).exists());
        // Fits, but the write itself hits the full disk.
        let err = commit(&shard, vec![append(b"small")]).await.unwrap_err();
        assert_reply(&err, 507, "insufficient_storage");
        assert_stream(&shard, &first).await;
        assert_recovers(&tmp.0, SMALL_SEGMENT, &acked).await;

        plan.clear();
        commit(&shard, vec![append(&big)]).await.unwrap();
        acked.push(append(&big));
        assert!(segment_path(&tmp.0, 2).exists());
        assert_stream(&shard, &[first.as_slice(), &big].concat()).await;
        let recovered = assert_recovers(&tmp.0, SMALL_SEGMENT, &acked).await;
        assert_eq!(recovered.end.map(|e| e.segment), Some(2));
    });
}

/// Waits (bounded) until `cond` holds.
async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn enospc_in_background_preallocation_then_resume() {
    let tmp = TempDir::new("enospc-spare");
    let first = blob(1, 9000);
    let mut acked = vec![create(KEY), append(&first)];
    // A log past half its first segment whose next segment does not exist
    // yet (as after a crash before the spare was preallocated).
    run(async {
        let (storage, _plan) = faulty(&tmp.0);
        let shard = start(storage, SMALL_SEGMENT).await;
        commit(&shard, acked.clone()).await.unwrap();
        let spare = segment_path(&tmp.0, 2);
        wait_until("the spare segment", || spare.exists()).await;
    });
    let spare = std::fs::read(segment_path(&tmp.0, 2)).unwrap();
    assert!(spare.iter().all(|&b| b == 0));
    std::fs::remove_file(segment_path(&tmp.0, 2)).unwrap();

    run(async {
        let (storage, plan) = faulty(&tmp.0);
        // The disk is full from the start: the spare that opening the log
        // prepares in the background fails.
        plan.set_writes(Fault::Enospc);
        let shard = start(storage, SMALL_SEGMENT).await;
        assert_stream(&shard, &first).await;
        let big = blob(2, 12_000);
        let err = commit(&shard, vec![append(&big)]).await.unwrap_err();
        assert_reply(&err, 507, "insufficient_storage");
        let err = commit(&shard, vec![append(b"small")]).await.unwrap_err();
        assert_reply(&err, 507, "insufficient_storage");
        monoio::time::sleep(Duration::from_millis(20)).await;
        assert_stream(&shard, &first).await;
        assert!(!segment_path(&tmp.0, 2).exists());

        // Space returns: the very next write that needs a segment works.
        plan.clear();
        commit(&shard, vec![append(&big)]).await.unwrap();
        acked.push(append(&big));
        assert_stream(&shard, &[first.as_slice(), &big].concat()).await;
        commit(&shard, vec![append(b"small")]).await.unwrap();
        acked.push(append(b"small"));
        let recovered = assert_recovers(&tmp.0, SMALL_SEGMENT, &acked).await;
        assert_eq!(recovered.end.map(|e| e.segment), Some(2));
    });
}

/// Test hooks around the faulty storage: hold every file sync until
/// released, and turn the next N writes into short writes.
#[derive(Default)]
struct Hooks {
    hold_syncs: Cell<bool>,
    syncs_waiting: Cell<usize>,
    short_writes: Cell<usize>,
}

struct Hooked<S: Storage> {
    inner: S,
    plan: FaultPlan,
    hooks: Rc<Hooks>,
}

struct HookedFile<F: SegmentFile> {
    inner: F,
    plan: FaultPlan,
    hooks: Rc<Hooks>,
}

impl<S: Storage> Hooked<S> {
    fn wrap(&self, inner: S::File) -> HookedFile<S::File> {
        HookedFile {
            inner,
            plan: self.plan.clone(),
            hooks: self.hooks.clone(),
        }
    }
}

impl<F: SegmentFile> SegmentFile for HookedFile<F> {
    async fn write_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        let short = self.hooks.short_writes.get();
        if short == 0 {
            return self.inner.write_at(buf, pos).await;
        }
        self.hooks.short_writes.set(short - 1);
        self.plan.set_writes(Fault::ShortWrite);
        let result = self.inner.write_at(buf, pos).await;
        self.plan.set_writes(Fault::None);
        result
    }

    async fn read_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        self.inner.read_at(buf, pos).await
    }

    async fn sync_data(&self) -> io::Result<()> {
        self.hooks
            .syncs_waiting
            .set(self.hooks.syncs_waiting.get() + 1);
        while self.hooks.hold_syncs.get() {
            monoio::time::sleep(Duration::from_millis(1)).await;
        }
        self.hooks
            .syncs_waiting
            .set(self.hooks.syncs_waiting.get() - 1);
        self.inner.sync_data().await
    }
}

impl<S: Storage> Storage for Hooked<S> {
    type File = HookedFile<S::File>;

    fn list(&self) -> io::Result<Vec<u64>> {
        self.inner.list()
    }

    async fn open(&self, index: u64) -> io::Result<Self::File> {
        Ok(self.wrap(self.inner.open(index).await?))
    }

    async fn create_tmp(&self, index: u64) -> io::Result<Self::File> {
        Ok(self.wrap(self.inner.create_tmp(index).await?))
    }

    async fn publish_tmp(&self, index: u64) -> io::Result<()> {
        self.inner.publish_tmp(index).await
    }

    async fn discard_tmp(&self, index: u64) {
        self.inner.discard_tmp(index).await
    }

    async fn remove(&self, index: u64) -> io::Result<()> {
        self.inner.remove(index).await
    }

    fn path(&self, index: u64) -> PathBuf {
        self.inner.path(index)
    }
}

fn hooked(
    dir: &Path,
) -> (
    Rc<Hooked<FaultyStorage<DirectStorage>>>,
    FaultPlan,
    Rc<Hooks>,
) {
    let plan = FaultPlan::default();
    let hooks = Rc::new(Hooks::default());
    let inner = FaultyStorage::new(DirectStorage::new(dir).unwrap(), plan.clone());
    let storage = Hooked {
        inner,
        plan: plan.clone(),
        hooks: hooks.clone(),
    };
    (Rc::new(storage), plan, hooks)
}

#[test]
fn short_writes_never_ack_or_replay_a_half_written_record() {
    let tmp = TempDir::new("short");
    run(async {
        let (storage, plan, hooks) = hooked(&tmp.0);
        let shard = start(storage, BIG_SEGMENT).await;
        let mut acked = vec![create(KEY), append(b"hello")];
        commit(&shard, acked.clone()).await.unwrap();
        let mut data = b"hello".to_vec();

        // One short write, continued by the appender: the append succeeds.
        hooks.short_writes.set(1);
        let big = blob(3, 3 * BLOCK + 100);
        commit(&shard, vec![append(&big)]).await.unwrap();
        assert_eq!(hooks.short_writes.get(), 0, "the short write happened");
        acked.push(append(&big));
        data.extend_from_slice(&big);
        assert_stream(&shard, &data).await;
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;

        // Every write short: the batch can never be completed. The append
        // fails, only its first blocks reach the disk, and the scrub cannot
        // run either.
        plan.set_writes(Fault::ShortWrite);
        let failed = blob(4, 5 * BLOCK);
        let err = commit(&shard, vec![append(b"x"), append(&failed)])
            .await
            .unwrap_err();
        assert_reply(&err, 503, "storage_unavailable");
        let err = commit(&shard, vec![append(b"y")]).await.unwrap_err();
        assert_reply(&err, 503, "storage_unavailable");
        assert_stream(&shard, &data).await;
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;

        plan.clear();
        commit(&shard, vec![append(b"z")]).await.unwrap();
        acked.push(append(b"z"));
        data.push(b'z');
        assert_stream(&shard, &data).await;
        let recovered = assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
        assert_eq!(
            recovered.report.torn, None,
            "the scrub cleared the torn batch"
        );
    });
}

#[test]
fn a_failed_batch_fails_everything_decided_on_top_of_it() {
    let tmp = TempDir::new("concurrent");
    run(async {
        let (storage, plan, hooks) = hooked(&tmp.0);
        let shard = start(storage, BIG_SEGMENT).await;
        let mut acked = vec![create(KEY), append(b"base")];
        commit(&shard, acked.clone()).await.unwrap();

        // Batch [a] is being synced while b and c are decided on top of it.
        hooks.hold_syncs.set(true);
        let a = submit(&shard, vec![append(b"a")]);
        wait_until("batch a to reach its sync", || {
            hooks.syncs_waiting.get() == 1
        })
        .await;
        let b = submit(&shard, vec![append(b"b")]);
        let c = submit(&shard, vec![append(b"c"), append(b"c2")]);
        {
            let table = shard.table.borrow();
            let stream = table.get(KEY).unwrap();
            assert_eq!(cached(stream), b"baseabcc2", "decided on the head state");
            assert_eq!(stream.tail(), 4, "readers see only committed data");
        }
        // What a write reply that saw this head state waits for.
        let barrier = shard.commits.ticket().expect("uncommitted entries");
        plan.set_syncs(Fault::Eio);
        hooks.hold_syncs.set(false);
        for (name, result) in [("a", a.await), ("b", b.await), ("c", c.await)] {
            let err = result.expect_err(name);
            assert_reply(&err, 503, "storage_unavailable");
        }
        barrier.await.unwrap_err();
        assert_stream(&shard, b"base").await;

        plan.clear();
        commit(&shard, vec![append(b"d")]).await.unwrap();
        acked.push(append(b"d"));
        assert_stream(&shard, b"based").await;
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;

        // Batch [e] commits; [f, g], queued behind it, fails alone.
        hooks.hold_syncs.set(true);
        let e = submit(&shard, vec![append(b"e")]);
        wait_until("batch e to reach its sync", || {
            hooks.syncs_waiting.get() == 1
        })
        .await;
        let f = submit(&shard, vec![append(b"f")]);
        let g = submit(&shard, vec![append(b"g")]);
        plan.set_writes(Fault::Eio);
        hooks.hold_syncs.set(false);
        e.await.expect("e was written before the fault");
        acked.push(append(b"e"));
        f.await.unwrap_err();
        g.await.unwrap_err();
        assert_stream(&shard, b"basede").await;

        plan.clear();
        commit(&shard, vec![append(b"h")]).await.unwrap();
        acked.push(append(b"h"));
        assert_stream(&shard, b"basedeh").await;
        assert_recovers(&tmp.0, BIG_SEGMENT, &acked).await;
    });
}
