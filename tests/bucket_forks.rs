//! Buckets (extensions §1.5) and forks (PROTOCOL.md §4.2) together, against
//! the real binary: a source deleted while a fork in another bucket lives
//! is soft-deleted (gone for clients: not listed, not counted), so its
//! bucket is empty and deletes (it once answered 409 `bucket_not_empty`
//! with `"streams":0`). The fork keeps its copy; the source's name is free
//! again in a re-created bucket, also after a restart.

mod common;

use common::{Server, req};

const TEXT: [(&str, &str); 1] = [("Content-Type", "text/plain")];

fn status(s: &Server, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    req(s.addr, method, path, headers, body).status
}

fn read_all(s: &Server, path: &str) -> (u16, Vec<u8>) {
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    (r.status, r.body)
}

#[test]
fn a_bucket_whose_only_stream_is_a_soft_deleted_source_deletes() {
    let mut s = Server::start(&["--cores", "2"]);
    for bucket in ["/srcbk", "/forkbk"] {
        assert_eq!(status(&s, "PUT", bucket, &[], b""), 201);
    }
    assert_eq!(status(&s, "PUT", "/srcbk/src", &TEXT, b"inherited"), 201);
    let from = [("Stream-Forked-From", "/srcbk/src")];
    assert_eq!(status(&s, "PUT", "/forkbk/fork", &from, b""), 201);
    assert_eq!(status(&s, "DELETE", "/srcbk/src", &[], b""), 204);
    assert_eq!(
        status(&s, "GET", "/srcbk/src", &[], b""),
        410,
        "soft-deleted"
    );
    // §4.2: 410 "for all client-facing operations", sub-resources too.
    let json = [("Content-Type", "application/json")];
    let offset = "0000000000000000_0000000000000003";
    let subresources = [
        ("GET", "/srcbk/src/bootstrap".to_string()),
        ("GET", "/srcbk/src/snapshot".to_string()),
        ("PUT", format!("/srcbk/src/snapshot/{offset}")),
        ("PUT", format!("/srcbk/src/retention/{offset}")),
        ("GET", "/srcbk/src/attrs".to_string()),
        ("PUT", "/srcbk/src/attrs".to_string()),
        ("POST", "/srcbk/src/append-batch".to_string()),
    ];
    for (method, path) in subresources {
        assert_eq!(
            status(&s, method, &path, &json, b"{}"),
            410,
            "{method} {path}"
        );
    }

    let bucket = req(s.addr, "GET", "/srcbk", &[], b"");
    assert!(
        bucket.text().contains(r#""streams":0"#),
        "{}",
        bucket.text()
    );
    assert_eq!(status(&s, "DELETE", "/srcbk", &[], b""), 204);
    assert_eq!(status(&s, "GET", "/srcbk", &[], b""), 404);

    for round in ["live", "after a restart"] {
        assert_eq!(
            read_all(&s, "/forkbk/fork"),
            (200, b"inherited".to_vec()),
            "{round}: the fork keeps its copy"
        );
        assert_eq!(status(&s, "GET", "/srcbk/src", &[], b""), 404, "{round}");
        s.restart();
    }
    assert_eq!(status(&s, "PUT", "/srcbk", &[], b""), 201);
    assert_eq!(status(&s, "PUT", "/srcbk/src", &TEXT, b"fresh"), 201);
    assert_eq!(read_all(&s, "/srcbk/src"), (200, b"fresh".to_vec()));
    assert_eq!(status(&s, "DELETE", "/forkbk/fork", &[], b""), 204);
    assert_eq!(read_all(&s, "/srcbk/src"), (200, b"fresh".to_vec()));
    s.restart();
    assert_eq!(read_all(&s, "/srcbk/src"), (200, b"fresh".to_vec()));
}
