//! Idempotent producers (PROTOCOL.md §5.2.1): header validation and the
//! epoch/sequence decision table.

use crate::stream::ProducerState;

/// JavaScript's largest safe integer: epochs and sequences stay below it.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerDecision {
    /// New data: commit with this (epoch, seq).
    Accept,
    /// Already applied: answer 204 with the last sequence.
    Duplicate { last_seq: u64 },
    /// 403 with the current epoch.
    StaleEpoch { current: u64 },
    /// 400: a new epoch must start at sequence 0.
    NewEpochNeedsSeqZero,
    /// 409 with expected and received sequence.
    Gap { expected: u64, received: u64 },
}

/// Parses a strict non-negative decimal integer no larger than 2^53-1.
pub fn parse_integer(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&v| v <= MAX_SAFE_INTEGER)
}

pub fn decide(state: Option<&ProducerState>, epoch: u64, seq: u64) -> ProducerDecision {
    let Some(state) = state else {
        return if seq == 0 {
            ProducerDecision::Accept
        } else {
            ProducerDecision::Gap {
                expected: 0,
                received: seq,
            }
        };
    };
    if epoch < state.epoch {
        return ProducerDecision::StaleEpoch {
            current: state.epoch,
        };
    }
    if epoch > state.epoch {
        return if seq == 0 {
            ProducerDecision::Accept
        } else {
            ProducerDecision::NewEpochNeedsSeqZero
        };
    }
    if seq <= state.last_seq {
        ProducerDecision::Duplicate {
            last_seq: state.last_seq,
        }
    } else if seq == state.last_seq + 1 {
        ProducerDecision::Accept
    } else {
        ProducerDecision::Gap {
            expected: state.last_seq + 1,
            received: seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProducerDecision::*;

    const S: ProducerState = ProducerState {
        epoch: 2,
        last_seq: 5,
        recent: crate::stream::state::RecentWrites::EMPTY,
    };

    #[test]
    fn decision_table() {
        assert_eq!(decide(None, 0, 0), Accept);
        assert_eq!(decide(None, 7, 0), Accept);
        assert_eq!(
            decide(None, 0, 3),
            Gap {
                expected: 0,
                received: 3
            }
        );
        assert_eq!(decide(Some(&S), 1, 0), StaleEpoch { current: 2 });
        assert_eq!(decide(Some(&S), 3, 0), Accept);
        assert_eq!(decide(Some(&S), 3, 1), NewEpochNeedsSeqZero);
        assert_eq!(decide(Some(&S), 2, 5), Duplicate { last_seq: 5 });
        assert_eq!(decide(Some(&S), 2, 0), Duplicate { last_seq: 5 });
        assert_eq!(decide(Some(&S), 2, 6), Accept);
        assert_eq!(
            decide(Some(&S), 2, 8),
            Gap {
                expected: 6,
                received: 8
            }
        );
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_integer("0"), Some(0));
        assert_eq!(parse_integer("9007199254740991"), Some(MAX_SAFE_INTEGER));
        for bad in [
            "",
            "-1",
            "+1",
            "1.0",
            "1e3",
            " 1",
            "9007199254740992",
            "abc",
        ] {
            assert_eq!(parse_integer(bad), None, "{bad:?}");
        }
    }
}
