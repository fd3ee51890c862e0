//! Append batch on the owning shard (extensions §4): every valid frame is
//! decided against the head state in order and queued, so all frames of a
//! request commit in one group commit; the answer waits for it.

use std::rc::Rc;

use super::Shard;
use crate::http::parse::RequestHead;
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

pub async fn serve(
    shard: &Rc<Shard>,
    head: &RequestHead,
    body: &[u8],
    key: &str,
    bucket: &str,
) -> Response {
    if !shard.buckets.borrow().contains_key(bucket) {
        return not_found("bucket not found");
    }
    let now_ms = shard.reap_if_expired(key);
    let req = Request::sub_resource(head, body, key, now_ms);
    if shard.commit_queue_full() {
        return super::dispatch::queue_full();
    }
    let frames = match batch::check(&req, &shard.table.borrow()) {
        Ok(frames) => frames,
        Err(reply) => return reply,
    };
    let mut acks = Vec::with_capacity(frames.len());
    let mut ticket = None;
    for frame in frames {
        // Checked above that the stream exists; nothing awaited since.
        let decided = batch::decide_frame(key, &shard.table.borrow(), frame, now_ms);
        match decided {
            Ok(command) => {
                let first = shard.table.borrow().get(key).map(|s| s.messages.next());
                ticket = Some(shard.submit(vec![command]));
                acks.push(appended(shard, key, first));
            }
            Err(failed) => acks.push(failed),
        }
    }
    shard.table.borrow_mut().touch(key, now_ms);
    let committed = match ticket {
        Some(ticket) => ticket.await,
        None => shard.barrier().await,
    };
    if let Err(error) = committed {
        let failed = error.response();
        for ack in acks
            .iter_mut()
            .filter(|a| matches!(a, Ack::Appended { .. }))
        {
            let message = error.message.clone();
            let code = if error.no_space {
                "insufficient_storage"
            } else {
                "storage_unavailable"
            };
            *ack = Ack::Failed {
                status: failed.status,
                code,
                message,
                next: None,
                closed: false,
            };
        }
    }
    batch::render(&acks)
}
