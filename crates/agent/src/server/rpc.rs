//! Connect RPC plumbing on the server side: turning an async `fn(state, caller, request) -> Result<
//! response, ServerError>` into an axum route ([`unary`]), decoding the single request envelope of a
//! server stream ([`stream_request`]), and writing errors in the Connect shape ([`error_response`]).

use super::auth::Caller;
use super::error::ServerError;
use super::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use sandboxd_envd::connect::{self, STREAM_CONTENT_TYPE, UNARY_CONTENT_TYPE};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

/// A unary Connect method: JSON in, JSON out, errors as Connect error bodies.
pub fn unary<Req, Resp, F, Fut>(handler: F) -> MethodRouter<AppState>
where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
    F: Fn(AppState, Caller, Req) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Resp, ServerError>> + Send + 'static,
{
    post(
        move |State(state): State<AppState>, headers: HeaderMap, body: Bytes| {
            let handler = handler.clone();
            async move {
                let result = async {
                    require_content_type(&headers, UNARY_CONTENT_TYPE)?;
                    let req: Req = decode(&body)?;
                    let caller = Caller::from_headers(&state, &headers)?;
                    handler(state, caller, req).await
                }
                .await;
                match result {
                    Ok(resp) => json_response(&resp),
                    Err(e) => error_response(&e),
                }
            }
        },
    )
}

/// Checks a server-stream request and decodes its one envelope.
pub fn stream_request<Req: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Req, ServerError> {
    require_content_type(headers, STREAM_CONTENT_TYPE)?;
    let envelope = connect::decode_single(body)
        .map_err(|e| ServerError::InvalidArgument(format!("malformed request envelope: {e}")))?;
    if envelope.is_compressed() {
        return Err(ServerError::Unimplemented(
            "compressed messages are not supported".into(),
        ));
    }
    decode(&envelope.data)
}

/// Headers of a server-stream response.
pub fn stream_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(STREAM_CONTENT_TYPE),
    );
    resp
}

/// A server-stream call refused before it started: 200 with only an end-of-stream frame carrying the
/// error (Connect clients read a stream's code from there, not from the HTTP status), except for a
/// wrong content type, which is an HTTP-level refusal.
pub fn stream_error(err: &ServerError) -> Response {
    if matches!(err, ServerError::UnsupportedMediaType(_)) {
        return error_response(err);
    }
    tracing::debug!(error = %err.message(), "stream call refused");
    stream_response(Body::from(connect::encode_end_stream(Some(
        err.to_connect(),
    ))))
}

/// A Connect unary error: the code's HTTP status and `{"code", "message"}`.
pub fn error_response(err: &ServerError) -> Response {
    let ce = err.to_connect();
    if ce.code == sandboxd_envd::Code::Internal {
        tracing::error!(error = %ce.message, "call failed");
    } else {
        tracing::debug!(code = %ce.code, error = %ce.message, "call refused");
    }
    let status = match err {
        ServerError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => {
            StatusCode::from_u16(ce.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
    };
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(UNARY_CONTENT_TYPE),
        )],
        ce.to_json(),
    )
        .into_response()
}

/// Fallback for unknown routes: Connect's answer to an unknown procedure (404, `unimplemented`).
pub async fn not_found(uri: axum::http::Uri) -> Response {
    let err = ServerError::Unimplemented(format!("{} is not implemented", uri.path()));
    let mut resp = error_response(&err);
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

fn json_response<T: Serialize>(msg: &T) -> Response {
    match serde_json::to_vec(msg) {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(UNARY_CONTENT_TYPE),
            )],
            body,
        )
            .into_response(),
        Err(e) => error_response(&ServerError::Internal(format!(
            "cannot encode the answer: {e}"
        ))),
    }
}

/// Parses a JSON message; an empty body is the empty message.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ServerError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ServerError::InvalidArgument(format!("invalid request message: {e}")))
}

fn require_content_type(headers: &HeaderMap, expected: &str) -> Result<(), ServerError> {
    let got = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = got.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(ServerError::UnsupportedMediaType(format!(
            "content type '{got}' is not supported here, expected '{expected}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_request_requires_connect_json_and_one_envelope() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+json"),
        );
        let body = connect::encode_envelope(0, br#"{"path":"/x"}"#);
        let req: sandboxd_envd::filesystem::StatRequest = stream_request(&h, &body).unwrap();
        assert_eq!(req.path, "/x");
        assert!(stream_request::<sandboxd_envd::filesystem::StatRequest>(&h, &body[..3]).is_err());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/proto"),
        );
        let err = stream_request::<sandboxd_envd::filesystem::StatRequest>(&h, &body).unwrap_err();
        assert!(matches!(err, ServerError::UnsupportedMediaType(_)));
    }

    #[test]
    fn empty_body_is_the_empty_message() {
        let req: sandboxd_envd::process::ListRequest = decode(b"").unwrap();
        assert_eq!(req, sandboxd_envd::process::ListRequest {});
        assert!(decode::<sandboxd_envd::filesystem::StatRequest>(b"{\"path\":5}").is_err());
    }
}
