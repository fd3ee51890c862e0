//! Snapshots on the owning shard (extensions §2): the blob is written to a
//! file of its own and synced (through io_uring) before the SNAPSHOT record
//! that makes it visible is committed; a superseded blob is removed once
//! its successor is committed, and blobs no stream refers to any more
//! (deleted, expired or recreated streams) are swept at startup and on
//! every cleaner pass, except blobs whose publish is in flight. Publishing
//! never blocks appends: only the blob write awaits.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::{Shard, blobs};
use crate::http::parse::{Method, RequestHead};
use crate::protocol::response::not_found;
use crate::protocol::snapshot::{self, Publish};
use crate::protocol::{NO_BODY, Request, Response, records};
use crate::stream::{Command, Snapshot, Table};

fn blob_dir(shard: &Shard) -> PathBuf {
    shard.segments.dir().join("snapshots")
}

/// This shard's blob file of incarnation `stream_id` at `offset`.
fn blob_file(shard: &Shard, stream_id: u64, offset: u64) -> PathBuf {
    blobs::path(&blob_dir(shard), stream_id, offset)
}

/// This shard's blob of incarnation `stream_id` at `offset`, opened: held
/// open, it stays that snapshot's bytes whatever publishes come next.
pub(super) fn open_blob(shard: &Shard, stream_id: u64, offset: u64) -> std::io::Result<File> {
    File::open(blob_file(shard, stream_id, offset))
}

/// Gives fork incarnation `stream_id` the blob held open in `from` as its
/// own snapshot `snap`, pending (kept from the sweep) until the fork's
/// record commits.
pub(super) fn adopt_blob<'a>(
    shard: &'a Shard,
    from: &File,
    stream_id: u64,
    snap: &Snapshot,
) -> std::io::Result<PendingBlob<'a>> {
    let path = blob_file(shard, stream_id, snap.offset);
    let pending = PendingBlob::new(shard, &path);
    blobs::adopt(from, snap.len, &path)?;
    Ok(pending)
}

/// A snapshot blob that could not be stored: the status a log write gets
/// for the same error (`CommitError`: 507 on a full disk, else 503).
fn unavailable(e: &std::io::Error) -> Response {
    let (status, code) = super::commit::CommitError::from_io(e).status();
    Response::error(status, code, &format!("the snapshot was not stored: {e}"))
        .header("retry-after", "1")
}

/// On a record-aware stream every snapshot answer carries its record
/// bounds (extensions §6.10: "Snapshot and bootstrap responses SHOULD
/// include Stream-Record-First and Stream-Record-Next").
pub fn with_record_bounds(shard: &Shard, key: &str, reply: Response) -> Response {
    // A reply that names either bound already says what it means to
    // (a record past the tail names only Stream-Record-Next, §6.6).
    let named = ["stream-record-first", "stream-record-next"];
    if named.iter().any(|name| reply.get_header(name).is_some()) {
        return reply;
    }
    match shard.table.borrow().get_visible(key) {
        Some(stream) => records::bounds_headers(stream, reply),
        None => reply,
    }
}

/// `{stream}/snapshot` and `{stream}/snapshot/{offset}`.
pub async fn serve(
    shard: &Rc<Shard>,
    head: &RequestHead,
    body: &Bytes,
    key: &str,
    bucket: &str,
    offset: Option<&str>,
) -> Response {
    if !shard.buckets.borrow().contains_key(bucket) {
        return not_found("bucket not found");
    }
    let now_ms = shard.reap_if_expired(key);
    let req = Request::sub_resource(head, body, key, now_ms);
    match (head.method, offset) {
        (Method::Get | Method::Head, None) => match shard.table.borrow().get_visible(key) {
            Some(stream) => snapshot::latest(&req, stream),
            None => not_found("stream not found"),
        },
        (Method::Get | Method::Head, Some(at)) => read(shard, key, at).await,
        (Method::Put, at) => publish(shard, &req, at).await,
        (Method::Delete, Some(at)) => match shard.table.borrow().get_visible(key) {
            Some(stream) => snapshot::delete(stream, at),
            None => not_found("stream not found"),
        },
        (_, at) => not_allowed(at.is_some()),
    }
}

/// 405 naming what the resource takes: DELETE only names one snapshot.
fn not_allowed(one_snapshot: bool) -> Response {
    let (allow, message) = match one_snapshot {
        true => (
            "GET, HEAD, PUT, DELETE, OPTIONS",
            "a snapshot takes GET, HEAD, PUT and DELETE",
        ),
        false => (
            "GET, HEAD, PUT, OPTIONS",
            "the latest snapshot takes GET, HEAD and PUT (DELETE names one snapshot)",
        ),
    };
    Response::error(405, "method_not_allowed", message).header("allow", allow)
}

async fn read(shard: &Shard, key: &str, at: &str) -> Response {
    let found = {
        let table = shard.table.borrow();
        let Some(stream) = table.get_visible(key) else {
            return not_found("stream not found");
        };
        snapshot::find(stream, at).map(|s| (stream.id, s.clone()))
    };
    let (id, snap) = match found {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    // The blob is held in memory from its read until the client has it: it
    // counts against `--max-reply-bytes` before it is read (the answer takes
    // its own lease as it is sent, with no await between the two).
    let _lease = match shard.lease_counted_reply(snap.len as usize) {
        Ok(lease) => lease,
        Err(busy) => return busy,
    };
    let Ok(blob) = blobs::read(&blob_file(shard, id, snap.offset), snap.len).await else {
        return not_found("the snapshot was superseded");
    };
    match shard.table.borrow().get_visible(key).filter(|s| s.id == id) {
        Some(stream) => snapshot::read_reply(stream, &snap, blob),
        None => not_found("stream not found"),
    }
}

/// How a publish's decision on the current head state went.
enum Decided {
    /// Refused: the answer, at once.
    Refused(Response),
    /// A repeat of the visible snapshot: its answer once the head state it
    /// was decided on is committed.
    Repeat(Response),
    /// Write this snapshot of incarnation `.0`.
    Write(u64, Snapshot),
}

fn decide(shard: &Shard, req: &Request<'_>, at: Option<&str>) -> Decided {
    let table = shard.table.borrow();
    let Some(stream) = table.get_visible(req.key) else {
        return Decided::Refused(not_found("stream not found"));
    };
    match snapshot::decide_publish(req, stream, at, shard.config.max_snapshot_bytes) {
        Err(reply) => Decided::Refused(reply),
        Ok(Publish::Same(reply)) => Decided::Repeat(reply),
        Ok(Publish::Write(snap)) => Decided::Write(stream.id, snap),
    }
}

async fn publish(shard: &Shard, req: &Request<'_>, at: Option<&str>) -> Response {
    // The incarnation first decided on: a publish never lands on a stream
    // created at the key after that one was deleted or expired.
    let mut bound = None;
    loop {
        let (id, snap) = match decide(shard, req, at) {
            Decided::Refused(reply) => return reply,
            Decided::Repeat(reply) => return shard.when_committed(reply).await,
            Decided::Write(id, _) if bound.is_some_and(|first| first != id) => {
                return not_found("stream not found");
            }
            Decided::Write(id, snap) => (id, snap),
        };
        bound = Some(id);
        // One publish at a time per stream and offset: another waits for
        // the first to end, then is decided again (a repeat of it, or a
        // conflict with it, §2.2), and never rewrites its blob.
        let path = blob_file(shard, id, snap.offset);
        if shard.pending_blobs.borrow().contains(&path) {
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            continue;
        }
        let _pending = PendingBlob::new(shard, &path);
        if let Err(e) = blobs::write(&blob_dir(shard), &path, req.body).await {
            return unavailable(&e);
        }
        // While the blob was written, another publish or a retention may
        // have committed: decided again, with no await before the submit,
        // so §2.2's checks (Stream-Snapshot-Match, the retained offset)
        // hold against what the publish lands on.
        match decide(shard, req, at) {
            Decided::Write(again, decided) if (again, &decided) == (id, &snap) => {
                return commit(shard, req.key, id, snap, &path).await;
            }
            Decided::Write(..) => {
                let _ = std::fs::remove_file(&path);
            }
            Decided::Refused(reply) => {
                let _ = std::fs::remove_file(&path);
                return reply;
            }
            // The same snapshot committed meanwhile: only another publish
            // at this offset could, and the pending blob keeps them apart.
            Decided::Repeat(reply) => return shard.when_committed(reply).await,
        }
    }
}

/// Commits the SNAPSHOT record of a publish whose blob is written at `path`.
async fn commit(shard: &Shard, key: &str, id: u64, snap: Snapshot, path: &Path) -> Response {
    let previous = match shard.table.borrow().get(key).filter(|s| s.id == id) {
        Some(stream) => stream.snapshot.clone(),
        None => return not_found("stream not found"),
    };
    let command = Command::Snapshot {
        key: key.to_string(),
        stream_id: id,
        snapshot: snap.clone(),
    };
    if let Err(e) = shard.submit(vec![command]).await {
        let _ = std::fs::remove_file(path);
        return e.response();
    }
    remove_superseded(shard, key, id, previous.map(|s| *s), &blob_dir(shard));
    snapshot::published(&snap)
}

/// `PUT {stream}/retention/{offset}` and `PUT {stream}/retention?record=R`.
pub async fn serve_retention(
    shard: &Rc<Shard>,
    head: &RequestHead,
    key: &str,
    bucket: &str,
    at: Option<&str>,
) -> Response {
    if !shard.buckets.borrow().contains_key(bucket) {
        return not_found("bucket not found");
    }
    if head.method != Method::Put {
        return Response::error(405, "method_not_allowed", "retention takes PUT")
            .header("allow", "PUT, OPTIONS");
    }
    // An expired stream is gone (PROTOCOL.md §5.1 TTL): reaped, it is 404.
    shard.reap_if_expired(key);
    let decided = {
        let table = shard.table.borrow();
        let Some(stream) = table.get_visible(key) else {
            return not_found("stream not found");
        };
        let req = Request::sub_resource(head, &NO_BODY, key, 0);
        snapshot::decide_retention(&req, stream, at).map(|to| (stream.id, to))
    };
    let command = match decided {
        Err(reply) => return reply,
        Ok((_, None)) => {
            return shard.when_committed(Response::new(204)).await;
        }
        Ok((id, Some((offset, first_record)))) => Command::Retain {
            key: key.to_string(),
            stream_id: id,
            offset,
            first_record,
        },
    };
    shard
        .submit(vec![command])
        .await
        .map_or_else(|e| e.response(), |()| Response::new(204))
}

/// Removes the blob a publish replaced, unless it is visible again or a
/// publish at its offset is in flight (a publish at an older offset may be
/// writing that file anew, to make it visible again).
fn remove_superseded(shard: &Shard, key: &str, id: u64, previous: Option<Snapshot>, dir: &Path) {
    let Some(previous) = previous else { return };
    let current = shard
        .table
        .borrow()
        .get(key)
        .and_then(|s| s.snapshot.as_ref().map(|c| c.offset));
    let path = blobs::path(dir, id, previous.offset);
    if current != Some(previous.offset) && !shard.pending_blobs.borrow().contains(&path) {
        let _ = std::fs::remove_file(path);
    }
}

/// Marks a blob as in flight until its publish ends (committed, failed or
/// dropped with its connection), so that [`sweep`] spares it meanwhile.
pub(super) struct PendingBlob<'a> {
    shard: &'a Shard,
    path: PathBuf,
}

impl<'a> PendingBlob<'a> {
    fn new(shard: &'a Shard, path: &Path) -> Self {
        shard.pending_blobs.borrow_mut().insert(path.to_path_buf());
        Self {
            shard,
            path: path.to_path_buf(),
        }
    }
}

impl Drop for PendingBlob<'_> {
    fn drop(&mut self) {
        self.shard.pending_blobs.borrow_mut().remove(&self.path);
    }
}

/// Tries of `sweep_when_settled` before it leaves the sweep to a later pass.
const SETTLE_TRIES: usize = 8;

/// Sweeps once everything decided is committed. Until then the head state
/// may have stopped referring to a blob that the durable state still
/// needs (a publish superseding it, a delete of its stream), and a crash
/// would restart from the durable state without it.
pub async fn sweep_when_settled(shard: &Shard) {
    for _ in 0..SETTLE_TRIES {
        if shard.commits.settled() {
            return sweep_shard(shard);
        }
        let _ = shard.barrier().await;
    }
}

/// Removes the blobs no stream refers to (crashes between blob and record,
/// deleted, expired or recreated streams), sparing publishes in flight.
/// Only where the head state is the durable one: at startup, or settled.
pub fn sweep_shard(shard: &Shard) {
    let pending = shard.pending_blobs.borrow();
    sweep(shard.segments.dir(), &shard.table.borrow(), &pending);
}

fn sweep(dir: &Path, table: &Table, pending: &std::collections::HashSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir.join("snapshots")) else {
        return;
    };
    let live: std::collections::HashSet<String> = table
        .iter()
        .filter_map(|(_, s)| {
            s.snapshot
                .as_ref()
                .map(|snap| blobs::name(s.id, snap.offset))
        })
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !live.contains(&name) && !pending.contains(&entry.path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_507_and_other_faults_503() {
        let full = unavailable(&std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(full.status, 507);
        assert!(String::from_utf8_lossy(&full.body).contains("insufficient_storage"));
        let quota = unavailable(&std::io::Error::from_raw_os_error(libc::EDQUOT));
        assert_eq!(quota.status, 507);
        let faulty = unavailable(&std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(faulty.status, 503);
    }
}
