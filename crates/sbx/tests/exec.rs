//! `sbx exec` against `FakeDaemonForTests` (a test double, not the daemon): streaming, exit codes.

mod common;

use common::{code, json, sbx, sbx_at, stderr, stdout, FakeDaemonForTests, Reap, TOKEN};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn exec_streams_output_and_exits_with_the_command_code() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let out = sbx(
        &fake,
        &["exec", "sb-1", "--", "out:2", "err:warn", "exit:3"],
    );
    assert_eq!(stdout(&out), "2\n");
    assert_eq!(stderr(&out), "warn\n");
    assert_eq!(code(&out), 3);
    let out = sbx(&fake, &["exec", "sb-1", "--", "out:ok"]);
    assert_eq!((code(&out), stdout(&out).as_str()), (0, "ok\n"));
}

#[test]
fn exec_sends_its_options() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let out = sbx(
        &fake,
        &[
            "exec",
            "--user",
            "root",
            "--cwd",
            "/w",
            "--env",
            "A=1=2",
            "--timeout",
            "500",
            "sb-1",
            "--",
            "exit:0",
            "--cwd",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let state = fake.state();
    let sent = state.last_exec.as_ref().expect("exec seen");
    assert_eq!(sent.cmd, ["exit:0", "--cwd"]);
    assert_eq!(
        (sent.user.as_deref(), sent.cwd.as_deref(), sent.timeout_ms),
        (Some("root"), Some("/w"), Some(500))
    );
    let env = sent.env.as_ref().expect("env sent");
    assert_eq!(env.get("A").map(String::as_str), Some("1=2"));
}

#[test]
fn exec_output_appears_before_the_command_ends() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let mut child = Reap(
        sbx_at(&fake.url, TOKEN)
            .args([
                "exec",
                "sb-1",
                "--",
                "out:first",
                "hold",
                "out:second",
                "exit:4",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sbx"),
    );
    let pipe = child.0.stdout.take().expect("stdout pipe");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let first = received
        .recv_timeout(Duration::from_secs(20))
        .expect("first line while the command is still running");
    assert_eq!(first.expect("utf-8"), "first");
    fake.release();
    let second = received
        .recv_timeout(Duration::from_secs(20))
        .expect("second line");
    assert_eq!(second.expect("utf-8"), "second");
    let status = child.0.wait().expect("wait");
    assert_eq!(status.code(), Some(4));
}

#[test]
fn broken_exec_streams_exit_255_with_a_message() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let out = sbx(
        &fake,
        &["exec", "sb-1", "--", "out:partial", "fail:agent gone"],
    );
    assert_eq!(code(&out), 255);
    assert_eq!(stdout(&out), "partial\n");
    assert_eq!(
        stderr(&out),
        "error: exec stream failed: agent gone (exec_stream)\n"
    );
    let out = sbx(&fake, &["exec", "sb-1", "--", "cut"]);
    assert_eq!(code(&out), 255);
    assert!(stderr(&out).contains("(protocol)"), "{}", stderr(&out));
    let out = sbx(&fake, &["exec", "nope", "--", "exit:0"]);
    assert_eq!(code(&out), 255);
    assert_eq!(stderr(&out), "error: no sandbox nope (not_found)\n");
}

#[test]
fn exec_json_prints_the_collected_result_and_keeps_the_exit_code() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let out = sbx(&fake, &["--json", "exec", "sb-1", "--", "out:2", "exit:3"]);
    assert_eq!(code(&out), 3);
    assert_eq!(
        json(&out),
        serde_json::json!({"exitCode": 3, "stdout": "2\n", "stderr": ""})
    );
}
