//! Webhooks: registrations, and the sender that drains the outbox.
//!
//! Contract: a registration names a URL, the event kinds it wants ([`crate::events::KINDS`]) and a
//! signing secret; events reach it through outbox rows written in the same transaction as the change
//! ([`crate::events::emit`]). The sender ([`Service::run_webhook_sender`]) delivers each due row with the
//! project's one sender policy ([`sandboxd_retry`]): transport errors and 5xx are retried (3 attempts,
//! ~1 s then ~5 s), then the row is rescheduled durably with a growing delay (the slow tail) until
//! [`SenderConfig::max_total`] after the event; a 4xx is never retried and fails the row. Every attempt
//! is logged (`webhook_attempts`) and carries the row's delivery id in `webhook-id`, the same on every
//! retry, signed per Standard Webhooks: `webhook-signature: v1,base64(HMAC-SHA256(secret,
//! "{id}.{timestamp}.{body}"))`, the secret used as raw bytes or, with a `whsec_` prefix, base64-decoded.
//!
//! Assumes: a receiver dedupes on `webhook-id` (a crash between a delivery and its record resends it).

use crate::events::KINDS;
use crate::sandboxes::random_id;
use crate::{Service, ServiceError};
use base64::Engine;
use hmac::{Hmac, Mac};
use sandboxd_retry::{classify_status, Outcome, Policy, SendError};
use sandboxd_store::{
    unix_millis_now, DeliveryAttempt, OutboxEntry, OutboxState, UnixMillis, Webhook,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Scope of `POST /v1/webhooks` Idempotency-Key claims; their targets are webhook ids.
pub const V1_WEBHOOKS_SCOPE: &str = "v1.webhooks";

/// Shortest secret accepted.
pub const MIN_SECRET_LEN: usize = 16;

/// How the sender works.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// How often due rows are looked for (besides right after each committed event).
    pub poll: Duration,
    /// The fast burst of each delivery run.
    pub policy: Policy,
    /// First delay of the slow tail (doubling up to [`SenderConfig::tail_max_delay`]).
    pub tail_delay: Duration,
    /// Longest delay of the slow tail.
    pub tail_max_delay: Duration,
    /// How long after the event delivery is attempted at all.
    pub max_total: Duration,
    /// Timeout of one HTTP attempt.
    pub timeout: Duration,
    /// Deliveries in flight at once.
    pub concurrency: usize,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            policy: Policy::state_bearing(),
            tail_delay: Duration::from_secs(30),
            tail_max_delay: Duration::from_secs(600),
            max_total: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            concurrency: 16,
        }
    }
}

/// The Standard Webhooks signature header value of `body` sent as message `id` at `timestamp`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> String {
    let key = secret_bytes(secret);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("v1,{sig}")
}

/// The key bytes of a secret: base64-decoded after a `whsec_` prefix, else the raw bytes.
fn secret_bytes(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap_or_else(|_| secret.as_bytes().to_vec()),
        None => secret.as_bytes().to_vec(),
    }
}

/// Checks a registration request.
fn validate(url: &str, events: &[String], secret: &str) -> Result<(), ServiceError> {
    let bad = |m: String| Err(ServiceError::InvalidRequest(m));
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
        _ => return bad(format!("url {url:?} must be an absolute http or https URL")),
    }
    if events.is_empty() {
        return bad("events must name at least one event".into());
    }
    if let Some(e) = events.iter().find(|e| !KINDS.contains(&e.as_str())) {
        return bad(format!("unknown event {e:?}; known: {}", KINDS.join(", ")));
    }
    if secret.chars().count() < MIN_SECRET_LEN {
        return bad(format!(
            "secret must be at least {MIN_SECRET_LEN} characters"
        ));
    }
    if let Some(b64) = secret.strip_prefix("whsec_") {
        if base64::engine::general_purpose::STANDARD
            .decode(b64)
            .is_err()
        {
            return bad("a secret starting with whsec_ must be base64 after the prefix".into());
        }
    }
    Ok(())
}

impl Service {
    /// Registers a webhook with id `id`.
    pub async fn create_webhook(
        &self,
        id: String,
        url: String,
        mut events: Vec<String>,
        secret: String,
    ) -> Result<Webhook, ServiceError> {
        validate(&url, &events, &secret)?;
        events.sort_by_key(|e| KINDS.iter().position(|k| k == e));
        events.dedup();
        let hook = Webhook {
            id,
            url,
            events,
            secret,
            created_at: unix_millis_now(),
        };
        let stored = hook.clone();
        self.writer()
            .write(move |tx| tx.insert_webhook(&stored))
            .await?;
        tracing::info!(webhook_id = %hook.id, url = %hook.url, "webhook registered");
        Ok(hook)
    }

    /// A fresh webhook id.
    pub fn new_webhook_id() -> String {
        random_id("wh_", 20)
    }

    /// Every registration.
    pub async fn list_webhooks(&self) -> Result<Vec<Webhook>, ServiceError> {
        Ok(self.reader().read(|tx| tx.list_webhooks()).await?)
    }

    /// Removes registration `id`; unknown ids are [`ServiceError::NotFound`].
    pub async fn delete_webhook(&self, id: &str) -> Result<(), ServiceError> {
        let rid = id.to_string();
        if self
            .writer()
            .write(move |tx| tx.delete_webhook(&rid))
            .await?
        {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!("webhook {id} not found")))
        }
    }

    /// The newest outbox rows of registration `id` (at most `limit`), each with its attempts.
    pub async fn webhook_deliveries(
        &self,
        id: &str,
        limit: usize,
    ) -> Result<Vec<(OutboxEntry, Vec<DeliveryAttempt>)>, ServiceError> {
        let rid = id.to_string();
        let (hook, rows) = self
            .reader()
            .read(move |tx| {
                Ok((
                    tx.get_webhook_registration(&rid)?,
                    tx.webhook_deliveries(&rid, limit)?,
                ))
            })
            .await?;
        if hook.is_none() && rows.is_empty() {
            return Err(ServiceError::NotFound(format!("webhook {id} not found")));
        }
        Ok(rows)
    }

    /// Delivers due outbox rows until the task is dropped: right after events commit, and every
    /// `config.poll`. One registration's rows are delivered one at a time, oldest first, so a receiver
    /// sees its events in commit order (a row in the slow tail does not hold back the ones after it).
    pub async fn run_webhook_sender(&self, config: SenderConfig) {
        let client = match reqwest::Client::builder()
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the webhook HTTP client; webhooks are not sent");
                return;
            }
        };
        let config = Arc::new(config);
        let slots = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
        let busy: Arc<Mutex<HashSet<String>>> = Default::default();
        let wake = Arc::new(tokio::sync::Notify::new());
        let mut events = self.subscribe();
        let mut tick = tokio::time::interval(config.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = wake.notified() => {}
                r = events.recv() => if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    return;
                },
            }
            let now = unix_millis_now();
            let due = match self
                .reader()
                .read(move |tx| tx.due_webhooks(now, 256))
                .await
            {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read due webhooks");
                    continue;
                }
            };
            // Group by registration, oldest first, skipping registrations with a run in flight.
            let mut groups: Vec<(String, Vec<OutboxEntry>)> = Vec::new();
            for row in due {
                let hook = row.webhook_id.clone().unwrap_or_default();
                if busy
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&hook)
                {
                    continue;
                }
                match groups.iter_mut().find(|(h, _)| *h == hook) {
                    Some((_, rows)) => rows.push(row),
                    None => groups.push((hook, vec![row])),
                }
            }
            for (hook, rows) in groups {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    break;
                };
                busy.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(hook.clone());
                let (svc, client, config) = (self.clone(), client.clone(), config.clone());
                let (busy, wake) = (busy.clone(), wake.clone());
                tokio::spawn(async move {
                    for row in rows {
                        // Leased past its longest run, so no other poll sends it meanwhile.
                        let (id, lease) = (row.id, unix_millis_now() + lease_ms(&config));
                        match svc
                            .writer()
                            .write(move |tx| tx.lease_webhook(id, lease))
                            .await
                        {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot lease a webhook delivery");
                                break;
                            }
                        }
                        if let Err(e) = svc.deliver(&client, &config, row).await {
                            tracing::warn!(error = %crate::error::chain(&e), "webhook delivery bookkeeping failed");
                        }
                    }
                    busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&hook);
                    drop(permit);
                    // Rows that came due meanwhile were skipped: look again now.
                    wake.notify_one();
                });
            }
        }
    }

    /// One delivery run of `row`: the burst, then delivered, failed, or rescheduled for the tail.
    async fn deliver(
        &self,
        client: &reqwest::Client,
        config: &SenderConfig,
        row: OutboxEntry,
    ) -> Result<(), ServiceError> {
        let hook_id = row.webhook_id.clone().unwrap_or_default();
        let hid = hook_id.clone();
        let Some(hook) = self
            .reader()
            .read_by_key(move |tx| tx.get_webhook_registration(&hid))
            .await?
        else {
            let id = row.id;
            self.writer()
                .write(move |tx| {
                    tx.settle_webhook(
                        id,
                        OutboxState::Failed,
                        unix_millis_now(),
                        Some("webhook deleted"),
                    )
                })
                .await?;
            return Ok(());
        };
        let body = Arc::new(row.payload.to_string());
        let (before, outbox_id, msg_id) = (row.attempts, row.id, row.event_id.clone());
        let report = sandboxd_retry::send(&config.policy, |n| {
            let (client, body, hook, msg_id) =
                (client.clone(), body.clone(), hook.clone(), msg_id.clone());
            let svc = self.clone();
            async move {
                let at = unix_millis_now();
                let timestamp = at / 1000;
                let sent = client
                    .post(&hook.url)
                    .header("content-type", "application/json")
                    .header("webhook-id", &msg_id)
                    .header("webhook-timestamp", timestamp.to_string())
                    .header(
                        "webhook-signature",
                        sign(&hook.secret, &msg_id, timestamp, &body),
                    )
                    .body(body.as_str().to_owned())
                    .send()
                    .await;
                let (status, outcome) = match sent {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        (Some(status), classify_status(status))
                    }
                    Err(e) => (None, Outcome::Retryable(crate::error::chain(&e))),
                };
                let error = match &outcome {
                    Outcome::Delivered => None,
                    Outcome::Retryable(e) | Outcome::Rejected(e) => Some(e.clone()),
                };
                let attempt = DeliveryAttempt {
                    attempt: before + n,
                    at,
                    status,
                    error,
                };
                tracing::debug!(webhook_id = %hook.id, delivery_id = %msg_id, attempt = attempt.attempt, ?status, "webhook attempt");
                if let Err(e) = svc
                    .writer()
                    .write(move |tx| tx.record_webhook_attempt(outbox_id, &attempt))
                    .await
                {
                    tracing::warn!(error = %e, "cannot log a webhook attempt");
                }
                outcome
            }
        })
        .await;
        let now = unix_millis_now();
        let (state, next, error) = match &report.result {
            Ok(()) => (OutboxState::Delivered, now, None),
            Err(SendError::Rejected(why)) => (OutboxState::Failed, now, Some(why.clone())),
            Err(SendError::Exhausted { last, .. }) => {
                let runs = (before + report.attempts).div_ceil(config.policy.attempts.max(1));
                let delay = tail_delay(config, runs);
                let deadline = row.created_at + config.max_total.as_millis() as UnixMillis;
                if now + delay < deadline {
                    (OutboxState::Pending, now + delay, Some(last.clone()))
                } else {
                    (OutboxState::Failed, now, Some(format!("gave up: {last}")))
                }
            }
        };
        tracing::info!(webhook_id = %hook.id, delivery_id = %row.event_id, kind = %row.kind, attempts = report.attempts, ?state, "webhook delivery run finished");
        self.writer()
            .write(move |tx| tx.settle_webhook(outbox_id, state, next, error.as_deref()))
            .await?;
        Ok(())
    }
}

/// The slow tail's delay after `runs` bursts: `tail_delay`, doubling, at most `tail_max_delay`.
fn tail_delay(config: &SenderConfig, runs: u32) -> UnixMillis {
    let factor = 1u32 << runs.saturating_sub(1).min(16);
    let d = config
        .tail_delay
        .saturating_mul(factor)
        .min(config.tail_max_delay);
    d.as_millis() as UnixMillis
}

/// How long a row is leased to one delivery run: its whole burst with every attempt timing out, and more.
fn lease_ms(config: &SenderConfig) -> UnixMillis {
    let waits: Duration = (2..=config.policy.attempts)
        .map(|n| config.policy.delay_before(n))
        .sum();
    let run = waits + config.timeout * config.policy.attempts;
    (run * 2).as_millis() as UnixMillis
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_standard_webhooks() {
        // The Standard Webhooks reference vector (svix test suite).
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // A raw secret is used as bytes.
        assert_ne!(
            sign("0123456789abcdef", "m", 1, "{}"),
            sign("0123456789abcdeg", "m", 1, "{}")
        );
    }

    #[test]
    fn registrations_are_validated() {
        let all = vec!["sandbox.created".to_string()];
        assert!(validate("http://127.0.0.1:9/hook", &all, "0123456789abcdef").is_ok());
        assert!(validate("ftp://x/", &all, "0123456789abcdef").is_err());
        assert!(validate("not a url", &all, "0123456789abcdef").is_err());
        assert!(validate("http://x/", &all, "short").is_err());
        assert!(validate(
            "http://x/",
            &["sandbox.exploded".into()],
            "0123456789abcdef"
        )
        .is_err());
        assert!(validate("http://x/", &[], "0123456789abcdef").is_err());
    }

    #[test]
    fn the_tail_grows_and_is_capped() {
        let c = SenderConfig::default();
        assert_eq!(tail_delay(&c, 1), 30_000);
        assert_eq!(tail_delay(&c, 2), 60_000);
        assert_eq!(tail_delay(&c, 10), 600_000);
    }
}
