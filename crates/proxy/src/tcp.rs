//! L4 forwarding: a host TCP port whose connections are spliced to one upstream.
//!
//! Guarantees: every accepted connection gets its own task that connects to the upstream (bounded by
//! [`crate::DEFAULT_CONNECT_TIMEOUT`]) and copies bytes both ways until both sides are done; a connection
//! the upstream refuses is closed. [`TcpForwarder::shutdown`] (and `Drop`) stops accepting — the listening
//! socket is closed once `shutdown` returns — and aborts every connection task.
//!
//! Assumes: a tokio runtime is running when `bind` is called and when the forwarder is dropped.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::upstream::Upstream;
use crate::DEFAULT_CONNECT_TIMEOUT;

/// Forwards connections accepted on a local address to an [`Upstream`].
#[derive(Debug)]
pub struct TcpForwarder {
    local_addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl TcpForwarder {
    /// Binds `listen` and starts forwarding to `upstream`.
    pub async fn bind(listen: SocketAddr, upstream: Upstream) -> io::Result<TcpForwarder> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let span = tracing::debug_span!("tcp_forward", %local_addr, %upstream);
        let accept = tokio::spawn(accept_loop(listener, Arc::new(upstream)).instrument(span));
        Ok(TcpForwarder { local_addr, accept })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and aborts all connections; the port is free once this returns.
    pub async fn shutdown(mut self) {
        self.accept.abort();
        // Waiting for the aborted task drops its listener and its JoinSet (which aborts the connections).
        let _ = (&mut self.accept).await;
    }
}

impl Drop for TcpForwarder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: Arc<Upstream>) {
    // Owned here so aborting this task aborts every connection with it.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    let upstream = upstream.clone();
                    let span = tracing::debug_span!("conn", %peer);
                    conns.spawn(splice(client, upstream).instrument(span));
                }
                Err(err) => {
                    // Per-connection accept errors (e.g. EMFILE, aborted handshakes) must not end the loop.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn splice(mut client: TcpStream, upstream: Arc<Upstream>) {
    let _ = client.set_nodelay(true);
    let mut server = match tokio::time::timeout(DEFAULT_CONNECT_TIMEOUT, upstream.connect()).await {
        Ok(Ok(server)) => server,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "upstream connect failed");
            return;
        }
        Err(_) => {
            tracing::debug!("upstream connect timed out");
            return;
        }
    };
    match tokio::io::copy_bidirectional(&mut client, &mut server).await {
        Ok((up, down)) => tracing::debug!(up, down, "connection closed"),
        Err(err) => tracing::debug!(error = %err, "connection failed"),
    }
}
