//! Shared by the `sbx` integration tests: running the real binary, reading its output.
//!
//! The binary is configured only through `SB_API_URL` / `SB_PAT_TOKEN`, so end-to-end tests against the
//! real daemon can reuse [`sbx_at`] with the daemon's URL and token.
#![allow(dead_code)] // each test crate uses a different part

#[path = "../../../client/tests/support/fake_daemon.rs"]
pub mod fake_daemon;

pub use fake_daemon::{FakeDaemonForTests, TOKEN};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

/// An `sbx` command aimed at the daemon at `url` with `token`.
pub fn sbx_at(url: &str, token: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sbx"));
    command
        .env("SB_API_URL", url)
        .env("SB_PAT_TOKEN", token)
        .stdin(Stdio::null());
    command
}

/// Runs `sbx ARGS` against the double, with its token, and waits for it.
pub fn sbx(fake: &FakeDaemonForTests, args: &[&str]) -> Output {
    sbx_at(&fake.url, TOKEN)
        .args(args)
        .output()
        .expect("run sbx")
}

/// Stdout as (lossy) text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr as (lossy) text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Stdout parsed as JSON.
pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(output)))
}

/// The exit code.
pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

/// Kills the child if the test fails before it exits.
pub struct Reap(pub std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
