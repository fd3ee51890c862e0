//! What a data dir holds on disk, for tests of space reclamation.

use std::path::Path;

/// Bytes of segment files under the data dir. A file the cleaner removes
/// between the listing and its `stat` counts as gone.
pub fn log_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for shard in std::fs::read_dir(dir).unwrap().flatten() {
        if !shard.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(shard.path()).unwrap().flatten() {
            if file.file_name().to_string_lossy().ends_with(".seg") {
                total += file.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}
