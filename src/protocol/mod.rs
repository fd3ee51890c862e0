//! The protocol layer: pure decisions. `decide` maps (request, stream table,
//! now) to an `Action`: a reply, commands to commit before replying, or a
//! read that may wait. Every MUST of PROTOCOL.md §4-§5 and §8-§12 lives here
//! and in the files beside it, unit-tested without sockets, disks or clocks.

pub mod append;
pub mod attrs;
pub mod batch;
pub mod bootstrap;
pub mod buckets;
pub mod conditions;
pub mod content_type;
pub mod create;
pub mod cursor;
pub mod fork;
pub mod headers;
pub mod json;
pub mod offset;
pub mod producer;
pub mod read;
pub mod records;
pub mod response;
pub mod router;
pub mod snapshot;
pub mod sse;
pub mod whole;
pub mod window;

use bytes::Bytes;

use crate::http::parse::{Method, RequestHead};
use crate::stream::{Command, Table};
pub use response::Response;
pub use router::{Surface, Target};

/// The body of a request that has none.
pub static NO_BODY: Bytes = Bytes::new();

/// One request as the protocol sees it: the parsed head and the whole body.
/// The body is shared so that a byte stream stores it as sent, no copy.
pub struct Request<'a> {
    pub head: &'a RequestHead,
    pub body: &'a Bytes,
    pub surface: Surface,
    pub key: &'a str,
    pub now_ms: u64,
    /// The body normalized as JSON ahead of the decision, when the shard
    /// did that in slices (a large body for a JSON stream); the decision
    /// takes it (no copy of up to a body's size) if the stream is still
    /// JSON then.
    pub normalized: std::cell::Cell<Option<json::Normalized>>,
}

impl<'a> Request<'a> {
    /// A request on a sub-resource of a bucketed stream (append-batch,
    /// snapshots, retention, bootstrap): no cursor, so no jitter.
    pub fn sub_resource(
        head: &'a RequestHead,
        body: &'a Bytes,
        key: &'a str,
        now_ms: u64,
    ) -> Request<'a> {
        Request {
            head,
            body,
            surface: Surface::Bucket,
            key,
            now_ms,
            normalized: Default::default(),
        }
    }

    /// The one value of query parameter `name`, if given (twice is a 400).
    pub fn query_once(&self, name: &str) -> Result<Option<&'a str>, Response> {
        query_once(self.head, name)
    }
}

/// The one value of `head`'s query parameter `name`, if given (twice is a
/// 400: which one counts would be a guess).
pub fn query_once<'a>(head: &'a RequestHead, name: &str) -> Result<Option<&'a str>, Response> {
    let mut values = head.query.iter().filter(|(k, _)| k == name);
    let first = values.next().map(|(_, v)| v.as_str());
    match values.next() {
        Some(_) => Err(response::bad_request(&format!(
            "{name} must be given at most once"
        ))),
        None => Ok(first),
    }
}

/// What the shard must do for a request.
#[derive(Debug)]
pub enum Action {
    Reply(Response),
    /// Commit `commands` (in order), apply them, then send `reply`.
    Commit {
        commands: Vec<Command>,
        reply: Response,
    },
    /// A read: rendered now, or after waiting (long-poll), or streamed (SSE).
    Read(read::ReadPlan),
}

/// Decides a request on a stream of the base protocol (either surface).
pub fn decide_stream(req: &Request, table: &Table) -> Action {
    match req.head.method {
        Method::Put => create::decide(req, table),
        Method::Post => append::decide(req, table),
        Method::Get => read::decide(req, table),
        Method::Head => Action::Reply(read::head(req, table)),
        Method::Delete => delete(req, table),
        _ => Action::Reply(
            Response::error(405, "method_not_allowed", "method not allowed on a stream")
                .header("allow", "GET, HEAD, PUT, POST, DELETE, OPTIONS"),
        ),
    }
}

/// PROTOCOL.md §5.3: 204 once deleted, 404 when absent.
fn delete(req: &Request, table: &Table) -> Action {
    match table.get(req.key) {
        Some(stream) => Action::Commit {
            commands: vec![Command::Delete {
                key: req.key.to_string(),
                stream_id: stream.id,
            }],
            reply: records::advertise(stream, Response::new(204)),
        },
        None => Action::Reply(response::not_found("stream not found")),
    }
}

/// The command that reaps `key` if it has expired at `now_ms` (PROTOCOL.md
/// §4: an expired stream behaves as deleted).
pub fn reap_expired(table: &Table, key: &str, now_ms: u64) -> Option<Command> {
    let stream = table.get(key)?;
    stream.is_expired(now_ms).then(|| Command::Delete {
        key: key.to_string(),
        stream_id: stream.id,
    })
}

/// The record of an access of `key` at `now_ms` that a restart must know
/// of: on a `Stream-TTL` stream (a sliding idle window, PROTOCOL.md §5.1),
/// one a tenth of a window or more past the latest the log records, so
/// that recovery can bound the last access (`Stream::logged_access_ms`).
pub fn access_record(table: &Table, key: &str, now_ms: u64) -> Option<Command> {
    let stream = table.get(key)?;
    let tenth = stream.ttl_secs?.saturating_mul(100);
    let due = now_ms >= stream.logged_access_ms.saturating_add(tenth);
    due.then(|| Command::Touch {
        key: key.to_string(),
        stream_id: stream.id,
        now_ms,
    })
}

#[cfg(test)]
mod tests;
