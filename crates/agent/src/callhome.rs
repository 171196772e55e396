//! Call-home: the agent's sender of the events it reports to the daemon (`sandboxd_envd::callback`).
//!
//! Contract:
//! - [`report`] delivers one logical event: it mints one `deliveryId` (128 random bits, hex) and sends
//!   the same JSON [`CallbackEvent`] on every attempt, so the daemon dedupes a retry that follows a
//!   delivery whose answer was lost.
//! - Each attempt is one `POST` [`EVENTS_PATH`] over a fresh HTTP/1.1 connection to the daemon's unix
//!   socket, with `Authorization: Bearer <the sandbox's agent token>`, bounded by [`ATTEMPT_TIMEOUT`].
//! - Retries follow the project's one sender policy (`sandboxd_retry`), given by the caller
//!   (`Policy::state_bearing()` in production): transport errors, timeouts and 5xx are retried, a 4xx
//!   never; the outcome (delivered, rejected, gave up, and after how many attempts) is logged and
//!   returned.
//!
//! Assumes a tokio runtime with I/O and time enabled. Never fails the caller: a report that cannot be
//! delivered is logged and the agent carries on (the daemon notices a silent agent by other means).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use sandboxd_envd::callback::{AgentEvent, CallbackEvent, EVENTS_PATH};
use sandboxd_retry::{classify_status, Outcome, Policy, Report, SendError};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing::Instrument;

/// How long one attempt (connect, request, answer) may take before it counts as a transport error.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// At most this much of an answer's body is read (it only ever ends up in a log line).
const ANSWER_LIMIT: usize = 4096;

/// Where an agent reports, and for which sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackTarget {
    /// The daemon's callback socket as this process sees it.
    pub socket: PathBuf,
    /// The sandbox the events are about.
    pub sandbox_id: String,
}

/// Why one attempt did not get an HTTP answer.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    /// The daemon's callback socket could not be connected to.
    #[error("cannot connect to {socket}")]
    Connect {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange with the daemon broke off.
    #[error("HTTP exchange failed")]
    Http(#[source] hyper::Error),
    /// The request could not be built.
    #[error("cannot build the request")]
    Request(#[source] http::Error),
    /// No answer came within the attempt's time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Reports `event` for `target`, authenticated by `token`, retrying under `policy`.
pub async fn report(
    target: &CallbackTarget,
    token: &str,
    event: AgentEvent,
    policy: &Policy,
) -> Report {
    let kind = event.kind();
    let event = CallbackEvent {
        delivery_id: delivery_id(),
        sandbox_id: target.sandbox_id.clone(),
        event,
    };
    // Serializing this plain struct cannot fail.
    let body = Bytes::from(serde_json::to_vec(&event).unwrap_or_default());
    let span = tracing::info_span!(
        "call_home",
        sandbox_id = %target.sandbox_id,
        event = kind,
        delivery_id = %event.delivery_id,
    );
    async {
        let report = sandboxd_retry::send(policy, |n| {
            let body = body.clone();
            async move {
                let outcome = attempt(&target.socket, token, body).await;
                if let Outcome::Retryable(why) = &outcome {
                    tracing::debug!(attempt = n, error = %why, "call-home attempt failed");
                }
                outcome
            }
        })
        .await;
        match &report.result {
            Ok(()) => tracing::info!(attempts = report.attempts, "call-home delivered"),
            Err(SendError::Rejected(why)) => tracing::warn!(
                attempts = report.attempts,
                reason = %why,
                "call-home rejected by the daemon; not retried"
            ),
            Err(SendError::Exhausted { attempts, last }) => {
                tracing::warn!(attempts, error = %last, "call-home gave up")
            }
        }
        report
    }
    .instrument(span)
    .await
}

/// One attempt, sorted by whether retrying can help.
async fn attempt(socket: &Path, token: &str, body: Bytes) -> Outcome {
    let answer = tokio::time::timeout(ATTEMPT_TIMEOUT, post(socket, token, body))
        .await
        .unwrap_or(Err(AttemptError::Timeout(ATTEMPT_TIMEOUT)));
    match answer {
        Ok((status, text)) => match classify_status(status) {
            Outcome::Delivered => Outcome::Delivered,
            Outcome::Retryable(why) => Outcome::Retryable(with_answer(why, &text)),
            Outcome::Rejected(why) => Outcome::Rejected(with_answer(why, &text)),
        },
        Err(e) => Outcome::Retryable(sandboxd_errors::chain(&e)),
    }
}

/// `POST`s `body` on a fresh connection; returns the status and the start of the answer's body.
async fn post(socket: &Path, token: &str, body: Bytes) -> Result<(u16, String), AttemptError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| AttemptError::Connect {
            socket: socket.display().to_string(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(AttemptError::Http)?;
    // The connection is driven beside the request and dropped with this attempt (a timeout too).
    let _conn = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let request = hyper::Request::post(EVENTS_PATH)
        .header(http::header::HOST, "localhost")
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(AttemptError::Request)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(AttemptError::Http)?;
    let status = response.status().as_u16();
    // The status decides; the body is only for the log, so a broken or oversized one is not an error.
    let text = match Limited::new(response.into_body(), ANSWER_LIMIT)
        .collect()
        .await
    {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    Ok((status, text))
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn with_answer(why: String, answer: &str) -> String {
    let answer = answer.trim();
    if answer.is_empty() {
        why
    } else {
        format!("{why}: {answer}")
    }
}

/// A fresh delivery id: 128 bits from the kernel's random source, as 32 lowercase hex digits.
fn delivery_id() -> String {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fills `buf` from `getrandom(2)`. Falls back to a value derived from the time and pid if the
/// kernel refuses (it never does on a supported kernel): an id only needs to be unique, not secret.
fn fill_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    if filled < buf.len() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let seed = now ^ (u128::from(std::process::id()) << 64);
        for (i, b) in buf.iter_mut().enumerate().skip(filled) {
            *b = (seed >> ((i % 16) * 8)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use std::sync::{Arc, Mutex};

    const TOKEN: &str = "agent-token-1";

    /// One request the test daemon received.
    #[derive(Debug, Clone)]
    struct Seen {
        authorization: Option<String>,
        content_type: Option<String>,
        body: serde_json::Value,
    }

    #[derive(Default)]
    struct Daemon {
        /// Statuses to answer, in order; the last repeats.
        script: Vec<u16>,
        seen: Mutex<Vec<Seen>>,
    }

    /// A test daemon on `<dir>/daemon.sock` answering `script`; returns its socket and its record.
    fn daemon(dir: &Path, script: Vec<u16>) -> (PathBuf, Arc<Daemon>) {
        let socket = dir.join("daemon.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind test daemon");
        let state = Arc::new(Daemon {
            script,
            seen: Mutex::default(),
        });
        let app = axum::Router::new()
            .route(EVENTS_PATH, post(answer))
            .with_state(state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (socket, state)
    }

    async fn answer(
        State(daemon): State<Arc<Daemon>>,
        headers: HeaderMap,
        body: Bytes,
    ) -> (StatusCode, String) {
        let header = |name: http::header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let mut seen = daemon.seen.lock().unwrap();
        let status = daemon.script[seen.len().min(daemon.script.len() - 1)];
        seen.push(Seen {
            authorization: header(http::header::AUTHORIZATION),
            content_type: header(http::header::CONTENT_TYPE),
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        });
        let body = if status == 200 {
            r#"{"applied":true,"state":"running"}"#.to_string()
        } else {
            format!(r#"{{"message":"scripted {status}"}}"#)
        };
        (StatusCode::from_u16(status).unwrap(), body)
    }

    fn fast() -> Policy {
        Policy {
            backoff: vec![Duration::from_millis(20)],
            ..Policy::state_bearing().without_jitter()
        }
    }

    fn target(socket: PathBuf) -> CallbackTarget {
        CallbackTarget {
            socket,
            sandbox_id: "sb-1".into(),
        }
    }

    fn ready() -> AgentEvent {
        AgentEvent::EnvironmentReady {
            envd_version: "0.6.4".into(),
        }
    }

    #[tokio::test]
    async fn server_errors_are_retried_with_one_delivery_id_until_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let (socket, daemon) = daemon(dir.path(), vec![500, 500, 200]);
        let report = report(&target(socket), TOKEN, ready(), &fast()).await;
        assert_eq!(report.attempts, 3);
        assert_eq!(report.result, Ok(()));
        let seen = daemon.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        let id = seen[0].body["deliveryId"].as_str().expect("deliveryId");
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        for s in &seen {
            assert_eq!(s.authorization.as_deref(), Some("Bearer agent-token-1"));
            assert_eq!(s.content_type.as_deref(), Some("application/json"));
            assert_eq!(
                s.body,
                serde_json::json!({"deliveryId": id, "sandboxId": "sb-1",
                                   "event": "environment-ready", "envdVersion": "0.6.4"})
            );
        }
    }

    #[tokio::test]
    async fn a_refused_event_is_sent_once() {
        let dir = tempfile::tempdir().unwrap();
        let (socket, daemon) = daemon(dir.path(), vec![409, 200]);
        let failed = AgentEvent::EnvironmentFailed {
            reason: "no listener".into(),
        };
        let report = report(&target(socket), TOKEN, failed, &fast()).await;
        assert_eq!(report.attempts, 1);
        assert!(
            matches!(&report.result, Err(SendError::Rejected(why)) if why.starts_with("HTTP 409")),
            "{report:?}"
        );
        let seen = daemon.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].body["event"], "environment-failed");
        assert_eq!(seen[0].body["reason"], "no listener");
    }

    #[tokio::test]
    async fn a_daemon_that_is_not_listening_is_tried_up_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("daemon.sock");
        let report = report(&target(socket), TOKEN, ready(), &fast()).await;
        assert_eq!(report.attempts, 3);
        assert!(
            matches!(&report.result,
                     Err(SendError::Exhausted { attempts: 3, last }) if last.contains("cannot connect")),
            "{report:?}"
        );
    }

    #[tokio::test]
    async fn a_daemon_that_keeps_failing_is_given_up_on_after_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let (socket, daemon) = daemon(dir.path(), vec![503]);
        let report = report(&target(socket), TOKEN, ready(), &fast()).await;
        assert_eq!(report.attempts, 3);
        assert!(
            matches!(&report.result,
                     Err(SendError::Exhausted { attempts: 3, last }) if last.starts_with("HTTP 503")),
            "{report:?}"
        );
        let seen = daemon.seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert!(seen
            .iter()
            .all(|s| s.body["deliveryId"] == seen[0].body["deliveryId"]));
    }

    #[tokio::test]
    async fn a_daemon_that_never_answers_times_the_attempt_out() {
        // Accepts connections but never answers: each attempt must end at its timeout.
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("daemon.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let held = Arc::new(Mutex::new(Vec::new()));
        let h = held.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                h.lock().unwrap().push(conn);
            }
        });
        tokio::time::pause();
        let one = Policy {
            attempts: 1,
            ..fast()
        };
        let report = report(&target(socket), TOKEN, ready(), &one).await;
        assert!(
            matches!(&report.result,
                     Err(SendError::Exhausted { attempts: 1, last }) if last.contains("no answer within")),
            "{report:?}"
        );
    }

    #[test]
    fn delivery_ids_are_fresh_128_bit_hex() {
        let a = delivery_id();
        let b = delivery_id();
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
