//! Call-home: how a sandbox's agent reports to the daemon.
//!
//! The daemon listens on a unix socket named [`SOCKET_NAME`] in a host directory that the runtime binds
//! read-only into every sandbox at [`SANDBOX_DIR`]: the agent reaches the daemon without any network
//! path (egress off), and a restarted daemon's new socket is visible through the same bind.
//!
//! One request per event: `POST` [`EVENTS_PATH`] with `Authorization: Bearer <the sandbox's agent
//! token>` and a JSON [`CallbackEvent`]. The sender mints one `deliveryId` per logical event and reuses it
//! on every retry (policy: `sandboxd_retry::Policy::state_bearing`); the daemon records the id in the
//! same transaction as the state change the event causes, so a duplicate changes nothing and re-fires
//! nothing. Answers:
//! - `200` with [`CallbackAnswer`]: accepted (`applied: false` when it was a duplicate or changed
//!   nothing);
//! - `400` a malformed event, `401` a token that is not this sandbox's, `404` an unknown sandbox, `409`
//!   an event the sandbox's state refuses (readiness after the sandbox was failed): never retried;
//! - `5xx`: the daemon could not decide; retried.
//!
//! Any process inside the sandbox can reach the socket; the token scopes an event to its own sandbox,
//! so the worst it can do is report on itself.

use serde::{Deserialize, Serialize};

/// File name of the daemon's callback socket in its callback directory.
pub const SOCKET_NAME: &str = "daemon.sock";
/// Where the daemon's callback directory appears inside every sandbox (read-only).
pub const SANDBOX_DIR: &str = "/.sandboxd/callback";
/// Path events are POSTed to.
pub const EVENTS_PATH: &str = "/callbacks/v1/events";

/// One event an agent reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CallbackEvent {
    /// Minted once per logical event; the same on every retry of it.
    pub delivery_id: String,
    /// The reporting sandbox.
    pub sandbox_id: String,
    /// What happened.
    #[serde(flatten)]
    pub event: AgentEvent,
}

/// What an agent reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum AgentEvent {
    /// The agent serves: the sandbox may become `running`.
    #[serde(rename_all = "camelCase")]
    EnvironmentReady {
        /// The envd protocol version the agent speaks.
        envd_version: String,
    },
    /// The environment cannot come up (or went down for good): the sandbox becomes `failed`.
    #[serde(rename_all = "camelCase")]
    EnvironmentFailed {
        /// Why, for the sandbox's `failureReason`.
        reason: String,
    },
}

impl AgentEvent {
    /// The event's name on the wire (`environment-ready`, …), also the ledger's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentEvent::EnvironmentReady { .. } => "environment-ready",
            AgentEvent::EnvironmentFailed { .. } => "environment-failed",
        }
    }
}

/// The daemon's answer to an accepted event.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CallbackAnswer {
    /// Whether this delivery changed anything (`false`: a duplicate, or nothing left to change).
    pub applied: bool,
    /// The sandbox's state after the event.
    pub state: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_a_flat_wire_shape() {
        let ev = CallbackEvent {
            delivery_id: "d1".into(),
            sandbox_id: "sb1".into(),
            event: AgentEvent::EnvironmentReady {
                envd_version: "0.6.4".into(),
            },
        };
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"deliveryId": "d1", "sandboxId": "sb1",
                               "event": "environment-ready", "envdVersion": "0.6.4"})
        );
        assert_eq!(serde_json::from_value::<CallbackEvent>(json).unwrap(), ev);
        let failed: CallbackEvent = serde_json::from_str(
            r#"{"deliveryId":"d2","sandboxId":"sb1","event":"environment-failed","reason":"no"}"#,
        )
        .unwrap();
        assert_eq!(failed.event.kind(), "environment-failed");
        assert!(serde_json::from_str::<CallbackEvent>(
            r#"{"deliveryId":"d3","sandboxId":"sb1","event":"environment-exploded"}"#
        )
        .is_err());
    }
}
