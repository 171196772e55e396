//! How `sbx` reports errors: API errors, non-JSON errors, missing token, transport, usage.

mod common;

use common::{code, sbx, sbx_at, stderr, stdout, FakeDaemonForTests, TOKEN};
use serde_json::Value;
use std::process::Command;

#[test]
fn unauthorized_is_printed_as_message_and_code_or_as_json() {
    let fake = FakeDaemonForTests::start();
    let out = sbx_at(&fake.url, "wrong")
        .args(["ls"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out),
        "error: missing or invalid token (unauthorized)\n"
    );
    assert!(out.stdout.is_empty());
    let out = sbx_at(&fake.url, "wrong")
        .args(["ls", "--json"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 1);
    let err: Value = serde_json::from_slice(&out.stderr).expect("ApiError JSON on stderr");
    assert_eq!(
        err,
        serde_json::json!({"code": "unauthorized", "message": "missing or invalid token"})
    );
}

#[test]
fn non_json_errors_keep_status_and_text() {
    let fake = FakeDaemonForTests::start();
    let out = sbx(&fake, &["get", "sb-teapot"]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out),
        "error: HTTP 503: upstream down (http_error)\n"
    );
}

#[test]
fn missing_token_is_a_clear_error() {
    let fake = FakeDaemonForTests::start();
    let out = Command::new(env!("CARGO_BIN_EXE_sbx"))
        .args(["ls"])
        .env("SB_API_URL", &fake.url)
        .env("SBX_CONFIG", "/nonexistent/sbx-config.json")
        .env_remove("SB_PAT_TOKEN")
        .output()
        .expect("run");
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out),
        "error: no API token: pass --token, set SB_PAT_TOKEN or run `sbx login` (missing_token)\n"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sbx"))
        .args(["ls", "--token", TOKEN])
        .env("SB_API_URL", &fake.url)
        .env_remove("SB_PAT_TOKEN")
        .output()
        .expect("run");
    assert_eq!(code(&out), 0, "--token works without the env var");
}

#[test]
fn unreachable_daemon_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let out = sbx_at(&format!("http://127.0.0.1:{port}"), TOKEN)
        .args(["ls"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(
        err.starts_with("error: request to the daemon failed: "),
        "{err}"
    );
    assert!(err.ends_with("(transport)\n"), "{err}");
}

#[test]
fn bad_arguments_are_usage_errors_not_panics() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let cases: &[&[&str]] = &[
        &["create", "--env", "novalue"],
        &["create", "--metadata", "=v"],
        &["create", "--cpu", "nan"],
        &["create", "--memory", "-5"],
        &["ls", "--metadata", "x"],
        &["exec", "sb-1"],
        &["exec", "--env", "A", "sb-1", "--", "exit:0"],
        &["cp", "a", "b"],
        &["cp", "sb-1:rel", "./x"],
        &["cp", ":/x", "./x"],
        &["cp", "sb-1:/a", "sb-2:/b"],
        &["expose", "sb-1", "0"],
        &["expose", "sb-1", "70000"],
        &["rm"],
        &["frobnicate"],
        &[],
        &["--api-url"],
    ];
    for args in cases {
        let out = sbx(&fake, args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: no message");
    }
    let out = sbx(&fake, &["--api-url", "ftp://x", "ls"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("(invalid_url)"), "{}", stderr(&out));
}

#[test]
fn help_never_shows_the_token() {
    let out = sbx_at("http://127.0.0.1:1", "s3cret-value")
        .arg("--help")
        .output()
        .expect("run");
    assert_eq!(code(&out), 0);
    assert!(!stdout(&out).contains("s3cret-value"));
    assert!(stdout(&out).contains("Exit codes"));
}
