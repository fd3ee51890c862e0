//! Large JSON bodies normalized in slices (PROTOCOL.md §7.1, through
//! `protocol::json::Normalizing`): a 32 MiB append of one-byte records took
//! its shard's thread ~100 ms to normalize in one go, and every other client
//! of the shard waited. The shard normalizes such a body ahead of the
//! decision, letting its other tasks run after each slice; the decision then
//! takes the result (`Request::normalized`) if the stream is still JSON.

use super::Shard;
use crate::protocol::content_type;
use crate::protocol::json::{Normalized, Normalizing};

/// Bodies at least this large are normalized in slices of this much.
pub const SLICE_BYTES: usize = 1 << 20;

/// Whether a body of `len` bytes sent with `content_type` to stream `key`
/// is normalized ahead: large, for an open JSON stream it would append to,
/// with room in the commit queue (what would be refused anyway, cheaply,
/// is not parsed first).
pub fn worth_slicing(shard: &Shard, key: &str, len: usize, content_type: Option<&str>) -> bool {
    let table = shard.table.borrow();
    let appendable = table.get(key).is_some_and(|s| {
        s.json
            && !s.closed
            && !s.soft_deleted
            && content_type.is_some_and(|ct| content_type::same(ct, &s.content_type))
    });
    len >= SLICE_BYTES && appendable && !shard.commit_queue_full()
}

/// `json::normalize_into(body, true, ..)`, yielding to the shard's other
/// tasks after every `SLICE_BYTES` of the body.
pub async fn normalized(body: &[u8]) -> Normalized {
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
