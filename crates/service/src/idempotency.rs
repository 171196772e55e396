//! The `Idempotency-Key` header on creating POSTs (draft-ietf-httpapi-idempotency-key-header), over the
//! store's `request_idempotency` claim/replay table.
//!
//! The key is scoped by the caller (their token) and the route; the request body is hashed so reusing a
//! key for a different request is refused. The first attempt's response — status and body, client
//! errors included — is stored and replayed for the same key until the replay window closes. A server
//! error (5xx) and a refusal to try (429, a per-key limit) are not stored: the claim is deleted so a
//! retry does the work again. A crash mid-attempt
//! leaves a pending claim whose lock expires, after which a retry redoes the work (the seed's case 4).

use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, ClaimOutcome, ClaimState, StoredResponse};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::time::Duration;

/// How long an attempt may run before a retry may take over (default of
/// [`crate::ServiceConfig::idempotency_pending_ttl`]).
pub const PENDING_TTL: Duration = Duration::from_secs(120);
/// How long a completed attempt is replayed.
pub const REPLAY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Scope of `POST /v1/sandboxes` claims; their targets are sandbox ids.
pub const V1_CREATE_SCOPE: &str = "v1.create";

/// A response that can be stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayable {
    /// HTTP status.
    pub status: u16,
    /// Body bytes.
    pub body: Vec<u8>,
    /// `Retry-After` seconds of a refusal (never stored: a refusal is not replayed).
    pub retry_after: Option<u64>,
}

fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// Checks an `Idempotency-Key` value: 1–255 visible ASCII characters.
pub fn validate_key(key: &str) -> Result<(), ServiceError> {
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(ServiceError::InvalidRequest(
            "Idempotency-Key must be 1 to 255 visible ASCII characters".into(),
        ));
    }
    Ok(())
}

impl Service {
    /// Runs `work` at most once per (`scope`, `caller`, `key`) within the replay window; returns its
    /// response and whether it is a replay.
    ///
    /// `target` names the resource the work will make, when known up front; it is recorded on the claim
    /// so that if this attempt dies mid-way, the attempt that later finds the claim stale receives it
    /// (`work`'s argument) and can undo it before redoing the work.
    pub async fn idempotent<F, Fut>(
        &self,
        scope: &'static str,
        caller: &str,
        key: &str,
        request: &[u8],
        target: Option<String>,
        work: F,
    ) -> Result<(Replayable, bool), ServiceError>
    where
        F: FnOnce(Option<String>) -> Fut,
        Fut: Future<Output = Replayable>,
    {
        validate_key(key)?;
        let fingerprint = digest(&[caller.as_bytes(), key.as_bytes()]);
        let request_hash = digest(&[request]);
        let fp = fingerprint.clone();
        let pending_ttl = self.config().idempotency_pending_ttl;
        let replay_ttl = self.config().idempotency_replay_ttl;
        let (outcome, stale_target) = self
            .writer()
            .write(move |tx| {
                let previous = tx.get_claim(scope, &fp)?;
                let outcome =
                    tx.claim(scope, &fp, &request_hash, unix_millis_now(), pending_ttl)?;
                let mut stale_target = None;
                if let ClaimOutcome::Acquired { generation } = outcome {
                    if let Some(t) = &target {
                        tx.set_claim_target(scope, &fp, generation, t)?;
                    }
                    // Only an attempt that never completed left something to undo; a completed one
                    // whose window closed made a resource the caller legitimately has.
                    stale_target = previous
                        .filter(|p| {
                            p.state == ClaimState::Pending && !p.response.target_id.is_empty()
                        })
                        .map(|p| p.response.target_id);
                }
                Ok((outcome, stale_target))
            })
            .await?;
        let generation = match outcome {
            ClaimOutcome::Acquired { generation } => generation,
            ClaimOutcome::Replay { status, body, .. } => {
                return Ok((
                    Replayable {
                        status: status.unwrap_or(200),
                        body: body.unwrap_or_default(),
                        retry_after: None,
                    },
                    true,
                ))
            }
            ClaimOutcome::InFlight { locked_until } => {
                let wait = (locked_until - unix_millis_now()).max(1000) / 1000;
                return Err(ServiceError::InFlight {
                    retry_after_secs: wait.min(5) as u64,
                });
            }
            ClaimOutcome::Mismatch => return Err(ServiceError::KeyReused),
        };
        let response = work(stale_target).await;
        crate::failpoints::hold("idempotency.before-complete").await;
        let stored = response.clone();
        let result = if response.status >= 500 || response.status == 429 {
            self.writer()
                .write(move |tx| tx.delete_claim(scope, &fingerprint, generation))
                .await
                .map(|_| ())
        } else {
            self.writer()
                .write(move |tx| {
                    tx.complete_claim(
                        scope,
                        &fingerprint,
                        generation,
                        &StoredResponse {
                            target_id: String::new(),
                            status: Some(stored.status),
                            body: Some(stored.body),
                        },
                        unix_millis_now(),
                        replay_ttl,
                    )
                })
                .await
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not record the idempotent outcome; a retry will redo the work");
        }
        Ok((response, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii() {
        assert!(validate_key("abc-123_XYZ").is_ok());
        for bad in ["", "a b", "é", &"k".repeat(256)] {
            assert!(validate_key(bad).is_err());
        }
    }

    #[test]
    fn fingerprints_do_not_collide_across_part_boundaries() {
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
    }
}
