//! [`Hub`]: the fan-out of one process's events to the streams attached to it (its `Start` stream and
//! any `Connect` streams), shaped like envd's multiplexed channels.
//!
//! Guarantees:
//! - Every subscriber sees the events published after it subscribed, in publish order per source.
//! - Publishing waits until every live subscriber has queued the event (at most [`QUEUE`] per
//!   subscriber), so a slow client slows the process down instead of growing the agent's memory.
//! - A subscriber whose stream was dropped (client gone) is forgotten; the process carries on. With
//!   no subscriber at all, output is discarded.
//! - [`Hub::close`] is final: nobody can subscribe afterwards, and it hands back the subscribers so the
//!   supervisor can send each its `end` as the last event.

use futures::future::join_all;
use sandboxd_envd::process::ProcessEvent;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Events buffered per subscriber between the process and its client.
pub const QUEUE: usize = 8;

/// See the module docs.
#[derive(Default)]
pub struct Hub {
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    subscribers: Vec<mpsc::Sender<ProcessEvent>>,
    closed: bool,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        // Nothing is left half-updated under this lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new subscriber, or `None` once the process has ended.
    pub fn subscribe(&self) -> Option<mpsc::Receiver<ProcessEvent>> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        state.subscribers.push(tx);
        Some(rx)
    }

    /// Hands `event` to every live subscriber, waiting for room in each one's queue.
    pub async fn publish(&self, event: ProcessEvent) {
        let subscribers: Vec<_> = {
            let mut state = self.lock();
            state.subscribers.retain(|s| !s.is_closed());
            state.subscribers.clone()
        };
        match subscribers.as_slice() {
            [] => {}
            [only] => {
                let _ = only.send(event).await;
            }
            many => {
                join_all(many.iter().map(|s| s.send(event.clone()))).await;
            }
        }
    }

    /// Refuses new subscribers from now on and returns the current ones.
    pub fn close(&self) -> Vec<mpsc::Sender<ProcessEvent>> {
        let mut state = self.lock();
        state.closed = true;
        std::mem::take(&mut state.subscribers)
    }
}

/// Sends `event` as the last event to each of `subscribers` (those still listening).
pub async fn finish(subscribers: Vec<mpsc::Sender<ProcessEvent>>, event: ProcessEvent) {
    join_all(subscribers.iter().map(|s| s.send(event.clone()))).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sandboxd_envd::process::{DataEvent, EndEvent};

    fn data(s: &'static str) -> ProcessEvent {
        ProcessEvent::Data(DataEvent::Stdout(Bytes::from_static(s.as_bytes())))
    }

    #[tokio::test]
    async fn subscribers_see_later_events_and_dropped_ones_are_forgotten() {
        let hub = Hub::default();
        hub.publish(data("nobody hears this")).await;
        let mut first = hub.subscribe().unwrap();
        hub.publish(data("a")).await;
        let mut second = hub.subscribe().unwrap();
        hub.publish(data("b")).await;
        assert_eq!(first.recv().await, Some(data("a")));
        assert_eq!(first.recv().await, Some(data("b")));
        assert_eq!(second.recv().await, Some(data("b")));
        drop(first);
        // A full queue of a dropped subscriber must not block publishing.
        for _ in 0..(QUEUE * 2) {
            hub.publish(data("c")).await;
            second.recv().await;
        }
        let end = ProcessEvent::End(EndEvent::default());
        finish(hub.close(), end.clone()).await;
        assert_eq!(second.recv().await, Some(end));
        assert_eq!(second.recv().await, None);
        assert!(hub.subscribe().is_none());
    }

    #[tokio::test]
    async fn a_slow_subscriber_backpressures_publishing() {
        let hub = Hub::default();
        let mut rx = hub.subscribe().unwrap();
        for _ in 0..QUEUE {
            hub.publish(data("x")).await;
        }
        let blocked = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            hub.publish(data("y")),
        );
        assert!(blocked.await.is_err(), "publish did not wait for room");
        rx.recv().await;
        hub.publish(data("z")).await;
    }
}
