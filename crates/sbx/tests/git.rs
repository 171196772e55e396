//! `sbx git` against the `/v1` double: what each subcommand sends, where a remote's password comes
//! from (stdin or `SBX_GIT_PASSWORD`, never a flag), and what it prints. The real daemon, a real
//! git server and these commands meet in `crates/sandboxd/tests/git.rs`.

mod common;

use common::{code, json, sbx, sbx_at, stderr, stdout, FakeDaemonForTests, TOKEN};
use serde_json::json;
use std::io::Write;
use std::process::Stdio;

#[test]
fn a_password_comes_from_stdin_or_the_environment_and_rides_in_the_body() {
    let fake = FakeDaemonForTests::start();
    let mut child = sbx_at(&fake.url, TOKEN)
        .args([
            "git",
            "sb-1",
            "clone",
            "http://h/r.git",
            "--username",
            "alice",
        ])
        .arg("--password-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sbx");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"s3cret\n")
        .expect("write the password");
    let out = child.wait_with_output().expect("sbx exits");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "/home/user/cloned\n");
    let out = sbx_at(&fake.url, TOKEN)
        .args(["git", "sb-1", "push", "repo", "--set-upstream", "--json"])
        .env("SBX_GIT_PASSWORD", "t0ken")
        .output()
        .expect("run sbx");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out), json!({}));
    let calls = fake.state().git_calls.clone();
    assert_eq!(
        calls,
        [
            (
                "clone".to_string(),
                json!({"url": "http://h/r.git", "username": "alice", "password": "s3cret"})
            ),
            (
                "push".to_string(),
                json!({"path": "repo", "setUpstream": true, "password": "t0ken"})
            ),
        ]
    );
    let refused = sbx(&fake, &["git", "sb-1", "push", "repo", "--password", "x"]);
    assert_eq!(code(&refused), 2, "a password flag was taken");
}

#[test]
fn the_help_documents_the_defaults() {
    let fake = FakeDaemonForTests::start();
    let help = stdout(&sbx(&fake, &["git", "sb-1", "clone", "--help"]));
    for default in [
        "the URL's last segment",
        "SBX_GIT_PASSWORD",
        "x-access-token",
    ] {
        assert!(help.contains(default), "{default}: {help}");
    }
    let help = stdout(&sbx(&fake, &["git", "sb-1", "push", "--help"]));
    assert!(help.contains("[default: origin]"), "{help}");
}
