//! Webhooks and the live event feed, end to end: the real daemon delivers to a receiver in this test.
//!
//! The receiver ([`Receiver`]) is a small axum server on 127.0.0.1:0 that records every request (headers
//! and body) and answers from a script (e.g. 500, 500, then 200). Each test verifies the Standard Webhooks
//! signature itself with its own HMAC, so a signing bug fails here, not only in the unit test.

mod common;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use common::{e2e, id_of, runtime_ids, Daemon};
use futures::StreamExt;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ALL_EVENTS: &[&str] = &[
    "sandbox.created",
    "sandbox.running",
    "sandbox.failed",
    "sandbox.lost",
    "sandbox.paused",
    "sandbox.resumed",
    "sandbox.deleted",
    "port.exposed",
    "port.unexposed",
];

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("webhook body is JSON")
    }

    fn kind(&self) -> String {
        self.json()["type"].as_str().unwrap_or_default().to_string()
    }

    /// Checks `webhook-signature` with an independent HMAC-SHA256 over `{id}.{timestamp}.{body}`.
    fn assert_signed_with(&self, secret: &str) {
        let key = match secret.strip_prefix("whsec_") {
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
            None => secret.as_bytes().to_vec(),
        };
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{}.{}.{}", self.id, self.timestamp, self.body).as_bytes());
        let want = format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        );
        assert!(
            self.signature.split(' ').any(|s| s == want),
            "bad signature {:?} for {self:?} (want {want})",
            self.signature
        );
        let ts: i64 = self
            .timestamp
            .parse()
            .expect("webhook-timestamp is unix seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!((now - ts).abs() < 300, "timestamp {ts} is not now ({now})");
        assert!(self.id.starts_with("msg_"), "webhook-id {:?}", self.id);
    }
}

#[derive(Default)]
struct ReceiverState {
    got: Mutex<Vec<Received>>,
    /// Statuses to answer, in order; 200 once empty.
    script: Mutex<VecDeque<u16>>,
}

/// A webhook receiver on 127.0.0.1:0.
struct Receiver {
    url: String,
    state: Arc<ReceiverState>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(script: &[u16]) -> Self {
        let state = Arc::new(ReceiverState::default());
        state.script.lock().unwrap().extend(script);
        async fn hook(
            State(state): State<Arc<ReceiverState>>,
            headers: HeaderMap,
            body: String,
        ) -> StatusCode {
            let h = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            state.got.lock().unwrap().push(Received {
                id: h("webhook-id"),
                timestamp: h("webhook-timestamp"),
                signature: h("webhook-signature"),
                body,
            });
            let status = state.script.lock().unwrap().pop_front().unwrap_or(200);
            StatusCode::from_u16(status).unwrap()
        }
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { url, state, server }
    }

    fn got(&self) -> Vec<Received> {
        self.state.got.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived (fails after `within`).
    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.got();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "receiver got {} requests within {within:?}, want {n}: {got:?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn register(daemon: &Daemon, url: &str, events: &[&str]) -> String {
    let resp = daemon
        .post_json(
            "/v1/webhooks",
            &json!({ "url": url, "events": events, "secret": SECRET }),
        )
        .await;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 201, "register: {body}");
    assert!(body.get("secret").is_none(), "the secret is never returned");
    body["id"].as_str().unwrap().to_string()
}

async fn deliveries(daemon: &Daemon, webhook: &str) -> Vec<Value> {
    let resp = daemon
        .http()
        .get(daemon.endpoint(&format!("/v1/webhooks/{webhook}/deliveries")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    body["deliveries"].as_array().unwrap().clone()
}

/// Waits until every delivery of `webhook` left `pending`.
async fn settled_deliveries(daemon: &Daemon, webhook: &str, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let d = deliveries(daemon, webhook).await;
        if !d.is_empty() && d.iter().all(|d| d["state"] != "pending") {
            return d;
        }
        assert!(Instant::now() < deadline, "deliveries still pending: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn subscriber_gets_each_lifecycle_event_once_in_order_and_signed() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let receiver = Receiver::start(&[]).await;
        let webhook = register(&daemon, &receiver.url, ALL_EVENTS).await;
        let id = daemon.create_id().await;
        let resp = daemon
            .post_json(
                &format!("/v1/sandboxes/{id}/ports"),
                &json!({ "port": 8000, "skipListenCheck": true }),
            )
            .await;
        assert_eq!(resp.status(), 201);
        // Exposing again changes nothing and announces nothing.
        let again = daemon
            .post_json(
                &format!("/v1/sandboxes/{id}/ports"),
                &json!({ "port": 8000, "skipListenCheck": true }),
            )
            .await;
        assert_eq!(again.status(), 200);
        let resp = daemon.delete(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(resp.status(), 204);
        receiver.wait_for(4, Duration::from_secs(15)).await;
        // Nothing more arrives (no duplicates, no extra events).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let got = receiver.got();
        let kinds: Vec<String> = got.iter().map(Received::kind).collect();
        assert_eq!(
            kinds,
            [
                "sandbox.created",
                "sandbox.running",
                "port.exposed",
                "sandbox.deleted"
            ],
            "{got:?}"
        );
        for r in &got {
            r.assert_signed_with(SECRET);
            let body = r.json();
            assert!(body["timestamp"].is_string(), "{body}");
            let about = body["data"]["sandboxId"]
                .as_str()
                .or(body["data"]["id"].as_str());
            assert_eq!(about, Some(id.as_str()), "{body}");
        }
        assert_eq!(got[0].json()["data"]["state"], "creating");
        assert_eq!(got[1].json()["data"]["state"], "running");
        assert_eq!(got[2].json()["data"]["port"], 8000);
        let ids: std::collections::BTreeSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids.len(), 4, "each event has its own delivery id");
        let d = settled_deliveries(&daemon, &webhook, Duration::from_secs(5)).await;
        assert_eq!(d.len(), 4);
        assert!(d
            .iter()
            .all(|d| d["state"] == "delivered" && d["attempts"].as_array().unwrap().len() == 1));
    });
}

#[test]
fn server_errors_are_retried_with_the_same_delivery_id() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let receiver = Receiver::start(&[500, 500]).await;
        let webhook = register(&daemon, &receiver.url, &["sandbox.created"]).await;
        let started = Instant::now();
        daemon.create_id().await;
        let got = receiver.wait_for(3, Duration::from_secs(20)).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(5),
            "3 attempts came within {took:?}: the backoff (1 s, 5 s) was not applied"
        );
        assert!(got.iter().all(|r| r.id == got[0].id), "{got:?}");
        for r in &got {
            r.assert_signed_with(SECRET);
        }
        let d = settled_deliveries(&daemon, &webhook, Duration::from_secs(5)).await;
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0]["id"], got[0].id.as_str());
        assert_eq!(d[0]["state"], "delivered");
        let statuses: Vec<i64> = d[0]["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["status"].as_i64().unwrap())
            .collect();
        assert_eq!(statuses, [500, 500, 200]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            receiver.got().len(),
            3,
            "a delivered event is not sent again"
        );
    });
}

#[test]
fn client_errors_are_attempted_once_and_fail_the_delivery() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let receiver = Receiver::start(&[400]).await;
        let webhook = register(&daemon, &receiver.url, &["sandbox.created"]).await;
        daemon.create_id().await;
        receiver.wait_for(1, Duration::from_secs(10)).await;
        let d = settled_deliveries(&daemon, &webhook, Duration::from_secs(5)).await;
        // Longer than the first backoff: a retry would have come by now.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(receiver.got().len(), 1, "a 4xx must not be retried");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0]["state"], "failed");
        let attempts = d[0]["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0]["status"], 400);
    });
}

#[test]
fn event_stream_sees_a_create_as_it_commits() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let unauthenticated = daemon
            .http_plain()
            .get(daemon.endpoint("/v1/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(unauthenticated.status(), 401);
        let resp = daemon
            .http()
            .get(daemon.endpoint("/v1/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let mut stream = resp.bytes_stream();
        let id = daemon.create_id().await;
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !text.contains("event: sandbox.running") {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, stream.next())
                .await
                .unwrap_or_else(|_| panic!("no sandbox.running on the stream: {text}"))
                .expect("stream ended")
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let events: Vec<(String, String, Value)> = text
            .split("\n\n")
            .filter(|e| e.contains("event: "))
            .map(|e| {
                let field = |name: &str| {
                    e.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or_default()
                        .to_string()
                };
                (
                    field("id: "),
                    field("event: "),
                    serde_json::from_str(&field("data: ")).unwrap(),
                )
            })
            .collect();
        let kinds: Vec<&str> = events.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["sandbox.created", "sandbox.running"], "{text}");
        for (eid, kind, data) in &events {
            assert!(eid.starts_with("evt_"), "{text}");
            assert_eq!(data["type"], kind.as_str());
            assert_eq!(data["data"]["id"], id.as_str());
        }
    });
}

#[test]
fn bad_registrations_are_rejected_and_nothing_is_stored() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let ok = json!({ "url": "http://127.0.0.1:9/hook", "events": ["sandbox.created"], "secret": SECRET });
        let mut cases = vec![];
        for (field, value) in [
            ("url", json!("not a url")),
            ("url", json!("ftp://127.0.0.1/hook")),
            ("url", json!("/relative")),
            ("secret", json!("too-short")),
            ("events", json!([])),
            ("events", json!(["sandbox.exploded"])),
        ] {
            let mut body = ok.clone();
            body[field] = value;
            cases.push(body);
        }
        for body in &cases {
            let resp = daemon.post_json("/v1/webhooks", body).await;
            let status = resp.status();
            let text = resp.text().await.unwrap();
            assert_eq!(status, 400, "{body}: {text}");
            assert!(text.contains("invalid_request"), "{text}");
        }
        let list: Value = daemon.get_json("/v1/webhooks").await;
        assert_eq!(list["webhooks"], json!([]), "nothing stored: {list}");
        // A valid registration with an Idempotency-Key is stored once and replayed.
        let post = || {
            daemon
                .http()
                .post(daemon.endpoint("/v1/webhooks"))
                .header("idempotency-key", "wh-key-1")
                .json(&ok)
                .send()
        };
        let first = post().await.unwrap();
        assert_eq!(first.status(), 201);
        let first: Value = first.json().await.unwrap();
        let second = post().await.unwrap();
        assert_eq!(second.status(), 201);
        assert_eq!(second.headers()["idempotent-replayed"], "true");
        let second: Value = second.json().await.unwrap();
        assert_eq!(first, second);
        let list: Value = daemon.get_json("/v1/webhooks").await;
        assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
        assert_eq!(list["webhooks"][0]["id"], first["id"]);
        let id = id_of(&first);
        let resp = daemon.delete(&format!("/v1/webhooks/{id}")).await;
        assert_eq!(resp.status(), 204);
        let resp = daemon.delete(&format!("/v1/webhooks/{id}")).await;
        assert_eq!(resp.status(), 404);
    });
}

/// The client's event feed (`sandboxd_client::Client::events`) has a sandbox's events in order, and
/// `sandbox.deleted` comes once the teardown behind the delete's answer ended: by then the runtime
/// holds nothing of the sandbox.
#[test]
fn the_clients_feed_reports_a_delete_once_its_teardown_ended() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let client = sandboxd_client::Client::new(&daemon.url(), daemon.token()).unwrap();
        let mut feed = std::pin::pin!(client.events().await.unwrap());
        let id = daemon.create_id().await;
        let deleted = daemon.delete(&format!("/v1/sandboxes/{id}")).await;
        assert!(deleted.status().is_success(), "{}", deleted.status());
        let mut kinds = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while kinds.last().map(String::as_str) != Some("sandbox.deleted") {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = tokio::time::timeout(left, feed.next())
                .await
                .unwrap_or_else(|_| panic!("no sandbox.deleted on the feed: {kinds:?}"))
                .expect("the feed ended")
                .expect("an event");
            assert!(event.id.starts_with("evt_"), "{event:?}");
            if event.data["id"] == id.as_str() {
                kinds.push(event.kind);
            }
        }
        assert_eq!(
            kinds,
            ["sandbox.created", "sandbox.running", "sandbox.deleted"]
        );
        assert!(
            !runtime_ids(&daemon).contains(&id),
            "{id} is still in the runtime"
        );
    });
}
