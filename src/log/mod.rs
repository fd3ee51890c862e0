//! The per-shard segment log (issue 3): record framing, aligned buffers,
//! the storage seam, the group-commit appender and recovery. It stores
//! opaque records and knows nothing of streams (DESIGN.md "Layers").

pub mod aligned;
pub mod appender;
pub mod faulty;
pub mod format;
pub mod handover;
pub mod recovery;
pub mod segment_reader;
pub mod storage;

/// Batch buffers of up to this size are always kept for the next batch.
const KEEP_BUFFER_BYTES: usize = 4 << 20;

/// Whether a batch buffer of `capacity` bytes that last held `used` is kept
/// for the next batch: always when small, and a larger one only while its
/// batches fill half of it, so a burst of large writes does not pin its
/// memory once it is over (and a steady one does not reallocate each time).
pub fn worth_keeping(capacity: usize, used: usize) -> bool {
    capacity <= KEEP_BUFFER_BYTES.max(used.saturating_mul(2))
}
