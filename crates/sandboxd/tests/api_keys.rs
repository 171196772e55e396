//! API keys against the real daemon: minted keys (admin and user) work on every surface of the
//! listener — `/v1` with `Authorization: Bearer`, the E2B facade with `X-API-KEY`, the Daytona facade
//! with a bearer under `/api` —, user keys cannot manage keys or webhooks, secrets are shown once,
//! and a revoked key is refused by the very next request. `sbx login` saves a key for the CLI.
//! Each test names the invariant it proves; the store side is in `crates/store/src/tokens.rs`.

mod common;

use common::{e2e, id_of, sbx_binary, stderr, stdout, Daemon, TOKEN};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

/// Each surface's sandbox list, called with `key` as that surface's SDK sends it: (surface, path,
/// header name, header value).
fn surfaces(key: &str) -> [(&'static str, &'static str, &'static str, String); 3] {
    [
        (
            "/v1",
            "/v1/sandboxes",
            "authorization",
            format!("Bearer {key}"),
        ),
        ("E2B", "/sandboxes", "x-api-key", key.to_string()),
        (
            "Daytona",
            "/api/sandbox",
            "authorization",
            format!("Bearer {key}"),
        ),
    ]
}

/// The status of `GET` on each surface's sandbox list with `key`.
async fn statuses_with(d: &Daemon, key: &str) -> Vec<(&'static str, u16)> {
    let plain = d.http_plain();
    let mut out = Vec::new();
    for (what, path, name, value) in surfaces(key) {
        let status = plain
            .get(d.endpoint(path))
            .header(name, value)
            .send()
            .await
            .expect("request")
            .status()
            .as_u16();
        out.push((what, status));
    }
    out
}

fn all(status: u16) -> Vec<(&'static str, u16)> {
    vec![("/v1", status), ("E2B", status), ("Daytona", status)]
}

/// `method path` with `key` as a bearer and an optional JSON body: (status, body).
async fn call(
    d: &Daemon,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = d
        .http_plain()
        .request(method, d.endpoint(path))
        .bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Creates a key with the admin token: (id, secret).
async fn create_key(d: &Daemon, name: &str, scope: &str) -> (String, String) {
    let (status, body) = call(
        d,
        TOKEN,
        "POST",
        "/v1/api-keys",
        Some(json!({"name": name, "scope": scope})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["key"].as_str().expect("the secret").to_string();
    assert!(key.starts_with("e2b_"), "{key}");
    assert_eq!(key.len(), 4 + 40, "{key}");
    assert!(key[4..].chars().all(|c| c.is_ascii_hexdigit()), "{key}");
    assert_eq!(body["prefix"].as_str(), Some(&key[..10]), "{body}");
    assert_eq!(
        (body["name"].as_str(), body["scope"].as_str()),
        (Some(name), Some(scope))
    );
    (id_of(&body), key)
}

/// Invariant: a minted key, admin or user, is accepted on every surface, and a revoked key is a 401
/// on every surface from the very next request on.
#[test]
fn keys_work_on_every_surface_until_revoked() {
    e2e(|| async {
        let d = Daemon::start().await;
        let (admin_id, admin) = create_key(&d, "ops", "admin").await;
        let (user_id, user) = create_key(&d, "agent", "user").await;
        assert_eq!(statuses_with(&d, &admin).await, all(200));
        assert_eq!(statuses_with(&d, &user).await, all(200));
        assert_eq!(
            statuses_with(&d, TOKEN).await,
            all(200),
            "the configured token stays an admin key"
        );

        // A user key does everything but manage keys and webhooks: here, a sandbox's life.
        let (status, sandbox) = call(&d, &user, "POST", "/v1/sandboxes", Some(json!({}))).await;
        assert_eq!(status, 201, "{sandbox}");
        let path = format!("/v1/sandboxes/{}", id_of(&sandbox));
        assert_eq!(call(&d, &user, "DELETE", &path, None).await.0, 204);

        // Revoked with a minted admin key: refused at once everywhere; the other keys are not.
        let (status, body) = call(
            &d,
            &admin,
            "DELETE",
            &format!("/v1/api-keys/{user_id}"),
            None,
        )
        .await;
        assert_eq!(status, 204, "{body}");
        assert_eq!(statuses_with(&d, &user).await, all(401));
        assert_eq!(statuses_with(&d, &admin).await, all(200));
        let (status, body) = call(
            &d,
            &admin,
            "DELETE",
            &format!("/v1/api-keys/{user_id}"),
            None,
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("not_found")),
            "{body}"
        );

        // An admin key can revoke itself; its very next request is refused.
        let (status, _) = call(
            &d,
            &admin,
            "DELETE",
            &format!("/v1/api-keys/{admin_id}"),
            None,
        )
        .await;
        assert_eq!(status, 204);
        assert_eq!(statuses_with(&d, &admin).await, all(401));
        let (status, body) = call(&d, &admin, "GET", "/v1/api-keys", None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("unauthorized")),
            "{body}"
        );
    });
}

/// Invariant: only admin keys manage keys and webhooks; a user key gets 403 `forbidden` and changes
/// nothing.
#[test]
fn user_keys_cannot_manage_keys_or_webhooks() {
    e2e(|| async {
        let d = Daemon::start().await;
        let (admin_id, _) = create_key(&d, "ops", "admin").await;
        let (_, user) = create_key(&d, "agent", "user").await;
        let hook = json!({"url": "http://127.0.0.1:9/hook", "events": ["sandbox.created"],
                          "secret": "0123456789abcdef0123"});
        let (status, created) = call(&d, TOKEN, "POST", "/v1/webhooks", Some(hook.clone())).await;
        assert_eq!(status, 201, "{created}");
        let hook_id = id_of(&created);
        for (method, path, body) in [
            (
                "POST",
                "/v1/api-keys".to_string(),
                Some(json!({"name": "x", "scope": "admin"})),
            ),
            ("GET", "/v1/api-keys".to_string(), None),
            ("DELETE", format!("/v1/api-keys/{admin_id}"), None),
            ("POST", "/v1/webhooks".to_string(), Some(hook.clone())),
            ("GET", "/v1/webhooks".to_string(), None),
            ("DELETE", format!("/v1/webhooks/{hook_id}"), None),
            ("GET", format!("/v1/webhooks/{hook_id}/deliveries"), None),
            ("POST", "/v1/admin/reconcile".to_string(), None),
        ] {
            let (status, body) = call(&d, &user, method, &path, body).await;
            assert_eq!(status, 403, "{method} {path}: {body}");
            assert_eq!(body["code"], "forbidden", "{method} {path}: {body}");
        }
        // Nothing changed: both keys and the webhook are still there.
        let (_, keys) = call(&d, TOKEN, "GET", "/v1/api-keys", None).await;
        assert_eq!(keys["apiKeys"].as_array().map(Vec::len), Some(3), "{keys}");
        let (_, hooks) = call(&d, TOKEN, "GET", "/v1/webhooks", None).await;
        assert_eq!(
            hooks["webhooks"].as_array().map(Vec::len),
            Some(1),
            "{hooks}"
        );
    });
}

/// Invariant: a key's secret is shown once, in the create's answer; no listing ever carries one.
/// The configured admin token is listed, cannot be revoked through the API, and keeps working.
#[test]
fn listings_carry_no_secret_and_the_configured_token_stays() {
    e2e(|| async {
        let d = Daemon::start().await;
        let (_, admin) = create_key(&d, "ops", "admin").await;
        let (user_id, user) = create_key(&d, "agent", "user").await;
        let resp = d
            .http()
            .get(d.endpoint("/v1/api-keys"))
            .send()
            .await
            .expect("list");
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.expect("body");
        for secret in [
            admin.as_str(),
            &admin[10..],
            user.as_str(),
            &user[10..],
            TOKEN,
        ] {
            assert!(!text.contains(secret), "the listing shows a secret: {text}");
        }
        let list: Value = serde_json::from_str(&text).expect("JSON");
        let keys = list["apiKeys"].as_array().expect("apiKeys");
        assert_eq!(keys.len(), 3, "{list}");
        let configured: Vec<&Value> = keys.iter().filter(|k| k["configured"] == true).collect();
        assert_eq!(configured.len(), 1, "{list}");
        assert_eq!(configured[0]["scope"], "admin");
        assert!(configured[0].get("prefix").is_none(), "{list}");
        let user_row = keys
            .iter()
            .find(|k| k["id"] == user_id.as_str())
            .expect("user key listed");
        assert_eq!(user_row["scope"], "user");
        assert!(user_row.get("key").is_none(), "{user_row}");
        assert!(user_row["createdAt"].is_string());

        let configured_id = id_of(configured[0]);
        let (status, body) = call(
            &d,
            &admin,
            "DELETE",
            &format!("/v1/api-keys/{configured_id}"),
            None,
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("conflict")),
            "{body}"
        );
        assert_eq!(statuses_with(&d, TOKEN).await, all(200));
    });
}

/// Invariant: a key the daemon did not mint (or none at all) is a 401 on every surface, and bad
/// create bodies are 400s that mint nothing.
#[test]
fn wrong_keys_are_401_and_bad_bodies_are_400() {
    e2e(|| async {
        let d = Daemon::start().await;
        let (_, real) = create_key(&d, "ops", "user").await;
        let forged = format!("e2b_{}", "0".repeat(40));
        // The real key with its last digit changed (to another digit, whatever it was).
        let last = if real.ends_with('0') { '1' } else { '0' };
        let near = format!("{}{last}", &real[..real.len() - 1]);
        for wrong in [forged.as_str(), near.as_str(), "", "e2e-token-4f7d0"] {
            assert_eq!(statuses_with(&d, wrong).await, all(401), "{wrong:?}");
        }
        // Each surface refuses in its own error shape.
        let plain = d.http_plain();
        for (path, code_field, code) in [
            ("/v1/sandboxes", "code", json!("unauthorized")),
            ("/sandboxes", "code", json!(401)),
            ("/api/sandbox", "statusCode", json!(401)),
        ] {
            for key in [None, Some(forged.as_str())] {
                let mut req = plain.get(d.endpoint(path));
                if let Some(key) = key {
                    req = req.bearer_auth(key);
                }
                let resp = req.send().await.expect("request");
                assert_eq!(resp.status(), 401, "{path} with {key:?}");
                let body: Value = resp.json().await.expect("a JSON error");
                assert_eq!(body[code_field], code, "{path} with {key:?}: {body}");
                assert!(body["message"].is_string(), "{path}: {body}");
            }
        }
        for body in [
            json!({"name": ""}),
            json!({"name": "x".repeat(65)}),
            json!({"name": "a\u{7}b"}),
            json!({"name": "x", "scope": "root"}),
            json!({"name": "x", "extra": 1}),
            json!({"scope": "user"}),
            json!([]),
        ] {
            let (status, answer) =
                call(&d, TOKEN, "POST", "/v1/api-keys", Some(body.clone())).await;
            assert_eq!(status, 400, "{body}: {answer}");
            assert_eq!(answer["code"], "invalid_request", "{body}: {answer}");
        }
        let resp = d
            .http()
            .post(d.endpoint("/v1/api-keys"))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 400);
        let (_, keys) = call(&d, TOKEN, "GET", "/v1/api-keys", None).await;
        assert_eq!(
            keys["apiKeys"].as_array().map(Vec::len),
            Some(2),
            "nothing minted: {keys}"
        );
        // A key without a scope is a user key.
        let (status, body) = call(
            &d,
            TOKEN,
            "POST",
            "/v1/api-keys",
            Some(json!({"name": "default"})),
        )
        .await;
        assert_eq!(
            (status, body["scope"].as_str()),
            (201, Some("user")),
            "{body}"
        );
    });
}

/// `sbx ARGS` against `d` with no key in the environment, the login kept in `config`, and `stdin`.
fn sbx_saved(
    d: &Daemon,
    config: &std::path::Path,
    args: &[&str],
    url: bool,
    stdin: &str,
) -> Output {
    let mut cmd = Command::new(sbx_binary());
    cmd.args(args)
        .env_remove("SB_PAT_TOKEN")
        .env_remove("SB_API_URL")
        .env("SBX_CONFIG", config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if url {
        cmd.env("SB_API_URL", d.url());
    }
    let mut child = cmd.spawn().expect("spawn sbx");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("run sbx")
}

/// Invariant: `sbx login` saves a key only after the daemon accepted it, in a file no other user can
/// read (mode 0600), and later commands use it without a key in the environment.
#[test]
fn sbx_login_saves_a_private_file_later_commands_use() {
    e2e(|| async {
        let d = Daemon::start().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("sbx/config.json");

        // A key the daemon refuses is not saved.
        let out = sbx_saved(
            &d,
            &config,
            &["login"],
            true,
            &format!("e2b_{}\n", "f".repeat(40)),
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));
        assert!(!config.exists());

        // The admin mints a user key with sbx; the user logs in with it from stdin.
        let out = d.sbx(&["api-keys", "create", "laptop", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let created: Value = serde_json::from_slice(&out.stdout).expect("CreatedApiKey JSON");
        let key = created["key"].as_str().expect("key").to_string();
        assert_eq!(created["scope"], "user");
        let out = sbx_saved(&d, &config, &["login"], true, &format!("{key}\n"));
        assert!(out.status.success(), "{}", stderr(&out));
        let mode = std::fs::metadata(&config)
            .expect("saved")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let saved: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
        assert_eq!(saved["token"], key.as_str());
        assert_eq!(saved["apiUrl"], d.url().as_str());

        // Later commands: no key and no address in the environment.
        let out = sbx_saved(&d, &config, &["ls", "--json"], false, "");
        assert!(out.status.success(), "{}", stderr(&out));
        let out = sbx_saved(&d, &config, &["api-keys", "list", "--json"], false, "");
        assert_eq!(out.status.code(), Some(1));
        let err: Value = serde_json::from_slice(&out.stderr).expect("ApiError JSON");
        assert_eq!(err["code"], "forbidden", "{err}");
        // The saved key goes only to the daemon it was saved for.
        let out = sbx_saved(
            &d,
            &config,
            &["ls", "--api-url", "http://127.0.0.1:9"],
            false,
            "",
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("missing_token"), "{}", stderr(&out));

        // The admin lists (no secrets) and revokes it: the saved login is refused at once.
        let out = d.sbx(&["api-keys", "list", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stdout(&out).contains(&key), "{}", stdout(&out));
        let listed: Value = serde_json::from_slice(&out.stdout).expect("ApiKey JSON");
        assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
        let out = d.sbx(&["api-keys", "list"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let table = stdout(&out);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0],
            ["ID", "NAME", "SCOPE", "PREFIX", "CREATED"],
            "{table}"
        );
        assert!(
            rows.iter()
                .any(|r| r[1..4] == ["admin", "admin", "(configured)"]),
            "{table}"
        );
        assert!(
            rows.iter()
                .any(|r| r[1..4] == ["laptop", "user", &key[..10]]),
            "{table}"
        );
        assert!(!table.contains(&key), "{table}");
        let id = created["id"].as_str().expect("id");
        let out = d.sbx(&["api-keys", "delete", id]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out).trim(), id);
        let out = sbx_saved(&d, &config, &["ls"], false, "");
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));

        let out = sbx_saved(&d, &config, &["logout"], false, "");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!config.exists());
    });
}

/// Invariant: minted keys survive a restart; the configured admin token is whatever the daemon is
/// configured with now — a rotated `SB_PAT_TOKEN` is refused after the restart.
#[test]
fn keys_survive_a_restart_and_a_rotated_admin_token_is_refused() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let (_, user) = create_key(&d, "agent", "user").await;
        let rotated = "e2e-rotated-admin-token-8c2e";
        d.set_env("SB_PAT_TOKEN", rotated);
        d.restart().await;
        assert_eq!(statuses_with(&d, &user).await, all(200));
        assert_eq!(statuses_with(&d, rotated).await, all(200));
        assert_eq!(
            statuses_with(&d, TOKEN).await,
            all(401),
            "the old admin token is gone"
        );
        let (_, keys) = call(&d, rotated, "GET", "/v1/api-keys", None).await;
        let keys = keys["apiKeys"].as_array().cloned().unwrap_or_default();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert_eq!(
            keys.iter().filter(|k| k["configured"] == true).count(),
            1,
            "{keys:?}"
        );
        // Back to the fixture's token, so its cleanup can call the daemon.
        d.set_env("SB_PAT_TOKEN", TOKEN);
        d.restart().await;
        assert_eq!(statuses_with(&d, TOKEN).await, all(200));
        assert_eq!(statuses_with(&d, rotated).await, all(401));
    });
}
