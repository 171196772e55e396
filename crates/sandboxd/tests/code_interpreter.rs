//! The code interpreter end to end: the built-in template `code-interpreter-v1` built by the
//! daemon's own builder (a real `pip install` of ipykernel, numpy, pandas, matplotlib and
//! bash_kernel in a build sandbox), the agent's interpreter on real Jupyter kernels, and the real,
//! unmodified E2B Code Interpreter SDKs (`tests/e2b/test_code_interpreter.py` with
//! `e2b-code-interpreter`, `tests/e2b/test_code_interpreter.mjs` with `@e2b/code-interpreter`;
//! `scripts/e2b-sdks` installs both), and the real Daytona SDK (`tests/daytona/test_sdk.py` with
//! `daytona`, installed by `scripts/daytona-sdks`), whose default sandboxes are this template's: its
//! control API, `process.exec`, `process.code_run`, `code_interpreter` contexts and `run_code`, and
//! 100 concurrent creates of one name giving one sandbox and 99 conflicts. One daemon serves every
//! step, so the template is built once.
//!
//! What it proves beyond the scripts (their docs list theirs):
//! - **Built once however many ask**: three concurrent creates naming the template before it
//!   exists, and the Daytona SDK's first create beside them, all succeed on one build (the log has
//!   one `FROM`); `sbx templates build code-interpreter-v1` builds it again with no Dockerfile given
//!   and exits 0 once ready.
//! - The interpreter is reached by host name (`49999-{id}.{domain}`) as well as by the SDKs'
//!   headers.
//! - `/v1/sandboxes/{id}/code` streams the interpreter's lines; its mistakes are the caller's
//!   (400, 404) and a sandbox without an interpreter is a conflict (409).
//! - Every public method the code interpreter SDKs add, and those of their result classes, works as
//!   `tests/e2b/surface/code-interpreter-python.md`, `code-interpreter-python-async.md` and
//!   `code-interpreter-js.md` say (`tests/e2b/test_surface.py code-interpreter[-async]`,
//!   `tests/e2b/test_surface.mjs code-interpreter`).
//! - `sbx code ID` reads code from stdin, prints its output, exits 1 when it raised.
//! - A kernel killed by the out-of-memory killer is an `error` line, and the next call runs on a
//!   fresh kernel; 100 MB of output stream through without the interpreter holding it.
//! - A pause ends a run in flight with an `error` line naming it; the code is interrupted once the
//!   sandbox resumes, and the next run is answered.

mod common;
mod e2b_support;

use common::{id_of, stderr, stdout, Daemon, Setup};
use e2b_support::{e2b_test, run_script_beside};
use sandboxd_test_support::workspace_root;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const TEMPLATE: &str = "code-interpreter-v1";

/// `POST /v1/sandboxes/{id}/code` with `body`: the status and, on 200, the output lines.
async fn run_code(d: &common::Daemon, id: &str, body: Value) -> (u16, Vec<Value>) {
    let resp = d
        .post_json(&format!("/v1/sandboxes/{id}/code"), &body)
        .await;
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a body");
    if status != 200 {
        return (status, vec![json!({ "body": text })]);
    }
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (status, lines)
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

#[test]
fn the_code_interpreter_serves_the_e2b_and_daytona_sdks_the_v1_route_and_sbx() {
    e2b_test(async {
        // The first creates wait for the template's build (a pip install from the package index),
        // which takes minutes on a loaded machine.
        let d = Daemon::start_setup(Setup {
            http_timeout: Duration::from_secs(600),
            ..e2b_support::setup()
        })
        .await;

        // The real Daytona SDK, from the start: its default snapshot is this template (code_run,
        // code_interpreter), and its idle sandboxes' clocks (whole minutes, on `base`) run while the
        // template builds and the E2B scripts work.
        let daytona = workspace_root().join(".venv-daytona/bin/python");
        assert!(
            daytona.exists(),
            "the Daytona SDK is not installed: run scripts/daytona-sdks"
        );
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
        ];
        let daytona_sdk = run_script_beside(&d, &daytona, &["tests/daytona/test_sdk.py"], &env);

        let e2b = async {
            // Three creates before the template exists: one build serves them all.
            let creates = (0..3).map(|n| {
                let body = json!({ "template": TEMPLATE, "metadata": { "n": n.to_string() } });
                let d = &d;
                async move { d.create(body).await }
            });
            let made = futures::future::join_all(creates).await;
            let log = d
                .http()
                .get(d.endpoint(&format!("/v1/templates/{TEMPLATE}/logs")))
                .send()
                .await
                .expect("the build log")
                .text()
                .await
                .expect("its lines");
            let builds = log.lines().filter(|l| l.contains("\"FROM base\"")).count();
            assert_eq!(builds, 1, "one build:\n{log}");
            for sandbox in &made {
                let (status, lines) =
                    run_code(&d, &id_of(sandbox), json!({ "code": "6 * 7" })).await;
                assert_eq!(status, 200);
                assert_eq!(of_type(&lines, "result")[0]["text"], "42", "{lines:?}");
                assert_eq!(lines.last().unwrap()["type"], "end_of_execution");
            }
            for sandbox in &made {
                let id = id_of(sandbox);
                assert!(d
                    .delete(&format!("/v1/sandboxes/{id}"))
                    .await
                    .status()
                    .is_success());
            }

            // The real E2B SDKs' scripts, one after another, beside Daytona's.
            let python = workspace_root().join(".venv-e2b/bin/python");
            let node = std::env::var_os("E2B_NODE")
                .map(PathBuf::from)
                .unwrap_or_else(|| "node".into());
            run_script_beside(&d, &python, &["tests/e2b/test_code_interpreter.py"], &[]).await;
            // The code interpreter SDK's own surface against its table
            // (`tests/e2b/surface/code-interpreter-python.md`).
            run_script_beside(
                &d,
                &python,
                &["tests/e2b/test_surface.py", "code-interpreter"],
                &[],
            )
            .await;
            // Its AsyncSandbox (`tests/e2b/surface/code-interpreter-python-async.md`).
            run_script_beside(
                &d,
                &python,
                &["tests/e2b/test_surface.py", "code-interpreter-async"],
                &[],
            )
            .await;
            run_script_beside(&d, &node, &["tests/e2b/test_code_interpreter.mjs"], &[]).await;
            // Its JS twin (`tests/e2b/surface/code-interpreter-js.md`).
            run_script_beside(
                &d,
                &node,
                &["tests/e2b/test_surface.mjs", "code-interpreter"],
                &[],
            )
            .await;
        };
        tokio::join!(e2b, daytona_sdk);
        e2b_support::assert_nothing_left(&d).await;

        // /v1: the caller's mistakes, and a sandbox with no interpreter.
        let sandbox = d
            .create(json!({ "template": TEMPLATE, "memoryMB": 512 }))
            .await;
        let id = id_of(&sandbox);
        let (status, body) = run_code(&d, &id, json!({ "code": "1", "contextId": "nope" })).await;
        assert_eq!(status, 404, "{body:?}");
        let (status, body) = run_code(&d, &id, json!({ "code": "1", "language": "r" })).await;
        assert_eq!(status, 400, "{body:?}");
        assert!(
            body[0]["body"]
                .as_str()
                .unwrap()
                .contains("\\\"python\\\" and \\\"bash\\\""),
            "{body:?}"
        );
        let both = json!({ "code": "1", "language": "python", "contextId": "x" });
        assert_eq!(run_code(&d, &id, both).await.0, 400);
        let plain = d.create_id().await;
        let (status, body) = run_code(&d, &plain, json!({ "code": "1" })).await;
        assert_eq!(status, 409, "{body:?}");
        assert!(
            body[0]["body"].as_str().unwrap().contains(TEMPLATE),
            "{body:?}"
        );

        // Reached by host name too, as `49999-{id}.{domain}`.
        let by_host = d
            .http_plain()
            .post(d.endpoint("/execute"))
            .header(
                reqwest::header::HOST,
                format!("49999-{id}.localhost:{}", d.port()),
            )
            .json(&json!({ "code": "6 * 7" }))
            .send()
            .await
            .expect("/execute by host name");
        assert_eq!(by_host.status(), 200);
        let text = by_host.text().await.unwrap();
        assert!(text.contains(r#""text":"42""#), "{text}");

        // 100 MB of output streams through; the interpreter's peak memory stays far below it.
        let flood =
            "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000 + '\\n')";
        let (status, lines) = run_code(&d, &id, json!({ "code": flood })).await;
        assert_eq!(status, 200);
        let streamed: usize = of_type(&lines, "stdout")
            .iter()
            .map(|l| l["text"].as_str().unwrap().len())
            .sum();
        assert!(streamed >= 100_000_000, "streamed {streamed} bytes");
        let peak = d
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    "grep VmHWM /proc/$(pgrep -f 'agent interpreter' | head -1)/status",
                ],
            )
            .await;
        let kib: u64 = peak
            .stdout
            .split_whitespace()
            .nth(1)
            .and_then(|k| k.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(
            kib < 64 * 1024,
            "the interpreter peaked at {kib} KiB: {}",
            peak.stdout
        );

        // A kernel the OOM killer ends is an error; the next call gets a fresh kernel.
        let (_, lines) = run_code(&d, &id, json!({ "code": "kept = 1" })).await;
        assert!(of_type(&lines, "error").is_empty(), "{lines:?}");
        let hog = "b = bytearray(2 * 1024 ** 3)";
        let (status, lines) = run_code(&d, &id, json!({ "code": hog })).await;
        assert_eq!(status, 200);
        let errors = of_type(&lines, "error");
        assert_eq!(errors.len(), 1, "{lines:?}");
        assert_eq!(errors[0]["name"], "KernelDied", "{lines:?}");
        let (_, lines) = run_code(&d, &id, json!({ "code": "'kept' in globals(), 1 + 1" })).await;
        assert_eq!(
            of_type(&lines, "result")[0]["text"],
            "(False, 2)",
            "{lines:?}"
        );

        // A pause ends a run in flight (`sandboxd_service::in_flight`): its output ends with an
        // `error` line naming the pause, and the interpreter interrupts the code once the sandbox
        // resumes, so the next run is not queued behind it.
        // It waits for a signal, which only the interrupt sends.
        let waits = "import signal\nprint('started', flush=True)\nsignal.pause()";
        let mut running = d
            .http()
            .post(d.endpoint(&format!("/v1/sandboxes/{id}/code")))
            .json(&json!({ "code": waits }))
            .send()
            .await
            .expect("the run's head");
        assert_eq!(running.status(), 200);
        let mut seen = String::new();
        while !seen.contains("started") {
            let chunk = running.chunk().await.expect("a line before the pause");
            seen.push_str(&String::from_utf8_lossy(&chunk.expect("not the end yet")));
        }
        let paused = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(paused.status(), 200);
        let rest = running.text().await.expect("the run ends, not given up on");
        let last: Value = serde_json::from_str(rest.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {seen}{rest}"));
        assert_eq!(
            (&last["type"], &last["name"]),
            (&json!("error"), &json!("SandboxPaused")),
            "{seen}{rest}"
        );
        let resumed = d
            .post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
            .await;
        assert_eq!(resumed.status(), 200);
        let (status, lines) = run_code(&d, &id, json!({ "code": "1 + 1" })).await;
        assert_eq!(status, 200, "{lines:?}");
        assert_eq!(of_type(&lines, "result")[0]["text"], "2", "{lines:?}");

        // sbx code: code from stdin; the exit code says whether it raised.
        let sbx_code = |code: &str| {
            let mut child = d
                .sbx_command(&["code", &id])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run sbx code");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(code.as_bytes())
                .unwrap();
            child.wait_with_output().expect("sbx code ends")
        };
        let ok = sbx_code("print('from stdin')\n6 * 7\n");
        assert!(ok.status.success(), "{}", stderr(&ok));
        assert_eq!(stdout(&ok), "from stdin\n42\n");
        let raised = sbx_code("1/0\n");
        assert_eq!(raised.status.code(), Some(1));
        assert!(
            stderr(&raised).contains("ZeroDivisionError"),
            "{}",
            stderr(&raised)
        );

        // Last, with no sandbox of it left: rebuilt by name with sbx (the build cache makes this
        // quick), exiting 0 once ready.
        for gone in [&id, &plain] {
            let status = d.delete(&format!("/v1/sandboxes/{gone}")).await.status();
            assert!(status.is_success(), "{status}");
        }
        assert!(d
            .delete(&format!("/v1/templates/{TEMPLATE}"))
            .await
            .status()
            .is_success());
        let built = d.sbx(&["templates", "build", TEMPLATE]);
        assert!(
            built.status.success(),
            "sbx templates build: {}{}",
            stdout(&built),
            stderr(&built)
        );
        let template = d.get_json(&format!("/v1/templates/{TEMPLATE}")).await;
        assert_eq!(template["state"], "ready", "{template}");
    });
}
