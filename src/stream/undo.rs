//! Taking applied commands back (issue 3 "Group commit": when a batch
//! fails, every command applied to the head state after the last commit is
//! rolled back, newest first). `Table::apply` captures an [`Undo`] per
//! command; `Table::undo` applies it.

use super::command::ProducerWrite;
use super::state::{ProducerState, Stream};

/// How to take one applied command back.
#[derive(Debug)]
pub enum Undo {
    /// Remove the stream the command created.
    Create { key: String },
    /// Restore data length, producer, closure and sequence state.
    Write(Box<WriteUndo>),
    /// Put the deleted stream back.
    Delete {
        key: String,
        stream: Option<Box<Stream>>,
    },
}

#[derive(Debug)]
pub struct WriteUndo {
    pub(super) key: String,
    data_len: u64,
    messages_next: u64,
    first_record: u64,
    producer: Option<(String, Option<ProducerState>)>,
    closed: bool,
    closed_by: Option<Box<ProducerWrite>>,
    stream_seq: Option<String>,
    last_write_ms: u64,
    last_access_ms: u64,
    logged_access_ms: u64,
    /// Captured only by the commands that change them.
    pub(super) attrs: Option<Vec<u8>>,
    pub(super) snapshot: Option<Option<Box<crate::stream::Snapshot>>>,
    retained: u64,
    soft_deleted: bool,
}

impl WriteUndo {
    pub(super) fn capture(
        key: &str,
        stream: &Stream,
        producer: Option<&ProducerWrite>,
    ) -> WriteUndo {
        WriteUndo {
            key: key.to_string(),
            data_len: stream.head_tail(),
            messages_next: stream.messages.next(),
            first_record: stream.first_record,
            producer: producer.map(|p| (p.id.clone(), stream.producers.get(&p.id).copied())),
            closed: stream.closed,
            closed_by: stream.closed_by.clone(),
            stream_seq: stream.stream_seq.clone(),
            last_write_ms: stream.last_write_ms,
            last_access_ms: stream.last_access_ms,
            logged_access_ms: stream.logged_access_ms,
            attrs: None,
            snapshot: None,
            retained: stream.retained,
            soft_deleted: stream.soft_deleted,
        }
    }

    pub(super) fn restore(self, stream: &mut Stream) {
        stream.soft_deleted = self.soft_deleted;
        if let Some(attrs) = self.attrs {
            stream.attrs = attrs;
        }
        if let Some(snapshot) = self.snapshot {
            stream.snapshot = snapshot;
        }
        stream.retained = self.retained;
        stream.data.truncate(self.data_len);
        stream.messages.truncate(self.messages_next);
        stream.first_record = self.first_record;
        if let Some((id, previous)) = self.producer {
            match previous {
                Some(state) => stream.producers.insert(id, state),
                None => stream.producers.remove(&id),
            };
        }
        stream.closed = self.closed;
        stream.closed_by = self.closed_by;
        stream.stream_seq = self.stream_seq;
        stream.last_write_ms = self.last_write_ms;
        stream.last_access_ms = self.last_access_ms;
        stream.logged_access_ms = self.logged_access_ms;
    }
}
