//! Starting the real agent binary on a temporary socket, and raw HTTP for what the client never sends.
#![allow(dead_code)]

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use sandboxd_envd::EnvdClient;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "test-token-0123456789";

/// A running `sandboxd-agent serve`, stopped (SIGTERM) on drop.
pub struct Agent {
    pub child: Child,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    pub async fn start() -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agent.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_sandboxd-agent"))
            .args(["serve", "--socket"])
            .arg(&socket)
            .args(["--token", TOKEN, "--default-user", "root"])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn agent");
        let agent = Agent {
            child,
            socket,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent.client().health().await.is_err() {
            assert!(Instant::now() < deadline, "agent did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        agent
    }

    pub fn client(&self) -> EnvdClient {
        EnvdClient::new(&self.socket, TOKEN)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A field of `/proc/<agent>/status` in kB (e.g. `VmHWM`).
    pub fn status_kb(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("field in /proc status")
    }

    /// One raw HTTP/1.1 request; returns status and body.
    pub async fn raw(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Vec<u8>) {
        let (status, _, body) = self.raw_with_headers(method, uri, headers, body).await;
        (status, body)
    }

    /// One raw HTTP/1.1 request; returns status, response headers and body.
    pub async fn raw_with_headers(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, hyper::HeaderMap, Vec<u8>) {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "localhost");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = sender
            .send_request(req.body(Full::new(Bytes::from(body))).expect("request"))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        (status, headers, body)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `program args` with `input` on stdin and returns its stdout (None if it cannot run).
pub fn filter(program: &str, args: &[&str], input: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let data = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    out.status.success().then_some(out.stdout)
}

pub fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

/// Whether `name` is in /etc/passwd (for the user-switch tests).
pub fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(':').next() == Some(name))
}
