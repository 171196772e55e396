//! The `Server-Timing` header: the steps the flow serving a request timed
//! ([`sandboxd_service::timing`]), on its answer, for `bench`'s breakdowns and a browser's network
//! panel. An answer whose flow timed nothing gets no header.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use sandboxd_service::timing;

/// The header's name (`http` has no constant for it).
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// Serves `req`, gathering the steps its flow times, and names them on the answer.
pub async fn server_timing(req: Request, next: Next) -> Response {
    let (mut response, steps) = timing::collect(next.run(req)).await;
    if let Some(value) = timing::server_timing(&steps) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().append(SERVER_TIMING, value);
        }
    }
    response
}
