//! Append-batch request bodies (extensions §4.1): frames, each behind its
//! 4-byte big-endian length.

/// The body carrying `payloads` as frames, in order.
pub fn framed(payloads: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for p in payloads {
        body.extend_from_slice(&(p.len() as u32).to_be_bytes());
        body.extend_from_slice(p);
    }
    body
}
