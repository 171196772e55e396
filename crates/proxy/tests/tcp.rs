//! The L4 forwarder against a real echo server.

use std::time::Duration;

use sandboxd_proxy::{TcpForwarder, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::time::timeout;

const T: Duration = Duration::from_secs(10);

async fn echo_tcp() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn round_trip(addr: std::net::SocketAddr, msg: &[u8]) -> Vec<u8> {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(msg).await.unwrap();
    conn.shutdown().await.unwrap();
    let mut back = Vec::new();
    timeout(T, conn.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    back
}

#[tokio::test]
async fn forwards_bytes_both_ways_to_a_tcp_upstream() {
    let fwd = TcpForwarder::bind(
        "127.0.0.1:0".parse().unwrap(),
        Upstream::Tcp(echo_tcp().await),
    )
    .await
    .unwrap();
    let msg: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(round_trip(fwd.local_addr(), &msg).await, msg);
    // Several connections at once, each with its own task.
    let a = round_trip(fwd.local_addr(), b"first");
    let b = round_trip(fwd.local_addr(), b"second");
    assert_eq!(tokio::join!(a, b), (b"first".to_vec(), b"second".to_vec()));
    fwd.shutdown().await;
}

#[tokio::test]
async fn forwards_to_a_unix_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let fwd = TcpForwarder::bind("127.0.0.1:0".parse().unwrap(), Upstream::Unix(path))
        .await
        .unwrap();
    assert_eq!(
        round_trip(fwd.local_addr(), b"over unix").await,
        b"over unix"
    );
}

#[tokio::test]
async fn shutdown_stops_accepting_and_closes_open_connections() {
    let fwd = TcpForwarder::bind(
        "127.0.0.1:0".parse().unwrap(),
        Upstream::Tcp(echo_tcp().await),
    )
    .await
    .unwrap();
    let addr = fwd.local_addr();
    let mut open = TcpStream::connect(addr).await.unwrap();
    open.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    timeout(T, open.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"ping");

    fwd.shutdown().await;

    let refused = TcpStream::connect(addr).await;
    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    // The spliced connection was aborted: the client sees EOF (or a reset), not an echo.
    let _ = open.write_all(b"pong").await;
    let n = timeout(T, open.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn drop_stops_accepting() {
    let fwd = TcpForwarder::bind(
        "127.0.0.1:0".parse().unwrap(),
        Upstream::Tcp(echo_tcp().await),
    )
    .await
    .unwrap();
    let addr = fwd.local_addr();
    drop(fwd);
    // Abort is asynchronous on drop; the listener closes as soon as the runtime drops the task.
    let mut refused = false;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "still accepting after drop");
}

#[tokio::test]
async fn refused_upstream_closes_the_client_connection() {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let fwd = TcpForwarder::bind("127.0.0.1:0".parse().unwrap(), Upstream::Tcp(dead))
        .await
        .unwrap();
    let mut conn = TcpStream::connect(fwd.local_addr()).await.unwrap();
    let mut buf = [0u8; 1];
    let n = timeout(T, conn.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0);
}
