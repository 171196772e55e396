//! The E2B control API as the tests speak it: create, get, post and the error shape, plus the native
//! exec for looking inside a sandbox.

use crate::common::Daemon;
use serde_json::{json, Value};

pub async fn create(d: &Daemon, body: &Value) -> (u16, Value) {
    let resp = d
        .http()
        .post(d.endpoint("/v2/sandboxes"))
        .json(body)
        .send()
        .await
        .expect("create request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

pub fn sandbox_id(body: &Value) -> String {
    body["sandboxID"]
        .as_str()
        .unwrap_or_else(|| panic!("no sandboxID in {body}"))
        .to_string()
}

/// Asserts an error answer in E2B's shape: `{"code": <status>, "message": <non-empty string>}`.
pub async fn expect_e2b_error(what: &str, resp: reqwest::Response, status: u16) {
    assert_eq!(resp.status().as_u16(), status, "{what}: status");
    let text = resp.text().await.unwrap_or_default();
    let body: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
    assert_eq!(
        body["code"],
        json!(status),
        "{what}: code must be the integer status: {body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: message: {body}"
    );
}

pub async fn get(d: &Daemon, id: &str) -> (u16, Value) {
    let resp = d
        .http()
        .get(d.endpoint(&format!("/sandboxes/{id}")))
        .send()
        .await
        .expect("get request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

pub async fn post(d: &Daemon, path: &str, body: Value) -> reqwest::Response {
    d.http()
        .post(d.endpoint(path))
        .json(&body)
        .send()
        .await
        .expect("request")
}

/// Runs `cmd` through the native exec (10 s limit), whatever it answers: (HTTP status, body).
pub async fn exec(d: &Daemon, id: &str, cmd: &[&str]) -> (u16, Value) {
    let (status, text) = d
        .exec_raw(id, &json!({ "cmd": cmd, "timeoutMs": 10_000 }))
        .await;
    (status, serde_json::from_str(&text).unwrap_or_default())
}
