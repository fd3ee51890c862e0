//! Forks across shards (PROTOCOL.md §4.2; docs/ARCHITECTURE.md "Forks"). A
//! fork copies what it inherits: the fork's shard asks the source's owner
//! (over the mesh, or itself) for a plan and the inherited bytes, logs them
//! as RELOCATE records of the fork's new incarnation (staged, a bounded
//! amount in flight at a time), then commits the FORK command that makes
//! the stream. A crash before that leaves orphan records that recovery
//! ignores. Deleting a source asks every shard how many forks it holds of
//! that incarnation: with any, the source is soft-deleted (410 on its URL);
//! the last fork's delete (or expiry, or a cleaner pass) sends it a nudge
//! and it is deleted for real, which cascades up a chain of forks.

use std::fs::File;
use std::rc::Rc;

use super::commit::Effect;
use super::fork_lease::Lease;
use super::placement::shard_of;
use super::store::{self, FetchError};
use super::{Shard, buckets, mesh::MeshMsg, slices, snapshot};
use crate::protocol::fork::{self, ForkRequest, ForkSpec, SourcePlan};
use crate::protocol::response::{index_full, not_found, storage_unavailable};
use crate::protocol::{Request, Response, offset, records};
use crate::stream::budget::{STREAM_BYTES, append_index_bytes};
use crate::stream::codec::Entry;
use crate::stream::table::incarnation_id;
use crate::stream::{Command, ForkOrigin, NewStream};

/// Inherited bytes logged before the fork waits for them to commit.
const IN_FLIGHT_BYTES: usize = 8 << 20;
/// The most inherited bytes one fetch reads.
const FETCH_WINDOW_BYTES: u64 = 1 << 20;
/// Messages a source has in flight to one fork.
const CHANNEL_DEPTH: usize = 4;

/// What a source's shard sends a fork's shard, in this order.
pub enum Lent {
    /// The plan, the blob of the snapshot it inherits (held open), and the
    /// lease that keeps the source from a hard delete until the fork is
    /// applied or has failed.
    Plan(Result<Box<(SourcePlan, Option<File>, Lease)>, Response>),
    /// Consecutive inherited appends (or the retained part of the first),
    /// each at its start offset: one message a fetch window, so a source of
    /// many small appends costs the fork's shard one wake-up a window, not
    /// one an append.
    Pieces(Vec<(u64, Vec<u8>)>),
    /// The sub-offset prefix; the last message.
    Prefix(Vec<u8>),
    Failed(Response),
}

fn fetch_failed(error: FetchError) -> Response {
    match error {
        FetchError::Gone => not_found("the source stream was deleted while forking"),
        FetchError::Trimmed { retained } => crate::protocol::read::gone_before(retained),
        FetchError::Io(e) => storage_unavailable(&format!("reading the source failed: {e}")),
    }
}

/// Source side: lends `key` to a fork (runs on the source's owner).
pub fn lend(shard: &Rc<Shard>, key: String, spec: ForkSpec, tx: flume::Sender<Lent>) {
    monoio::spawn(lend_task(shard.clone(), key, spec, tx));
}

async fn lend_task(shard: Rc<Shard>, key: String, spec: ForkSpec, tx: flume::Sender<Lent>) {
    let now_ms = shard.reap_if_expired(&key);
    let plan = fork::plan_source(shard.table.borrow().get(&key), &spec, now_ms);
    let plan = match plan {
        Ok(plan) => plan,
        Err(reply) => {
            let _ = tx.send_async(Lent::Plan(Err(reply))).await;
            return;
        }
    };
    let (id, pieces) = (plan.source_id, plan.pieces.clone());
    let prefix = (plan.anchor, plan.prefix_end);
    // Opened with the plan (no await between): the blob of exactly the
    // snapshot planned, whatever publishes come while the fork copies.
    let blob = match plan
        .snapshot
        .as_ref()
        .map(|snap| snapshot::open_blob(&shard, id, snap.offset))
    {
        None => None,
        Some(Ok(file)) => Some(file),
        Some(Err(e)) => {
            let reply =
                storage_unavailable(&format!("the source's snapshot blob is unreadable: {e}"));
            let _ = tx.send_async(Lent::Plan(Err(reply))).await;
            return;
        }
    };
    shard.fork_leases.start(id);
    let lease = Lease::new(shard.mesh.clone(), shard.index, key.clone(), id);
    if tx
        .send_async(Lent::Plan(Ok(Box::new((plan, blob, lease)))))
        .await
        .is_err()
    {
        return;
    }
    for window in windows(&pieces) {
        let (from, to) = (
            window[0].0,
            window[window.len() - 1].0 + window[window.len() - 1].1,
        );
        let bytes = match store::fetch(&shard, &key, id, from, to).await {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = tx.send_async(Lent::Failed(fetch_failed(e))).await;
                return;
            }
        };
        let lent = window
            .iter()
            .map(|&(start, len)| {
                let at = (start - from) as usize;
                (start, bytes[at..at + len as usize].to_vec())
            })
            .collect();
        if tx.send_async(Lent::Pieces(lent)).await.is_err() {
            return;
        }
    }
    let lent = match store::fetch(&shard, &key, id, prefix.0, prefix.1).await {
        Ok(bytes) => Lent::Prefix(bytes),
        Err(e) => Lent::Failed(fetch_failed(e)),
    };
    let _ = tx.send_async(lent).await;
}

/// Inherited appends fetched together: consecutive pieces up to
/// `FETCH_WINDOW_BYTES`. One fetch reads a window's runs of the log
/// sequentially where a fetch per append paid a read per append (forks of
/// forks hold data no longer cached, one piece per inherited append).
fn windows(pieces: &[(u64, u64)]) -> Vec<&[(u64, u64)]> {
    let mut out = Vec::new();
    let mut first = 0;
    for i in 1..=pieces.len() {
        let span = |end: usize| pieces[end - 1].0 + pieces[end - 1].1 - pieces[first].0;
        let ends_here = i == pieces.len()
            || pieces[i].0 != pieces[i - 1].0 + pieces[i - 1].1
            || span(i + 1) > FETCH_WINDOW_BYTES;
        if ends_here {
            out.push(&pieces[first..i]);
            first = i;
        }
    }
    out
}

/// Fork side: a PUT with `Stream-Forked-From` on the fork's owner, in
/// `bucket` on the extensions' surface.
pub async fn create(
    shard: &Rc<Shard>,
    req: &Request<'_>,
    request: ForkRequest,
    bucket: Option<&str>,
) -> Response {
    if let Some(reply) = recreate(shard, req.key, &request) {
        return shard.when_committed(reply).await;
    }
    if shard.table.borrow().index_refuses(STREAM_BYTES) {
        return index_full();
    }
    let (tx, rx) = flume::bounded(CHANNEL_DEPTH);
    let owner = shard_of(&request.source, shard.shards());
    let (key, spec) = (request.source.clone(), request.spec.clone());
    if owner == shard.index {
        lend(shard, key, spec, tx);
    } else if !shard
        .mesh
        .send(owner, MeshMsg::ForkSource { key, spec, tx })
    {
        return storage_unavailable("the source's shard is stopping");
    }
    // The lease ends when this function returns: after the FORK applied.
    let (plan, source_blob, _lease) = match rx.recv_async().await {
        Ok(Lent::Plan(Ok(planned))) => *planned,
        Ok(Lent::Plan(Err(reply)) | Lent::Failed(reply)) => return reply,
        _ => return storage_unavailable("the source's shard did not answer"),
    };
    // Each inherited append is a message at least: a fork the budget has
    // no room for is refused before it copies (exactly, after).
    let inherited = append_index_bytes(1).saturating_mul(plan.pieces.len() as u64);
    if shard.table.borrow().index_refuses(inherited + STREAM_BYTES) {
        return index_full();
    }
    let wanted = slices::worth_slicing_fork(&plan, req.body.len());
    let normalized = slices::ahead(wanted, req.body).await;
    let config = match fork::configure(&request, &plan, req.body, normalized) {
        Ok(config) => config,
        Err(reply) => return reply,
    };
    // The sub-offset prefix and the body are one message of the fork, one
    // record in the log: no larger than a message may be (a record past a
    // segment could not be written).
    let first_message = (plan.prefix_end - plan.anchor).saturating_add(req.body.len() as u64);
    if first_message > shard.config.max_body_bytes {
        return Response::error(
            413,
            "body_too_large",
            "the sub-offset prefix and the body together exceed --max-body-bytes",
        );
    }
    // Stamped now, not when the request arrived: the plan's wait may have
    // let another create of the key in (and a TTL counts from here).
    let now_ms = shard
        .table
        .borrow()
        .create_stamp(req.key, crate::clock::now_ms());
    shard.table.borrow_mut().reserve_stamp(req.key, now_ms);
    let id = incarnation_id(req.key, now_ms);
    let json = crate::protocol::content_type::is_json(&config.content_type);
    let _staging = Staging::begin(shard, id);
    let prefix = match copy(shard, req.key, id, json, &rx).await {
        Ok(prefix) => prefix,
        Err(reply) => return reply,
    };
    // A DELETE of the bucket in progress decides first (the create is
    // answered after its outcome); no await from here to the submit.
    if let Some(b) = bucket {
        buckets::settle(shard, b).await;
    }
    // Another request created the stream while this one copied: answer
    // once that is committed (it may yet fail), as at the top.
    if let Some(reply) = recreate(shard, req.key, &request) {
        return shard.when_committed(reply).await;
    }
    // The bucket may have been deleted, or frozen for deletion, meanwhile
    // (extensions §1.5: only an empty bucket goes). Checked with no await
    // before the submit: a freeze after it counts this fork.
    if let Some(Err(reply)) = bucket.map(|b| buckets::admits_create(shard, b)) {
        return reply;
    }
    let mut data = prefix;
    data.extend_from_slice(&config.body);
    if index_refuses_fork(shard, id, json, &data) {
        return index_full();
    }
    // After these checks, with no await before the submit: no other fork of
    // this key can take the blob's name meanwhile.
    let _inherited = match (&plan.snapshot, &source_blob) {
        (Some(snap), Some(from)) => match snapshot::adopt_blob(shard, from, id, snap) {
            Ok(pending) => Some(pending),
            Err(e) => {
                return storage_unavailable(&format!("inheriting the source's snapshot: {e}"));
            }
        },
        _ => None,
    };
    let new = NewStream {
        key: req.key.to_string(),
        content_type: config.content_type,
        ttl_secs: config.lifetime.ttl_secs,
        expires_at: config.lifetime.expires_at,
        expires_at_ms: config.lifetime.expires_at_ms,
        closed: request.closed,
        data,
        now_ms,
        attrs: request.attrs.clone(),
    };
    let command = Command::Fork {
        new,
        start: plan.anchor,
        origin: fork::origin(&request, &plan),
        retained: plan.retained,
        first_record: plan.first_record,
        snapshot: plan.snapshot.clone().map(Box::new),
    };
    // Submitting applies it: the 201 describes this incarnation, built
    // before the wait for the disk lets anything else change the key.
    let ticket = shard.submit(vec![command]);
    let reply = created(shard, req, plan.prefix_end);
    match ticket.await {
        Ok(()) => reply,
        Err(e) => e.response(),
    }
}

/// Whether the fork incarnation `id`, with its staged inherited data and
/// its own `data`, would take the shard past its index budget.
fn index_refuses_fork(shard: &Shard, id: u64, json: bool, data: &[u8]) -> bool {
    let table = shard.table.borrow();
    let own = match records::messages_in(json, data) {
        0 => 0,
        messages => append_index_bytes(messages),
    };
    table.index_refuses(STREAM_BYTES + table.staged_index_bytes(id) + own)
}

/// A fork's staging area, dropped however the fork ends (committed, failed,
/// or its request cancelled): the FORK command's apply has taken the staged
/// extents by then, or they are abandoned and late commits are ignored.
struct Staging<'a> {
    shard: &'a Shard,
    id: u64,
}

impl<'a> Staging<'a> {
    fn begin(shard: &'a Shard, id: u64) -> Staging<'a> {
        shard.table.borrow_mut().begin_stage(id);
        Staging { shard, id }
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        self.shard.table.borrow_mut().unstage(self.id);
    }
}

/// The answer to a fork PUT on a stream that exists already.
fn recreate(shard: &Shard, key: &str, request: &ForkRequest) -> Option<Response> {
    let table = shard.table.borrow();
    table
        .get(key)
        .map(|existing| fork::recreate(existing, request))
}

/// Logs the inherited pieces as RELOCATE records of incarnation `id`,
/// staging their locations as they commit; returns the prefix.
async fn copy(
    shard: &Shard,
    key: &str,
    id: u64,
    json: bool,
    rx: &flume::Receiver<Lent>,
) -> Result<Vec<u8>, Response> {
    let mut in_flight = 0;
    let mut last: Option<super::commit::Ticket> = None;
    loop {
        let pieces = match rx.recv_async().await {
            Ok(Lent::Pieces(pieces)) => pieces,
            Ok(Lent::Prefix(prefix)) => {
                if let Some(ticket) = last {
                    ticket.await.map_err(|e| e.response())?;
                }
                return Ok(prefix);
            }
            Ok(Lent::Failed(reply)) => return Err(reply),
            _ => return Err(storage_unavailable("the source's shard stopped lending")),
        };
        in_flight += pieces.iter().map(|(_, bytes)| bytes.len()).sum::<usize>();
        let entries = pieces
            .into_iter()
            .map(|(start, bytes)| relocation(key, id, json, start, bytes))
            .collect();
        last = shard.submit_entries(entries).map_err(|e| e.response())?;
        if in_flight >= IN_FLIGHT_BYTES || shard.commit_queue_full() {
            if let Some(ticket) = last.take() {
                ticket.await.map_err(|e| e.response())?;
            }
            in_flight = 0;
        }
    }
}

/// The RELOCATE record of one inherited append at `start` and the staging
/// of its location and message ends once it commits.
fn relocation(key: &str, id: u64, json: bool, start: u64, bytes: Vec<u8>) -> (Entry, Effect) {
    let len = bytes.len() as u64;
    let ends = match json {
        true => crate::stream::newlines::positions(&bytes)
            .map(|i| start + i as u64 + 1)
            .collect(),
        false => vec![start + len],
    };
    let entry = Entry::Relocate {
        key: key.to_string(),
        stream_id: id,
        start,
        data: bytes,
    };
    let effect = Effect::Stage {
        stream_id: id,
        start,
        len,
        ends,
    };
    (entry, effect)
}

/// The 201 of a new fork, with its record range on JSON streams: the
/// records of its own body, which begin at `own_start`, after what it
/// inherited, the sub-offset prefix included (extensions §6.3: a fork
/// without a body creates no records, so its range is empty at the tail).
fn created(shard: &Shard, req: &Request, own_start: u64) -> Response {
    let table = shard.table.borrow();
    // Absent only when the submit failed (its ticket says how).
    let Some(stream) = table.get(req.key) else {
        return not_found("stream not found");
    };
    let reply = Response::new(201)
        .header("location", crate::protocol::create::location(req))
        .header("content-type", stream.content_type.clone())
        .header("stream-next-offset", offset::format(stream.head_tail()))
        .header_if(stream.closed, "stream-closed", "true");
    let first = stream.messages.ordinal_at(own_start).unwrap_or(0);
    records::ack(stream, reply, first, stream.messages.next())
}

/// DELETE (PROTOCOL.md §4.2, §5.4): soft when any shard holds a fork of
/// this incarnation.
pub async fn delete(shard: &Rc<Shard>, key: &str) -> Response {
    // Extensions §6: the reply to a stream operation on a JSON stream
    // advertises the record model, a DELETE's included.
    let Some((id, records)) = shard
        .table
        .borrow()
        .get(key)
        .map(|s| (s.id, records::active(s)))
    else {
        return not_found("stream not found");
    };
    // A fork that may exist keeps the source, soft-deleted: a soft delete
    // is collected later, a hard one would strand the forks.
    let none = no_forks(shard, id).await;
    let (soft, origin) = match shard.table.borrow().get(key) {
        Some(s) if s.id == id && s.soft_deleted => return fork::soft_deleted_reply(false),
        Some(s) if s.id == id => (!none, s.fork.clone()),
        _ => return not_found("stream not found"),
    };
    let (owned, stream_id) = (key.to_string(), id);
    let command = match soft {
        true => Command::SoftDelete {
            key: owned,
            stream_id,
        },
        false => Command::Delete {
            key: owned,
            stream_id,
        },
    };
    if let Err(e) = shard.submit(vec![command]).await {
        return e.response();
    }
    // The answer waits for what this delete lets go: a source it was the
    // last fork of (and that one's source...), or, soft-deleted, itself if
    // its forks went meanwhile. A soft delete always counts again: a fork
    // deleted after a shard counted it nudges this source, and a nudge
    // that came before the soft delete applied found nothing to collect.
    match (soft, origin) {
        (false, Some(origin)) => settle_source(shard, &origin).await,
        (true, _) => collect_now(shard, key, id).await,
        _ => {}
    }
    match records {
        true => Response::new(204).header("stream-extensions", records::TOKEN),
        false => Response::new(204),
    }
}

/// Whether no fork of `source_id` can exist: every shard counts none of
/// it (a stopped shard that did not answer may hold some), and no fork
/// planned but not yet applied, which no shard counts, may exist (no lease
/// was held, or ended, while the counts were gathered).
async fn no_forks(shard: &Shard, source_id: u64) -> bool {
    let watch = shard.fork_leases.watch(source_id);
    let counts = shard
        .mesh
        .gather(|reply| MeshMsg::ForkRefs { source_id, reply })
        .await;
    let counted: Option<usize> = counts.all().map(|each| each.into_iter().sum());
    counted == Some(0) && !watch.leased()
}

/// Deletes the soft-deleted `key` (incarnation `id`) once no fork of it is
/// left; its own delete nudges its source in turn.
pub fn collect(shard: &Rc<Shard>, key: String, id: u64) {
    let shard = shard.clone();
    monoio::spawn(async move { collect_now(&shard, &key, id).await });
}

/// `collect`, awaited, and with it the collection of its source, and so on
/// up the chain: a fork's DELETE answers once every source it held is gone.
async fn collect_now(shard: &Shard, key: &str, id: u64) {
    // One collection of a source at a time (a delete's nudge and a client's
    // settle race): a later asker waits for it, and the chain it settles,
    // then checks again itself: what it was asked for (a lease that ended,
    // a fork deleted) may have come after the running one counted forks.
    if let Some(running) = join_collection(shard, id) {
        let _ = running.recv_async().await;
        if let Some(after_ours) = join_collection(shard, id) {
            // Started after the one waited for ended: it counts anew.
            let _ = after_ours.recv_async().await;
            return;
        }
    }
    let _running = Collecting { shard, id };
    collect_alone(shard, key, id).await;
}

/// Joins the collection of source incarnation `id` in progress (the
/// receiver completes when it ends), or claims it for the caller (`None`).
fn join_collection(shard: &Shard, id: u64) -> Option<flume::Receiver<()>> {
    let mut running = shard.fork_collections.borrow_mut();
    match running.get_mut(&id) {
        Some(waiters) => {
            let (done, finished) = flume::bounded(1);
            waiters.push(done);
            Some(finished)
        }
        None => {
            running.insert(id, Vec::new());
            None
        }
    }
}

/// A collection of source incarnation `id` in progress; its end (however
/// it ends) releases the askers that waited for it.
struct Collecting<'a> {
    shard: &'a Shard,
    id: u64,
}

impl Drop for Collecting<'_> {
    fn drop(&mut self) {
        let waiters = self.shard.fork_collections.borrow_mut().remove(&self.id);
        for done in waiters.into_iter().flatten() {
            let _ = done.send(());
        }
    }
}

async fn collect_alone(shard: &Shard, key: &str, id: u64) {
    let soft = |shard: &Shard| {
        let table = shard.table.borrow();
        table
            .get(key)
            .filter(|s| s.id == id && s.soft_deleted)
            .map(|s| s.fork.clone())
    };
    // Gone already (a delete decided by a nudge may still be committing:
    // the caller is answered once it is), or kept for its forks.
    if soft(shard).is_none() {
        let _ = shard.barrier().await;
        return;
    }
    let none = no_forks(shard, id).await;
    let Some(origin) = soft(shard).filter(|_| none) else {
        let _ = shard.barrier().await;
        return;
    };
    let command = Command::Delete {
        key: key.to_string(),
        stream_id: id,
    };
    if shard.submit(vec![command]).await.is_ok()
        && let Some(origin) = origin
    {
        settle_source(shard, &origin).await;
    }
}

/// Asks the owner of `origin`'s source to collect it now, and waits until
/// it has (or decided not to, or its shard is stopping).
async fn settle_source(shard: &Shard, origin: &ForkOrigin) {
    let owner = shard_of(&origin.source, shard.shards());
    let (done, settled) = flume::bounded(1);
    let msg = MeshMsg::ForkSettle {
        source: origin.source.clone(),
        source_id: origin.source_id,
        done,
    };
    if shard.mesh.send(owner, msg) {
        let _ = settled.recv_async().await;
    }
}

/// After a fork is deleted: tell its source's owner to check on it.
pub fn released(shard: &Shard, origin: &ForkOrigin) {
    let owner = shard_of(&origin.source, shard.shards());
    let msg = MeshMsg::ForkReleased {
        source: origin.source.clone(),
        source_id: origin.source_id,
    };
    shard.mesh.send(owner, msg);
}

/// A cleaner pass: collect soft-deleted streams whose nudge was lost (a
/// crash between a fork's delete and its source's).
pub fn sweep(shard: &Rc<Shard>) {
    let soft: Vec<(String, u64)> = shard
        .table
        .borrow()
        .iter()
        .filter(|(_, s)| s.soft_deleted)
        .map(|(k, s)| (k.clone(), s.id))
        .collect();
    for (key, id) in soft {
        collect(shard, key, id);
    }
}

/// The fork messages of the mesh.
pub fn handle_mesh(shard: &Rc<Shard>, msg: MeshMsg) {
    match msg {
        MeshMsg::ForkSource { key, spec, tx } => lend(shard, key, spec, tx),
        MeshMsg::ForkRefs { source_id, reply } => {
            let _ = reply.send(shard.table.borrow().fork_count(source_id));
        }
        MeshMsg::ForkReleased { source, source_id } => collect(shard, source, source_id),
        MeshMsg::ForkSettle {
            source,
            source_id,
            done,
        } => {
            let shard = shard.clone();
            monoio::spawn(async move {
                collect_now(&shard, &source, source_id).await;
                let _ = done.send(());
            });
        }
        MeshMsg::ForkLeaseEnded { source, source_id } => {
            shard.fork_leases.end(source_id);
            collect(shard, source, source_id);
        }
        _ => unreachable!("only fork messages come here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_join_contiguous_pieces_up_to_the_window() {
        let mb = FETCH_WINDOW_BYTES;
        let pieces = [
            (0, 10),
            (10, 5),
            (20, 5),
            (25, mb),
            (25 + mb, 1),
            (26 + mb, 2 * mb),
        ];
        let got: Vec<Vec<(u64, u64)>> = windows(&pieces).iter().map(|w| w.to_vec()).collect();
        let want = [
            vec![(0, 10), (10, 5)],
            vec![(20, 5)],
            vec![(25, mb)],
            vec![(25 + mb, 1)],
            vec![(26 + mb, 2 * mb)],
        ];
        assert_eq!(got, want);
        assert!(windows(&[]).is_empty());
    }
}
