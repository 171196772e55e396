//! The daemon's live feed of events (`GET /v1/events`, Server-Sent Events): what a webhook would
//! be sent, as it happens, from the moment of the subscription.
//!
//! Contract: [`Client::events`] answers once the daemon has accepted the subscription, so every
//! event emitted after it returns is in the stream, in the daemon's order. The feed's comments
//! (keep-alives, "missed N events" when the reader fell behind) are not events and are skipped.

use crate::{Client, ClientError};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::Method;

/// One event of the feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// The event's id.
    pub id: String,
    /// Its type, e.g. `sandbox.deleted`.
    pub kind: String,
    /// Its data (for a sandbox's events: the sandbox, or at least its `id`).
    pub data: serde_json::Value,
}

impl Client {
    /// Subscribes to the daemon's events from now on.
    pub async fn events(
        &self,
    ) -> Result<impl Stream<Item = Result<FeedEvent, ClientError>> + Send + 'static, ClientError>
    {
        let url = self.endpoint(&["events"])?;
        let response = self.send(self.request(Method::GET, url)).await?;
        Ok(response.bytes_stream().eventsource().map(|event| {
            let event = event.map_err(|e| match e {
                EventStreamError::Transport(e) => ClientError::Transport(e),
                other => ClientError::Protocol(format!("event feed: {other}")),
            })?;
            let body: serde_json::Value =
                serde_json::from_str(&event.data).map_err(|source| ClientError::Decode {
                    what: "an event",
                    source,
                })?;
            Ok(FeedEvent {
                id: event.id,
                kind: event.event,
                data: body.get("data").cloned().unwrap_or_default(),
            })
        }))
    }
}
