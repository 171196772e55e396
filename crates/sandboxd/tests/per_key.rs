//! Per-key limits against the real daemon (`--max-sandboxes-per-key`,
//! `--max-concurrent-creates-per-key`): past a limit a create is 429 with `Retry-After` on every
//! surface and makes nothing; the limits hold under racing creates. The counting is in
//! `crates/store/src/per_key.rs`, the check in `crates/service/src/per_key.rs`.

mod common;

use common::{e2e, id_of, runtime_ids, Daemon};
use futures::future::join_all;
use serde_json::{json, Value};

/// Mints a `user` key with the admin token.
async fn mint(d: &Daemon, name: &str) -> String {
    d.mint_key(name, "user").await.0
}

/// `POST path` with `body` as `key` sends it on that surface: (status, Retry-After, body).
async fn create_as(
    d: &Daemon,
    key: &str,
    path: &str,
    body: &Value,
    idempotency: Option<&str>,
) -> (u16, Option<String>, Value) {
    let mut req = d.http_plain().post(d.endpoint(path)).json(body);
    req = if path.starts_with("/sandboxes") {
        req.header("x-api-key", key)
    } else {
        req.bearer_auth(key)
    };
    if let Some(k) = idempotency {
        req = req.header("idempotency-key", k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, resp.json().await.unwrap_or(Value::Null))
}

/// Invariant: a key holds at most `--max-sandboxes-per-key` sandboxes, however many of its creates
/// race; the refused ones are 429 with Retry-After and leave nothing behind, other keys are not
/// affected, and a deleted sandbox frees its place at once.
#[test]
fn per_key_limits_hold_under_racing_creates() {
    e2e(|| async {
        let d = Daemon::start_with(&["--max-sandboxes-per-key", "3"], &[]).await;
        let key = mint(&d, "limited").await;
        let body = json!({"metadata": {"race": "limit"}});
        let answers =
            join_all((0..50).map(|_| create_as(&d, &key, "/v1/sandboxes", &body, None))).await;
        let created: Vec<String> = answers
            .iter()
            .filter(|(s, ..)| *s == 201)
            .map(|(.., v)| id_of(v))
            .collect();
        assert_eq!(created.len(), 3, "{answers:?}");
        for (status, retry, value) in answers.iter().filter(|(s, ..)| *s != 201) {
            assert_eq!(*status, 429, "{value}");
            assert_eq!(value["code"], "limit_exceeded", "{value}");
            assert!(
                retry.as_deref().is_some_and(|r| r.parse::<u64>().is_ok()),
                "{retry:?}"
            );
        }
        assert_eq!(d.list_all().await.len(), 3, "a refused create left a row");
        assert_eq!(runtime_ids(&d).len(), 3, "a refused create left a sandbox");

        // The other surfaces count the same sandboxes and refuse in their own shapes.
        let (status, retry, e2b) =
            create_as(&d, &key, "/sandboxes", &json!({"templateID": "base"}), None).await;
        assert_eq!((status, e2b["code"].as_u64()), (429, Some(429)), "{e2b}");
        assert!(retry.is_some());
        let (status, retry, daytona) = create_as(&d, &key, "/api/sandbox", &json!({}), None).await;
        assert_eq!(
            (status, daytona["statusCode"].as_u64()),
            (429, Some(429)),
            "{daytona}"
        );
        assert!(retry.is_some());

        // Another key, and the admin token, are not limited by this key's sandboxes.
        let other = mint(&d, "other").await;
        assert_eq!(
            create_as(&d, &other, "/v1/sandboxes", &body, None).await.0,
            201
        );
        assert_eq!(d.create(json!({})).await["state"], "running");

        // A refusal is not an outcome an Idempotency-Key replays: after a delete, the same key works.
        let (status, ..) = create_as(&d, &key, "/v1/sandboxes", &body, Some("retry-me")).await;
        assert_eq!(status, 429);
        assert_eq!(
            d.delete(&format!("/v1/sandboxes/{}", created[0]))
                .await
                .status(),
            204
        );
        let (status, _, value) =
            create_as(&d, &key, "/v1/sandboxes", &body, Some("retry-me")).await;
        assert_eq!(status, 201, "{value}");
    });
}

/// Invariant: at most `--max-concurrent-creates-per-key` creates of one key are in flight; the others
/// are refused at once (429, Retry-After 1), not queued.
#[test]
fn creates_in_flight_per_key_are_limited() {
    e2e(|| async {
        let d = Daemon::start_with(
            &["--max-concurrent-creates-per-key", "2"],
            &[("FAILPOINTS", "create.after-insert=return(3000)")],
        )
        .await;
        let key = mint(&d, "busy").await;
        let body = json!({});
        let started = std::time::Instant::now();
        let answers =
            join_all((0..10).map(|_| create_as(&d, &key, "/v1/sandboxes", &body, None))).await;
        let statuses: Vec<u16> = answers.iter().map(|(s, ..)| *s).collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            2,
            "{answers:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            8,
            "{answers:?}"
        );
        assert!(answers
            .iter()
            .filter(|(s, ..)| *s == 429)
            .all(|(_, retry, _)| retry.as_deref() == Some("1")));
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        // Finished creates no longer count: the next ones are admitted.
        assert_eq!(
            create_as(&d, &key, "/v1/sandboxes", &body, None).await.0,
            201
        );
    });
}
