//! Secrets through the real daemon, on every surface that keeps them (`/v1/secrets`, `sbx secrets`,
//! E2B's `/secrets`, Daytona's `/api/secret`): a value goes in once and is found nowhere after —
//! not in an answer, the data dir, the daemon's log, its command line or its environment — and a
//! create that names an unknown secret is refused before anything is made. What a sandbox does
//! with a secret is `egress_gateway.rs`'s; the vendors' SDKs drive the same calls in
//! `tests/e2b/test_sdk.py` and `tests/daytona/test_sdk.py`.

mod common;

use common::{assert_success, e2e, expect_error, stdout, Daemon};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Files past this size are layers and disk pools, not the store or a log.
const SCAN_LIMIT: u64 = 64 << 20;

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            files_under(&entry.path(), out);
        } else if kind.is_file() && entry.metadata().is_ok_and(|m| m.len() <= SCAN_LIMIT) {
            out.push(entry.path());
        }
    }
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn created(what: &str, resp: reqwest::Response) -> Value {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 201, "{what}: {text}");
    serde_json::from_str(&text).expect("a secret")
}

#[test]
fn a_value_goes_in_once_and_is_found_nowhere_after() {
    e2e(|| async {
        let d = Daemon::start_with(&[], &[("SB_LOG", "debug")]).await;
        let run = std::process::id();
        let values: Vec<String> = (1..=5)
            .map(|n| format!("sk-live-{run}-value-{n}"))
            .collect();

        // /v1: created without its value in the answer; a taken name, a bad host, a bad name and an
        // empty value are the caller's 400/409 and change nothing.
        let v1 = d
            .post_json(
                "/v1/secrets",
                &json!({"name": "openai", "value": values[0], "hosts": ["API.openai.com", "*.example.org"]}),
            )
            .await;
        let v1 = created("v1 create", v1).await;
        assert_eq!(v1["placeholder"], "${sandboxd.secrets.openai}");
        assert_eq!(v1["hosts"], json!(["api.openai.com", "*.example.org"]));
        assert!(v1.get("value").is_none(), "{v1}");
        for (body, status) in [
            (json!({"name": "openai", "value": "x"}), 409),
            (
                json!({"name": "k2", "value": "x", "hosts": ["https://a.com"]}),
                400,
            ),
            (json!({"name": "k2", "value": "x", "hosts": ["*.com"]}), 400),
            (json!({"name": "a b", "value": "x"}), 400),
            (json!({"name": "k2", "value": ""}), 400),
            (json!({"name": "k2", "value": "x", "extra": 1}), 400),
        ] {
            let resp = d.post_json("/v1/secrets", &body).await;
            expect_error(&format!("create {body}"), resp, status, None).await;
        }
        let listed = d.get_json("/v1/secrets").await;
        assert_eq!(
            listed["secrets"].as_array().map(Vec::len),
            Some(1),
            "{listed}"
        );

        // sbx: the value from stdin, never an argument; an update is a new version.
        let mut create = d
            .sbx_command(&["secrets", "create", "github", "--host", "api.github.com"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run sbx");
        writeln!(create.stdin.take().unwrap(), "{}", values[1]).unwrap();
        let out = create.wait_with_output().unwrap();
        assert_success("sbx secrets create", &out);
        assert_eq!(stdout(&out).trim(), "${sandboxd.secrets.github}");
        let value_file = d.data_dir().join("..").join("value.txt");
        std::fs::write(&value_file, &values[2]).unwrap();
        let file_arg = value_file.to_str().unwrap();
        let out = d.sbx(&[
            "secrets",
            "update",
            "github",
            "--value-file",
            file_arg,
            "--json",
        ]);
        assert_success("sbx secrets update", &out);
        let updated: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(updated["version"], 2, "{updated}");
        std::fs::remove_file(&value_file).unwrap();
        let out = d.sbx(&["secrets", "ls"]);
        assert_success("sbx secrets ls", &out);
        assert!(stdout(&out).contains("api.github.com"), "{}", stdout(&out));

        // E2B and Daytona keep the same secrets.
        let e2b = d
            .http_plain()
            .post(d.endpoint("/secrets"))
            .header("x-api-key", d.token())
            .json(&json!({"name": "e2b-key", "value": values[3], "metadata": {"team": "a"}}))
            .send()
            .await
            .unwrap();
        let e2b = created("E2B create", e2b).await;
        assert_eq!(
            (e2b["currentVersion"].as_u64(), e2b.get("value")),
            (Some(1), None)
        );
        let daytona = d
            .post_json(
                "/api/secret",
                &json!({"name": "DT_KEY", "value": values[4], "hosts": ["10.0.0.7"]}),
            )
            .await;
        let daytona = created("Daytona create", daytona).await;
        assert_eq!(daytona["placeholder"], "${sandboxd.secrets.DT_KEY}");
        let all = d.get_json("/v1/secrets").await;
        let names: Vec<&str> = all["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert_eq!(names, ["DT_KEY", "e2b-key", "github", "openai"]);

        // A create naming an unknown secret is refused naming it, and makes nothing.
        let before = d.list_all().await.len();
        let resp = d
            .post_json(
                "/v1/sandboxes",
                &json!({"env": {"K": "${e2b.secrets.ghost}"}}),
            )
            .await;
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("unknown secrets: ghost"), "{text}");
        assert_eq!(
            d.list_all().await.len(),
            before,
            "a refused create made a sandbox"
        );

        // No value anywhere: every file of the data dir but layers (the store, its log, the key),
        // the daemon's log, its command line and its environment.
        let mut files = Vec::new();
        files_under(&d.data_dir(), &mut files);
        assert!(
            files.iter().any(|f| f.ends_with("sandboxd.db")),
            "{files:?}"
        );
        assert!(
            files.iter().any(|f| f.ends_with("secrets.key")),
            "{files:?}"
        );
        files.push(d.log_path(1, "err"));
        files.push(d.log_path(1, "out"));
        for proc_file in ["cmdline", "environ"] {
            files.push(PathBuf::from(format!("/proc/{}/{proc_file}", d.pid())));
        }
        for file in &files {
            let Ok(bytes) = std::fs::read(file) else {
                continue;
            };
            for value in &values {
                assert!(
                    !holds(&bytes, value),
                    "{} holds a secret's value",
                    file.display()
                );
            }
        }
        let log = std::fs::read_to_string(d.log_path(1, "err")).unwrap();
        assert!(
            log.contains("/v1/secrets"),
            "the log saw no secret call: {log}"
        );

        // Deleted on one surface, gone on all.
        let resp = d.delete("/v1/secrets/openai").await;
        assert_eq!(resp.status(), 204);
        let resp = d.delete("/v1/secrets/openai").await;
        expect_error("delete again", resp, 404, None).await;
        let gone = d
            .http()
            .get(d.endpoint("/api/secret/openai"))
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 404);
    });
}
