//! What a pause tells the requests in flight to its sandbox.
//!
//! A sandbox paused with its memory keeps its processes, frozen: a command that was running when
//! the pause came (an auto-pause at its deadline, a `pause` by hand) neither ends nor prints until
//! the sandbox resumes, and the request waiting on it would wait that long, or until its client gave
//! up. Instead, every request in flight to a sandbox ends when the sandbox is paused: the daemon's
//! exec answers a conflict (its stream ends with an `error` event), an exchange forwarded by the
//! proxy (the E2B SDK's calls to the sandbox's agent) is cut short, and a WebSocket through it is
//! closed, as the vendor's own sandboxes drop their connections when they pause. The command itself
//! is not lost: it goes on when the sandbox resumes.
//!
//! Contract:
//! - **A pause reaches every request that was in flight when it was recorded.** A request subscribes
//!   ([`InFlight::subscribe`]) before it reads the sandbox's state, and a pause is announced
//!   ([`InFlight::paused`]) after its record and its freeze; so a request that saw the sandbox
//!   running either ends before the pause or is told of it, whatever the interleaving (the
//!   pause's epoch is newer than the subscription's). The announcement follows the record so that
//!   a client whose stream it ends finds the sandbox paused when it looks (the E2B SDK does). A
//!   request that polls the state meanwhile can find it paused before the announcement: such a
//!   poller answers as the announcement would (`Service::session_wait`).
//! - **A pause reaches nothing else.** Requests to other sandboxes are woken, check the paused set,
//!   and go on waiting; a request that subscribed after a resume is not ended by the pause before it.
//! - Idle costs nothing: no task, no timer; a subscription is a channel receiver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The pauses announced so far ([`InFlight::paused`]) and the sandboxes paused now.
#[derive(Clone)]
pub struct InFlight(Arc<Shared>);

struct Shared {
    /// The number of pauses announced; each announcement is one more.
    epoch: watch::Sender<u64>,
    /// Sandboxes paused now, each with the epoch its pause was announced at.
    paused: Mutex<HashMap<String, u64>>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight(Arc::new(Shared {
            epoch: watch::channel(0).0,
            paused: Mutex::default(),
        }))
    }
}

/// A request's subscription, taken before it reads its sandbox's state.
pub struct Subscription {
    shared: Arc<Shared>,
    epoch: watch::Receiver<u64>,
    since: u64,
}

impl InFlight {
    /// A subscription to the pauses announced from now on.
    pub fn subscribe(&self) -> Subscription {
        let mut epoch = self.0.epoch.subscribe();
        let since = *epoch.borrow_and_update();
        Subscription {
            shared: self.0.clone(),
            epoch,
            since,
        }
    }

    /// Announces that sandbox `id` is paused: every request in flight to it ends.
    pub fn paused(&self, id: &str) {
        let mut paused = self.0.paused.lock().unwrap_or_else(|p| p.into_inner());
        // The epoch moves under the map's lock, so a waiter woken by it finds the entry.
        let mut epoch = 0;
        self.0.epoch.send_modify(|e| {
            *e += 1;
            epoch = *e;
        });
        paused.insert(id.to_string(), epoch);
    }

    /// Whether sandbox `id` is paused now: its pause was announced and it has not resumed since.
    pub fn is_paused(&self, id: &str) -> bool {
        self.0
            .paused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(id)
    }

    /// Sandbox `id` runs again (or is gone): requests made from now on are not ended by its last
    /// pause.
    pub fn resumed(&self, id: &str) {
        self.0
            .paused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

impl Subscription {
    /// Resolves once sandbox `id` has been paused since this subscription was taken; never
    /// otherwise.
    pub async fn until_paused(mut self, id: String) {
        loop {
            let since = self.since;
            let hit = self
                .shared
                .paused
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .is_some_and(|at| *at > since);
            if hit {
                return;
            }
            // The sender lives as long as the service, which outlives its requests.
            if self.epoch.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn ends<F: std::future::Future<Output = ()>>(f: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_ok()
    }

    /// A pause ends the requests to its sandbox subscribed before it, and no other request.
    #[tokio::test]
    async fn a_pause_ends_what_was_in_flight_to_its_sandbox_only() {
        let in_flight = InFlight::default();
        let mut before = tokio::spawn(in_flight.subscribe().until_paused("sb-1".into()));
        let mut other = tokio::spawn(in_flight.subscribe().until_paused("sb-2".into()));
        tokio::task::yield_now().await;
        in_flight.paused("sb-1");
        assert!(
            ends(async { (&mut before).await.unwrap() }).await,
            "the request to the paused sandbox ended"
        );
        assert!(
            !ends(async { (&mut other).await.unwrap() }).await,
            "the request to another sandbox goes on"
        );
    }

    /// A request subscribed after a resume is not ended by the pause before it, and a pause
    /// announced before a request polls its wait still ends it.
    #[tokio::test]
    async fn only_pauses_after_the_subscription_count() {
        let in_flight = InFlight::default();
        in_flight.paused("sb-1");
        in_flight.resumed("sb-1");
        let after_resume = in_flight.subscribe();
        assert!(!ends(after_resume.until_paused("sb-1".into())).await);
        let unpolled = in_flight.subscribe().until_paused("sb-1".into());
        in_flight.paused("sb-1");
        assert!(ends(unpolled).await);
        // Paused before the subscription: that pause is not this request's (it read the state
        // after, and found the sandbox paused).
        assert!(!ends(in_flight.subscribe().until_paused("sb-1".into())).await);
    }
}
