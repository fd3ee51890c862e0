//! Request header validation shared by create and append: `Stream-TTL`,
//! `Stream-Expires-At` (PROTOCOL.md §5.1), `Stream-Closed`, producer headers
//! (§5.2.1), and the content coding of a request body (RFC 9110 §8.4).

use super::producer::parse_integer;
use super::response::{Response, bad_request};
use crate::http::parse::RequestHead;
use crate::stream::ProducerWrite;

/// The stream lifetime requested on create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lifetime {
    pub ttl_secs: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<u64>,
}

/// A request body must come without a content coding: rill stores what it
/// receives, and a coded body (gzip, say) would be taken for the stream's
/// bytes. Any coding but `identity` is a 415 that names the one accepted
/// (RFC 9110 §15.5.16).
pub fn check_content_encoding(head: &RequestHead) -> Result<(), Response> {
    let coded = head
        .headers
        .values("content-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
    match coded {
        false => Ok(()),
        true => Err(Response::error(
            415,
            "unsupported_content_encoding",
            "request bodies are taken without a content coding",
        )
        .header("accept-encoding", "identity")),
    }
}

/// `Stream-TTL`: a non-negative decimal integer without leading zeros, signs,
/// points or exponents. Both headers at once is a 400.
pub fn lifetime(head: &RequestHead) -> Result<Lifetime, Response> {
    let ttl = head.header("stream-ttl");
    let expires = head.header("stream-expires-at");
    if ttl.is_some() && expires.is_some() {
        return Err(bad_request(
            "Stream-TTL and Stream-Expires-At are mutually exclusive",
        ));
    }
    let mut lifetime = Lifetime::default();
    if let Some(ttl) = ttl {
        let canonical = ttl == "0" || (!ttl.starts_with('0') && !ttl.is_empty());
        let secs = parse_integer(ttl).filter(|_| canonical);
        lifetime.ttl_secs = Some(secs.ok_or_else(|| bad_request("invalid Stream-TTL"))?);
    }
    if let Some(expires) = expires {
        let ms = crate::clock::parse_rfc3339_ms(expires).ok_or_else(|| {
            bad_request("invalid Stream-Expires-At: expected an RFC 3339 timestamp")
        })?;
        lifetime.expires_at = Some(expires.to_string());
        lifetime.expires_at_ms = Some(ms);
    }
    Ok(lifetime)
}

/// The protocol's fields that carry one value. RFC 9110 §5.3: a sender
/// must not repeat a field that is not a list; repeated, which value counts
/// would be a guess (`Stream-TTL: 60` then `Stream-TTL: 3600`).
/// `Stream-Closed` is not among them: §4.1 treats any value but `true`
/// as absent, without an error (`wants_close`).
const SINGLE_VALUED: [&str; 13] = [
    "content-type",
    "stream-ttl",
    "stream-expires-at",
    "stream-seq",
    "producer-id",
    "producer-epoch",
    "producer-seq",
    "stream-forked-from",
    "stream-fork-offset",
    "stream-fork-sub-offset",
    "stream-attrs",
    "stream-record-match",
    "stream-snapshot-match",
];

/// 400 when one of the protocol's single-valued fields is repeated.
pub fn check_single_valued(head: &RequestHead) -> Result<(), Response> {
    let mut seen = 0u16;
    for (name, _) in head.headers.iter() {
        let Some(i) = SINGLE_VALUED.iter().position(|single| *single == name) else {
            continue;
        };
        if seen & (1 << i) != 0 {
            return Err(bad_request(&format!("{name} appears more than once")));
        }
        seen |= 1 << i;
    }
    Ok(())
}

/// `Stream-Closed: true` (case-insensitive); any other value means not
/// closing (PROTOCOL.md §4.1: treated as absent, no error). Two lines are
/// one comma-joined value (RFC 9110 §5.3), `true, true`: not `true`.
pub fn wants_close(head: &RequestHead) -> bool {
    let mut values = head
        .headers
        .iter()
        .filter(|(name, _)| *name == "stream-closed");
    matches!(
        (values.next(), values.next()),
        (Some((_, value)), None) if value.eq_ignore_ascii_case("true")
    )
}

/// Producer headers: all three or none; id non-empty; strict integers.
pub fn producer(head: &RequestHead) -> Result<Option<ProducerWrite>, Response> {
    let id = head.header("producer-id");
    let epoch = head.header("producer-epoch");
    let seq = head.header("producer-seq");
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(bad_request(
                "Producer-Id, Producer-Epoch and Producer-Seq must be sent together",
            ));
        }
    };
    if id.is_empty() {
        return Err(bad_request("Producer-Id must not be empty"));
    }
    let epoch = parse_integer(epoch)
        .ok_or_else(|| bad_request("Producer-Epoch must be an integer in 0..=2^53-1"))?;
    let seq = parse_integer(seq)
        .ok_or_else(|| bad_request("Producer-Seq must be an integer in 0..=2^53-1"))?;
    Ok(Some(ProducerWrite {
        id: id.to_string(),
        epoch,
        seq,
    }))
}
