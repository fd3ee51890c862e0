//! Buckets (extensions §1): list-query validation, paging and the JSON
//! bodies of bucket metadata and stream listings. Identifier rules live in
//! `router`; the registry itself is replicated by the shards.

use serde::Serialize;

use super::response::{Response, bad_request};
use crate::http::parse::RequestHead;
use crate::stream::Stream;

pub const DEFAULT_LIMIT: usize = 1000;

/// One stream of a bucket listing (extensions §1.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamSummary {
    pub stream_id: String,
    pub status: &'static str,
    pub content_type: String,
    pub tail_offset: u64,
    pub created_at_ms: u64,
    pub last_write_at_ms: u64,
}

impl StreamSummary {
    pub fn of(stream_id: &str, stream: &Stream) -> StreamSummary {
        StreamSummary {
            stream_id: stream_id.to_string(),
            status: if stream.is_closed() { "Closed" } else { "Open" },
            content_type: stream.content_type.clone(),
            tail_offset: stream.tail(),
            created_at_ms: stream.created_at_ms,
            last_write_at_ms: stream.last_write_ms,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub prefix: String,
    pub after: Option<String>,
    pub limit: usize,
}

/// `prefix`, `after` (exclusive cursor) and `limit` in 1..=1000.
pub fn list_query(head: &RequestHead) -> Result<ListQuery, Response> {
    let once = |name| super::query_once(head, name);
    let limit = match once("limit")? {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=DEFAULT_LIMIT).contains(n) && !text.starts_with('+'))
            .ok_or_else(|| bad_request("limit must be an integer in 1..=1000"))?,
    };
    Ok(ListQuery {
        prefix: once("prefix")?.unwrap_or("").to_string(),
        after: once("after")?.map(str::to_string),
        limit,
    })
}

#[derive(Serialize)]
struct ListBody<'a> {
    bucket_id: &'a str,
    prefix: &'a str,
    stream_count: usize,
    streams: &'a [StreamSummary],
    next_cursor: Option<&'a str>,
    has_more: bool,
}

/// Sorts the gathered summaries, applies `after` and `limit`, renders the page.
pub fn list_page(bucket: &str, query: &ListQuery, mut all: Vec<StreamSummary>) -> Response {
    all.sort_by(|a, b| a.stream_id.as_bytes().cmp(b.stream_id.as_bytes()));
    let start = match &query.after {
        Some(after) => all.partition_point(|s| s.stream_id.as_bytes() <= after.as_bytes()),
        None => 0,
    };
    let rest = &all[start..];
    let page = &rest[..rest.len().min(query.limit)];
    let has_more = rest.len() > page.len();
    let body = ListBody {
        bucket_id: bucket,
        prefix: &query.prefix,
        stream_count: page.len(),
        streams: page,
        next_cursor: if has_more {
            page.last().map(|s| s.stream_id.as_str())
        } else {
            None
        },
        has_more,
    };
    json_reply(200, &body)
}

/// GET /{bucket_id} (extensions §1.3).
pub fn bucket_metadata(bucket: &str, created_at_ms: u64, streams: usize) -> Response {
    let body = serde_json::json!({ "bucket_id": bucket, "streams": streams, "created_at_ms": created_at_ms });
    json_reply(200, &body)
}

pub fn json_reply(status: u16, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    Response::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .with_body(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str) -> StreamSummary {
        StreamSummary {
            stream_id: id.into(),
            status: "Open",
            content_type: "text/plain".into(),
            tail_offset: 0,
            created_at_ms: 1,
            last_write_at_ms: 1,
        }
    }

    #[test]
    fn pages_in_byte_order() {
        let all = vec![summary("c"), summary("a"), summary("b")];
        let q = ListQuery {
            prefix: String::new(),
            after: None,
            limit: 2,
        };
        let page: serde_json::Value =
            serde_json::from_slice(&list_page("bkt1", &q, all.clone()).body).unwrap();
        assert_eq!(page["streams"][0]["stream_id"], "a");
        assert_eq!(page["next_cursor"], "b");
        assert_eq!(page["has_more"], true);
        let q = ListQuery {
            prefix: String::new(),
            after: Some("b".into()),
            limit: 2,
        };
        let page: serde_json::Value =
            serde_json::from_slice(&list_page("bkt1", &q, all).body).unwrap();
        assert_eq!(page["streams"][0]["stream_id"], "c");
        assert_eq!(page["has_more"], false);
        assert!(page["next_cursor"].is_null());
    }
}
