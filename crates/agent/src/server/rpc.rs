//! Connect RPC plumbing on the server side: turning an async `fn(state, caller, request) -> Result<
//! response, ServerError>` into an axum route ([`unary`]), decoding the single request envelope of a
//! server stream ([`stream_request`]) and framing its answer ([`message_stream`]: first message,
//! keepalives when idle, always an end-of-stream frame), decoding the envelopes of a client stream as
//! they arrive ([`client_stream_messages`]) and answering it ([`client_stream_response`]), and writing
//! errors in the Connect shape ([`error_response`]).

use super::auth::Caller;
use super::error::ServerError;
use super::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use futures::{Stream, StreamExt, TryStreamExt};
use sandboxd_envd::connect::{
    self, ConnectError, EnvelopeDecoder, STREAM_CONTENT_TYPE, UNARY_CONTENT_TYPE,
};
use sandboxd_envd::KEEPALIVE_HEADER;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::codec::FramedRead;
use tokio_util::io::StreamReader;

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

/// The keepalive interval a stream call asks for with `Keepalive-Ping-Interval` (seconds), else
/// `default`.
pub fn keepalive_interval(headers: &HeaderMap, default: Duration) -> Duration {
    headers
        .get(KEEPALIVE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(default)
}

/// How a server stream goes on after its first message.
pub struct StreamShape<M> {
    /// The message sent after each `keepalive` without one.
    pub keepalive_message: M,
    pub keepalive: Duration,
    /// Whether a message is the stream's last (the end frame follows it).
    pub is_last: fn(&M) -> bool,
    /// How the stream ends when `events` runs dry: `None` is success.
    pub on_exhausted: Option<ConnectError>,
}

/// The framed body of a server stream: `first`, then `events` with keepalives in the idle gaps, then
/// an end-of-stream frame: successful after the last message, carrying the error an event failed with,
/// or `on_exhausted` when `events` ends first.
pub fn message_stream<M, S>(
    first: M,
    events: S,
    shape: StreamShape<M>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static
where
    M: Serialize + Clone + Send + 'static,
    S: Stream<Item = Result<M, ServerError>> + Send + 'static,
{
    enum Phase<M> {
        First(M),
        Running,
        Finish(Option<ConnectError>),
        Done,
    }
    struct State<M> {
        events: Pin<Box<dyn Stream<Item = Result<M, ServerError>> + Send>>,
        shape: StreamShape<M>,
        phase: Phase<M>,
    }
    let state = State {
        events: Box::pin(events),
        shape,
        phase: Phase::First(first),
    };
    futures::stream::unfold(state, |mut st| async move {
        let frame = match std::mem::replace(&mut st.phase, Phase::Running) {
            Phase::Done => return None,
            Phase::Finish(err) => {
                st.phase = Phase::Done;
                connect::encode_end_stream(err)
            }
            Phase::First(msg) => encode(&msg),
            Phase::Running => {
                match tokio::time::timeout(st.shape.keepalive, st.events.next()).await {
                    Err(_) => encode(&st.shape.keepalive_message),
                    Ok(Some(Ok(msg))) => {
                        if (st.shape.is_last)(&msg) {
                            st.phase = Phase::Finish(None);
                        }
                        encode(&msg)
                    }
                    Ok(Some(Err(e))) => {
                        st.phase = Phase::Done;
                        tracing::debug!(error = %e.message(), "stream failed");
                        connect::encode_end_stream(Some(e.to_connect()))
                    }
                    Ok(None) => {
                        st.phase = Phase::Done;
                        connect::encode_end_stream(st.shape.on_exhausted.take())
                    }
                }
            }
        };
        Some((Ok(frame), st))
    })
}

fn encode<M: Serialize>(msg: &M) -> Bytes {
    // Stream messages are plain data; serialization cannot fail, but never panic on it.
    connect::encode_message(msg).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot encode a stream message");
        Bytes::new()
    })
}

/// Checks a client-stream request and decodes its envelopes as they arrive.
pub fn client_stream_messages<Req: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> Result<impl Stream<Item = Result<Req, ServerError>> + Send + 'static, ServerError> {
    require_content_type(headers, STREAM_CONTENT_TYPE)?;
    let reader = StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    Ok(FramedRead::new(reader, EnvelopeDecoder)
        .map_err(|e| ServerError::InvalidArgument(format!("malformed request envelope: {e}")))
        .take_while(|env| {
            // An end-of-stream flag from a client closes its side like end of body.
            let go_on = env.as_ref().map_or(true, |e| !e.is_end_stream());
            futures::future::ready(go_on)
        })
        .and_then(|envelope| async move {
            if envelope.is_compressed() {
                return Err(ServerError::Unimplemented(
                    "compressed messages are not supported".into(),
                ));
            }
            decode(&envelope.data)
        }))
}

/// The answer to a client stream: 200 with the one message and an end frame, or only an end frame
/// carrying the error (the Connect streaming shape, which is how a client-stream call answers).
pub fn client_stream_response<Resp: Serialize>(result: Result<Resp, ServerError>) -> Response {
    match result {
        Ok(msg) => {
            let mut body = encode(&msg).to_vec();
            body.extend_from_slice(&connect::encode_end_stream(None));
            stream_response(Body::from(body))
        }
        Err(e) => stream_error(&e),
    }
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

pub fn require_content_type(headers: &HeaderMap, expected: &str) -> Result<(), ServerError> {
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

    #[tokio::test]
    async fn client_streams_decode_each_envelope_and_stop_at_end_stream() {
        use sandboxd_envd::process::ListRequest;
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+json"),
        );
        let mut wire = Vec::new();
        wire.extend_from_slice(&connect::encode_envelope(0, b"{}"));
        wire.extend_from_slice(&connect::encode_envelope(0, b""));
        wire.extend_from_slice(&connect::encode_end_stream(None));
        wire.extend_from_slice(&connect::encode_envelope(0, b"{}"));
        let msgs: Vec<_> = client_stream_messages::<ListRequest>(&h, Body::from(wire))
            .unwrap()
            .collect()
            .await;
        assert_eq!(msgs.len(), 2);
        assert!(msgs.iter().all(Result::is_ok));
        let bad = client_stream_messages::<ListRequest>(&h, Body::from(vec![0, 0, 0, 0, 9]))
            .unwrap()
            .collect::<Vec<_>>()
            .await;
        assert!(matches!(
            bad.as_slice(),
            [Err(ServerError::InvalidArgument(_))]
        ));
    }

    #[tokio::test]
    async fn message_streams_open_with_first_keepalive_when_idle_and_end_with_a_frame() {
        let events = futures::stream::iter(vec![Ok(2u32), Ok(3)]).chain(futures::stream::pending());
        let shape = StreamShape {
            keepalive_message: 0u32,
            keepalive: Duration::from_millis(50),
            is_last: |m| *m == 3,
            on_exhausted: None,
        };
        let frames: Vec<Bytes> = message_stream(1u32, events, shape)
            .map(|f| f.unwrap_or_default())
            .collect()
            .await;
        let payloads: Vec<_> = frames
            .iter()
            .map(|f| connect::decode_single(f).unwrap())
            .collect();
        let texts: Vec<_> = payloads
            .iter()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect();
        assert_eq!(texts, vec!["1", "2", "3", "{}"]);
        assert!(payloads[3].is_end_stream());

        let failing = futures::stream::iter(vec![Err(ServerError::NotFound("gone".into()))]);
        let shape = StreamShape {
            keepalive_message: 0u32,
            keepalive: Duration::from_secs(60),
            is_last: |_| false,
            on_exhausted: None,
        };
        let frames: Vec<Bytes> = message_stream(1u32, failing, shape)
            .map(|f| f.unwrap_or_default())
            .collect()
            .await;
        assert_eq!(frames.len(), 2);
        let end = connect::decode_single(&frames[1]).unwrap();
        assert!(end.is_end_stream());
        assert!(String::from_utf8_lossy(&end.data).contains("not_found"));

        let idle = futures::stream::pending::<Result<u32, ServerError>>();
        let shape = StreamShape {
            keepalive_message: 0u32,
            keepalive: Duration::from_millis(20),
            is_last: |_| false,
            on_exhausted: None,
        };
        let first_three: Vec<Bytes> = message_stream(1u32, idle, shape)
            .take(3)
            .map(|f| f.unwrap_or_default())
            .collect()
            .await;
        let texts: Vec<_> = first_three
            .iter()
            .map(|f| String::from_utf8_lossy(&connect::decode_single(f).unwrap().data).into_owned())
            .collect();
        assert_eq!(texts, vec!["1", "0", "0"]);
    }

    #[test]
    fn empty_body_is_the_empty_message() {
        let req: sandboxd_envd::process::ListRequest = decode(b"").unwrap();
        assert_eq!(req, sandboxd_envd::process::ListRequest {});
        assert!(decode::<sandboxd_envd::filesystem::StatRequest>(b"{\"path\":5}").is_err());
    }
}
