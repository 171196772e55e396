//! One sandbox's DNS forwarder (see [`super`] for its place in the sandbox's network).
//!
//! Contract:
//! - Every query received on UDP or TCP (two-byte length prefix, several queries per connection) is
//!   sent as it is to the upstreams in order, over the same transport, each given
//!   [`UPSTREAM_TIMEOUT`] and all of them [`QUERY_TIMEOUT`]; the first answer carrying the query's id
//!   is returned to the sandbox byte for byte. When no upstream answers, a parsable query gets
//!   SERVFAIL; anything else (shorter than a DNS header) gets nothing.
//! - Before the answer is released, the A records of an answer whose question (equal to the query's)
//!   matches an allowed pattern are put into the sandbox's `names_allow` set, those of a denied one
//!   into `names_deny`, each for its TTL but at least [`MIN_TTL`] (so a TTL-0 answer is still usable
//!   for the connection it was asked for) and at most [`MAX_TTL`]. Waiting for the firewall is what
//!   keeps the sandbox's first connect from racing its element. An `nft` call that fails or takes
//!   longer than [`NFT_TIMEOUT`] is logged and the answer released anyway: the name then resolves but
//!   stays unreachable, never the other way round. An element is only ever lengthened by this
//!   forwarder (a shorter answer for an address it already admitted for longer changes nothing), and
//!   is written with a quarter more than its answer needs, so the same answer again within that
//!   margin costs no `nft` call.
//! - Bounded: at most [`MAX_IN_FLIGHT`] UDP queries and [`MAX_CONNECTIONS`] TCP connections are served
//!   at once (more UDP queries are dropped, as a busy resolver does; the client retries), and a TCP
//!   connection idle for [`IDLE_TIMEOUT`] is closed. No input makes it panic.
//! - Dropping the [`Forwarder`] stops it and every query it was serving.

use super::answers::{admissible, learnt};
use super::NamePattern;
use crate::namespace::egress::{self, Learnt, NameSet};
use crate::RuntimeError;
use hickory_proto::op::{Message, ResponseCode};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;
use tokio::time::timeout;

pub use super::answers::{MAX_TTL, MIN_TTL};
/// How long one upstream may take to answer.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one query may take over all upstreams (below the 5 s a glibc client waits).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the firewall may take to admit an answer's addresses.
pub const NFT_TIMEOUT: Duration = Duration::from_secs(2);
/// UDP queries served at once.
pub const MAX_IN_FLIGHT: usize = 64;
/// TCP connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a TCP connection may sit without a query.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest DNS message (TCP's length prefix is 16 bits).
const MAX_MESSAGE: usize = 65_535;
/// Learnt lifetimes remembered before expired ones are pruned.
const MAX_KNOWN: usize = 4096;

/// What one forwarder serves.
#[derive(Debug, Clone)]
pub struct ForwarderConfig {
    /// Where it listens, UDP and TCP (the host end of the sandbox's pair, port 53).
    pub listen: SocketAddr,
    /// The sandbox's address: its sets are named after it.
    pub sandbox: Ipv4Addr,
    /// Allowed names.
    pub allow: Vec<NamePattern>,
    /// Denied names.
    pub deny: Vec<NamePattern>,
    /// The resolvers it asks, in order.
    pub upstreams: Vec<SocketAddr>,
    /// Addresses no answer admits besides the always excluded ones (see [`super`]): the runtime's
    /// sandbox subnet, as a range of `u32` addresses.
    pub excluded: std::ops::Range<u32>,
}

/// A running forwarder; dropping it stops it.
pub struct Forwarder {
    task: tokio::task::JoinHandle<()>,
    udp: SocketAddr,
    tcp: SocketAddr,
    shared: Arc<Shared>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Forwarder {
    /// Binds UDP and TCP at `config.listen` (a port 0 picks one free port for both) and starts
    /// serving. Must be called inside a tokio runtime.
    pub async fn start(config: ForwarderConfig) -> Result<Forwarder, RuntimeError> {
        let bind_err = |e: std::io::Error| {
            RuntimeError::Network(format!("DNS forwarder on {}: {e}", config.listen))
        };
        let (socket, listener) = bind_both(config.listen).await.map_err(bind_err)?;
        let udp = socket.local_addr().map_err(bind_err)?;
        let tcp = listener.local_addr().map_err(bind_err)?;
        let shared = Arc::new(Shared {
            names: std::sync::RwLock::new(Names {
                allow: config.allow.clone(),
                deny: config.deny.clone(),
            }),
            config,
            known: Mutex::new(HashMap::new()),
        });
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            tokio::join!(
                serve_udp(Arc::new(socket), serving.clone()),
                serve_tcp(listener, serving)
            );
        });
        Ok(Forwarder {
            task,
            udp,
            tcp,
            shared,
        })
    }

    /// Replaces the names it admits and denies from the next answer on, and forgets what it
    /// admitted before (the sets it wrote are flushed with the rules that replace them, so the same
    /// answer again must be written again).
    pub fn set_names(&self, allow: Vec<NamePattern>, deny: Vec<NamePattern>) {
        *self.shared.names.write().unwrap_or_else(|p| p.into_inner()) = Names { allow, deny };
        self.shared
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The UDP address it listens on.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    /// The TCP address it listens on.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
    }
}

/// A UDP socket and a TCP listener on one address. With port 0, the TCP port is the one the UDP
/// socket was given, which something else may hold already: then both are bound again, a few times.
async fn bind_both(listen: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    const ATTEMPTS: usize = 8;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let socket = UdpSocket::bind(listen).await?;
        match TcpListener::bind(socket.local_addr()?).await {
            Ok(listener) => return Ok((socket, listener)),
            Err(e)
                if listen.port() == 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && attempt < ATTEMPTS => {}
            Err(e) => return Err(e),
        }
    }
}

struct Shared {
    /// Its configuration; the names in it are those it started with ([`Shared::names`] holds
    /// the current ones).
    config: ForwarderConfig,
    names: std::sync::RwLock<Names>,
    /// When each element this forwarder put into a set expires.
    known: Mutex<HashMap<(NameSet, Ipv4Addr), Instant>>,
}

/// The names whose answers it admits and denies.
struct Names {
    allow: Vec<NamePattern>,
    deny: Vec<NamePattern>,
}

#[derive(Clone, Copy)]
enum Transport {
    Udp,
    Tcp,
}

async fn serve_udp(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut in_flight = JoinSet::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        while in_flight.try_join_next().is_some() {}
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                tracing::debug!(error = %e, "DNS forwarder: receive failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if in_flight.len() >= MAX_IN_FLIGHT {
            continue;
        }
        let (query, socket, shared) = (buf[..n].to_vec(), socket.clone(), shared.clone());
        in_flight.spawn(async move {
            if let Some(answer) = resolve(&query, Transport::Udp, &shared).await {
                let _ = socket.send_to(&answer, peer).await;
            }
        });
    }
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "DNS forwarder: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if connections.len() < MAX_CONNECTIONS {
            connections.spawn(serve_connection(stream, shared.clone()));
        }
    }
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    loop {
        let Some(query) = timeout(IDLE_TIMEOUT, read_framed(&mut stream))
            .await
            .ok()
            .flatten()
        else {
            return;
        };
        let Some(answer) = resolve(&query, Transport::Tcp, &shared).await else {
            return;
        };
        if write_framed(&mut stream, &answer).await.is_none() {
            return;
        }
    }
}

/// One length-prefixed message, or `None` at its end or on an error.
async fn read_framed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let len = stream.read_u16().await.ok()?;
    let mut message = vec![0u8; usize::from(len)];
    stream.read_exact(&mut message).await.ok()?;
    Some(message)
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) -> Option<()> {
    let len = u16::try_from(message.len()).ok()?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await.ok()
}

/// The answer to `query` (see the module docs), its addresses admitted first.
async fn resolve(query: &[u8], transport: Transport, shared: &Shared) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let id = [query[0], query[1]];
    let asked = Message::from_vec(query).ok();
    let upstreams = &shared.config.upstreams;
    let answered = timeout(QUERY_TIMEOUT, async {
        for upstream in upstreams {
            let exchange = async {
                match transport {
                    Transport::Udp => exchange_udp(query, id, *upstream).await,
                    Transport::Tcp => exchange_tcp(query, *upstream).await,
                }
            };
            match timeout(UPSTREAM_TIMEOUT, exchange).await {
                Ok(Some(answer)) if answer.get(..2) == Some(&id[..]) => return Some(answer),
                _ => tracing::debug!(%upstream, "DNS upstream did not answer"),
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    match answered {
        Some(answer) => {
            if let Some(asked) = &asked {
                shared.admit(asked, &answer).await;
            }
            Some(answer)
        }
        None => asked.and_then(|asked| servfail(&asked)),
    }
}

async fn exchange_udp(query: &[u8], id: [u8; 2], upstream: SocketAddr) -> Option<Vec<u8>> {
    let local: SocketAddr = match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await.ok()?;
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let n = socket.recv(&mut buf).await.ok()?;
        if buf.get(..2) == Some(&id[..]) {
            buf.truncate(n);
            return Some(buf);
        }
    }
}

async fn exchange_tcp(query: &[u8], upstream: SocketAddr) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(upstream).await.ok()?;
    write_framed(&mut stream, query).await?;
    read_framed(&mut stream).await
}

/// A SERVFAIL for `asked`, echoing its id and question.
fn servfail(asked: &Message) -> Option<Vec<u8>> {
    let mut answer = Message::error_msg(
        asked.metadata.id,
        asked.metadata.op_code,
        ResponseCode::ServFail,
    );
    answer.metadata.recursion_desired = asked.metadata.recursion_desired;
    answer.metadata.recursion_available = true;
    answer.add_queries(asked.queries.iter().cloned());
    answer.to_vec().ok()
}

/// The lifetime an element is written with for an answer that needs `seconds`: a quarter more, so
/// the same answer again within that margin finds its element long enough and costs no `nft` call.
fn with_headroom(seconds: u32) -> u32 {
    seconds.saturating_add(seconds / 4)
}

impl Shared {
    /// Puts the addresses `answer` teaches into the sandbox's sets (see the module docs).
    async fn admit(&self, asked: &Message, answer: &[u8]) {
        let Ok(answer) = Message::from_vec(answer) else {
            return;
        };
        if answer.queries != asked.queries {
            return;
        }
        let config = &self.config;
        let admissible = |a: Ipv4Addr| admissible(a, &config.excluded);
        let now = Instant::now();
        let found = {
            let names = self.names.read().unwrap_or_else(|p| p.into_inner());
            learnt(&answer, &names.allow, &names.deny, admissible)
        };
        let learnt: Vec<Learnt> = found
            .into_iter()
            .filter(|l| self.lengthens(l, now))
            .map(|l| Learnt {
                seconds: with_headroom(l.seconds),
                ..l
            })
            .collect();
        if learnt.is_empty() {
            return;
        }
        match timeout(NFT_TIMEOUT, egress::learn(config.sandbox, &learnt)).await {
            Ok(Ok(())) => self.remember(&learnt, now),
            Ok(Err(e)) => {
                tracing::warn!(sandbox = %config.sandbox, error = %e, "admitting resolved addresses failed")
            }
            Err(_) => {
                tracing::warn!(sandbox = %config.sandbox, "admitting resolved addresses timed out")
            }
        }
    }

    fn lengthens(&self, l: &Learnt, now: Instant) -> bool {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let until = now + Duration::from_secs(u64::from(l.seconds));
        known
            .get(&(l.set, l.address))
            .is_none_or(|known| *known < until)
    }

    fn remember(&self, learnt: &[Learnt], now: Instant) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= MAX_KNOWN {
            known.retain(|_, until| *until > now);
        }
        for l in learnt {
            let until = now + Duration::from_secs(u64::from(l.seconds));
            let entry = known.entry((l.set, l.address)).or_insert(until);
            *entry = (*entry).max(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::dns::test_messages::*;
    use hickory_proto::op::MessageType;

    /// A DNS server test double on loopback: answers every query (UDP and TCP) with `allowed.test`
    /// pointing at 192.0.2.1, with one extra byte-exact marker (its own id echo).
    async fn upstream_double() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let listener = TcpListener::bind(addr).await.unwrap();
        let reply = |query: &[u8]| {
            let asked = Message::from_vec(query).unwrap();
            let mut m = answer("other.test.", vec![a("other.test.", 60, [192, 0, 2, 1])]);
            m.metadata.id = asked.metadata.id;
            m.queries = asked.queries;
            m.to_vec().unwrap()
        };
        let task = tokio::spawn(async move {
            let udp = async {
                let mut buf = vec![0u8; 512];
                while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                    let _ = socket.send_to(&reply(&buf[..n]), peer).await;
                }
            };
            let tcp = async {
                while let Ok((mut stream, _)) = listener.accept().await {
                    if let Some(q) = read_framed(&mut stream).await {
                        let _ = write_framed(&mut stream, &reply(&q)).await;
                    }
                }
            };
            tokio::join!(udp, tcp);
        });
        (addr, task)
    }

    /// A port asked for by number is that port or an error: only port 0 is bound again elsewhere.
    #[tokio::test]
    async fn a_named_port_held_over_tcp_is_an_error_and_port_zero_finds_a_free_pair() {
        let held = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = bind_both(held.local_addr().unwrap()).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        let (udp, tcp) = bind_both("127.0.0.1:0".parse().unwrap()).await.unwrap();
        assert_eq!(udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    }

    async fn forwarder(upstreams: Vec<SocketAddr>) -> Forwarder {
        Forwarder::start(ForwarderConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            sandbox: Ipv4Addr::new(10, 201, 0, 2),
            // Never matched below: no firewall is touched.
            allow: patterns(&["allowed.test"]),
            deny: Vec::new(),
            upstreams,
            excluded: SUBNET,
        })
        .await
        .unwrap()
    }

    async fn ask_udp(at: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(query, at).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = timeout(Duration::from_secs(6), socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some(buf[..n].to_vec())
    }

    #[tokio::test]
    async fn answers_come_back_unchanged_over_udp_and_tcp() {
        let (upstream, _double) = upstream_double().await;
        // A dead upstream first: the next one answers.
        let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let fw = forwarder(vec![dead_addr, upstream]).await;
        let q = query(4242, "other.test.").to_vec().unwrap();
        let direct = ask_udp(upstream, &q).await.unwrap();
        assert_eq!(ask_udp(fw.udp_addr(), &q).await.unwrap(), direct);
        let mut stream = TcpStream::connect(fw.tcp_addr()).await.unwrap();
        for _ in 0..2 {
            write_framed(&mut stream, &q).await.unwrap();
            assert_eq!(read_framed(&mut stream).await.unwrap(), direct);
        }
    }

    #[tokio::test]
    async fn without_an_upstream_a_query_gets_servfail_and_garbage_nothing() {
        let fw = forwarder(Vec::new()).await;
        let q = query(99, "other.test.");
        let got = Message::from_vec(&ask_udp(fw.udp_addr(), &q.to_vec().unwrap()).await.unwrap())
            .unwrap();
        assert_eq!(got.metadata.id, 99);
        assert_eq!(got.metadata.message_type, MessageType::Response);
        assert_eq!(got.metadata.response_code, ResponseCode::ServFail);
        assert_eq!(got.queries, q.queries);
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(b"xyz", fw.udp_addr()).await.unwrap();
        let mut buf = [0u8; 64];
        assert!(timeout(Duration::from_millis(300), socket.recv(&mut buf))
            .await
            .is_err());
    }

    #[test]
    fn an_element_gets_a_quarter_more_than_its_answer_needs() {
        assert_eq!(with_headroom(MIN_TTL), 37);
        assert_eq!(with_headroom(400), 500);
        assert!(with_headroom(u32::MAX) == u32::MAX);
    }

    #[tokio::test]
    async fn a_dropped_forwarder_stops_listening() {
        let fw = forwarder(Vec::new()).await;
        let addr = fw.udp_addr();
        drop(fw);
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Its port is free again.
        UdpSocket::bind(addr).await.unwrap();
    }
}
