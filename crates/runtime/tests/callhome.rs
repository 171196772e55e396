//! Call-home from real namespace sandboxes: the runtime binds the daemon's callback directory into the
//! sandbox read-only, and the agent reports `environment-ready` through it once it serves.

mod common;

use common::{fixture_with, text, Fixture};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use sandboxd_envd::callback::{EVENTS_PATH, SANDBOX_DIR, SOCKET_NAME};
use sandboxd_test_support::require_root;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// Failpoints are process-wide: a test that sets one must not overlap the others in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One request the test daemon received.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    content_type: Option<String>,
    body: serde_json::Value,
}

/// A stand-in for the daemon's callback listener: `daemon.sock` in its own directory, answering every
/// request `200` and handing it to the test.
struct Daemon {
    dir: tempfile::TempDir,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Daemon {
    fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The next request, if one arrives within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<Seen> {
        tokio::time::timeout(wait, self.seen.recv())
            .await
            .ok()
            .flatten()
    }
}

fn daemon() -> Daemon {
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-cb-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod callback dir");
    let socket = dir.path().join(SOCKET_NAME);
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind daemon.sock");
    // The agent connects as the sandbox's mapped root: it needs write permission on the socket.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
        .expect("chmod daemon.sock");
    let (tx, seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let header = |name: hyper::header::HeaderName| {
                            parts
                                .headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string)
                        };
                        let _ = tx.send(Seen {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_string(),
                            authorization: header(hyper::header::AUTHORIZATION),
                            content_type: header(hyper::header::CONTENT_TYPE),
                            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
                        });
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from_static(
                            br#"{"applied":true,"state":"running"}"#,
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Daemon { dir, seen }
}

async fn fixture_calling(daemon: &Daemon) -> Fixture {
    let dir = daemon.dir();
    fixture_with(|config| config.callback_dir = Some(dir)).await
}

#[tokio::test]
async fn a_started_sandbox_reports_environment_ready_once() {
    if !require_root() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let mut daemon = daemon();
    let fx = fixture_calling(&daemon).await;
    let sb = fx.sandbox().await;
    let seen = daemon
        .next(Duration::from_secs(15))
        .await
        .expect("the agent did not call home");
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, EVENTS_PATH);
    assert_eq!(
        seen.authorization,
        Some(format!("Bearer {}", sb.info.agent.token))
    );
    assert_eq!(seen.content_type.as_deref(), Some("application/json"));
    let delivery_id = seen.body["deliveryId"]
        .as_str()
        .unwrap_or_else(|| panic!("no deliveryId in {}", seen.body))
        .to_string();
    assert_eq!(delivery_id.len(), 32, "{delivery_id}");
    assert_eq!(
        seen.body,
        serde_json::json!({
            "deliveryId": delivery_id,
            "sandboxId": sb.info.id(),
            "event": "environment-ready",
            "envdVersion": sandboxd_envd::version::ENVD_VERSION,
        })
    );
    // Delivered at the first attempt: nothing is sent again.
    if let Some(again) = daemon.next(Duration::from_secs(2)).await {
        panic!("a second call home: {again:?}");
    }
    fx.destroy(&sb).await;
}

#[tokio::test]
async fn the_callback_directory_is_visible_and_read_only_inside_the_sandbox() {
    if !require_root() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let daemon = daemon();
    let fx = fixture_calling(&daemon).await;
    let sb = fx.sandbox().await;
    let script = format!(
        "test -d {SANDBOX_DIR} && echo dir; test -S {SANDBOX_DIR}/{SOCKET_NAME} && echo socket; \
         touch {SANDBOX_DIR}/probe"
    );
    // Even the sandbox's root cannot write there.
    let out = sb.sh_as(Some("root"), &script).await;
    assert_eq!(text(&out.stdout), "dir\nsocket\n", "{}", text(&out.stderr));
    assert_ne!(out.exit_code, 0);
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        text(&out.stderr)
    );
    assert!(!daemon.dir().join("probe").exists());
    fx.destroy(&sb).await;
}

/// Removes a failpoint when dropped, so a failing test leaves none behind.
#[cfg(feature = "failpoints")]
struct Failpoint(&'static str);

#[cfg(feature = "failpoints")]
impl Drop for Failpoint {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}

#[cfg(feature = "failpoints")]
#[tokio::test]
async fn an_agent_told_to_exit_before_ready_completes_the_handshake_and_never_calls_home() {
    use sandboxd_runtime::{Runtime, RuntimeState};
    if !require_root() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let mut daemon = daemon();
    let fx = fixture_calling(&daemon).await;
    let fault = Failpoint("agent.exit-before-ready");
    fail::cfg(fault.0, "return").expect("configure failpoint");
    // Start succeeds: the agent answered Ready before it exited.
    let sb = fx.sandbox().await;
    drop(fault);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = fx.rt.inspect(sb.info.id()).await.expect("inspect");
        if info.is_some_and(|i| i.state != RuntimeState::Running) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the init is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(seen) = daemon.next(Duration::from_secs(2)).await {
        panic!("the agent called home: {seen:?}");
    }
    let log = boot_log(&fx, sb.info.id());
    assert!(log.contains("exit-before-ready"), "{log}");
    fx.destroy(&sb).await;
}

#[cfg(feature = "failpoints")]
fn boot_log(fx: &Fixture, id: &str) -> String {
    let path = fx
        .dir
        .path()
        .join("runtime/sandboxes")
        .join(id)
        .join("boot.log");
    std::fs::read_to_string(path).unwrap_or_default()
}
