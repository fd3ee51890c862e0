//! Stream cursors for CDN collapsing (PROTOCOL.md §8.1): the 20-second interval
//! number since 2024-10-09T00:00:00Z, and strictly past the client's cursor
//! when the client already holds the current interval or a later one.

pub const EPOCH_MS: u64 = 1_728_432_000_000;
pub const INTERVAL_MS: u64 = 20_000;
const MAX_JITTER_SECS: u64 = 3600;

/// `jitter_seed` is any random number; the caller supplies it so this stays pure.
pub fn next_cursor(client_cursor: Option<&str>, now_ms: u64, jitter_seed: u64) -> String {
    let current = now_ms.saturating_sub(EPOCH_MS) / INTERVAL_MS;
    let client = client_cursor.and_then(|c| c.parse::<u64>().ok());
    match client {
        Some(client) if client >= current => {
            let jitter_secs = 1 + jitter_seed % MAX_JITTER_SECS;
            let intervals = jitter_secs.div_ceil(INTERVAL_MS / 1000).max(1);
            client.saturating_add(intervals).to_string()
        }
        _ => current.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_number_from_epoch() {
        assert_eq!(next_cursor(None, EPOCH_MS + 45_000, 7), "2");
        assert_eq!(next_cursor(Some("junk"), EPOCH_MS + 45_000, 7), "2");
        assert_eq!(next_cursor(Some("1"), EPOCH_MS + 45_000, 7), "2");
    }

    #[test]
    fn never_goes_back_or_repeats_client_cursor() {
        for seed in [0, 1, 19, 20, 3599, u64::MAX] {
            let next: u64 = next_cursor(Some("1000"), EPOCH_MS, seed).parse().unwrap();
            assert!(next > 1000 && next <= 1000 + 180, "{next}");
        }
    }
}
