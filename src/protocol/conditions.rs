//! Preconditions on a stream's writes (RFC 9110 §13.1.1 If-Match, §13.1.2
//! If-None-Match, evaluated in §13.2.2's order; PROTOCOL.md §12.1 makes
//! RFC 9110 normative): PUT, POST and DELETE of a stream go ahead only
//! when their conditions hold, else 412. The stream's representation is
//! what HEAD describes, its entity tag HEAD's (`read::stream_etag`). Per
//! §13.2.1 they are evaluated only for a write that would otherwise
//! succeed: a missing stream stays 404, a conflicting create 409.

use super::read::stream_etag;
use super::response::Response;
use crate::http::parse::RequestHead;
use crate::stream::Stream;

/// The 412 a write gets when a precondition of `head` fails against the
/// stream as it is (`None`: no stream); `None` when they hold or none
/// was sent.
pub fn failed(head: &RequestHead, stream: Option<&Stream>) -> Option<Response> {
    let current = stream.map(stream_etag);
    let current = current.as_deref();
    if let Some(list) = head.list_header("if-match")
        && !if_match(&list, current)
    {
        return Some(precondition_failed(
            "If-Match names no current entity tag of the stream",
        ));
    }
    if let Some(list) = head.list_header("if-none-match")
        && if_none_match_hits(&list, current)
    {
        return Some(precondition_failed(
            "If-None-Match names the stream's current entity tag (or * and it exists)",
        ));
    }
    None
}

fn tags(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|t| !t.is_empty())
}

/// §13.1.1: `*` matches any current representation; listed tags compare
/// strongly (a weak tag never matches).
fn if_match(list: &str, current: Option<&str>) -> bool {
    names_current(list, current, |t, current| {
        !t.starts_with("W/") && t == current
    })
}

/// §13.1.2: `*` matches any current representation; listed tags compare
/// weakly.
fn if_none_match_hits(list: &str, current: Option<&str>) -> bool {
    let opaque = |t: &str| t.trim_start_matches("W/").to_string();
    names_current(list, current, |t, current| opaque(t) == opaque(current))
}

/// Whether a current representation exists and the list is `*` or names
/// its tag (compared by `same`).
fn names_current(list: &str, current: Option<&str>, same: impl Fn(&str, &str) -> bool) -> bool {
    current.is_some_and(|current| tags(list).any(|t| t == "*" || same(t, current)))
}

fn precondition_failed(message: &str) -> Response {
    Response::error(412, "precondition_failed", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_wants_a_current_representation_and_a_strong_tag() {
        assert!(!if_match("*", None));
        assert!(if_match("*", Some("\"1:0:3\"")));
        assert!(if_match("\"x\", \"1:0:3\"", Some("\"1:0:3\"")));
        assert!(!if_match("W/\"1:0:3\"", Some("\"1:0:3\"")));
        assert!(!if_match("\"1:0:4\"", Some("\"1:0:3\"")));
    }

    #[test]
    fn if_none_match_hits_any_current_tag_weakly() {
        assert!(!if_none_match_hits("*", None));
        assert!(if_none_match_hits("*", Some("\"1:0:3\"")));
        assert!(if_none_match_hits("W/\"1:0:3\"", Some("\"1:0:3\"")));
        assert!(!if_none_match_hits("\"1:0:4\", \"x\"", Some("\"1:0:3\"")));
    }
}
