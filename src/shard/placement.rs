//! Stream placement (DESIGN.md "Request flow" 2): a pure hash of the key.

use xxhash_rust::xxh3::xxh3_64;

/// The shard that owns `key` among `shards` shards.
pub fn shard_of(key: &str, shards: usize) -> usize {
    assert!(shards > 0, "at least one shard");
    (xxh3_64(key.as_bytes()) % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        for shards in 1..8 {
            for i in 0..200 {
                let key = format!("/v1/stream/s-{i}");
                let owner = shard_of(&key, shards);
                assert!(owner < shards);
                assert_eq!(owner, shard_of(&key, shards));
            }
        }
    }

    #[test]
    fn spreads_keys() {
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[shard_of(&format!("bucket/stream-{i}"), 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}
