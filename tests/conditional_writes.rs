//! Preconditions on a stream's writes (RFC 9110 §13.1.1-§13.1.2, §13.2;
//! PROTOCOL.md §12.1 makes RFC 9110 normative), against the real binary:
//! PUT, POST and DELETE with If-Match or If-None-Match go ahead only when
//! the condition holds against the stream's current entity tag (HEAD's),
//! else 412 with a JSON body; a write that fails anyway keeps its status.

mod common;

use common::{Server, req};

const TEXT: (&str, &str) = ("Content-Type", "text/plain");

fn etag(s: &Server, path: &str) -> String {
    let head = req(s.addr, "HEAD", path, &[], b"");
    head.header("etag").expect("HEAD has an ETag").to_string()
}

fn body_of(s: &Server, path: &str) -> Vec<u8> {
    req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"").body
}

#[test]
fn if_none_match_star_creates_only_what_is_absent() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/cond-create";
    let absent = [TEXT, ("If-None-Match", "*")];
    assert_eq!(req(s.addr, "PUT", path, &absent, b"a").status, 201);
    let again = req(s.addr, "PUT", path, &absent, b"a");
    assert_eq!(again.status, 412, "{}", again.text());
    assert!(
        again.text().contains("precondition_failed"),
        "{}",
        again.text()
    );
    // A create that would conflict anyway keeps its 409 (§13.2.1).
    let json = [("Content-Type", "application/json"), ("If-None-Match", "*")];
    assert_eq!(req(s.addr, "PUT", path, &json, b"").status, 409);
    // If-Match: * needs a current stream.
    let present = [TEXT, ("If-Match", "*")];
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/cond-new", &present, b"").status,
        412
    );
    assert_eq!(req(s.addr, "PUT", path, &present, b"").status, 200);
}

#[test]
fn if_match_appends_only_onto_the_tail_it_names() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/cond/s";
    assert_eq!(req(s.addr, "PUT", "/cond", &[], b"").status, 201);
    assert_eq!(req(s.addr, "PUT", path, &[TEXT], b"a").status, 201);
    let seen = etag(&s, path);
    let append =
        |tag: &str, body: &[u8]| req(s.addr, "POST", path, &[TEXT, ("If-Match", tag)], body);
    assert_eq!(append(&seen, b"b").status, 204);
    let stale = append(&seen, b"c");
    assert_eq!(stale.status, 412, "{}", stale.text());
    assert_eq!(
        append(&format!("W/{}", etag(&s, path)), b"c").status,
        412,
        "weak"
    );
    assert_eq!(
        append(&format!("\"x\", {}", etag(&s, path)), b"c").status,
        204
    );
    assert_eq!(body_of(&s, path), b"abc");
    // A missing stream stays 404 whatever the condition.
    let missing = req(
        s.addr,
        "POST",
        "/cond/none",
        &[TEXT, ("If-Match", "*")],
        b"x",
    );
    assert_eq!(missing.status, 404);
}

#[test]
fn a_delete_meets_its_conditions_first() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/cond-delete";
    assert_eq!(req(s.addr, "PUT", path, &[TEXT], b"a").status, 201);
    let stale = [("If-Match", "\"not-it\"")];
    assert_eq!(req(s.addr, "DELETE", path, &stale, b"").status, 412);
    let exists = [("If-None-Match", "*")];
    assert_eq!(req(s.addr, "DELETE", path, &exists, b"").status, 412);
    assert_eq!(body_of(&s, path), b"a", "still there");
    let current = etag(&s, path);
    assert_eq!(
        req(s.addr, "DELETE", path, &[("If-Match", &current)], b"").status,
        204
    );
    assert_eq!(req(s.addr, "DELETE", path, &stale, b"").status, 404);
}
