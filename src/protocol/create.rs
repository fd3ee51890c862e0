//! Create (PROTOCOL.md §5.1): content type, lifetime, `Stream-Closed`, initial
//! body, idempotent re-create (200) and 409 on a configuration mismatch.

use super::headers::{Lifetime, lifetime, wants_close};
use super::response::{Response, bad_request, conflict};
use super::{Action, Request, Surface, attrs, content_type, json, offset, records};
use crate::stream::budget::{STREAM_BYTES, append_index_bytes};
use crate::stream::{Command, NewStream, Stream, Table};

pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// What a new stream adds to the index budget: its metadata, key, content
/// type and attributes, and its initial messages (`stream::budget`).
fn index_bytes(key: &str, content_type: &str, attrs: &[u8], data: &[u8]) -> u64 {
    let strings = (key.len() + content_type.len() + attrs.len()) as u64;
    let messages = records::messages_in(content_type::is_json(content_type), data);
    let initial = if messages == 0 {
        0
    } else {
        append_index_bytes(messages)
    };
    STREAM_BYTES + strings + initial
}

pub fn decide(req: &Request, table: &Table) -> Action {
    match decide_inner(req, table) {
        Ok(action) | Err(action) => action,
    }
}

fn decide_inner(req: &Request, table: &Table) -> Result<Action, Action> {
    let content_type = requested_content_type(req).map_err(Action::Reply)?;
    let lifetime = lifetime(req.head).map_err(Action::Reply)?;
    let closed = wants_close(req.head);
    let data = canonical_body(req, &content_type).map_err(Action::Reply)?;
    let attrs = attrs::from_header(req).map_err(Action::Reply)?;
    if let Some(existing) = table.get(req.key) {
        let same_attrs = existing.attrs == attrs;
        return Ok(Action::Reply(recreate(
            existing,
            &content_type,
            &lifetime,
            closed,
            same_attrs,
        )));
    }
    if table.index_refuses(index_bytes(req.key, &content_type, &attrs, &data)) {
        return Err(Action::Reply(super::response::index_full()));
    }
    let tail = data.len() as u64;
    let reply = Response::new(201)
        .header("location", location(req))
        .header("content-type", content_type.clone())
        .header("stream-next-offset", offset::format(tail))
        .header_if(closed, "stream-closed", "true");
    let reply = match content_type::is_json(&content_type) {
        // extensions §6.3: a new stream's records are 0..count.
        true => reply
            .header("stream-extensions", records::TOKEN)
            .header("stream-record-start", "0")
            .header("stream-record-next", records::count(&data).to_string()),
        false => reply,
    };
    let command = Command::Create(NewStream {
        key: req.key.to_string(),
        content_type,
        ttl_secs: lifetime.ttl_secs,
        expires_at: lifetime.expires_at,
        expires_at_ms: lifetime.expires_at_ms,
        closed,
        data,
        // Later than a deleted predecessor's creation: a distinct id.
        now_ms: table.create_stamp(req.key, req.now_ms),
        attrs,
    });
    Ok(Action::Commit {
        commands: vec![command],
        reply,
    })
}

/// The requested content type; omitted means `application/octet-stream`.
fn requested_content_type(req: &Request) -> Result<String, Response> {
    match req.head.header("content-type").map(str::trim) {
        None | Some("") => Ok(DEFAULT_CONTENT_TYPE.to_string()),
        Some(ct) if content_type::is_valid(ct) => Ok(ct.to_string()),
        Some(_) => Err(bad_request("invalid Content-Type")),
    }
}

/// The initial body in canonical form: JSON streams normalize (an empty array
/// is allowed on create, PROTOCOL.md §7.1).
/// The shard may have normalized a large body ahead (`Request::normalized`).
fn canonical_body(req: &Request, content_type: &str) -> Result<Vec<u8>, Response> {
    if !content_type::is_json(content_type) || req.body.is_empty() {
        return Ok(req.body.to_vec());
    }
    let normalized = json::normalized(req.body, req.normalized.take());
    let (data, _) = normalized.map_err(|e| bad_request(&e.message()))?;
    Ok(data)
}

/// An existing stream: 200 when the configuration (attributes included,
/// extensions §5.2) matches, else 409. The initial body is not compared: a
/// retried create must stay idempotent.
fn recreate(
    existing: &Stream,
    ct: &str,
    lifetime: &Lifetime,
    closed: bool,
    same_attrs: bool,
) -> Response {
    let matches = content_type::same(&existing.content_type, ct)
        && existing.ttl_secs == lifetime.ttl_secs
        && existing.expires_at_ms == lifetime.expires_at_ms
        && existing.closed == closed
        && existing.fork.is_none()
        && same_attrs;
    match matches {
        true => recreated(existing),
        false => exists_differently(),
    }
}

/// 409: the stream exists with another configuration.
pub fn exists_differently() -> Response {
    conflict(
        "stream_exists",
        "stream already exists with a different configuration",
    )
}

/// The 200 of a re-create that matched: the stream as it is, no records
/// created (extensions §6.3: both record headers at the tail).
pub fn recreated(existing: &Stream) -> Response {
    let reply = Response::new(200)
        .header("content-type", existing.content_type.clone())
        .header("stream-next-offset", offset::format(existing.head_tail()))
        .header_if(existing.closed, "stream-closed", "true");
    let tail = existing.messages.next();
    records::ack(existing, reply, tail, tail)
}

/// `Location` for a 201: the stream's absolute URL when the Host is known,
/// in the scheme an absolute-form target named (RFC 9112 §3.2.2).
pub fn location(req: &Request) -> String {
    let path = &req.head.raw_path;
    let scheme = if req.head.https { "https" } else { "http" };
    match req.head.host() {
        Some(host) if !host.is_empty() => format!("{scheme}://{host}{path}"),
        _ => path.clone(),
    }
}

/// Whether a surface renders JSON reads as NDJSON.
pub fn is_ndjson(surface: Surface, stream: &Stream) -> bool {
    stream.json && surface == Surface::Bucket
}
