//! The per-shard segment log (issue 3): record framing, aligned buffers,
//! the storage seam, the group-commit appender and recovery. It stores
//! opaque records and knows nothing of streams (DESIGN.md "Layers").

pub mod aligned;
pub mod appender;
pub mod format;
pub mod recovery;
pub mod storage;
