//! Append batch on the owning shard (extensions §4): every valid frame is
//! decided against the head state in order and queued, so a small
//! request's frames commit in one group commit; a large one yields to the
//! shard's other clients between frames (each frame then keeps its own
//! outcome); the answer waits for all of them.

use std::rc::Rc;

use bytes::Bytes;

use super::commit::CommitError;
use super::{Shard, slices};
use crate::http::parse::RequestHead;
use crate::protocol::append::SHARED_FROM;
use crate::protocol::batch::{self, Ack};
use crate::protocol::response::not_found;
use crate::protocol::{Request, Response, records};

/// The ack of a frame just applied, with its record range (extensions
/// §6.11) on JSON streams; `first` is the record tail before it.
fn appended(shard: &Shard, key: &str, first: Option<u64>) -> Ack {
    let table = shard.table.borrow();
    let stream = table.get(key).expect("a frame was just applied to it");
    let records = (records::active(stream), first);
    Ack::Appended {
        next: stream.head_tail(),
        records: match records {
            (true, Some(first)) => Some((first, stream.messages.next())),
            _ => None,
        },
    }
}

/// Frame bytes decided between two yields to the shard's other tasks.
const YIELD_BYTES: usize = 1 << 20;

/// The ack of a frame whose commit failed.
fn not_committed(error: &CommitError) -> Ack {
    let (status, code) = error.status();
    Ack::Failed {
        status,
        code,
        message: error.message.clone(),
        next: None,
        closed: false,
    }
}

/// A frame as the append stores it: a slice of the body when the frame is
/// most of it (no copy of a large frame), else its own copy, so that a
/// cached frame never keeps a much larger body alive. A frame under
/// `SHARED_FROM` is copied by `append::canonical` anyway.
fn frame_bytes(body: &Bytes, frame: &[u8]) -> Bytes {
    let most = frame.len() * 4 >= body.len() * 3;
    match frame.len() < SHARED_FROM || most {
        true => body.slice_ref(frame),
        false => Bytes::copy_from_slice(frame),
    }
}

pub async fn serve(
    shard: &Rc<Shard>,
    head: &RequestHead,
    body: &Bytes,
    key: &str,
    bucket: &str,
) -> Response {
    if !shard.buckets.borrow().contains_key(bucket) {
        return not_found("bucket not found");
    }
    // A write slides `Stream-TTL`; its access record is awaited first.
    super::dispatch::slide_ttl(shard, key, head.method).await;
    let now_ms = shard.reap_if_expired(key);
    let req = Request::sub_resource(head, body, key, now_ms);
    if shard.commit_queue_full() {
        return super::dispatch::queue_full();
    }
    let frames = match batch::check(&req, &shard.table.borrow()) {
        Ok(frames) => frames,
        Err(reply) => return reply,
    };
    let incarnation = shard.table.borrow().get(key).map(|s| s.id);
    let mut acks = Vec::with_capacity(frames.len());
    let mut tickets = Vec::with_capacity(frames.len());
    let mut since_yield = 0;
    for frame in frames {
        // Frames are separate appends (§4.3 "not an atomic multi-frame
        // transaction"): a large batch lets the shard's other clients in
        // between them, and each frame finds its stream again.
        if since_yield >= YIELD_BYTES {
            Shard::yield_to_others().await;
            since_yield = 0;
        }
        since_yield += frame.len();
        let frame = frame_bytes(body, frame);
        // A large JSON frame is normalized in slices, as a large append is.
        let wanted = slices::worth_slicing(shard, head, key, frame.len());
        let normalized = slices::ahead(wanted, &frame).await;
        let table = shard.table.borrow();
        let decided = batch::decide_frame(key, incarnation, &table, (&frame, normalized), now_ms);
        drop(table);
        match decided {
            Ok(command) => {
                let first = shard.table.borrow().get(key).map(|s| s.messages.next());
                tickets.push((acks.len(), shard.submit(vec![command])));
                acks.push(appended(shard, key, first));
            }
            Err(failed) => acks.push(failed),
        }
    }
    // Frames on either side of a yield may commit in different batches,
    // and a failed batch undoes only what was submitted before it.
    for (frame, ticket) in tickets {
        if let Err(error) = ticket.await {
            acks[frame] = not_committed(&error);
        }
    }
    // A refused frame reports the head state, which another request may
    // have changed (a close, a delete during a yield): answer once that is
    // committed too (or failed: the acks stand).
    if acks.iter().any(|a| matches!(a, Ack::Failed { .. })) {
        let _ = shard.barrier().await;
    }
    batch::render(&acks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_frame_is_shared_only_when_it_is_most_of_the_body() {
        let body = Bytes::from(vec![b'x'; 4 * SHARED_FROM]);
        let whole = &body[4..];
        assert_eq!(frame_bytes(&body, whole).as_ptr(), whole.as_ptr());
        let quarter = &body[4..4 + SHARED_FROM];
        let copy = frame_bytes(&body, quarter);
        assert_ne!(copy.as_ptr(), quarter.as_ptr(), "it would pin the body");
        assert_eq!(copy, quarter);
        let small = &body[4..104];
        assert_eq!(frame_bytes(&body, small).as_ptr(), small.as_ptr());
    }
}
