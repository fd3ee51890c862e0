//! Black-box tests of buckets (extensions §1) and the bucketed
//! `/{bucket_id}/{stream_id}` surface of the real `rill` binary, with two
//! shards so buckets and streams are spread over both.

mod common;

use common::{Conn, Response, Server, enc, req};
use rill::shard::placement::shard_of;
use serde_json::Value;

const SHARDS: usize = 2;
const TEXT: &str = "text/plain";

fn start() -> Server {
    Server::start(&["--cores", "2"])
}

fn json(r: &Response) -> Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{} body is not JSON ({e}): {:?}", r.status, r.text()))
}

/// An error response: `status` and a body `{"error":{"code":..,"message":..}}`.
fn assert_error(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text());
    let v = json(r);
    assert!(
        v["error"]["code"].as_str().is_some_and(|s| !s.is_empty()),
        "{what}: error.code missing in {v}"
    );
    assert!(
        v["error"]["message"].as_str().is_some(),
        "{what}: error.message missing in {v}"
    );
}

fn put_bucket(s: &Server, bucket: &str) {
    let r = req(s.addr, "PUT", &format!("/{bucket}"), &[], b"");
    assert_eq!(r.status, 201, "PUT /{bucket}: {:?} {}", r.headers, r.text());
}

/// `/{bucket}/{stream}` with the stream id percent-encoded.
fn spath(bucket: &str, stream: &str) -> String {
    format!("/{bucket}/{}", enc(stream))
}

fn create_stream(s: &Server, bucket: &str, stream: &str, ct: &str, body: &[u8]) {
    let r = req(
        s.addr,
        "PUT",
        &spath(bucket, stream),
        &[("Content-Type", ct)],
        body,
    );
    assert_eq!(
        r.status,
        201,
        "create {bucket}/{stream}: {:?} {}",
        r.headers,
        r.text()
    );
}

fn bucket_streams(s: &Server, bucket: &str) -> u64 {
    let r = req(s.addr, "GET", &format!("/{bucket}"), &[], b"");
    assert_eq!(r.status, 200, "GET /{bucket}: {}", r.text());
    let v = json(&r);
    assert_eq!(v["bucket_id"], bucket, "{v}");
    v["streams"]
        .as_u64()
        .unwrap_or_else(|| panic!("streams is not an integer: {v}"))
}

fn list(s: &Server, bucket: &str, query: &str) -> Response {
    req(
        s.addr,
        "GET",
        &format!("/{bucket}/streams{query}"),
        &[],
        b"",
    )
}

fn list_ok(s: &Server, bucket: &str, query: &str) -> Value {
    let r = list(s, bucket, query);
    assert_eq!(r.status, 200, "list {bucket}{query}: {}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    json(&r)
}

/// Stream ids `{prefix}{i}` (i counting up from 0) until at least `per_shard`
/// of them are owned by every shard; the key is `{bucket}/{id}`.
fn ids_on_all_shards(bucket: &str, prefix: &str, per_shard: usize) -> Vec<String> {
    let mut counts = [0usize; SHARDS];
    let mut ids = Vec::new();
    let mut i = 0;
    while counts.iter().any(|&c| c < per_shard) {
        let id = format!("{prefix}{i}");
        counts[shard_of(&format!("{bucket}/{id}"), SHARDS)] += 1;
        ids.push(id);
        i += 1;
    }
    ids
}

#[test]
fn create_bucket_then_conflict_and_invalid_ids_are_400() {
    let s = start();
    let r = req(s.addr, "PUT", "/agents", &[], b"");
    assert_eq!(r.status, 201, "{:?} {}", r.headers, r.text());
    assert_error(
        &req(s.addr, "PUT", "/agents", &[], b""),
        409,
        "second PUT /agents",
    );
    // Boundaries of ^[a-z0-9_-]{4,64}$ that are valid.
    put_bucket(&s, "a-_9");
    put_bucket(&s, &"z".repeat(64));

    let too_long = "a".repeat(65);
    for bad in [
        "abc",
        "Upper",
        too_long.as_str(),
        "a.b_",
        "ab%20cd",
        "abc%C3%A9",
    ] {
        let path = format!("/{bad}");
        assert_error(
            &req(s.addr, "PUT", &path, &[], b""),
            400,
            &format!("PUT {path}"),
        );
        assert_error(
            &req(s.addr, "GET", &path, &[], b""),
            400,
            &format!("GET {path}"),
        );
        assert_error(
            &req(s.addr, "DELETE", &path, &[], b""),
            400,
            &format!("DELETE {path}"),
        );
        assert_error(
            &req(s.addr, "GET", &format!("{path}/streams"), &[], b""),
            400,
            &format!("GET {path}/streams"),
        );
    }
    // The invalid ids were not created as a side effect.
    assert_error(&req(s.addr, "GET", "/abcd", &[], b""), 404, "GET /abcd");
}

#[test]
fn bucket_metadata_counts_streams_and_missing_is_404() {
    let s = start();
    assert_error(&req(s.addr, "GET", "/nobucket", &[], b""), 404, "missing");
    put_bucket(&s, "meta");
    assert_eq!(bucket_streams(&s, "meta"), 0);
    let ids = ids_on_all_shards("meta", "s", 3);
    for (n, id) in ids.iter().enumerate() {
        create_stream(&s, "meta", id, TEXT, b"x");
        assert_eq!(bucket_streams(&s, "meta"), n as u64 + 1);
    }
    // Streams of another bucket and of /v1/stream are not counted.
    put_bucket(&s, "other");
    create_stream(&s, "other", "s0", TEXT, b"");
    let r = req(
        s.addr,
        "PUT",
        "/v1/stream/meta/s99",
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_eq!(r.status, 201);
    assert_eq!(bucket_streams(&s, "meta"), ids.len() as u64);
    assert_eq!(bucket_streams(&s, "other"), 1);
    // A deleted stream no longer counts.
    let r = req(s.addr, "DELETE", &spath("meta", &ids[0]), &[], b"");
    assert_eq!(r.status, 204);
    assert_eq!(bucket_streams(&s, "meta"), ids.len() as u64 - 1);
}

#[test]
fn stream_operations_in_missing_bucket_are_404_without_implicit_creation() {
    let s = start();
    let path = spath("late", "s1");
    let r = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"hi");
    assert_error(&r, 404, "PUT stream in missing bucket");
    // Still no bucket.
    assert_error(&req(s.addr, "GET", "/late", &[], b""), 404, "GET /late");
    for method in ["GET", "POST", "DELETE"] {
        let r = req(s.addr, method, &path, &[("Content-Type", TEXT)], b"x");
        assert_eq!(r.status, 404, "{method} in missing bucket: {}", r.text());
    }
    let r = req(s.addr, "HEAD", &path, &[], b"");
    assert_eq!(r.status, 404, "HEAD in missing bucket");

    put_bucket(&s, "late");
    let r = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"hi");
    assert_eq!(r.status, 201, "{:?} {}", r.headers, r.text());
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hi");
}

#[test]
fn combined_key_limit_is_122_bytes_and_ids_are_validated() {
    let s = start();
    let bucket = "keylimit";
    put_bucket(&s, bucket);
    // `{bucket}/{stream}` exactly 122 bytes.
    let fits = "s".repeat(122 - bucket.len() - 1);
    let r = req(
        s.addr,
        "PUT",
        &spath(bucket, &fits),
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_eq!(r.status, 201, "122-byte key: {}", r.text());
    let over = "s".repeat(122 - bucket.len());
    let r = req(
        s.addr,
        "PUT",
        &spath(bucket, &over),
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_error(&r, 400, "123-byte key");
    // Bytes, not characters: "é" is two bytes.
    let multibyte = format!("{}é", "s".repeat(122 - bucket.len() - 1 - 2));
    let r = req(
        s.addr,
        "PUT",
        &spath(bucket, &multibyte),
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_eq!(r.status, 201, "122-byte key with é: {}", r.text());
    let multibyte_over = format!("{}é", "s".repeat(122 - bucket.len() - 1 - 1));
    let r = req(
        s.addr,
        "PUT",
        &spath(bucket, &multibyte_over),
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_error(&r, 400, "123-byte key with é");

    // Forbidden stream ids: encoded `/`, NUL, `..`, invalid UTF-8.
    for raw in ["a%2Fb", "%2F", "a%2fb", "a%00b", "a..b", "..", "%FF"] {
        let path = format!("/{bucket}/{raw}");
        let r = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"");
        assert_error(&r, 400, &format!("PUT {path}"));
    }
    // Any other UTF-8 is fine: spaces, upper case, a single dot.
    for id in ["Upper Case", "a.b", "ü-stream", "a%b"] {
        create_stream(&s, bucket, id, TEXT, b"");
    }
    assert_eq!(bucket_streams(&s, bucket), 6);
}

#[test]
fn streams_is_reserved_for_the_listing() {
    let s = start();
    put_bucket(&s, "resv");
    let r = req(
        s.addr,
        "PUT",
        "/resv/streams",
        &[("Content-Type", TEXT)],
        b"data",
    );
    assert!(
        (400..500).contains(&r.status),
        "PUT /resv/streams must not create a stream: {} {}",
        r.status,
        r.text()
    );
    let r = req(
        s.addr,
        "POST",
        "/resv/streams",
        &[("Content-Type", TEXT)],
        b"data",
    );
    assert!((400..500).contains(&r.status), "POST: {}", r.status);
    assert_eq!(bucket_streams(&s, "resv"), 0);
    let v = list_ok(&s, "resv", "");
    assert_eq!(v["bucket_id"], "resv");
    assert_eq!(v["stream_count"], 0);
    assert_eq!(v["streams"], serde_json::json!([]));
    assert_eq!(v["has_more"], false);

    create_stream(&s, "resv", "one", TEXT, b"");
    let v = list_ok(&s, "resv", "");
    assert_eq!(v["stream_count"], 1);
    assert_eq!(v["streams"][0]["stream_id"], "one");
    // Listing a missing bucket is 404.
    assert_error(&list(&s, "nobucket", ""), 404, "list missing bucket");
}

/// Every id of the listing, paging with `limit` through `next_cursor`;
/// checks the page invariants on the way.
fn collect_pages(s: &Server, bucket: &str, prefix: &str, limit: usize) -> (Vec<Value>, usize) {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = format!("?prefix={}&limit={limit}", enc(prefix));
        if let Some(a) = &after {
            q.push_str(&format!("&after={}", enc(a)));
        }
        let v = list_ok(s, bucket, &q);
        pages += 1;
        assert!(pages < 100, "paging does not end");
        assert_eq!(v["bucket_id"], bucket, "{v}");
        assert_eq!(v["prefix"], prefix, "{v}");
        let page = v["streams"].as_array().expect("streams array").clone();
        assert_eq!(v["stream_count"].as_u64(), Some(page.len() as u64), "{v}");
        assert!(page.len() <= limit, "page longer than limit: {v}");
        let has_more = v["has_more"].as_bool().expect("has_more bool");
        if has_more {
            assert_eq!(page.len(), limit, "short page with has_more: {v}");
            let cursor = v["next_cursor"].as_str().expect("next_cursor string");
            assert_eq!(
                Some(cursor),
                page.last().and_then(|e| e["stream_id"].as_str()),
                "next_cursor is the last id of the page: {v}"
            );
            after = Some(cursor.to_string());
        } else {
            assert!(
                v["next_cursor"].is_null() || v.get("next_cursor").is_none(),
                "{v}"
            );
        }
        all.extend(page);
        if !has_more {
            return (all, pages);
        }
    }
}

fn ids_of(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["stream_id"].as_str().expect("stream_id").to_string())
        .collect()
}

fn byte_sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    ids
}

#[test]
fn listing_pages_by_prefix_in_byte_order() {
    let s = start();
    let bucket = "listing";
    put_bucket(&s, bucket);
    let mut ids: Vec<String> = Vec::new();
    ids.extend(ids_on_all_shards(bucket, "user-", 5).into_iter().take(12));
    for id in [
        "user_x", "user", "User-1", "admin-1", "admin-2", "a", "zz", "ü", "user-é", "user-~",
        "user- ",
    ] {
        ids.push(id.to_string());
    }
    while ids.len() < 25 {
        ids.push(format!("misc-{}", ids.len()));
    }
    let shards: std::collections::HashSet<usize> = ids
        .iter()
        .map(|id| shard_of(&format!("{bucket}/{id}"), SHARDS))
        .collect();
    assert_eq!(shards.len(), SHARDS, "ids spread over all shards");

    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for (i, id) in ids.iter().enumerate() {
        let body = "x".repeat(i);
        create_stream(&s, bucket, id, TEXT, body.as_bytes());
    }
    // One stream gets more bytes and is closed; one is JSON.
    let mut c = Conn::open(s.addr);
    let r = c.request(
        "POST",
        &spath(bucket, "zz"),
        &[("Content-Type", TEXT), ("Stream-Closed", "true")],
        b"tail",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    create_stream(&s, bucket, "json-1", "application/json", b"[1,2]");
    ids.push("json-1".to_string());
    assert_eq!(ids.len(), 26);

    let expected = byte_sorted(ids.clone());
    let (entries, pages) = collect_pages(&s, bucket, "", 10);
    assert_eq!(pages, 3);
    assert_eq!(ids_of(&entries), expected, "all ids, once, in byte order");

    let after_ms = before_ms + 60_000;
    for e in &entries {
        let id = e["stream_id"].as_str().unwrap();
        let i = ids.iter().position(|x| x == id).unwrap();
        let (status, ct, tail) = match id {
            "zz" => ("Closed", TEXT, Some(i as u64 + 4)),
            // JSON: the byte count of the stored messages; not pinned here.
            "json-1" => ("Open", "application/json", None),
            _ => ("Open", TEXT, Some(i as u64)),
        };
        assert_eq!(e["status"], status, "{e}");
        assert!(
            e["content_type"]
                .as_str()
                .is_some_and(|c| c.to_ascii_lowercase().starts_with(ct)),
            "{e}"
        );
        let t = e["tail_offset"].as_u64().expect("tail_offset integer");
        match tail {
            Some(tail) => assert_eq!(t, tail, "tail_offset is the byte count: {e}"),
            None => assert!(t > 0, "{e}"),
        }
        let created = e["created_at_ms"].as_u64().expect("created_at_ms");
        let written = e["last_write_at_ms"].as_u64().expect("last_write_at_ms");
        assert!(
            created >= before_ms.saturating_sub(5_000) && created <= after_ms,
            "{e}"
        );
        assert!(written >= created && written <= after_ms, "{e}");
    }

    // The whole list in one page (default limit 1000) and with limit=1000.
    for q in ["", "?limit=1000"] {
        let v = list_ok(&s, bucket, q);
        assert_eq!(v["has_more"], false);
        assert_eq!(v["stream_count"], ids.len());
        assert_eq!(
            ids_of(v["streams"].as_array().unwrap()),
            expected,
            "query {q:?}"
        );
    }

    // Prefixes, paged in small pages.
    for (prefix, limit) in [
        ("user-", 3),
        ("user", 4),
        ("admin-", 1),
        ("nomatch", 5),
        ("ü", 2),
    ] {
        let want = byte_sorted(
            ids.iter()
                .filter(|id| id.starts_with(prefix))
                .cloned()
                .collect(),
        );
        let (entries, _) = collect_pages(&s, bucket, prefix, limit);
        assert_eq!(ids_of(&entries), want, "prefix {prefix:?} limit {limit}");
    }

    // `after` is exclusive and need not name an existing stream.
    let v = list_ok(&s, bucket, "?after=user-");
    let want: Vec<String> = expected
        .iter()
        .filter(|id| id.as_bytes() > b"user-".as_slice())
        .cloned()
        .collect();
    assert_eq!(ids_of(v["streams"].as_array().unwrap()), want);
    let v = list_ok(&s, bucket, &format!("?after={}", enc(&expected[0])));
    assert_eq!(ids_of(v["streams"].as_array().unwrap()), expected[1..]);
    let v = list_ok(
        &s,
        bucket,
        &format!("?after={}", enc(expected.last().unwrap())),
    );
    assert_eq!(v["stream_count"], 0);
    assert_eq!(v["has_more"], false);

    for bad in ["0", "1001", "abc", "-1", "", "1.5"] {
        let q = format!("?limit={bad}");
        assert_error(&list(&s, bucket, &q), 400, &format!("limit={bad}"));
    }
    for twice in ["?limit=1&limit=2", "?prefix=a&prefix=b", "?after=a&after=b"] {
        assert_error(&list(&s, bucket, twice), 400, twice);
    }
}

#[test]
fn delete_bucket_requires_it_to_be_empty() {
    let s = start();
    let bucket = "doomed";
    put_bucket(&s, bucket);
    let ids = ids_on_all_shards(bucket, "d", 2);
    for id in &ids {
        create_stream(&s, bucket, id, TEXT, b"x");
    }
    assert_error(
        &req(s.addr, "DELETE", &format!("/{bucket}"), &[], b""),
        409,
        "DELETE non-empty bucket",
    );
    // Still there, streams intact.
    assert_eq!(bucket_streams(&s, bucket), ids.len() as u64);
    for (n, id) in ids.iter().enumerate() {
        let r = req(s.addr, "DELETE", &spath(bucket, id), &[], b"");
        assert_eq!(r.status, 204, "{}", r.text());
        if n + 1 < ids.len() {
            assert_error(
                &req(s.addr, "DELETE", &format!("/{bucket}"), &[], b""),
                409,
                "DELETE bucket with streams left",
            );
        }
    }
    let r = req(s.addr, "DELETE", &format!("/{bucket}"), &[], b"");
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert!(r.body.is_empty());
    assert_error(
        &req(s.addr, "GET", &format!("/{bucket}"), &[], b""),
        404,
        "GET deleted bucket",
    );
    assert_error(
        &req(s.addr, "DELETE", &format!("/{bucket}"), &[], b""),
        404,
        "DELETE deleted bucket",
    );
    assert_error(&list(&s, bucket, ""), 404, "list deleted bucket");
    // No stream can be created in it on any shard.
    for id in &ids {
        let r = req(
            s.addr,
            "PUT",
            &spath(bucket, id),
            &[("Content-Type", TEXT)],
            b"",
        );
        assert_error(&r, 404, "create stream in deleted bucket");
    }
    assert_error(
        &req(s.addr, "DELETE", "/nobucket", &[], b""),
        404,
        "DELETE missing bucket",
    );
}

#[test]
fn json_streams_read_as_ndjson_on_buckets_and_as_array_on_v1() {
    let s = start();
    put_bucket(&s, "dialect");
    let body = br#"[{"a":1},{"b":2}]"#;
    create_stream(&s, "dialect", "j", "application/json", body);
    let r = req(s.addr, "GET", "/dialect/j?offset=-1", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(r.text(), "{\"a\":1}\n{\"b\":2}\n");

    let mut c = Conn::open(s.addr);
    let r = c.request(
        "POST",
        "/dialect/j",
        &[("Content-Type", "application/json")],
        br#"{"c":3}"#,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let r = c.request("GET", "/dialect/j?offset=-1", &[], b"");
    assert_eq!(r.text(), "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");

    let r = req(
        s.addr,
        "PUT",
        "/v1/stream/dialect/j",
        &[("Content-Type", "application/json")],
        body,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = req(s.addr, "GET", "/v1/stream/dialect/j?offset=-1", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    assert_eq!(r.text(), r#"[{"a":1},{"b":2}]"#);
    // The two surfaces are distinct namespaces.
    let r = req(s.addr, "GET", "/dialect/j?offset=-1", &[], b"");
    assert_eq!(r.text().lines().count(), 3);
}

#[test]
fn keep_alive_connection_alternates_between_shards() {
    let s = start();
    let bucket = "handoff";
    put_bucket(&s, bucket);
    let ids: Vec<String> = ids_on_all_shards(bucket, "h", 5).into_iter().collect();
    assert!(ids.len() >= 10);
    for id in &ids {
        create_stream(&s, bucket, id, TEXT, b"");
    }
    let mut c = Conn::open(s.addr);
    let mut expected: Vec<String> = vec![String::new(); ids.len()];
    for round in 0..3 {
        for (i, id) in ids.iter().enumerate() {
            let piece = format!("[{round}:{i}]");
            let r = c.request(
                "POST",
                &spath(bucket, id),
                &[("Content-Type", TEXT)],
                piece.as_bytes(),
            );
            assert_eq!(r.status, 204, "round {round} POST {id}: {}", r.text());
            expected[i].push_str(&piece);
            let r = c.request("GET", &format!("{}?offset=-1", spath(bucket, id)), &[], b"");
            assert_eq!(r.status, 200, "round {round} GET {id}");
            assert_eq!(r.text(), expected[i], "round {round} stream {id}");
        }
        // Bucket-level requests on the same connection.
        let r = c.request("GET", &format!("/{bucket}"), &[], b"");
        assert_eq!(json(&r)["streams"], ids.len());
        let r = c.request("GET", &format!("/{bucket}/streams?limit=3"), &[], b"");
        assert_eq!(json(&r)["stream_count"], 3);
    }

    // Pipelined: every request in one write, alternating owners.
    let mut batch = Vec::new();
    for id in &ids {
        batch.extend(c.build_request("GET", &format!("{}?offset=-1", spath(bucket, id)), &[], b""));
    }
    c.send_raw(&batch);
    for (i, id) in ids.iter().enumerate() {
        let r = c.read_response();
        assert_eq!(r.status, 200, "pipelined GET {id}");
        assert_eq!(r.text(), expected[i], "pipelined stream {id}");
    }
    // Still the same live connection.
    let r = c.request(
        "GET",
        &format!("{}?offset=-1", spath(bucket, &ids[0])),
        &[],
        b"",
    );
    assert_eq!(r.text(), expected[0]);
}

#[test]
fn delete_bucket_races_with_stream_create() {
    // extensions §1.5: "A bucket MUST be empty (zero streams) before
    // deletion" and §1.6: stream operations in a missing bucket are 404. So a
    // DELETE (204) and a stream PUT (201) racing on the same bucket cannot
    // both succeed, and a deleted bucket leaves no stream behind.
    let s = start();
    let mut both = Vec::new();
    for i in 0..60 {
        let bucket = format!("race{i:03}");
        put_bucket(&s, &bucket);
        // A stream owned by another shard than the bucket, so the two
        // requests really run concurrently.
        let bucket_shard = shard_of(&bucket, SHARDS);
        let id = (0..)
            .map(|n| format!("s{n}"))
            .find(|id| shard_of(&format!("{bucket}/{id}"), SHARDS) != bucket_shard)
            .unwrap();
        let del_req = common::build_request(&s.addr, "DELETE", &format!("/{bucket}"), &[], b"");
        let put_req = common::build_request(
            &s.addr,
            "PUT",
            &spath(&bucket, &id),
            &[("Content-Type", TEXT)],
            b"",
        );
        let mut del = Conn::open(s.addr);
        let mut put = Conn::open(s.addr);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let b2 = barrier.clone();
        let t = std::thread::spawn(move || {
            b2.wait();
            put.send_raw(&put_req);
            put.read_response().status
        });
        barrier.wait();
        del.send_raw(&del_req);
        let del_status = del.read_response().status;
        let put_status = t.join().unwrap();
        // A create that meets the delete checking the bucket waits for its
        // outcome: it lands first (the delete is 409) or finds no bucket.
        assert!(
            matches!((put_status, del_status), (201, 409) | (404, 204)),
            "{bucket}: PUT {put_status}, DELETE {del_status}"
        );
        if del_status == 204 {
            // Recreating the bucket must show it empty.
            put_bucket(&s, &bucket);
            let n = bucket_streams(&s, &bucket);
            if put_status == 201 || n != 0 {
                both.push(format!(
                    "{bucket}: PUT {put_status}, recreated with {n} streams"
                ));
            }
        }
    }
    assert!(
        both.is_empty(),
        "DELETE bucket 204 and stream PUT 201 both succeeded: {both:?}"
    );
}

/// §1.5: a bucket is deleted only when empty. A fork copying into a bucket
/// while the bucket is deleted either lands first (the delete is 409) or is
/// refused; it never survives the delete to come back when the id is
/// reused.
#[test]
fn a_fork_racing_its_buckets_delete_never_outlives_it() {
    let s = start();
    put_bucket(&s, "forksrc");
    // A source big enough that a fork takes a while to copy it: 8 MiB in
    // 1 MiB appends (the test server takes bodies up to 2 MiB).
    create_stream(&s, "forksrc", "big", TEXT, b"");
    for _ in 0..8 {
        let r = req(
            s.addr,
            "POST",
            "/forksrc/big",
            &[("Content-Type", TEXT)],
            &vec![b'x'; 1 << 20],
        );
        assert_eq!(r.status, 204);
    }
    for round in 0..12 {
        let bucket = format!("race{round:04}");
        put_bucket(&s, &bucket);
        let addr = s.addr;
        let fork_path = spath(&bucket, "f");
        let forking = std::thread::spawn(move || {
            let from = [("Stream-Forked-From", "/forksrc/big")];
            req(addr, "PUT", &fork_path, &from, b"").status
        });
        std::thread::sleep(std::time::Duration::from_millis(round % 4));
        let deleted = req(s.addr, "DELETE", &format!("/{bucket}"), &[], b"").status;
        let forked = forking.join().unwrap();
        match (forked, deleted) {
            (201, 409) | (404, 204) => {}
            other => panic!("round {round}: fork and delete answered {other:?}"),
        }
        if deleted == 204 {
            put_bucket(&s, &bucket);
            assert_eq!(
                bucket_streams(&s, &bucket),
                0,
                "round {round}: a stream came back"
            );
        }
    }
}

/// Concurrent DELETEs of one empty bucket (extensions §1.5): one deletes it
/// (204), the others find it gone (404); two used to both answer 204.
#[test]
fn concurrent_deletes_of_a_bucket_delete_it_once() {
    let s = start();
    for round in 0..20 {
        let bucket = format!("race-{round}");
        put_bucket(&s, &bucket);
        let path = format!("/{bucket}");
        let statuses: Vec<u16> = std::thread::scope(|scope| {
            let deletes: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| req(s.addr, "DELETE", &path, &[], b"").status))
                .collect();
            deletes.into_iter().map(|d| d.join().unwrap()).collect()
        });
        let deleted = statuses.iter().filter(|&&st| st == 204).count();
        assert_eq!(deleted, 1, "round {round}: {statuses:?}");
        assert!(
            statuses.iter().all(|&st| st == 204 || st == 404),
            "{statuses:?}"
        );
    }
}
