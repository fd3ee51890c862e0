//! Stream state machine: per-stream state, the commands that change it, and the
//! per-shard table that applies them. Deterministic and free of I/O: the shard
//! applies a command only once it is committed, and recovery replays the same
//! commands through the same `Table::apply` (DESIGN.md "Layers").

pub mod bitpack;
pub mod budget;
pub mod chunked;
pub mod codec;
pub mod command;
pub mod data;
pub mod fork;
pub mod newlines;
pub mod pins;
mod placed;
pub mod rebuild;
pub mod records;
pub mod state;
pub mod table;
pub mod undo;

pub use command::{Command, ForkOrigin, NewStream, ProducerWrite};
pub use state::{ProducerState, Snapshot, Stream};
pub use table::{Applied, Table};
