//! Bootstrap on the owning shard (extensions §3): the response streams as
//! chunks, part by part; stream bytes are fetched a window at a time (cache
//! or log), never the whole stream into one buffer.

use std::rc::Rc;

use monoio::net::TcpStream;

use super::conn::{respond, responding, send_piece, write_bytes};
use super::dispatch::advertised;
use super::store;
use super::{Shard, blobs, snapshot};
use crate::http::parse::{Method, RequestHead};
use crate::http::render::{self, Persistence, Streamed};
use crate::protocol::bootstrap;
use crate::protocol::response::{not_found, storage_unavailable};
use crate::protocol::{NO_BODY, Request, Response};

/// Bytes fetched at a time.
const WINDOW_BYTES: u64 = 1 << 20;

/// What the parts cover, taken when the request starts.
struct Plan {
    id: u64,
    content_type: String,
    json: bool,
    /// The snapshot and its blob, opened with the plan (no await between):
    /// a publish that supersedes it meanwhile cannot take its bytes away.
    snapshot: Option<(crate::stream::Snapshot, std::fs::File)>,
    start: u64,
    end: u64,
    /// Message ends in `(start, end]`.
    ends: Vec<u64>,
}

fn plan(shard: &Shard, key: &str) -> Result<(Plan, Response, String), Response> {
    let table = shard.table.borrow();
    let stream = table
        .get_visible(key)
        .ok_or_else(|| not_found("stream not found"))?;
    let start = stream
        .snapshot
        .as_ref()
        .map_or(stream.retained, |s| s.offset);
    let end = stream.tail();
    let ends = stream.messages.ends_in(start, end).to_vec();
    let snapshot = match stream.snapshot.as_deref().cloned() {
        None => None,
        Some(s) => match snapshot::open_blob(shard, stream.id, s.offset) {
            Ok(file) => Some((s, file)),
            Err(e) => return Err(blob_unreadable(&e)),
        },
    };
    // Unguessable: a boundary a writer could predict, it could plant in a
    // message and cut every later bootstrap short.
    let random = crate::entropy::random_pair()
        .map_err(|e| storage_unavailable(&format!("no random boundary: {e}")))?;
    let boundary = bootstrap::boundary(random);
    let head = bootstrap::head(stream, &boundary, end);
    let plan = Plan {
        id: stream.id,
        content_type: stream.content_type.clone(),
        json: stream.json,
        snapshot,
        start,
        end,
        ends,
    };
    Ok((plan, head, boundary))
}

fn blob_unreadable(e: &std::io::Error) -> Response {
    storage_unavailable(&format!("reading the snapshot blob failed: {e}"))
}

/// (content type, bytes) of the first part: the snapshot, or empty. Read
/// before the response head goes out, so that a failed read is a 503
/// rather than a cut-off 200.
async fn first_part(plan: &mut Plan) -> Result<(String, Vec<u8>), Response> {
    let Some((snapshot, file)) = plan.snapshot.take() else {
        return Ok(("application/octet-stream".to_string(), Vec::new()));
    };
    let blob = blobs::read_open(file, snapshot.len)
        .await
        .map_err(|e| blob_unreadable(&e))?;
    Ok((snapshot.content_type, blob))
}

pub async fn serve(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    head: &RequestHead,
    key: &str,
    bucket: &str,
    keep: Persistence,
) -> bool {
    if !shard.buckets.borrow().contains_key(bucket) {
        return respond(shard, socket, not_found("bucket not found"), keep, false).await;
    }
    // Errors about a stream carry its tokens too (extensions "Capability
    // Advertisement"); the 200 adds them as it renders.
    if !matches!(head.method, Method::Get | Method::Head) {
        let reply = Response::error(405, "method_not_allowed", "bootstrap takes GET or HEAD")
            .header("allow", "GET, HEAD, OPTIONS");
        let reply = advertised(shard, key, reply);
        return respond(shard, socket, reply, keep, false).await;
    }
    // An expired stream is gone (PROTOCOL.md §5.1 TTL): reaped, it is 404.
    shard.reap_if_expired(key);
    let req = Request::sub_resource(head, &NO_BODY, key, 0);
    if let Err(reply) = bootstrap::check(&req) {
        let reply = advertised(shard, key, reply);
        return respond(shard, socket, reply, keep, false).await;
    }
    let (mut plan, reply_head, boundary) = match plan(shard, key) {
        Ok(planned) => planned,
        Err(reply) => return respond(shard, socket, reply, keep, false).await,
    };
    // The snapshot blob and one window of messages (at most what is
    // retained) are held in memory while the client reads them; a small
    // bootstrap, as any small reply, is not counted.
    let window = WINDOW_BYTES.min(plan.end - plan.start);
    let held = plan.snapshot.as_ref().map_or(0, |(s, _)| s.len) + window;
    let _lease = match shard.lease_counted_reply(usize::try_from(held).unwrap_or(usize::MAX)) {
        Ok(lease) => lease,
        Err(busy) => return respond(shard, socket, busy, keep, false).await,
    };
    // The messages planned are served whole, whatever retention does.
    let pin = store::ReadPin::new(shard, key, plan.id, plan.start);
    let head_only = head.method == Method::Head;
    let first = match head_only {
        true => Default::default(),
        false => match first_part(&mut plan).await {
            Ok(first) => first,
            Err(reply) => return respond(shard, socket, reply, keep, false).await,
        },
    };
    responding(shard, socket, reply_head.status);
    let mut out = Vec::new();
    let streamed = Streamed::for_request(head.http11);
    let keep = keep.and(streamed.keeps_alive());
    render::encode(&reply_head, streamed.framing(), keep, head_only, &mut out);
    if !write_bytes(socket, out).await {
        return false;
    }
    if head_only {
        return keep.alive();
    }
    let ok = parts(&pin, (socket, streamed), &plan, (&boundary, first)).await;
    ok && write_bytes(socket, streamed.end().to_vec()).await && keep.alive()
}

/// The snapshot part, the message parts, the closing delimiter. A part
/// that contains the boundary (or a failed read) ends the response early,
/// so the client sees an incomplete entity rather than a forged one.
async fn parts(
    pin: &store::ReadPin<'_>,
    (socket, streamed): (&mut TcpStream, Streamed),
    plan: &Plan,
    (boundary, (first_type, first)): (&str, (String, Vec<u8>)),
) -> bool {
    let mut out = Vec::new();
    let first = bootstrap::part(&mut out, boundary, &first_type, &first);
    if !first || !send_piece(socket, streamed, &out).await {
        return false;
    }
    let mut from = plan.start;
    let mut next = 0;
    while next < plan.ends.len() {
        let mut to_index = next;
        while to_index + 1 < plan.ends.len() && plan.ends[to_index + 1] - from <= WINDOW_BYTES {
            to_index += 1;
        }
        let to = plan.ends[to_index];
        let Ok(bytes) = pin.fetch(from, to).await else {
            return false;
        };
        let mut out = Vec::with_capacity(bytes.len() + 128 * (to_index - next + 1));
        let mut at = from;
        for &end in &plan.ends[next..=to_index] {
            let message = &bytes[(at - from) as usize..(end - from) as usize];
            let body = &message[..if plan.json && message.last() == Some(&b'\n') {
                message.len() - 1
            } else {
                message.len()
            }];
            if !bootstrap::part(&mut out, boundary, &plan.content_type, body) {
                return false;
            }
            at = end;
        }
        if !send_piece(socket, streamed, &out).await {
            return false;
        }
        from = to;
        next = to_index + 1;
    }
    debug_assert!(from <= plan.end);
    let mut out = Vec::new();
    bootstrap::close(&mut out, boundary);
    send_piece(socket, streamed, &out).await
}
