//! Helpers shared by the raw-HTTP black-box tests (`blackbox_basic.rs`,
//! `blackbox_races.rs`): stream paths, create/append/read shorthands and
//! the checks that the server is still answering.
#![allow(dead_code)]

use crate::common::{Conn, ReadError, Response, Server, enc, req, unique_name};

pub const OCTET: &str = "application/octet-stream";
pub const TEXT: &str = "text/plain";

pub fn stream_path(name: &str) -> String {
    format!("/v1/stream/{name}")
}

pub fn new_stream_path() -> String {
    stream_path(&unique_name("bb"))
}

pub fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| {
            panic!(
                "no Stream-Next-Offset in {} response: {:?}",
                r.status, r.headers
            )
        })
        .to_string()
}

/// PUT a stream with `content_type`; asserts 201 and returns its tail offset.
pub fn create(s: &Server, path: &str, content_type: &str) -> String {
    let r = req(s.addr, "PUT", path, &[("Content-Type", content_type)], b"");
    assert_eq!(r.status, 201, "create {path}: {:?} {}", r.headers, r.text());
    next_offset(&r)
}

/// POST `body`; asserts 204 and returns the new tail offset.
pub fn append(c: &mut Conn, path: &str, content_type: &str, body: &[u8]) -> String {
    let r = c.request("POST", path, &[("Content-Type", content_type)], body);
    assert_eq!(
        r.status,
        204,
        "append to {path}: {:?} {}",
        r.headers,
        r.text()
    );
    next_offset(&r)
}

pub fn read_from(addr: std::net::SocketAddr, path: &str, offset: &str) -> Response {
    let r = req(
        addr,
        "GET",
        &format!("{path}?offset={}", enc(offset)),
        &[],
        b"",
    );
    assert_eq!(
        r.status,
        200,
        "GET {path}?offset={offset}: {:?} {}",
        r.headers,
        r.text()
    );
    r
}

pub fn is_up_to_date(r: &Response) -> bool {
    r.header("stream-up-to-date")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The server still answers a fresh connection correctly.
pub fn assert_alive(s: &Server) {
    let path = new_stream_path();
    let r = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"");
    assert_eq!(
        r.status, 201,
        "server no longer works after bad input: {:?}",
        r.headers
    );
}

/// The connection got a 4xx response or was closed without a response.
pub fn assert_4xx_or_closed(c: &mut Conn, what: &str) {
    match c.try_read_response() {
        Ok(r) => assert!(
            (400..500).contains(&r.status),
            "{what}: expected 4xx or close, got {} {:?} {}",
            r.status,
            r.headers,
            r.text()
        ),
        Err(ReadError::Closed) => {}
        Err(e) => panic!("{what}: expected 4xx or close, got: {e}"),
    }
}

/// Read a response and require `status` (a reset after the server answered
/// counts as a failure: the status must arrive).
pub fn assert_status(c: &mut Conn, status: u16, what: &str) {
    match c.try_read_response() {
        Ok(r) => assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text()),
        Err(e) => panic!("{what}: expected {status}, got: {e}"),
    }
}
