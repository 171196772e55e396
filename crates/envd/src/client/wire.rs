//! HTTP helpers of the client: bodies, bounded collection, and reading error answers.

use super::Body;
use crate::connect::{self, ConnectError};
use crate::files::FilesError;
use crate::Error;
use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

/// Largest unary answer or whole-file read the client buffers.
pub const MAX_BUFFERED_BODY: usize = 256 << 20;

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

pub async fn collect_limited(body: Incoming) -> Result<Bytes, Error> {
    let limited = http_body_util::Limited::new(body, MAX_BUFFERED_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => match e.downcast::<hyper::Error>() {
            Ok(h) => Err(Error::Http(*h)),
            Err(_) => Err(Error::Protocol(format!(
                "answer exceeds {MAX_BUFFERED_BODY} bytes"
            ))),
        },
    }
}

pub async fn rpc_error(resp: Response<Incoming>) -> Error {
    let status = resp.status().as_u16();
    let body = collect_limited(resp.into_body()).await.unwrap_or_default();
    match serde_json::from_slice::<ConnectError>(&body) {
        Ok(e) => Error::Rpc(e),
        Err(_) => Error::Rpc(ConnectError::new(
            connect::Code::from_http_status(status),
            String::from_utf8_lossy(&body).into_owned(),
        )),
    }
}

pub async fn files_error(resp: Response<Incoming>) -> Error {
    let status = resp.status().as_u16();
    let body = collect_limited(resp.into_body()).await.unwrap_or_default();
    let message = serde_json::from_slice::<FilesError>(&body)
        .map(|e| e.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
    Error::Status { status, message }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent_encode("/a b/ä&x=1"), "/a%20b/%C3%A4%26x%3D1");
    }
}
