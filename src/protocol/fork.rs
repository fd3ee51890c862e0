//! Forks (PROTOCOL.md §4.2): the fork headers of a PUT, what a source lends
//! a fork (decided on the source's shard against its state: existence,
//! soft delete, content type, `Stream-Fork-Offset`, `Stream-Fork-Sub-Offset`),
//! the fork's configuration (content type and lifetime inherited unless
//! given), idempotent re-create, and the soft-delete answers (410 on the
//! URL, 409 on re-create).

use super::headers::{Lifetime, lifetime, wants_close};
use super::response::{Response, bad_request, conflict, not_found};
use super::router::{Target, route};
use super::{Request, attrs, content_type, create, json, offset};
use crate::stream::fork::same_origin;
use crate::stream::{ForkOrigin, Snapshot, Stream, Table};

/// A PUT with `Stream-Forked-From`, validated as far as it can be without
/// the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRequest {
    /// The source's stream key.
    pub source: String,
    pub spec: ForkSpec,
    pub lifetime: Lifetime,
    pub closed: bool,
    pub attrs: Vec<u8>,
}

/// What the fork asks of its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkSpec {
    pub offset: Option<u64>,
    pub sub: u64,
    /// The requested Content-Type; `None` inherits the source's.
    pub content_type: Option<String>,
}

/// What a source lends a fork: its configuration and the byte ranges the
/// fork inherits (`[retained, anchor)`, as the source's appends, then the
/// sub-offset prefix `[anchor, prefix_end)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePlan {
    pub source_id: u64,
    pub content_type: String,
    pub lifetime: Lifetime,
    pub retained: u64,
    pub first_record: u64,
    pub anchor: u64,
    pub prefix_end: u64,
    /// `(start, len)` of each inherited append, clipped to the range.
    pub pieces: Vec<(u64, u64)>,
    /// The source's visible snapshot, when it is at or before the fork
    /// point: the fork inherits it, so that its bootstrap covers what
    /// retention dropped (extensions §3.4).
    pub snapshot: Option<Snapshot>,
}

/// The fork headers of a PUT: `Ok(None)` for a plain create. Sub- or
/// fork offsets without `Stream-Forked-From` are a 400 (§4.2).
pub fn parse(req: &Request) -> Result<Option<ForkRequest>, Response> {
    let head = req.head;
    let Some(from) = head.header("stream-forked-from") else {
        if head.header("stream-fork-sub-offset").is_some()
            || head.header("stream-fork-offset").is_some()
        {
            return Err(bad_request(
                "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
            ));
        }
        return Ok(None);
    };
    let source = match route(from.trim()) {
        Target::Stream { key, .. } => key,
        _ => return Err(not_found("the Stream-Forked-From source does not exist")),
    };
    let offset = match head.header("stream-fork-offset") {
        None => None,
        Some(text) => Some(
            offset::parse_token(text.trim())
                .ok_or_else(|| bad_request("Stream-Fork-Offset is not a valid offset"))?,
        ),
    };
    let sub = match head.header("stream-fork-sub-offset") {
        None => 0,
        Some(text) => sub_offset(text)?,
    };
    let content_type = match head.header("content-type").map(str::trim) {
        None | Some("") => None,
        Some(ct) if content_type::is_valid(ct) => Some(ct.to_string()),
        Some(_) => return Err(bad_request("invalid Content-Type")),
    };
    Ok(Some(ForkRequest {
        source,
        spec: ForkSpec {
            offset,
            sub,
            content_type,
        },
        lifetime: lifetime(head)?,
        closed: wants_close(head),
        attrs: attrs::from_header(req)?,
    }))
}

/// `^(0|[1-9][0-9]*)$`, within u64.
fn sub_offset(text: &str) -> Result<u64, Response> {
    let canonical = text == "0" || (!text.starts_with('0') && !text.is_empty());
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    text.parse()
        .ok()
        .filter(|_| canonical && digits)
        .ok_or_else(|| bad_request("Stream-Fork-Sub-Offset must be a non-negative integer"))
}

/// Decides, on the source's shard, what `stream` lends a fork.
pub fn plan_source(
    stream: Option<&Stream>,
    spec: &ForkSpec,
    now_ms: u64,
) -> Result<SourcePlan, Response> {
    let stream = stream
        .filter(|s| s.visible && !s.is_expired(now_ms))
        .ok_or_else(|| not_found("the Stream-Forked-From source does not exist"))?;
    if stream.soft_deleted {
        return Err(conflict(
            "source_deleted",
            "the source stream is deleted and kept only for its forks",
        ));
    }
    if let Some(ct) = &spec.content_type
        && !content_type::same(ct, &stream.content_type)
    {
        return Err(conflict(
            "content_type_mismatch",
            "Content-Type does not match the source stream",
        ));
    }
    let anchor = fork_point(stream, spec.offset)?;
    let prefix_end = sub_offset_end(stream, anchor, spec.sub)?;
    let snapshot = inherited_snapshot(stream, anchor)?;
    let pieces = stream
        .data
        .extents_in(stream.retained, anchor)
        .iter()
        .map(|e| {
            let start = e.start.max(stream.retained);
            (start, e.end().min(anchor) - start)
        })
        .collect();
    Ok(SourcePlan {
        source_id: stream.id,
        content_type: stream.content_type.clone(),
        lifetime: Lifetime {
            ttl_secs: stream.ttl_secs,
            expires_at: stream.expires_at.clone(),
            expires_at_ms: stream.expires_at_ms,
        },
        retained: stream.retained,
        first_record: stream.first_record,
        anchor,
        prefix_end,
        pieces,
        snapshot,
    })
}

/// The snapshot a fork at `anchor` inherits. Past retention a fork starts
/// where its source's data does, so it needs the snapshot that covers
/// that start (extensions §2.2: retention never passes the latest
/// snapshot; §3.4: bootstrap must cover the earliest retained offset); a
/// fork point before that snapshot has none, and is refused.
fn inherited_snapshot(stream: &Stream, anchor: u64) -> Result<Option<Snapshot>, Response> {
    let snapshot = stream
        .snapshot
        .as_deref()
        .cloned()
        .filter(|s| s.offset <= anchor);
    if stream.retained > 0 && snapshot.is_none() {
        let message = match stream.snapshot {
            Some(_) => {
                "retention dropped the source's data before its snapshot: fork at or after the snapshot offset"
            }
            None => "retention dropped the source's data and no snapshot covers it",
        };
        return Err(conflict("fork_before_snapshot", message));
    }
    Ok(snapshot)
}

/// `Stream-Fork-Offset` (default: the tail): within the retained data and,
/// on JSON streams, on a record boundary.
fn fork_point(stream: &Stream, requested: Option<u64>) -> Result<u64, Response> {
    let at = requested.unwrap_or(stream.tail());
    if at > stream.tail() {
        return Err(bad_request(
            "Stream-Fork-Offset is beyond the source's tail",
        ));
    }
    if at < stream.retained {
        return Err(Response::error(
            410,
            "offset_gone",
            "Stream-Fork-Offset is before the source's earliest retained offset",
        ));
    }
    if stream.json && !stream.is_boundary(at) {
        return Err(bad_request(
            "Stream-Fork-Offset is not on a message boundary",
        ));
    }
    Ok(at)
}

/// Where the sub-offset prefix ends: `sub` bytes (or JSON messages) of the
/// append that starts at `anchor`, never past it.
fn sub_offset_end(stream: &Stream, anchor: u64, sub: u64) -> Result<u64, Response> {
    if sub == 0 {
        return Ok(anchor);
    }
    let overshoot = || bad_request("Stream-Fork-Sub-Offset is past the next data boundary");
    let append_end = stream
        .data
        .extents_in(anchor, anchor + 1)
        .first()
        .map(|e| e.end().min(stream.tail()))
        .filter(|_| anchor < stream.tail())
        .ok_or_else(overshoot)?;
    // `sub` is any u64 a client sent: a sum past u64 overshoots too.
    if !stream.json {
        return match anchor.checked_add(sub) {
            Some(end) if end <= append_end => Ok(end),
            _ => Err(overshoot()),
        };
    }
    let first = stream.messages.ordinal_at(anchor).ok_or_else(overshoot)?;
    let last = stream
        .messages
        .ordinal_at(append_end)
        .ok_or_else(overshoot)?;
    match first.checked_add(sub) {
        Some(target) if target <= last => stream.messages.offset_of(target).ok_or_else(overshoot),
        _ => Err(overshoot()),
    }
}

/// The fork's stored configuration, once the source answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkConfig {
    pub content_type: String,
    pub lifetime: Lifetime,
    /// The canonical initial body (after the prefix).
    pub body: Vec<u8>,
}

/// Content type and lifetime inherited unless the request gives them
/// (§4.2 table: a fork asking for either expiry gets exactly that).
/// `normalized`: the body, normalized by the shard ahead (a large one).
pub fn configure(
    fork: &ForkRequest,
    plan: &SourcePlan,
    body: &[u8],
    normalized: Option<json::Normalized>,
) -> Result<ForkConfig, Response> {
    let content_type = content_type(plan).to_string();
    let lifetime = match asks_lifetime(fork) {
        true => fork.lifetime.clone(),
        false => plan.lifetime.clone(),
    };
    let body = match content_type::is_json(&content_type) && !body.is_empty() {
        true => {
            let normalized = json::normalized(body, normalized);
            normalized.map_err(|e| bad_request(&e.message()))?.0
        }
        false => body.to_vec(),
    };
    Ok(ForkConfig {
        content_type,
        lifetime,
        body,
    })
}

/// The fork's origin as stored.
pub fn origin(fork: &ForkRequest, plan: &SourcePlan) -> ForkOrigin {
    ForkOrigin {
        source: fork.source.clone(),
        source_id: plan.source_id,
        offset: plan.anchor,
        sub: fork.spec.sub,
        own_lifetime: asks_lifetime(fork),
    }
}

/// The fork's content type: its source's (§4.2: one the request gives
/// "MUST match the source stream's content type", checked by `plan`). A
/// matching one spelled differently (`TEXT/PLAIN`, or a charset the source
/// leaves out) is not stored: the inherited bytes keep the source's type.
pub fn content_type(plan: &SourcePlan) -> &str {
    &plan.content_type
}

/// Whether a fork request names a TTL or Expires-At of its own.
fn asks_lifetime(fork: &ForkRequest) -> bool {
    fork.lifetime.ttl_secs.is_some() || fork.lifetime.expires_at_ms.is_some()
}

/// A fork PUT on an existing stream: 200 when it is the same fork with the
/// same configuration (a content type left out is the source's, so it
/// matches; a lifetime left out matches only an inherited one), else 409
/// (§4.2 idempotency).
pub fn recreate(existing: &Stream, fork: &ForkRequest) -> Response {
    if existing.soft_deleted {
        return soft_deleted_put();
    }
    let same_fork = existing
        .fork
        .as_ref()
        .is_some_and(|o| same_origin(o, &fork.source, fork.spec.offset, fork.spec.sub));
    let ct = fork.spec.content_type.as_deref();
    let life = &fork.lifetime;
    // Without a lifetime of its own, a fork's is its source's: the same
    // as the existing fork's only if that one inherited too.
    let same_lifetime = match asks_lifetime(fork) {
        true => existing.ttl_secs == life.ttl_secs && existing.expires_at_ms == life.expires_at_ms,
        false => existing.fork.as_ref().is_some_and(|o| !o.own_lifetime),
    };
    let matches = same_fork
        && ct.is_none_or(|ct| content_type::same(ct, &existing.content_type))
        && same_lifetime
        && existing.closed == fork.closed
        && existing.attrs == fork.attrs;
    match matches {
        true => create::recreated(existing),
        false => create::exists_differently(),
    }
}

/// The answer on `key`'s URL when it is a soft-deleted source (§4.2),
/// else None.
pub fn soft_deleted_refusal(table: &Table, key: &str, is_put: bool) -> Option<Response> {
    let soft = table.get(key).is_some_and(|s| s.soft_deleted);
    soft.then(|| soft_deleted_reply(is_put))
}

/// §4.2 soft delete: the URL of a deleted source that forks still read
/// from answers 410, except re-creation, which is 409.
pub fn soft_deleted_reply(is_put: bool) -> Response {
    match is_put {
        true => soft_deleted_put(),
        false => Response::error(
            410,
            "stream_deleted",
            "the stream is deleted; its data is kept only for its forks",
        ),
    }
}

fn soft_deleted_put() -> Response {
    conflict(
        "stream_deleted",
        "the stream is deleted but still has forks; its path cannot be re-created yet",
    )
}
