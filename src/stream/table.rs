//! The per-shard stream table and `apply`: the deterministic transition
//! function shared by the live commit path and (later) recovery.

use std::collections::HashMap;

use super::command::Command;
use super::state::{ProducerState, Stream};

#[derive(Default)]
pub struct Table {
    streams: HashMap<String, Stream>,
    next_id: u64,
}

/// What `apply` did, for the shard to wake waiters and render replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The stream's tail after the command.
    pub tail: u64,
    /// Whether data or closure changed (waiters must be woken).
    pub wake: bool,
}

impl Table {
    pub fn get(&self, key: &str) -> Option<&Stream> {
        self.streams.get(key)
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    pub fn keys_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Stream)> {
        self.streams
            .iter()
            .filter(move |(k, _)| k.starts_with(prefix))
    }

    /// Records a read or write access: `Stream-TTL` slides from here. Access
    /// times are not logged; after a restart the window starts again.
    pub fn touch(&mut self, key: &str, now_ms: u64) {
        if let Some(stream) = self.streams.get_mut(key) {
            stream.last_access_ms = stream.last_access_ms.max(now_ms);
        }
    }

    /// Applies one committed command. Commands were validated by `protocol`
    /// against this same state, so a command that no longer fits is a bug.
    pub fn apply(&mut self, command: Command) -> Applied {
        match command {
            Command::Create { .. } => self.apply_create(command),
            Command::Append {
                key,
                data,
                producer,
                stream_seq,
                close,
                now_ms,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("append to a missing stream");
                assert!(!stream.closed, "append to a closed stream");
                push_data(stream, &data);
                if let Some(p) = &producer {
                    stream.producers.insert(
                        p.id.clone(),
                        ProducerState {
                            epoch: p.epoch,
                            last_seq: p.seq,
                        },
                    );
                }
                if stream_seq.is_some() {
                    stream.stream_seq = stream_seq;
                }
                if close {
                    stream.closed = true;
                    stream.closed_by = producer.map(|p| (p.id, p.epoch, p.seq));
                }
                stream.last_write_ms = now_ms;
                stream.last_access_ms = stream.last_access_ms.max(now_ms);
                Applied {
                    tail: stream.tail(),
                    wake: true,
                }
            }
            Command::Close {
                key,
                producer,
                now_ms,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("close of a missing stream");
                if let Some(p) = &producer {
                    stream.producers.insert(
                        p.id.clone(),
                        ProducerState {
                            epoch: p.epoch,
                            last_seq: p.seq,
                        },
                    );
                }
                if !stream.closed {
                    stream.closed = true;
                    stream.closed_by = producer.map(|p| (p.id, p.epoch, p.seq));
                }
                stream.last_access_ms = stream.last_access_ms.max(now_ms);
                Applied {
                    tail: stream.tail(),
                    wake: true,
                }
            }
            Command::Delete { key } => {
                let removed = self.streams.remove(&key);
                Applied {
                    tail: removed.map_or(0, |s| s.tail()),
                    wake: true,
                }
            }
        }
    }

    fn apply_create(&mut self, command: Command) -> Applied {
        let Command::Create {
            key,
            content_type,
            ttl_secs,
            expires_at,
            expires_at_ms,
            closed,
            data,
            now_ms,
        } = command
        else {
            unreachable!("apply_create takes Create only");
        };
        self.next_id += 1;
        let json = crate::protocol::content_type::is_json(&content_type);
        let mut stream = Stream {
            id: self.next_id,
            content_type,
            json,
            ttl_secs,
            expires_at,
            expires_at_ms,
            created_at_ms: now_ms,
            last_access_ms: now_ms,
            last_write_ms: now_ms,
            closed,
            closed_by: None,
            data: Vec::new(),
            message_ends: Vec::new(),
            stream_seq: None,
            producers: Default::default(),
        };
        push_data(&mut stream, &data);
        let tail = stream.tail();
        self.streams.insert(key, stream);
        Applied { tail, wake: true }
    }
}

/// Appends canonical bytes and records message boundaries: one per line on
/// JSON streams, one per append otherwise.
fn push_data(stream: &mut Stream, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let base = stream.tail();
    if stream.json {
        for newline in memchr::memchr_iter(b'\n', data) {
            stream.message_ends.push(base + newline as u64 + 1);
        }
    } else {
        stream.message_ends.push(base + data.len() as u64);
    }
    stream.data.extend_from_slice(data);
    debug_assert_eq!(stream.message_ends.last().copied(), Some(stream.tail()));
}
