//! Large JSON bodies normalized in slices (PROTOCOL.md §7.1, through
//! `protocol::json::Normalizing`): a 32 MiB append of one-byte records took
//! its shard's thread ~100 ms to normalize in one go, and every other client
//! of the shard waited. The shard normalizes such a body (an append's, an
//! append-batch frame's, a new JSON stream's or fork's initial one) ahead of the
//! decision, letting its other tasks run after each slice; the decision then
//! takes the result (`Request::normalized`) if the stream is still JSON.

use super::Shard;
use crate::http::parse::{Method, RequestHead};
use crate::protocol::content_type;
use crate::protocol::fork::{self, SourcePlan};
use crate::protocol::json::{Normalized, Normalizing};

/// Bodies at least this large are normalized in slices of this much.
pub const SLICE_BYTES: usize = 1 << 20;

/// Whether the `len` bytes of body of `head` for stream `key` are
/// normalized ahead: large, with room in the commit queue, and either
/// appended (POST, also append-batch frames) to an open JSON stream of the
/// same content type, or creating a JSON stream (a plain PUT of a new one).
/// What would be refused anyway, cheaply, is not parsed first.
pub fn worth_slicing(shard: &Shard, head: &RequestHead, key: &str, len: usize) -> bool {
    if len < SLICE_BYTES || shard.commit_queue_full() {
        return false;
    }
    let ct = head.header("content-type");
    let table = shard.table.borrow();
    let stream = table.get(key);
    match head.method {
        Method::Post => stream.is_some_and(|s| {
            s.json
                && !s.closed
                && !s.soft_deleted
                && ct.is_some_and(|ct| content_type::same(ct, &s.content_type))
        }),
        Method::Put => {
            stream.is_none()
                && head.header("stream-forked-from").is_none()
                && ct.is_some_and(content_type::is_json)
        }
        _ => false,
    }
}

/// Whether a fork's body of `len` bytes is normalized ahead: large, and
/// the fork's content type (its source's) is JSON.
pub fn worth_slicing_fork(plan: &SourcePlan, len: usize) -> bool {
    len >= SLICE_BYTES && content_type::is_json(fork::content_type(plan))
}

/// `body` normalized ahead when `wanted` (one of the `worth_slicing`s).
pub async fn ahead(wanted: bool, body: &[u8]) -> Option<Normalized> {
    match wanted {
        true => Some(normalized(body).await),
        false => None,
    }
}

/// `json::normalize_into(body, true, ..)`, yielding to the shard's other
/// tasks after every `SLICE_BYTES` of the body.
async fn normalized(body: &[u8]) -> Normalized {
    let mut lines = Vec::with_capacity(body.len() + 1);
    let mut steps = Normalizing::new(body, &mut lines);
    let outcome = loop {
        if let Some(outcome) = steps.step(SLICE_BYTES) {
            break outcome;
        }
        Shard::yield_to_others().await;
    };
    outcome.map(|count| (lines, count))
}
