//! One network namespace per sandbox, joined to the host by a veth pair (rtnetlink, no `ip` commands).
//!
//! Slot `n` owns the point-to-point subnet `base + 4n / 30`: the host end `<prefix><n>` gets `.1`, the
//! sandbox end (`eth0`, created directly inside the sandbox's namespace) gets `.2`. The caller leases
//! slots (the daemon from its store), so two live sandboxes of one daemon never share one.
//!
//! The host is not ours alone: another daemon (or this one before its data dir was wiped) may hold
//! a slot's addresses. [`Network::slot_free`] tells, and a busy slot is never attached: two
//! interfaces with one address would make the other's sandbox unreachable. Interface names are this
//! runtime's own (the prefix comes from the daemon's id), so deleting one never deletes another
//! daemon's.
//!
//! Without egress the sandbox has no default route (with it, see [`super::egress`]): it reaches its own loopback and the host end of its
//! pair only, and the host's loopback services are out of reach (127.0.0.1 inside is the sandbox's own).
//! The daemon reaches the sandbox's ports over the pair; the agent itself is reached over a unix socket.
//!
//! Deleting a pair blocks in the kernel for 15–30 ms (the device's unregistration waits out RCU),
//! and a netlink request runs inside its `sendto`: deletions go through a connection of their own,
//! driven by a thread of its own ([`Network::detach`]), so that they stall neither a worker of the
//! caller's runtime nor the requests behind them on the shared connection (a create's slot check).

use crate::{NetAddrs, RuntimeError};
use futures::TryStreamExt;
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Point-to-point prefix of every slot.
const PREFIX: u8 = 30;

/// The host side of sandbox networking.
pub struct Network {
    handle: Handle,
    /// For deletions alone, its connection on a thread of its own (see the module docs).
    deleter: Handle,
    base: Ipv4Addr,
    slots: u32,
    prefix: String,
}

/// The sandbox's default route: through the host end of its pair, out of `eth0`.
fn default_route(addrs: &NetAddrs, eth0: u32) -> rtnetlink::packet_route::route::RouteMessage {
    RouteMessageBuilder::<Ipv4Addr>::new()
        .gateway(addrs.host)
        .output_interface(eth0)
        .build()
}

fn net_err(what: &str) -> impl FnOnce(rtnetlink::Error) -> RuntimeError + '_ {
    move |e| RuntimeError::Network(format!("{what}: {e}"))
}

impl Network {
    /// Opens a netlink connection in the host namespace; `base` must be the first address of a block of
    /// `4 * slots` addresses.
    pub fn new(base: Ipv4Addr, slots: u32, prefix: &str) -> Result<Self, RuntimeError> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| RuntimeError::Network(format!("netlink socket: {e}")))?;
        tokio::spawn(conn);
        Ok(Self {
            handle,
            deleter: connection_on_its_own_thread()?,
            base,
            slots,
            prefix: prefix.to_string(),
        })
    }

    /// The addresses of `slot`.
    pub fn addrs(&self, slot: u32) -> Result<NetAddrs, RuntimeError> {
        if slot >= self.slots {
            return Err(RuntimeError::SlotOutOfRange(slot));
        }
        let first = u32::from(self.base) + slot * 4;
        Ok(NetAddrs {
            slot,
            host: Ipv4Addr::from(first + 1),
            sandbox: Ipv4Addr::from(first + 2),
            prefix: PREFIX,
        })
    }

    /// Host-side interface name of `slot`.
    pub fn host_ifname(&self, slot: u32) -> String {
        format!("{}{slot}", self.prefix)
    }

    /// Whether `slot` may be attached: no interface has its name and no interface of the host holds
    /// its addresses (another daemon's sandbox, or one this daemon no longer knows). A bind to the
    /// host end's address succeeds exactly when the host holds it.
    pub async fn slot_free(&self, slot: u32) -> Result<bool, RuntimeError> {
        let addrs = self.addrs(slot)?;
        for address in [addrs.host, addrs.sandbox] {
            if std::net::UdpSocket::bind((address, 0)).is_ok() {
                return Ok(false);
            }
        }
        Ok(link_index(&self.handle, &self.host_ifname(slot))
            .await
            .is_err())
    }

    /// Creates the veth pair of `slot` with its inner end in the network namespace of `pid`, and
    /// configures both ends. Fails if the slot's interface already exists (a live sandbox holds it).
    /// With `egress`, the sandbox also gets a default route via the host end (NAT is the caller's job,
    /// see [`super::egress`]).
    pub async fn attach(
        &self,
        slot: u32,
        pid: i32,
        egress: bool,
    ) -> Result<NetAddrs, RuntimeError> {
        self.attach_at(slot, Path::new(&format!("/proc/{pid}/ns/net")), egress)
            .await
    }

    /// [`Network::attach`] into the network namespace `netns` names (a `/proc/<pid>/ns/net`, or a
    /// file a namespace is bound on).
    pub async fn attach_at(
        &self,
        slot: u32,
        netns: &Path,
        egress: bool,
    ) -> Result<NetAddrs, RuntimeError> {
        let addrs = self.addrs(slot)?;
        let host_if = self.host_ifname(slot);
        let ns = std::fs::File::open(netns).map_err(RuntimeError::io("open", netns))?;
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name("eth0".to_string())
            .setns_by_fd(ns.as_raw_fd())
            .build();
        let pair = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(host_if.clone())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        self.handle
            .link()
            .add(pair)
            .execute()
            .await
            .map_err(net_err("create veth pair"))?;
        let configured = async {
            let index = link_index(&self.handle, &host_if).await?;
            self.handle
                .address()
                .add(index, IpAddr::V4(addrs.host), PREFIX)
                .execute()
                .await
                .map_err(net_err("address host end"))?;
            set_up(&self.handle, index).await?;
            let inner =
                handle_in_netns(ns.try_clone().map_err(RuntimeError::io("open", netns))?).await?;
            let lo = link_index(&inner, "lo").await?;
            set_up(&inner, lo).await?;
            let eth0 = link_index(&inner, "eth0").await?;
            inner
                .address()
                .add(eth0, IpAddr::V4(addrs.sandbox), PREFIX)
                .execute()
                .await
                .map_err(net_err("address sandbox end"))?;
            set_up(&inner, eth0).await?;
            if egress {
                inner
                    .route()
                    .add(default_route(&addrs, eth0))
                    .execute()
                    .await
                    .map_err(net_err("default route"))?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = configured {
            let _ = self.detach(slot).await;
            return Err(e);
        }
        Ok(addrs)
    }

    /// Gives the sandbox on `slot`, whose network namespace is `netns`, its default route through the
    /// host end (`egress`), or takes it away; a route already as asked is fine.
    pub async fn set_default_route(
        &self,
        slot: u32,
        netns: &Path,
        egress: bool,
    ) -> Result<(), RuntimeError> {
        let addrs = self.addrs(slot)?;
        let ns = std::fs::File::open(netns).map_err(RuntimeError::io("open", netns))?;
        let inner = handle_in_netns(ns).await?;
        let eth0 = link_index(&inner, "eth0").await?;
        let route = default_route(&addrs, eth0);
        let done = if egress {
            inner.route().add(route).execute().await
        } else {
            inner.route().del(route).execute().await
        };
        match done {
            Ok(()) => Ok(()),
            Err(rtnetlink::Error::NetlinkError(e))
                if e.raw_code() == -libc::EEXIST || e.raw_code() == -libc::ESRCH =>
            {
                Ok(())
            }
            Err(e) => Err(net_err("default route")(e)),
        }
    }

    /// The slots of the host interfaces named by this runtime's prefix (`<prefix><digits>`), whoever
    /// made them: a prefix ends in letters (or is `sbh`) and a slot is digits, so another daemon's
    /// names never parse as ours.
    pub async fn interfaces(&self) -> Result<Vec<u32>, RuntimeError> {
        let mut links = self.handle.link().get().execute();
        let mut slots = Vec::new();
        while let Some(link) = links.try_next().await.map_err(net_err("list interfaces"))? {
            let name = link.attributes.iter().find_map(|a| match a {
                rtnetlink::packet_route::link::LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            });
            if let Some(slot) = name.as_deref().and_then(|n| slot_of(&self.prefix, n)) {
                slots.push(slot);
            }
        }
        slots.sort_unstable();
        Ok(slots)
    }

    /// Deletes the host end of `slot` (which deletes the pair); a missing interface is fine.
    pub async fn detach(&self, slot: u32) -> Result<(), RuntimeError> {
        let name = self.host_ifname(slot);
        let Ok(index) = link_index(&self.handle, &name).await else {
            return Ok(());
        };
        match self.deleter.link().del(index).execute().await {
            Ok(()) => Ok(()),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(()),
            Err(e) => Err(RuntimeError::Network(format!("delete {name}: {e}"))),
        }
    }
}

/// The slot interface `name` is of under `prefix`, if it is one of its names.
fn slot_of(prefix: &str, name: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A netlink connection in the host namespace driven by a thread of its own (a current-thread
/// runtime that lives until every clone of the handle is dropped), and its handle.
fn connection_on_its_own_thread() -> Result<Handle, RuntimeError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("sandboxd-netlink".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = tx.send(Err(format!("its runtime: {e}")));
                    return;
                }
            };
            // Made inside the runtime that drives it: its socket registers with that reactor.
            let made = runtime.block_on(async { rtnetlink::new_connection() });
            match made {
                Ok((conn, handle, _)) => {
                    let _ = tx.send(Ok(handle));
                    runtime.block_on(conn);
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("its socket: {e}")));
                }
            }
        })
        .map_err(|e| RuntimeError::Network(format!("netlink thread: {e}")))?;
    rx.recv()
        .map_err(|_| RuntimeError::Network("netlink thread died".into()))?
        .map_err(|e| RuntimeError::Network(format!("netlink connection for deletions: {e}")))
}

async fn link_index(handle: &Handle, name: &str) -> Result<u32, RuntimeError> {
    let handle = handle.clone();
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => Ok(link.header.index),
        Ok(None) => Err(RuntimeError::Network(format!("no interface {name}"))),
        Err(e) => Err(RuntimeError::Network(format!("find {name}: {e}"))),
    }
}

async fn set_up(handle: &Handle, index: u32) -> Result<(), RuntimeError> {
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(net_err("set link up"))
}

/// A netlink handle whose socket lives in the network namespace of `pid`.
///
/// A fresh OS thread enters the namespace and opens the socket there (a socket stays in the namespace
/// it was created in); the thread then ends, so no pooled thread is ever left inside a sandbox's
/// namespace.
async fn handle_in_netns(ns: std::fs::File) -> Result<Handle, RuntimeError> {
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let result = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| RuntimeError::Network(format!("enter sandbox netns: {e}")))
            .and_then(|()| {
                let _entered = runtime.enter();
                let (conn, handle, _) = rtnetlink::new_connection()
                    .map_err(|e| RuntimeError::Network(format!("netlink socket in netns: {e}")))?;
                runtime.spawn(conn);
                Ok(handle)
            });
        let _ = tx.send(result);
    });
    rx.await
        .map_err(|_| RuntimeError::Network("netns thread died".into()))?
}

/// The first source port of the egress gateway's upstream connections ([`super::egress`]: the
/// redirect leaves ports from here up alone).
pub const GATEWAY_SOURCE_PORTS: std::ops::RangeInclusive<u16> = 61000..=65535;

/// A TCP connection to `dst` opened from inside the network namespace `netns` names (a
/// `/proc/<pid>/ns/net`), from a source port in [`GATEWAY_SOURCE_PORTS`].
///
/// As [`handle_in_netns`]: a fresh OS thread enters the namespace and makes the socket there (a
/// socket stays in the namespace it was made in), then ends; the connect runs on the caller's
/// runtime.
pub async fn connect_in_netns(
    netns: &Path,
    dst: std::net::SocketAddr,
) -> Result<tokio::net::TcpStream, RuntimeError> {
    let ns = std::fs::File::open(netns).map_err(RuntimeError::io("open", netns))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let made = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| std::io::Error::other(format!("enter sandbox netns: {e}")))
            .and_then(|()| bound_socket(dst.is_ipv4()));
        let _ = tx.send(made);
    });
    let socket = rx
        .await
        .map_err(|_| RuntimeError::Network("netns thread died".into()))?
        .map_err(|e| RuntimeError::Network(format!("gateway socket in sandbox netns: {e}")))?;
    socket
        .connect(dst)
        .await
        .map_err(|e| RuntimeError::Network(format!("connect to {dst} from the sandbox: {e}")))
}

/// A TCP connection to `dst` opened on the host, its packets marked `mark` (`SO_MARK`): how the
/// egress gateway reaches out for a sandbox whose namespace the host cannot send from (the gVisor
/// tier's), under that sandbox's lists ([`super::egress::gateway_mark`]).
pub async fn connect_marked(
    mark: u32,
    dst: std::net::SocketAddr,
) -> Result<tokio::net::TcpStream, RuntimeError> {
    let socket = match dst {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(|e| RuntimeError::Network(format!("gateway socket: {e}")))?;
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::Mark, &mark)
        .map_err(|e| RuntimeError::Network(format!("marking the gateway's socket: {e}")))?;
    socket
        .connect(dst)
        .await
        .map_err(|e| RuntimeError::Network(format!("connect to {dst} for the sandbox: {e}")))
}

/// A TCP socket bound to a free port of [`GATEWAY_SOURCE_PORTS`], starting after the last one
/// handed out.
fn bound_socket(v4: bool) -> std::io::Result<tokio::net::TcpSocket> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let (first, last) = (*GATEWAY_SOURCE_PORTS.start(), *GATEWAY_SOURCE_PORTS.end());
    let span = u32::from(last - first) + 1;
    let start = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % span;
    let any: IpAddr = if v4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let mut last_error = None;
    for i in 0..span.min(256) {
        let port = first + ((start + i) % span) as u16;
        let socket = if v4 {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        match socket.bind(std::net::SocketAddr::new(any, port)) {
            Ok(()) => {
                NEXT.store(start + i + 1, std::sync::atomic::Ordering::Relaxed);
                return Ok(socket);
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free source port")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_get_disjoint_point_to_point_subnets() {
        let net = Network::new(Ipv4Addr::new(10, 201, 0, 0), 16384, "sbh").unwrap();
        let a = net.addrs(0).unwrap();
        let b = net.addrs(1).unwrap();
        assert_eq!(a.host, Ipv4Addr::new(10, 201, 0, 1));
        assert_eq!(a.sandbox, Ipv4Addr::new(10, 201, 0, 2));
        assert_eq!(b.host, Ipv4Addr::new(10, 201, 0, 5));
        assert_eq!(
            net.addrs(16383).unwrap().sandbox,
            Ipv4Addr::new(10, 201, 255, 254)
        );
        assert!(matches!(
            net.addrs(16384),
            Err(RuntimeError::SlotOutOfRange(_))
        ));
    }

    #[test]
    fn only_the_prefix_followed_by_digits_is_ours() {
        assert_eq!(slot_of("sbhabcd", "sbhabcd12"), Some(12));
        assert_eq!(slot_of("sbhabcd", "sbhabcd0"), Some(0));
        // Another daemon whose id starts like ours, and the id-less names.
        assert_eq!(slot_of("sbhabc", "sbhabcd12"), None);
        assert_eq!(slot_of("sbhabcd", "sbh12"), None);
        assert_eq!(slot_of("sbh", "sbhabcd12"), None);
        assert_eq!(slot_of("sbhabcd", "sbhabcd"), None);
        assert_eq!(slot_of("sbhabcd", "sbhabcd1x"), None);
        assert_eq!(slot_of("sbhabcd", "eth0"), None);
        assert_eq!(slot_of("sbhabcd", "sbhabcd99999999999"), None);
    }
}
