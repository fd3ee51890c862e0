//! Executes one request on the shard that owns it: runs the protocol's
//! decision, applies committed commands, writes the reply or hands the
//! connection to a live read.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::net::TcpStream;

use super::conn::respond;
use super::{Shard, batch, bootstrap, buckets, fork, live, metrics, slices, snapshot};
use crate::http::parse::{BodyKind, Method, RequestHead};
use crate::http::render::{self, Persistence};
use crate::protocol::response::{bad_request, not_found};
use crate::protocol::{self, Action, Request, Response, Surface, Target, records};

/// Handles one request; returns whether the connection stays open.
pub async fn handle(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    head: &RequestHead,
    body: Vec<u8>,
    target: Target,
) -> bool {
    let keep = Persistence::of(head.keep_alive && !shard.stopping.get(), head.http11);
    let is_head = head.method == Method::Head;
    // Only an append (POST) may keep its body in the cache.
    let body = match head.method == Method::Post {
        true => super::body::shared(body),
        false => Bytes::from(body),
    };
    if head.method == Method::Options {
        let requested = head.header("access-control-request-headers");
        return respond(shard, socket, render::preflight(requested), keep, false).await;
    }
    // RFC 9110 §15.6.2: a method the server does not recognize (methods are
    // case-sensitive: `get` is not GET) is 501; a known one a resource does
    // not take is 405.
    if head.method == Method::Other {
        let reply = Response::error(501, "not_implemented", "unknown request method");
        return respond(shard, socket, reply, keep, false).await;
    }
    let has_body = !matches!(head.body, BodyKind::None | BodyKind::Length(0));
    if has_body && let Err(reply) = protocol::headers::check_content_encoding(head) {
        return respond(shard, socket, reply, keep, is_head).await;
    }
    if let Target::StreamExtension { key, resource, .. } = &target
        && let Some(gone) = extension_preamble(shard, head.method, key, resource).await
    {
        return respond(shard, socket, gone, keep, is_head).await;
    }
    let reply = match target {
        Target::Stream {
            surface,
            key,
            bucket,
        } => {
            let stream = StreamRequest {
                head,
                body: &body,
                surface,
                key: &key,
                bucket: bucket.as_deref(),
                attrs: false,
            };
            return stream_request(shard, socket, stream, keep).await;
        }
        Target::StreamExtension {
            resource,
            key,
            bucket,
        } if resource == "attrs" => {
            let stream = StreamRequest {
                head,
                body: &body,
                surface: Surface::Bucket,
                key: &key,
                bucket: Some(&bucket),
                attrs: true,
            };
            return stream_request(shard, socket, stream, keep).await;
        }
        Target::StreamExtension {
            resource,
            key,
            bucket,
        } if resource == "append-batch" => {
            let reply = batch::serve(shard, head, &body, &key, &bucket).await;
            advertised(shard, &key, reply)
        }
        Target::StreamExtension {
            resource,
            key,
            bucket,
        } if names(&resource, "snapshot") => {
            let at = resource.strip_prefix("snapshot/");
            let reply = snapshot::serve(shard, head, &body, &key, &bucket, at).await;
            let reply = snapshot::with_record_bounds(shard, &key, reply);
            advertised(shard, &key, reply)
        }
        Target::StreamExtension {
            resource,
            key,
            bucket,
        } if resource == "bootstrap" => {
            return bootstrap::serve(shard, socket, head, &key, &bucket, keep).await;
        }
        Target::StreamExtension {
            resource,
            key,
            bucket,
        } if names(&resource, "retention") => {
            let at = resource.strip_prefix("retention/");
            let reply = snapshot::serve_retention(shard, head, &key, &bucket, at).await;
            advertised(shard, &key, reply)
        }
        Target::StreamExtension { resource, .. } => Response::error(
            404,
            "extension_unavailable",
            &format!("the {resource} sub-resource is not available on this server yet"),
        ),
        Target::Bucket { bucket } => buckets::bucket_request(shard, head, &bucket).await,
        Target::BucketStreams { bucket } => buckets::list_request(shard, head, &bucket).await,
        Target::Health | Target::Ready | Target::Metrics if !is_read(head) => {
            Response::error(405, "method_not_allowed", "this resource takes GET or HEAD")
                .header("allow", "GET, HEAD, OPTIONS")
        }
        Target::Health => crate::health::live(),
        Target::Ready => crate::health::ready(),
        Target::Metrics => metrics::serve(shard).await,
        Target::NotFound => not_found("no such resource"),
        Target::Reserved => not_found(
            "the __ds namespace is reserved for Durable Streams control APIs \
             (subscriptions are not served)",
        ),
        Target::Invalid(message) => bad_request(message),
    };
    respond(shard, socket, reply, keep, is_head).await
}

/// Forks and soft deletes (PROTOCOL.md §4.2): the answer to a request on
/// a soft-deleted stream, a fork PUT, or a DELETE (soft when forks exist);
/// `None` for everything else.
async fn lifecycle(
    shard: &Rc<Shard>,
    sr: &StreamRequest<'_>,
    req: &Request<'_>,
) -> Option<Response> {
    let method = sr.head.method;
    let is_put = method == Method::Put;
    let soft = protocol::fork::soft_deleted_refusal(&shard.table.borrow(), sr.key, is_put);
    if soft.is_some() {
        return soft;
    }
    match method {
        Method::Put if !sr.attrs => match protocol::fork::parse(req) {
            Ok(None) => None,
            Err(reply) => Some(reply),
            Ok(Some(_)) if shard.commit_queue_full() => Some(queue_full()),
            Ok(Some(request)) => Some(fork::create(shard, req, request, sr.bucket).await),
        },
        Method::Delete if !sr.attrs => Some(fork::delete(shard, sr.key).await),
        _ => None,
    }
}

/// Extensions "Capability Advertisement": a reply about a stream carries
/// the tokens active for it (reads and bootstrap add theirs as they render).
pub(super) fn advertised(shard: &Shard, key: &str, reply: Response) -> Response {
    match shard.table.borrow().get(key) {
        Some(stream) => records::advertise(stream, reply),
        None => reply,
    }
}

/// 503 while the shard's commit queue is full: the disk is behind.
pub fn queue_full() -> Response {
    crate::protocol::response::retry_soon(
        "commit_queue_full",
        "too many writes are waiting for the disk; retry shortly",
    )
}

struct StreamRequest<'a> {
    head: &'a RequestHead,
    body: &'a Bytes,
    surface: Surface,
    key: &'a str,
    bucket: Option<&'a str>,
    /// The request targets the stream's `/attrs` (extensions §5).
    attrs: bool,
}

/// The most `--producer-gap-wait-ms` waits one append's gap wait spans.
const GAP_WAITS: u32 = 50;

/// The decision on `req`. A producer append ahead of its sequence (a gap,
/// PROTOCOL.md §5.2.1) waits up to `--producer-gap-wait-ms` for the next
/// append before it, decided again after each commit of its stream: a client that
/// pipelines a producer's appends over several connections (the official
/// clients do) sends them in order, but a connection accepted by another
/// shard arrives here later (the handoff) and would otherwise get a 409.
async fn decide(shard: &Shard, attrs: bool, req: &Request<'_>) -> Action {
    let decide_now = || match attrs {
        true => protocol::attrs::decide(req, &shard.table.borrow()),
        false => protocol::decide_stream(req, &shard.table.borrow()),
    };
    let mut action = decide_now();
    let wait = Duration::from_millis(shard.config.producer_gap_wait_ms);
    if wait.is_zero() || !is_sequence_gap(&action) {
        return action;
    }
    // The wait is for the next sequence number: each one that lands starts
    // it again, so a pipeline whose appends commit one after another (each
    // waits for the one before it) is not refused for its depth; in all it
    // lasts at most `GAP_WAITS` waits (a connection is not held for ever
    // by an append far ahead of a producer that keeps landing others).
    let started = Instant::now();
    let last_deadline = started + wait * GAP_WAITS;
    let mut deadline = started + wait;
    let mut expected = expected_seq(&action).map(str::to_string);
    // The append waits on this incarnation only: one created at the key
    // after it expired or was deleted is another stream (a 404 for it).
    let id = shard.table.borrow().get(req.key).map(|s| s.id);
    let audience = shard.waiters.join(req.key);
    while is_sequence_gap(&action) && !shard.stopping.get() {
        let changed = audience.signal.changed(audience.signal.generation());
        let timed_out = monoio::time::timeout_at(deadline.into(), changed)
            .await
            .is_err();
        // Decided again at the deadline too: the append it waits for may
        // have applied and still be committing (a large body), which wakes
        // no one yet; the answer then follows it instead of naming it missing.
        action = match shard.table.borrow().get(req.key).map(|s| s.id) == id {
            true => decide_now(),
            false => Action::Reply(not_found("stream not found")),
        };
        if timed_out {
            break;
        }
        let now_expected = expected_seq(&action);
        if now_expected.is_some() && now_expected != expected.as_deref() {
            expected = now_expected.map(str::to_string);
            deadline = (Instant::now() + wait).min(last_deadline);
        }
    }
    shard.waiters.release(req.key, audience);
    action
}

fn is_read(head: &RequestHead) -> bool {
    matches!(head.method, Method::Get | Method::Head)
}

fn is_sequence_gap(action: &Action) -> bool {
    expected_seq(action).is_some()
}

/// The sequence number a gap's 409 says the producer needs next.
fn expected_seq(action: &Action) -> Option<&str> {
    match action {
        Action::Reply(reply) if reply.status == 409 => reply.get_header("producer-expected-seq"),
        _ => None,
    }
}

/// The refusal of an append that waits for `100 Continue` (RFC 9110
/// §10.1.1), when its head alone decides it: the client is not invited to
/// send a body that would be refused on arrival. None for any other
/// request, and for an append the head does not refuse.
pub async fn refused_before_body(
    shard: &Shard,
    head: &RequestHead,
    target: &Target,
) -> Option<Response> {
    let Target::Stream { key, bucket, .. } = target else {
        return None;
    };
    let waits = head.expect_continue && matches!(head.body, BodyKind::Length(n) if n > 0);
    if !waits || head.method != Method::Post {
        return None;
    }
    if let Err(reply) = protocol::headers::check_content_encoding(head) {
        return Some(reply);
    }
    let now_ms = shard.reap_if_expired(key);
    let bucket_missing = bucket
        .as_deref()
        .is_some_and(|b| !shard.buckets.borrow().contains_key(b));
    let refusal = match bucket_missing {
        true => not_found("bucket not found"),
        false => protocol::append::refusal_before_body(head, key, &shard.table.borrow())?,
    };
    // A refused write slides `Stream-TTL` as any write does (§5.1).
    shard.touch(key, now_ms).await;
    // As any write's answer: out once what it saw is committed.
    Some(advertised(shard, key, shard.when_committed(refusal).await))
}

/// Before a stream's sub-resource is served: its read or write slides
/// `Stream-TTL` as the base's do (bootstrap, snapshot and retention here;
/// append-batch and attrs on their own paths), then a soft-deleted stream
/// is 410 (PROTOCOL.md §4.2: "for all client-facing operations"), also
/// when a DELETE soft-deleted it during the slide's wait.
async fn extension_preamble(
    shard: &Shard,
    method: Method,
    key: &str,
    resource: &str,
) -> Option<Response> {
    let slides =
        resource == "bootstrap" || names(resource, "snapshot") || names(resource, "retention");
    if slides {
        slide_ttl(shard, key, method).await;
    }
    let gone = protocol::fork::soft_deleted_refusal(&shard.table.borrow(), key, false)?;
    Some(advertised(shard, key, gone))
}

/// Whether the sub-resource path `resource` is `kind` or one of its items
/// (`kind/{offset}`).
fn names(resource: &str, kind: &str) -> bool {
    resource
        .strip_prefix(kind)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Slides `key`'s `Stream-TTL` for a read or write (PROTOCOL.md §5.1:
/// "each read or write operation resets the expiry countdown"; HEAD does
/// not; the extensions defer to the base), an expired stream reaped first.
/// The access record is awaited before anything is decided, so the
/// decision sees the state after it.
pub(super) async fn slide_ttl(shard: &Shard, key: &str, method: Method) {
    if !matches!(method, Method::Head | Method::Options) {
        let now_ms = shard.reap_if_expired(key);
        shard.touch(key, now_ms).await;
    }
}

/// Extensions §1.6: stream operations need the bucket (404 without it);
/// creating a new stream also needs it not to be mid-delete.
fn bucket_admits(shard: &Shard, bucket: &str, sr: &StreamRequest) -> Result<(), Response> {
    if creates(shard, sr) {
        return buckets::admits_create(shard, bucket);
    }
    match shard.buckets.borrow().contains_key(bucket) {
        true => Ok(()),
        false => Err(not_found("bucket not found")),
    }
}

/// Whether `action` is a PUT or POST of a stream that would succeed: the
/// writes whose preconditions count (RFC 9110 §13.2.1).
fn writes_ahead(sr: &StreamRequest, action: &Action) -> bool {
    let succeeds = match action {
        Action::Commit { .. } => true,
        Action::Reply(reply) => (200..300).contains(&reply.status),
        Action::Read(_) => false,
    };
    succeeds && !sr.attrs && matches!(sr.head.method, Method::Put | Method::Post)
}

/// The 412 of a write whose If-Match or If-None-Match fails against the
/// stream as it is now (`protocol::conditions`). A DELETE of a visible
/// stream always succeeds, so its preconditions count whenever it exists.
fn failed_precondition(shard: &Shard, sr: &StreamRequest) -> Option<Response> {
    let table = shard.table.borrow();
    let stream = table.get_visible(sr.key);
    if sr.head.method == Method::Delete && stream.is_none() {
        return None;
    }
    protocol::conditions::failed(sr.head, stream)
}

/// A PUT of a key this shard does not hold: a create (or fork).
fn creates(shard: &Shard, sr: &StreamRequest) -> bool {
    sr.head.method == Method::Put && shard.table.borrow().get(sr.key).is_none()
}

async fn stream_request(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    sr: StreamRequest<'_>,
    keep: Persistence,
) -> bool {
    let is_head = sr.head.method == Method::Head;
    // Reads and writes slide `Stream-TTL`: of a stream, GET and POST (a PUT
    // creates, or re-states a stream unchanged); of its attributes, every
    // method `slide_ttl` counts (all but HEAD and OPTIONS).
    if sr.attrs || matches!(sr.head.method, Method::Get | Method::Post) {
        slide_ttl(shard, sr.key, sr.head.method).await;
    }
    // Before the bucket checks: from those to the decision nothing awaits,
    // so a create cannot land in a bucket deleted meanwhile.
    let slicing = !sr.attrs && slices::worth_slicing(shard, sr.head, sr.key, sr.body.len());
    let normalized = slices::ahead(slicing, sr.body).await;
    if let Some(bucket) = sr.bucket {
        // Only a create can meet a bucket's freeze (it has no streams).
        if creates(shard, &sr) {
            buckets::settle(shard, bucket).await;
        }
        if let Err(reply) = bucket_admits(shard, bucket, &sr) {
            return respond(shard, socket, reply, keep, is_head).await;
        }
    }
    let now_ms = shard.reap_if_expired(sr.key);
    let req = Request {
        head: sr.head,
        body: sr.body,
        surface: sr.surface,
        key: sr.key,
        now_ms,
        normalized: std::cell::Cell::new(normalized),
    };
    let deletes = sr.head.method == Method::Delete && !sr.attrs;
    if deletes && let Some(failed) = failed_precondition(shard, &sr) {
        let reply = advertised(shard, sr.key, failed);
        return respond(shard, socket, reply, keep, is_head).await;
    }
    if let Some(reply) = lifecycle(shard, &sr, &req).await {
        let reply = advertised(shard, sr.key, reply);
        return respond(shard, socket, reply, keep, is_head).await;
    }
    let action = decide(shard, sr.attrs, &req).await;
    let action = match writes_ahead(&sr, &action).then(|| failed_precondition(shard, &sr)) {
        Some(Some(failed)) => Action::Reply(failed),
        _ => action,
    };
    match action {
        Action::Reply(reply) => {
            // A write's answer rests on the head state: it may go out only
            // once everything it saw is committed. Reads see published state.
            let writes = matches!(sr.head.method, Method::Put | Method::Post | Method::Delete);
            let reply = match writes {
                true => shard.when_committed(reply).await,
                false => reply,
            };
            let reply = advertised(shard, sr.key, reply);
            respond(shard, socket, reply, keep, is_head).await
        }
        Action::Commit { commands, reply } => {
            if shard.commit_queue_full() {
                return respond(shard, socket, queue_full(), keep, is_head).await;
            }
            let reply = shard
                .submit(commands)
                .await
                .map_or_else(|e| e.response(), |()| reply);
            let reply = advertised(shard, sr.key, reply);
            respond(shard, socket, reply, keep, is_head).await
        }
        Action::Read(plan) => {
            let if_none_match = sr.head.list_header("if-none-match");
            let streamed = render::Streamed::for_request(sr.head.http11);
            live::serve(shard, (socket, streamed), plan, keep, if_none_match).await
        }
    }
}
