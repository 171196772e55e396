//! `sbx create/ls/get/rm/expose` against `FakeDaemonForTests`: output shapes and request bodies.

mod common;

use common::fake_daemon::labelled;
use common::{code, json, sbx, stderr, stdout, FakeDaemonForTests};

#[test]
fn create_prints_the_id_or_the_sandbox_json() {
    let fake = FakeDaemonForTests::start();
    let out = sbx(
        &fake,
        &[
            "create",
            "--name",
            "web",
            "--template",
            "py",
            "--cpu",
            "0.5",
            "--memory",
            "256",
            "--timeout",
            "60",
            "--env",
            "A=1",
            "--metadata",
            "team=x",
            "--egress",
            "--idempotency-key",
            "k1",
        ],
    );
    assert_eq!(
        (code(&out), stdout(&out).as_str()),
        (0, "sb-new1\n"),
        "{}",
        stderr(&out)
    );
    {
        let state = fake.state();
        let (body, key) = state.last_create.as_ref().expect("create seen");
        let sent = serde_json::to_value(body).expect("body");
        assert_eq!(
            sent,
            serde_json::json!({
                "name": "web", "template": "py", "cpu": 0.5, "memoryMB": 256, "timeoutSec": 60,
                "env": {"A": "1"}, "metadata": {"team": "x"}, "network": {"egress": true}
            })
        );
        assert_eq!(key.as_deref(), Some("k1"));
    }
    let out = sbx(&fake, &["create", "--json"]);
    let sandbox = json(&out);
    assert_eq!(sandbox["id"], "sb-new2");
    assert_eq!(sandbox["state"], "running");
    assert_eq!(sandbox["memoryMB"], 512);
}

#[test]
fn create_sends_the_lifecycle_and_refuses_auto_resume_alone() {
    let fake = FakeDaemonForTests::start();
    let out = sbx(&fake, &["create", "--pause-on-timeout", "--auto-resume"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    {
        let state = fake.state();
        let (body, _) = state.last_create.as_ref().expect("create seen");
        let sent = serde_json::to_value(body).expect("body");
        assert_eq!(
            sent,
            serde_json::json!({"lifecycle": {"onTimeout": "pause", "autoResume": true}})
        );
    }
    let out = sbx(&fake, &["create", "--auto-resume"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--pause-on-timeout"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn ls_prints_a_table_or_a_json_array_and_follows_cursors_with_all() {
    let fake = FakeDaemonForTests::start();
    for i in 0..3 {
        let sandbox = labelled(&format!("sb-{i}"), &[("team", "a")]);
        fake.state().sandboxes.insert(sandbox.id.clone(), sandbox);
    }
    fake.add_sandbox("sb-9", "other");

    let out = sbx(&fake, &["ls", "--metadata", "team=a"]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header + first page of 2: {text}");
    assert!(lines[0].starts_with("ID"), "{text}");
    assert!(lines[0].contains("NAME") && lines[0].contains("CREATED"));
    assert!(lines[1].starts_with("sb-0 "), "{text}");
    assert!(stderr(&out).contains("--all"));

    let out = sbx(&fake, &["ls", "--all", "--metadata", "team=a", "--json"]);
    let ids: Vec<String> = json(&out)
        .as_array()
        .expect("JSON array")
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids, ["sb-0", "sb-1", "sb-2"]);
}

#[test]
fn get_prints_key_values_or_json() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "web");
    let out = sbx(&fake, &["get", "web"]);
    let text = stdout(&out);
    assert!(text.lines().any(|l| l == "id:        sb-1"), "{text}");
    assert!(text.lines().any(|l| l == "expiresAt: never"), "{text}");
    let out = sbx(&fake, &["get", "sb-1", "--json"]);
    assert_eq!(json(&out)["name"], "web");
}

#[test]
fn rm_deletes_the_others_and_fails_at_the_end() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    fake.add_sandbox("sb-2", "");
    let out = sbx(&fake, &["rm", "sb-1", "nope", "sb-2"]);
    assert_eq!(code(&out), 1);
    assert_eq!(stdout(&out), "sb-1\nsb-2\n");
    assert_eq!(stderr(&out), "error: no sandbox nope (not_found)\n");
    assert!(fake.state().sandboxes.is_empty());

    fake.add_sandbox("sb-3", "");
    let out = sbx(&fake, &["rm", "--json", "sb-3"]);
    assert_eq!(code(&out), 0);
    assert_eq!(json(&out), serde_json::json!(["sb-3"]));
}

#[test]
fn expose_prints_the_public_url_or_json() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let out = sbx(&fake, &["expose", "sb-1", "8080"]);
    assert_eq!(stdout(&out), "http://8080-sb-1.sandbox.test\n");
    let out = sbx(&fake, &["expose", "sb-1", "3000", "--json"]);
    assert_eq!(
        json(&out),
        serde_json::json!({"port": 3000, "protocol": "http", "publicUrl": "http://3000-sb-1.sandbox.test"})
    );
}
