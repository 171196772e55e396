//! Where a sandbox port is served, and how to reach it.
//!
//! An [`Upstream`] is either a TCP address (a port inside the sandbox's network namespace, reached through
//! its veth address) or a unix socket path (the in-sandbox agent). [`Upstream::connect`] opens a byte stream
//! to it with `TCP_NODELAY` set; it applies no timeout of its own, callers bound it. [`port_is_listening`] is
//! the connect probe the daemon runs at expose time: it only proves that something accepts connections.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// Where a target is served right now.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Upstream {
    Tcp(SocketAddr),
    /// A TCP address dialed from a given local address (cluster members' forwarding, so that firewall
    /// rules between hosts' addresses hold for it).
    TcpFrom(SocketAddr, std::net::IpAddr),
    Unix(PathBuf),
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Tcp(addr) => write!(f, "tcp:{addr}"),
            Upstream::TcpFrom(addr, local) => write!(f, "tcp:{addr} from {local}"),
            Upstream::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Upstream {
    /// Opens a stream to the upstream (no timeout: wrap it in one).
    pub async fn connect(&self) -> io::Result<UpstreamStream> {
        match self {
            Upstream::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                Ok(UpstreamStream::Tcp(stream))
            }
            Upstream::TcpFrom(addr, local) => {
                let socket = match addr {
                    SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                    SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                };
                socket.bind(SocketAddr::new(*local, 0))?;
                let stream = socket.connect(*addr).await?;
                stream.set_nodelay(true)?;
                Ok(UpstreamStream::Tcp(stream))
            }
            Upstream::Unix(path) => Ok(UpstreamStream::Unix(UnixStream::connect(path).await?)),
        }
    }
}

/// Whether something accepts connections at `upstream` within `timeout`.
pub async fn port_is_listening(upstream: &Upstream, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, upstream.connect()).await,
        Ok(Ok(_))
    )
}

/// A connected stream to an [`Upstream`].
#[derive(Debug)]
pub enum UpstreamStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamStream::Tcp(s) => s.is_write_vectored(),
            UpstreamStream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
