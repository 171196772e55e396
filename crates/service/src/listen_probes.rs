//! Whether something listens on a sandbox's port, asked once however many callers ask together.
//!
//! Exposing a port first checks that the sandbox listens on it: a TCP connection to the port. A
//! server's accept queue is small (Python's `http.server` keeps five); a hundred callers exposing
//! the same port at once would each connect, overflow it, and the kernel would drop their SYNs and
//! retry them a second later, past the probe's deadline, so some of them would be told the port is
//! not listening while it is.
//!
//! Contract:
//! - **One probe per port in flight.** Callers asking about the same (sandbox, port) while a probe
//!   is under way share its answer instead of connecting again; a caller that comes after it ended
//!   probes anew (a server may have started or stopped since).
//! - **A caller that goes away does not cancel the others' answer**: the probe runs as long as
//!   anyone awaits it. It takes the probe's entry along, though: a probe nobody awaits (its deadline
//!   running all the same) is never joined later.

use futures::future::{BoxFuture, FutureExt, Shared};
use sandboxd_proxy::{port_is_listening, Upstream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Probe = Shared<BoxFuture<'static, bool>>;

/// The listen probes in flight, by sandbox and port.
#[derive(Clone, Default)]
pub(crate) struct ListenProbes(Arc<Mutex<HashMap<(String, u16), Probe>>>);

impl ListenProbes {
    /// Whether `upstream` (port `port` of sandbox `sandbox`) accepts a connection within `timeout`,
    /// from the probe in flight for it if there is one.
    pub(crate) async fn listening(
        &self,
        sandbox: &str,
        port: u16,
        upstream: &Upstream,
        timeout: Duration,
    ) -> bool {
        let key = (sandbox.to_string(), port);
        let probe = {
            let mut probes = self.0.lock().unwrap_or_else(|p| p.into_inner());
            probes
                .entry(key.clone())
                .or_insert_with(|| {
                    let upstream = upstream.clone();
                    async move { port_is_listening(&upstream, timeout).await }
                        .boxed()
                        .shared()
                })
                .clone()
        };
        let _flight = Flight {
            probes: self,
            key,
            probe: probe.clone(),
        };
        probe.await
    }
}

/// A caller's part in a probe: its entry goes when the caller has its answer or goes away, so a
/// probe no one awaits any more (its deadline counting) is never joined later.
struct Flight<'a> {
    probes: &'a ListenProbes,
    key: (String, u16),
    probe: Probe,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut probes = self.probes.0.lock().unwrap_or_else(|p| p.into_inner());
        // Only this probe's entry goes: a newer one may stand in its place already. Callers still
        // awaiting this one keep their own handle on it.
        if probes.get(&self.key).is_some_and(|p| p.ptr_eq(&self.probe)) {
            probes.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);

    /// Invariant (listen probes): callers asking about one port together make one connection.
    #[tokio::test]
    async fn callers_asking_together_share_one_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let upstream = Upstream::Tcp(listener.local_addr().unwrap());
        let probes = ListenProbes::default();
        let answers = futures::future::join_all(
            (0..100).map(|_| probes.listening("sb-1", 8000, &upstream, T)),
        )
        .await;
        assert!(answers.into_iter().all(|a| a));
        // The connection is in the accept queue once the probe's connect succeeded.
        assert!(listener.accept().is_ok(), "the probe connected");
        let second = listener.accept().map(|_| ()).unwrap_err();
        assert_eq!(
            second.kind(),
            std::io::ErrorKind::WouldBlock,
            "one connection"
        );
        assert!(probes.0.lock().unwrap().is_empty(), "nothing stays behind");

        // A caller after the probe ended asks again.
        assert!(probes.listening("sb-1", 8000, &upstream, T).await);
        assert!(listener.accept().is_ok(), "a new probe connected");
    }

    /// A caller that goes away mid-probe takes the probe's entry with it: a later caller does not
    /// join a probe whose deadline ran while no one awaited it.
    #[tokio::test]
    async fn a_caller_gone_mid_probe_leaves_nothing_to_join() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = Upstream::Tcp(listener.local_addr().unwrap());
        let probes = ListenProbes::default();
        let mut gone = Box::pin(probes.listening("sb-1", 8000, &upstream, T));
        assert!(
            futures::poll!(gone.as_mut()).is_pending(),
            "the connect is under way"
        );
        assert_eq!(probes.0.lock().unwrap().len(), 1);
        drop(gone);
        assert!(probes.0.lock().unwrap().is_empty());
        assert!(probes.listening("sb-1", 8000, &upstream, T).await);
    }

    #[tokio::test]
    async fn ports_and_sandboxes_are_probed_apart() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = Upstream::Tcp(listener.local_addr().unwrap());
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            Upstream::Tcp(l.local_addr().unwrap())
        };
        let probes = ListenProbes::default();
        let (a, b, c) = tokio::join!(
            probes.listening("sb-1", 8000, &open, T),
            probes.listening("sb-1", 8001, &closed, T),
            probes.listening("sb-2", 8000, &closed, T),
        );
        assert_eq!((a, b, c), (true, false, false));
        drop(listener);
    }
}
