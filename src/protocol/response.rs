//! Typed responses produced by the protocol layer; `http::render` turns them
//! into bytes. Error bodies are JSON: `{"error":{"code":..,"message":..}}`.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn header_if(self, cond: bool, name: &'static str, value: &str) -> Self {
        if cond { self.header(name, value) } else { self }
    }

    pub fn with_body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// An error with the status the spec names and a JSON body.
    pub fn error(status: u16, code: &str, message: &str) -> Self {
        let body = serde_json::json!({ "error": { "code": code, "message": message } });
        Response::new(status)
            .header("content-type", "application/json")
            .with_body(body.to_string().into_bytes())
    }

    pub fn get_header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub fn bad_request(message: &str) -> Response {
    Response::error(400, "bad_request", message)
}

pub fn not_found(message: &str) -> Response {
    Response::error(404, "not_found", message)
}

/// 503 with `Retry-After: 1`: a limit or a passing state refuses the
/// request, and a retry shortly may succeed.
pub fn retry_soon(code: &str, message: &str) -> Response {
    Response::error(503, code, message).header("retry-after", "1")
}

/// 503 with Retry-After: storage (the disk, a blob, the log) failed in a
/// way a retry may not meet.
pub fn storage_unavailable(message: &str) -> Response {
    retry_soon("storage_unavailable", message)
}

/// A create, or a write of new messages or larger attributes, while the
/// shard's index budget is spent (`--max-index-bytes`): retention or
/// deletes free room.
pub fn index_full() -> Response {
    Response::error(
        503,
        "index_budget_full",
        "the server's message index is at its memory limit; move retention, or delete streams or buckets",
    )
    .header("retry-after", "5")
}

pub fn conflict(code: &str, message: &str) -> Response {
    Response::error(409, code, message)
}
