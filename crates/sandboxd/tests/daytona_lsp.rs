//! Daytona's language servers ([`sandboxd_service::lsp`]) where the surface tests do not take them:
//!
//! - Invariant: callers sharing one server never take each other's answers. Each request carries
//!   an id of its caller's own, and each caller reads to its own answer: 40 parallel calls on one
//!   `pylsp` (document symbols of two files, completions) each get the answer to their request.
//! - The daemon keeps nothing of a server between calls: after the daemon is killed with SIGKILL
//!   and started again, the server the sandbox still runs answers the next call without a new
//!   `start`; `stop` ends it, and a call after that is a 404.
//! - A server that dies under a call makes that call a 502 as soon as it is gone (not at the
//!   call's deadline), and the next call a 404.
//!
//! Needs `pylsp` on the host, which a sandbox of `base` sees (`scripts/lsp-servers`).

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test};
use reqwest::Method;
use serde_json::{json, Value};

const PROJECT: &str = "/home/user/lsp";
const ALPHA: &str = "class Alpha:\n    def alpha_method(self):\n        pass\n\n\nAlpha().alp\n";
const BETA: &str = "def beta():\n    return 2\n";

fn names(symbols: &Value) -> Vec<String> {
    symbols
        .as_array()
        .unwrap_or_else(|| panic!("not a list of symbols: {symbols}"))
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn callers_of_one_server_get_their_own_answers_and_a_restarted_daemon_serves_it() {
    assert!(
        std::path::Path::new("/usr/bin/pylsp").exists(),
        "pylsp is missing on the host: run scripts/lsp-servers"
    );
    e2b_test(async {
        let mut d = e2b_support::start().await;
        let id = common::id_of(&d.create(json!({})).await);
        let script = format!(
            "mkdir -p {PROJECT} && printf '%s' \"$A\" > {PROJECT}/a.py && printf '%s' \"$B\" > {PROJECT}/b.py"
        );
        let out = d
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    &format!("A='{ALPHA}' B='{BETA}'; export A B; {script}"),
                ],
            )
            .await;
        assert_eq!(out.exit_code, 0, "{out:?}");
        let lsp = format!("/api/toolbox/{id}/lsp");
        let server = json!({ "languageId": "python", "pathToProject": PROJECT });
        let (status, answer) = call(&d, Method::POST, &format!("{lsp}/start"), Some(server)).await;
        assert_eq!(status, 200, "start: {answer}");
        for file in ["a.py", "b.py"] {
            let open = json!({ "languageId": "python", "pathToProject": PROJECT,
                               "uri": format!("file://{PROJECT}/{file}") });
            let (status, answer) =
                call(&d, Method::POST, &format!("{lsp}/did-open"), Some(open)).await;
            assert_eq!(status, 200, "did-open {file}: {answer}");
        }
        let symbols = |file: &str| {
            format!("{lsp}/document-symbols?languageId=python&pathToProject={PROJECT}&uri=file://{PROJECT}/{file}")
        };

        let calls = (0..40).map(|i| {
            let d = &d;
            let (lsp, symbols) = (&lsp, &symbols);
            async move {
                match i % 3 {
                    0 => {
                        let (status, answer) = call(d, Method::GET, &symbols("a.py"), None).await;
                        assert_eq!(status, 200, "{answer}");
                        let got = names(&answer);
                        assert!(
                            got.contains(&"Alpha".to_string())
                                && !got.contains(&"beta".to_string()),
                            "{i}: {got:?}"
                        );
                    }
                    1 => {
                        let (status, answer) = call(d, Method::GET, &symbols("b.py"), None).await;
                        assert_eq!(status, 200, "{answer}");
                        assert_eq!(names(&answer), ["beta"], "{i}");
                    }
                    _ => {
                        let body = json!({ "languageId": "python", "pathToProject": PROJECT,
                            "uri": format!("file://{PROJECT}/a.py"),
                            "position": { "line": 5, "character": 11 } });
                        let (status, answer) =
                            call(d, Method::POST, &format!("{lsp}/completions"), Some(body)).await;
                        assert_eq!(status, 200, "{answer}");
                        let labels: Vec<&str> = answer["items"]
                            .as_array()
                            .unwrap_or_else(|| panic!("{i}: no items: {answer}"))
                            .iter()
                            .filter_map(|item| item["label"].as_str())
                            .collect();
                        assert!(
                            labels.iter().any(|l| l.starts_with("alpha_method")),
                            "{i}: {labels:?}"
                        );
                    }
                }
            }
        });
        futures::future::join_all(calls).await;

        // Nothing of the server lives in the daemon: a new daemon process finds it by its tag.
        d.kill9();
        d.restart().await;
        let (status, answer) = call(&d, Method::GET, &symbols("b.py"), None).await;
        assert_eq!(status, 200, "after the restart: {answer}");
        assert_eq!(names(&answer), ["beta"]);

        let server = json!({ "languageId": "python", "pathToProject": PROJECT });
        let (status, answer) = call(&d, Method::POST, &format!("{lsp}/stop"), Some(server)).await;
        assert_eq!(status, 200, "stop: {answer}");
        let (status, answer) = call(&d, Method::GET, &symbols("b.py"), None).await;
        assert_eq!(status, 404, "after stop: {answer}");
        // A server that stops answering and then dies under a call: that call is a 502 as soon as
        // it is gone, not at its deadline; the next one finds no server (404).
        let server = json!({ "languageId": "python", "pathToProject": PROJECT });
        let (status, answer) = call(&d, Method::POST, &format!("{lsp}/start"), Some(server)).await;
        assert_eq!(status, 200, "start again: {answer}");
        let signal = |sig: &'static str| {
            let script = format!(
                "import os\nfor p in os.listdir('/proc'):\n  try:\n    cmd = open(f'/proc/{{p}}/cmdline', 'rb').read()\n  \
                 except Exception: continue\n  if p.isdigit() and b'pylsp' in cmd and int(p) != os.getpid(): os.kill(int(p), {sig})"
            );
            let (d, id) = (&d, &id);
            async move {
                let out = d.exec(id, &["python3", "-c", &script]).await;
                assert_eq!(out.exit_code, 0, "{out:?}");
            }
        };
        signal("19").await; // SIGSTOP: it reads nothing more
        let started = std::time::Instant::now();
        let of_b = symbols("b.py");
        let pending = call(&d, Method::GET, &of_b, None);
        let killer = async {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            signal("9").await;
        };
        let ((status, answer), ()) = tokio::join!(pending, killer);
        assert_eq!(status, 502, "a call under a dead server: {answer}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "it waited for its deadline: {:?}",
            started.elapsed()
        );
        let (status, answer) = call(&d, Method::GET, &symbols("b.py"), None).await;
        assert_eq!(status, 404, "after it died: {answer}");
        let (status, _) = call(&d, Method::DELETE, &format!("/v1/sandboxes/{id}"), None).await;
        assert!(status < 300, "delete: {status}");
    });
}
