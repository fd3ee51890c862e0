//! Bucket endpoints (extensions §1) on the bucket's owner shard, which
//! serializes changes and replicates the registry to every shard through the
//! mesh before answering; listings are scatter-gather.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::Shard;
use super::commit::CommitError;
use super::mesh::MeshMsg;
use crate::clock;
use crate::http::parse::{Method, RequestHead};
use crate::protocol::buckets::{self, StreamSummary};
use crate::protocol::response::{Response, conflict, not_found};
use crate::stream::codec::Entry;
use crate::stream::{Command, Stream};

/// One bucket in a shard's replica of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub created_at_ms: u64,
    /// A delete is checking emptiness: no stream may be created meanwhile.
    pub frozen: bool,
}

/// How long a request waits for a DELETE in progress to decide its bucket's
/// fate before it gets 503.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// Waits while `bucket` is frozen by a DELETE in progress, which ends with
/// the bucket deleted or thawed (not empty). A request that meets the
/// freeze is answered as if it came after the DELETE's outcome (a create
/// then gets 201 or 404, extensions §1.5-1.6), not with a guess. Returns at
/// the latest after `SETTLE_LIMIT` or when the shard stops, still frozen.
pub async fn settle(shard: &Shard, bucket: &str) {
    let frozen = || shard.buckets.borrow().get(bucket).is_some_and(|b| b.frozen);
    wait_while(shard, frozen).await;
}

/// Polls `busy` until it is false, `SETTLE_LIMIT` passes or the shard
/// stops: a freeze or a create lasts a mesh round trip plus a logged
/// record, and only requests naming that bucket meet it.
async fn wait_while(shard: &Shard, busy: impl Fn() -> bool) {
    let deadline = Instant::now() + SETTLE_LIMIT;
    while busy() && Instant::now() < deadline && !shard.stopping.get() {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A bucket still frozen after [`settle`]: its DELETE is stuck (the disk).
fn still_deleting() -> Response {
    crate::protocol::response::retry_soon(
        "bucket_deleting",
        "the bucket is being deleted; retry shortly",
    )
}

/// Whether a stream may be created in `bucket` on this shard: `Err` holds
/// the answer when not. Call [`settle`] first.
pub fn admits_create(shard: &Shard, bucket: &str) -> Result<(), Response> {
    match shard.buckets.borrow().get(bucket) {
        None => Err(not_found("bucket not found")),
        Some(b) if b.frozen => Err(still_deleting()),
        Some(_) => Ok(()),
    }
}

/// Applies a committed registry record to this shard's replica.
pub fn apply_entry(shard: &Shard, entry: Entry) {
    let mut registry = shard.buckets.borrow_mut();
    match entry {
        Entry::BucketCreate {
            bucket,
            created_at_ms,
        } => {
            let entry = Bucket {
                created_at_ms,
                frozen: false,
            };
            if !registry.contains_key(&bucket) {
                shard.table.borrow_mut().count_bucket(&bucket, true);
            }
            registry.insert(bucket, entry);
        }
        Entry::BucketDelete { bucket } => {
            if registry.remove(&bucket).is_some() {
                shard.table.borrow_mut().count_bucket(&bucket, false);
            }
        }
        Entry::Stream(_) | Entry::Relocate { .. } | Entry::Image(_) => {
            unreachable!("stream records are not registry changes")
        }
    }
}

/// Logs a registry change on this shard, then acknowledges whether it
/// committed.
fn replicate(shard: &Rc<Shard>, entry: Entry, ack: flume::Sender<Result<(), CommitError>>) {
    let ticket = shard.submit_bucket(entry);
    monoio::spawn(async move {
        let _ = ack.send(ticket.await);
    });
}

/// Sends `make`'s registry change to every shard and waits for all to log
/// it: how many did, and the first failure as the client will be told
/// (507 on a full disk).
async fn replicate_to_all(
    shard: &Shard,
    make: impl Fn(flume::Sender<Result<(), CommitError>>) -> MeshMsg,
) -> (usize, Result<(), Response>) {
    let acks = shard.mesh.gather(make).await;
    let committed = acks.replies.iter().filter(|ack| ack.is_ok()).count();
    // A shard that stopped gives no answer: not an acknowledgement.
    let Some(acks) = acks.all() else {
        return (committed, Err(shard_stopping()));
    };
    match acks.into_iter().find_map(Result::err) {
        Some(error) => (committed, Err(error.response())),
        None => (committed, Ok(())),
    }
}

/// Applies replicated registry changes and answers scans (any shard).
pub fn handle_mesh(shard: &Rc<Shard>, msg: MeshMsg) {
    match msg {
        MeshMsg::BucketCreated {
            bucket,
            created_at_ms,
            ack,
        } => {
            replicate(
                shard,
                Entry::BucketCreate {
                    bucket,
                    created_at_ms,
                },
                ack,
            );
        }
        MeshMsg::BucketFreeze {
            bucket,
            frozen,
            reply,
        } => {
            let registered = match shard.buckets.borrow_mut().get_mut(&bucket) {
                Some(entry) => {
                    entry.frozen = frozen;
                    true
                }
                None => false,
            };
            let holds = holds_live_streams(shard, &bucket);
            let _ = reply.send(registered.then_some(holds));
        }
        MeshMsg::BucketDeleted { bucket, ack } => {
            delete_soft_deleted(shard, &bucket);
            replicate(shard, Entry::BucketDelete { bucket }, ack);
        }
        MeshMsg::ScanBucket {
            bucket,
            prefix,
            after,
            limit,
            reply,
        } => {
            let _ = reply.send(scan(shard, &bucket, (&prefix, after.as_deref()), limit));
        }
        MeshMsg::CountBucket { bucket, reply } => {
            let shard = shard.clone();
            monoio::spawn(async move {
                let _ = reply.send(count(&shard, &bucket).await);
            });
        }
        _ => unreachable!("handled by the inbox loop or the fork module"),
    }
}

/// Whether a bucket listing shows `stream` (extensions §1.4).
fn listed(shard: &Shard, key: &str, stream: &Stream, now_ms: u64) -> bool {
    stream.visible && !stream.soft_deleted && !shard.has_expired(key, stream, now_ms)
}

/// The first `limit` listed streams of `bucket` whose id starts with
/// `prefix` and sorts after `after`: a range of the ordered table, so a
/// page costs its length, not the bucket's size.
fn scan(
    shard: &Shard,
    bucket: &str,
    (prefix, after): (&str, Option<&str>),
    limit: usize,
) -> Vec<StreamSummary> {
    let key_prefix = format!("{bucket}/{prefix}");
    let key_after = after.map(|after| format!("{bucket}/{after}"));
    let now_ms = clock::now_ms();
    let table = shard.table.borrow();
    table
        .keys_after(&key_prefix, key_after.as_deref())
        .filter(|(key, s)| listed(shard, key, s, now_ms))
        .take(limit)
        .map(|(key, stream)| StreamSummary::of(&key[bucket.len() + 1..], stream))
        .collect()
}

/// How many streams of `bucket` a listing shows on this shard, counted a
/// range at a time (a bucket of a million streams is ~40 ms of walking).
async fn count(shard: &Shard, bucket: &str) -> usize {
    let key_prefix = format!("{bucket}/");
    let now_ms = clock::now_ms();
    let (mut total, mut after) = (0, None::<String>);
    loop {
        let last = shard.visit_keys(&key_prefix, after.as_deref(), |key, stream| {
            total += usize::from(listed(shard, key, stream, now_ms));
        });
        let Some(last) = last else { return total };
        after = Some(last);
        Shard::yield_to_others().await;
    }
}

/// Whether this shard holds a stream of `bucket` that a bucket delete must
/// wait for: any stream of the head state, durable or not, but soft-deleted
/// sources of forks (gone for clients, and not counted by the bucket's
/// listing: §1.5's "empty" is what the client sees). Expired ones passed on
/// the way are reaped. The walk stops at the first live stream, so a delete
/// of a large bucket still in use is refused without walking all of it.
fn holds_live_streams(shard: &Shard, bucket: &str) -> bool {
    let key_prefix = format!("{bucket}/");
    let now_ms = clock::now_ms();
    let mut holds = false;
    let mut reaps = Vec::new();
    for (key, stream) in shard.table.borrow().keys_with_prefix(&key_prefix) {
        match (shard.has_expired(key, stream, now_ms), stream.soft_deleted) {
            (true, _) => reaps.push(Command::Delete {
                key: key.clone(),
                stream_id: stream.id,
            }),
            (false, true) => {}
            (false, false) => {
                holds = true;
                break;
            }
        }
    }
    if !reaps.is_empty() {
        drop(shard.submit(reaps));
    }
    holds
}

/// A bucket delete takes the soft-deleted sources of forks with it: logged
/// before the bucket's record (one queue, so its ticket covers them). Their
/// forks hold their own copies (PROTOCOL.md §4.2 keeps a source only so its
/// name answers 410 while forks live; its bucket going, the name goes too).
fn delete_soft_deleted(shard: &Shard, bucket: &str) {
    let key_prefix = format!("{bucket}/");
    let deletes: Vec<Command> = shard
        .table
        .borrow()
        .keys_with_prefix(&key_prefix)
        .filter(|(_, stream)| stream.soft_deleted)
        .map(|(key, stream)| Command::Delete {
            key: key.clone(),
            stream_id: stream.id,
        })
        .collect();
    if !deletes.is_empty() {
        drop(shard.submit(deletes));
    }
}

/// Each shard's first `limit + 1` streams of the page `query` asks for
/// (one more than the page shows tells whether more follow), or 503 when
/// a stopped shard gave none (a partial listing would look whole).
async fn gather_page(
    shard: &Shard,
    bucket: &str,
    query: &buckets::ListQuery,
) -> Result<Vec<StreamSummary>, Response> {
    let replies = shard
        .mesh
        .gather(|reply| MeshMsg::ScanBucket {
            bucket: bucket.to_string(),
            prefix: query.prefix.clone(),
            after: query.after.clone(),
            limit: query.limit + 1,
            reply,
        })
        .await;
    match replies.all() {
        Some(replies) => Ok(replies.into_iter().flatten().collect()),
        None => Err(shard_stopping()),
    }
}

/// How many streams `bucket` holds on every shard (as listed), or 503.
async fn gather_count(shard: &Shard, bucket: &str) -> Result<usize, Response> {
    let replies = shard
        .mesh
        .gather(|reply| MeshMsg::CountBucket {
            bucket: bucket.to_string(),
            reply,
        })
        .await;
    replies
        .all()
        .map(|counts| counts.into_iter().sum())
        .ok_or_else(shard_stopping)
}

/// Whether bucket `id` would take this shard's registry replica past what
/// is left of the index budget, which counts streams and buckets alike.
fn registry_full(shard: &Shard, id: &str) -> bool {
    let bytes = crate::stream::budget::bucket_bytes(id);
    shard.table.borrow().index_refuses(bytes)
}

/// Counts this shard's registry replica, just recovered, against its
/// index budget.
pub fn count_registry(shard: &Shard) {
    let mut table = shard.table.borrow_mut();
    for id in shard.buckets.borrow().keys() {
        table.count_bucket(id, true);
    }
}

/// PUT, GET and DELETE on `/{bucket_id}`.
pub async fn bucket_request(shard: &Rc<Shard>, head: &RequestHead, bucket: &str) -> Response {
    if matches!(head.method, Method::Put | Method::Delete) {
        if shard.stopping.get() {
            return shard_stopping();
        }
        settle(shard, bucket).await;
        let changing = || shard.bucket_changes.borrow().contains(bucket);
        wait_while(shard, changing).await;
        // A create or delete still being logged (a stalled or full disk):
        // no other create or delete may run beside it.
        if changing() {
            return busy();
        }
    }
    let existing = shard.buckets.borrow().get(bucket).copied();
    match (head.method, existing.map(|b| b.created_at_ms)) {
        (Method::Put, Some(_)) => conflict("bucket_exists", "bucket already exists"),
        (Method::Put, None) if registry_full(shard, bucket) => {
            crate::protocol::response::index_full()
        }
        (Method::Put, None) => create_bucket(shard, bucket).await,
        (Method::Get | Method::Head, Some(created_at_ms)) => {
            match gather_count(shard, bucket).await {
                Ok(count) => buckets::bucket_metadata(bucket, created_at_ms, count),
                Err(reply) => reply,
            }
        }
        (Method::Delete, Some(_)) => {
            delete_bucket(shard, bucket, existing.is_some_and(|b| b.frozen)).await
        }
        (Method::Get | Method::Head | Method::Delete, None) => not_found("bucket not found"),
        _ => Response::error(
            405,
            "method_not_allowed",
            "use PUT, GET or DELETE on a bucket",
        )
        .header("allow", "GET, HEAD, PUT, DELETE, OPTIONS"),
    }
}

/// PUT of a new bucket (extensions §1.2): logged on every shard before it
/// is acknowledged; each shard registers it as its record commits, so no
/// shard admits streams into a bucket that no log holds. A create that
/// fails on some shard is taken back (as an empty bucket's delete), so a
/// retry starts afresh. When it cannot be taken back at once, the delete
/// (or, with a stream already in the bucket, the create) is completed in
/// the background until every shard has logged it, so the shards agree as
/// the next start would make them; requests naming the bucket wait or get
/// 503 `bucket_busy` meanwhile.
async fn create_bucket(shard: &Rc<Shard>, bucket: &str) -> Response {
    shard.bucket_changes.borrow_mut().insert(bucket.to_string());
    let created_at_ms = clock::now_ms();
    let create = Change::Create { created_at_ms };
    let (_, created) = replicate_to_all(shard, change_record(bucket, create)).await;
    let reply = match created {
        Ok(()) => buckets::json_reply(
            201,
            &serde_json::json!({ "bucket_id": bucket, "created_at_ms": created_at_ms }),
        ),
        Err(reply) => reply,
    };
    if reply.status == 201 {
        shard.bucket_changes.borrow_mut().remove(bucket);
        return reply;
    }
    match delete_everywhere(shard, bucket).await {
        Deletion::Deleted => {
            shard.bucket_changes.borrow_mut().remove(bucket);
        }
        Deletion::NotEmpty => {
            monoio::spawn(complete(shard.clone(), bucket.to_string(), create));
        }
        Deletion::Failed { committed, .. } => {
            if committed || registered_anywhere(shard, bucket).await {
                monoio::spawn(complete(shard.clone(), bucket.to_string(), Change::Delete));
            } else {
                shard.bucket_changes.borrow_mut().remove(bucket);
            }
        }
    }
    reply
}

/// A registry change to log on every shard.
#[derive(Clone, Copy)]
enum Change {
    Create { created_at_ms: u64 },
    Delete,
}

/// The mesh message that logs `change` of `bucket` on a shard.
fn change_record(
    bucket: &str,
    change: Change,
) -> impl Fn(flume::Sender<Result<(), CommitError>>) -> MeshMsg + '_ {
    move |ack| match change {
        Change::Create { created_at_ms } => MeshMsg::BucketCreated {
            bucket: bucket.to_string(),
            created_at_ms,
            ack,
        },
        Change::Delete => MeshMsg::BucketDeleted {
            bucket: bucket.to_string(),
            ack,
        },
    }
}

fn freeze(bucket: &str, frozen: bool) -> impl Fn(flume::Sender<Option<bool>>) -> MeshMsg {
    move |reply| MeshMsg::BucketFreeze {
        bucket: bucket.to_string(),
        frozen,
        reply,
    }
}

/// Whether some shard's registry holds `bucket` (left frozen there), or
/// may: a stopped shard did not answer.
async fn registered_anywhere(shard: &Shard, bucket: &str) -> bool {
    let replies = shard.mesh.gather(freeze(bucket, true)).await;
    !replies.complete || replies.replies.iter().any(Option::is_some)
}

/// Logs `change` of `bucket` (a delete: of an empty, frozen bucket) on
/// every shard, retrying each second until all have it (or the shard
/// stops), then lets requests naming the bucket through.
async fn complete(shard: Rc<Shard>, bucket: String, change: Change) {
    while !shard.stopping.get() {
        monoio::time::sleep(Duration::from_secs(1)).await;
        let (_, logged) = replicate_to_all(&shard, change_record(&bucket, change)).await;
        if logged.is_ok() {
            break;
        }
    }
    shard.bucket_changes.borrow_mut().remove(&bucket);
}

/// A bucket change that some shard, stopping, did not answer.
fn shard_stopping() -> Response {
    crate::protocol::response::storage_unavailable("a shard is stopping")
}

/// A PUT or DELETE that met a create or delete of the same bucket still
/// being logged.
fn busy() -> Response {
    crate::protocol::response::retry_soon(
        "bucket_busy",
        "a create or delete of this bucket is still being logged; retry shortly",
    )
}

/// How a delete of a bucket on every shard went.
enum Deletion {
    Deleted,
    /// Some shard holds a stream of it: thawed everywhere.
    NotEmpty,
    /// Some shard could not log it (left frozen where it is registered);
    /// `committed` when some shard did.
    Failed {
        reply: Response,
        committed: bool,
    },
}

/// Freezes `bucket` on every shard (no stream create passes a frozen
/// bucket) while looking for its streams, then logs its delete everywhere
/// if it is empty. Freezing and looking happen in one step on each shard,
/// so no create can slip in between.
async fn delete_everywhere(shard: &Shard, bucket: &str) -> Deletion {
    let Some(holds) = shard.mesh.gather(freeze(bucket, true)).await.all() else {
        // A shard that stopped did not look at its streams.
        shard.mesh.gather(freeze(bucket, false)).await;
        let (reply, committed) = (shard_stopping(), false);
        return Deletion::Failed { reply, committed };
    };
    if holds.into_iter().flatten().any(|holds| holds) {
        shard.mesh.gather(freeze(bucket, false)).await;
        return Deletion::NotEmpty;
    }
    match replicate_to_all(shard, change_record(bucket, Change::Delete)).await {
        (_, Ok(())) => Deletion::Deleted,
        (committed, Err(reply)) => Deletion::Failed {
            reply,
            committed: committed > 0,
        },
    }
}

/// DELETE `/{bucket_id}` (extensions §1.5): 204 once every shard logged
/// it, 409 while it holds streams. A delete no shard could log thaws the
/// bucket, so it takes streams and deletes again once the disk does; one
/// that some shards logged is completed in the background.
async fn delete_bucket(shard: &Rc<Shard>, bucket: &str, already_frozen: bool) -> Response {
    if already_frozen {
        return still_deleting();
    }
    // Marked before the first await: a concurrent PUT or DELETE of the
    // same bucket (all come to this shard, its owner) waits for this one
    // and then sees its outcome (two DELETEs both got 204).
    shard.bucket_changes.borrow_mut().insert(bucket.to_string());
    let reply = match delete_everywhere(shard, bucket).await {
        Deletion::Deleted => Response::new(204),
        Deletion::NotEmpty => conflict("bucket_not_empty", "bucket still has streams"),
        Deletion::Failed { reply, committed } => {
            if committed {
                // The completion keeps the mark until every shard logged it.
                monoio::spawn(complete(shard.clone(), bucket.to_string(), Change::Delete));
                return reply;
            }
            shard.mesh.gather(freeze(bucket, false)).await;
            reply
        }
    };
    shard.bucket_changes.borrow_mut().remove(bucket);
    reply
}

/// GET `/{bucket_id}/streams` (extensions §1.4).
pub async fn list_request(shard: &Rc<Shard>, head: &RequestHead, bucket: &str) -> Response {
    if !matches!(head.method, Method::Get | Method::Head) {
        return Response::error(
            405,
            "method_not_allowed",
            "`streams` is reserved for the bucket listing",
        )
        .header("allow", "GET, HEAD, OPTIONS");
    }
    let query = match buckets::list_query(head) {
        Ok(query) => query,
        Err(reply) => return reply,
    };
    if !shard.buckets.borrow().contains_key(bucket) {
        return not_found("bucket not found");
    }
    match gather_page(shard, bucket, &query).await {
        Ok(all) => buckets::list_page(bucket, &query, all),
        Err(reply) => reply,
    }
}
