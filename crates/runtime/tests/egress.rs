//! Egress: off unless asked for; when on, NAT is in place before the sandbox's first instruction, and
//! sandboxes still cannot reach one another nor the host's own services. Allow and deny lists: a denied
//! destination is unreachable (forwarded or on the host itself), an allowed one reachable even without
//! egress (a host address too), allow wins over deny, a re-applied static setup keeps every sandbox's
//! lists, and destroy leaves no rule behind. Domain names: a name's addresses are reachable exactly
//! once the sandbox's own DNS forwarder resolved them (a test double serves the names), a denied
//! name's addresses are not, and a restarted runtime restarts the forwarders of running sandboxes.
//!
//! "Outside" is a network namespace each test makes, joined to the host by its own veth pair: a server
//! there sees a masqueraded source address exactly when the sandbox's traffic was NATed by the host.
//! The host end of that pair (`198.18.<n>.1`) is one of the host's own addresses: a server bound there
//! is reached through the host's input path, not forwarded.

mod common;

use common::dns_double::DnsDouble;
use common::listed::{nft_table, Listed};
use common::outside::{answer_with_peer, client_script, outside_index, Forwarding, Outside};
use common::{connect_within, fixture, fixture_with, spec, text, Fixture};
use sandboxd_runtime::namespace::{egress, NamespaceRuntime};
use sandboxd_runtime::{EgressLists, NamePattern, ResourceLimits, Runtime};
use sandboxd_test_support::{require_root, test_slot};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

#[tokio::test]
async fn egress_is_natted_when_asked_for_and_absent_otherwise() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(0));
    let _forwarding = Forwarding::on();
    let fx = fixture().await;

    // Without egress: no route off the sandbox's own /30.
    let closed = fx.sandbox().await;
    let mut server = outside.serve_once(8080);
    let out = closed.sh(&client_script(&outside.server(), 8080)).await;
    assert!(
        text(&out.stdout).starts_with("unreachable"),
        "{}",
        text(&out.stdout)
    );

    // With egress: the first command already leaves, masqueraded as the host's address.
    let open = Listed::start(&fx, true, &[], &[]).await;
    assert_eq!(open.reach(&outside.server(), 8080).await, outside.host());
    let _ = server.wait();

    // Egress does not open the way to another sandbox.
    let target = closed.info.net.sandbox;
    closed
        .sh("nohup python3 -m http.server 8081 >/dev/null 2>&1 &")
        .await;
    // The host reaches it (so it listens), the other sandbox must not.
    connect_within((target, 8081).into(), Duration::from_secs(120)).await;
    let across = open.reach(&target.to_string(), 8081).await;
    assert!(across.starts_with("unreachable"), "{across}");

    // The sandbox's address left the egress set with it.
    open.destroy(&fx).await;
    fx.destroy(&closed).await;
}

#[tokio::test]
async fn a_denied_destination_is_unreachable_while_plain_egress_reaches_it() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(1));
    let _forwarding = Forwarding::on();
    let fx = fixture().await;
    let net = format!("{}/30", outside.host());
    let denied = Listed::start(&fx, true, &[], &[&net]).await;
    let plain = Listed::start(&fx, true, &[], &[]).await;
    outside.serve_on_host(8091);

    let check = |when: &'static str| {
        let (denied, plain, outside) = (&denied, &plain, &outside);
        async move {
            // Forwarded: the server outside the host.
            let mut server = outside.serve_once(8090);
            let blocked = denied.reach(&outside.server(), 8090).await;
            assert!(blocked.starts_with("unreachable"), "{when}: {blocked}");
            assert_eq!(
                plain.reach(&outside.server(), 8090).await,
                outside.host(),
                "{when}"
            );
            let _ = server.wait();
            // The host's own address in the denied block: its input path is closed too.
            let blocked = denied.reach(&outside.host(), 8091).await;
            assert!(blocked.starts_with("unreachable"), "{when}: {blocked}");
        }
    };
    check("first setup").await;

    // A new daemon process re-applies the static rules: the lists must survive it.
    egress::install_table().await.unwrap();
    let chain = egress::chain_name(denied.info.net.sandbox);
    assert!(nft_table().contains(&chain));
    check("after the static rules were re-applied").await;

    denied.destroy(&fx).await;
    plain.destroy(&fx).await;
}

#[tokio::test]
async fn an_allow_list_opens_exactly_its_destinations_without_egress() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(2));
    let _forwarding = Forwarding::on();
    let fx = fixture().await;
    let allowed = Listed::start(&fx, false, &[&outside.server()], &[]).await;
    outside.serve_on_host(8093);

    let mut server = outside.serve_once(8092);
    assert_eq!(allowed.reach(&outside.server(), 8092).await, outside.host());
    let _ = server.wait();
    // Not on the list: the host's other addresses stay as unreachable as without egress.
    let blocked = allowed.reach(&outside.host(), 8093).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");

    allowed.destroy(&fx).await;
}

#[tokio::test]
async fn an_allowed_destination_wins_over_a_denied_one() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(3));
    let _forwarding = Forwarding::on();
    let fx = fixture().await;
    let both = Listed::start(
        &fx,
        true,
        &[&outside.server()],
        &["0.0.0.0/0", &outside.server()],
    )
    .await;
    outside.serve_on_host(8095);

    let mut server = outside.serve_once(8094);
    assert_eq!(both.reach(&outside.server(), 8094).await, outside.host());
    let _ = server.wait();
    // Everything else is denied: other destinations outside, and the host's own addresses.
    let mut server = outside.serve_once_on(&outside.second(), 8096);
    let blocked = both.reach(&outside.second(), 8096).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");
    // (It is there: a sandbox with plain egress reaches it.)
    let plain = Listed::start(&fx, true, &[], &[]).await;
    assert_eq!(plain.reach(&outside.second(), 8096).await, outside.host());
    let _ = server.wait();
    let blocked = both.reach(&outside.host(), 8095).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");

    both.destroy(&fx).await;
    plain.destroy(&fx).await;
}

/// Invariant: a sandbox opens no connection to the host itself — not to the host end of its own pair,
/// not to the host's other addresses, with or without egress — unless its allow list names the
/// address. With it, the host sees the sandbox's own address (its input path, no NAT).
#[tokio::test]
async fn the_host_is_off_limits_unless_an_allow_list_names_it() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(4));
    let _forwarding = Forwarding::on();
    let fx = fixture().await;
    let host = format!("{}/32", outside.host());
    let closed = Listed::start(&fx, false, &[], &[]).await;
    let plain = Listed::start(&fx, true, &[], &[]).await;
    let opened = Listed::start(&fx, true, &[&host], &[]).await;
    let only_host = Listed::start(&fx, false, &[&host], &[]).await;
    outside.serve_on_host(8097);
    // Every address of the host, the host ends of the sandboxes' pairs included.
    let on_pairs = TcpListener::bind("0.0.0.0:0").unwrap();
    let pair_port = on_pairs.local_addr().unwrap().port();
    answer_with_peer(on_pairs);
    let mut control = std::net::TcpStream::connect(("127.0.0.1", pair_port)).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut control, &mut answer).unwrap();
    assert_eq!(answer, "127.0.0.1", "control: the host's service answers");

    for (name, sb) in [("closed", &closed), ("plain egress", &plain)] {
        let blocked = sb.reach(&outside.host(), 8097).await;
        assert!(blocked.starts_with("unreachable"), "{name}: {blocked}");
    }
    for (name, sb) in [
        ("closed", &closed),
        ("plain egress", &plain),
        ("allowed another host address", &opened),
    ] {
        let own_pair = sb.info.net.host.to_string();
        let blocked = sb.reach(&own_pair, pair_port).await;
        assert!(blocked.starts_with("unreachable"), "{name}: {blocked}");
    }
    for sb in [&opened, &only_host] {
        let seen = sb.reach(&outside.host(), 8097).await;
        assert_eq!(seen, sb.info.net.sandbox.to_string());
    }

    for sb in [closed, plain, opened, only_host] {
        sb.destroy(&fx).await;
    }
}

fn names(list: &[&str]) -> Vec<NamePattern> {
    list.iter().map(|n| n.parse().unwrap()).collect()
}

fn ip(address: &str) -> Ipv4Addr {
    address.parse().unwrap()
}

/// Prints `<name> <address>` (or `<name> unresolved …`) per name, resolved by the sandbox's libc.
fn resolve_script(names: &[&str]) -> String {
    let list: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    format!(
        "python3 -c \"import socket\nfor n in [{}]:\n  try: print(n, socket.gethostbyname(n))\n\
         \x20 except Exception as e: print(n, 'unresolved', type(e).__name__)\"",
        list.join(",")
    )
}

/// Asks `nameserver` over TCP for the A record of `name`; prints the answer's last address.
fn tcp_query_script(nameserver: &str, name: &str) -> String {
    format!(
        "python3 -c \"import socket,struct\n\
         m=struct.pack('>6H',4660,256,1,0,0,0)+b''.join(bytes([len(l)])+l.encode() for l in '{name}'.split('.'))+bytes(1)+struct.pack('>2H',1,1)\n\
         s=socket.create_connection(('{nameserver}',53),timeout=3)\n\
         s.sendall(struct.pack('>H',len(m))+m)\n\
         n=struct.unpack('>H',s.recv(2))[0]\nr=b''\n\
         while len(r)<n: r+=s.recv(n-len(r))\n\
         print(socket.inet_ntoa(r[-4:]))\""
    )
}

fn nft_set(name: &str) -> String {
    let out = std::process::Command::new("nft")
        .args(["list", "set", "ip", egress::TABLE, name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The test double's table: `allowed.test` and `wild.test` at the outside server, `other.test` and
/// every name below `wild.test` at the second outside address.
fn serve_names(outside: &Outside) -> DnsDouble {
    let (server, second) = (ip(&outside.server()), ip(&outside.second()));
    DnsDouble::start(
        &outside.name,
        server,
        &[
            ("allowed.test", server),
            ("other.test", second),
            ("wild.test", server),
            ("*.wild.test", second),
        ],
        0,
    )
}

/// Invariant: a name in an allow list admits exactly the addresses the sandbox's forwarder resolved
/// for it, and only from the answer on; other names resolve but stay unreachable; `*.suffix` admits
/// the names below the suffix, not the suffix itself; a denied name's addresses are closed to a
/// sandbox with egress; destroy leaves neither chain nor set behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_names_open_exactly_the_addresses_resolved_for_them() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(5));
    let _forwarding = Forwarding::on();
    let dns = serve_names(&outside);
    let (server, second) = (outside.server(), outside.second());
    let upstream = SocketAddr::new(ip(&server).into(), 53);
    let fx = fixture_with(|c| c.dns_upstreams = vec![upstream]).await;
    let named = Listed::start_with(&fx, |s| s.egress_allow_names = names(&["allowed.test"])).await;
    assert_eq!(
        named.sh("cat /etc/resolv.conf").await,
        format!("nameserver {}", named.info.net.host)
    );

    // Not resolved yet: the allowed name's address is as closed as any other.
    let mut first = outside.serve_once(8100);
    let before = named.reach(&server, 8100).await;
    assert!(before.starts_with("unreachable"), "{before}");
    // Both names resolve, through the configured upstream.
    assert_eq!(
        named
            .sh(&resolve_script(&["allowed.test", "other.test"]))
            .await,
        format!("allowed.test {server}\nother.test {second}")
    );
    assert!(
        dns.answered() >= 2,
        "the double answered {}",
        dns.answered()
    );
    // The resolved address is reachable from its answer on (resolved and connected at once).
    assert_eq!(named.reach("allowed.test", 8100).await, outside.host());
    let _ = first.wait();
    let set = nft_set(&egress::name_set(
        named.info.net.sandbox,
        egress::NameSet::Allow,
    ));
    assert!(set.contains(&server) && !set.contains(&second), "{set}");
    // The other name resolved too, but is not on the list.
    let mut other = outside.serve_once_on(&second, 8101);
    let blocked = named.reach("other.test", 8101).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");
    // (It is there: plain egress reaches it.)
    let plain = Listed::start(&fx, true, &[], &[]).await;
    assert_eq!(plain.reach(&second, 8101).await, outside.host());
    let _ = other.wait();

    // `*.wild.test`: the names below, not the apex.
    let wild = Listed::start_with(&fx, |s| s.egress_allow_names = names(&["*.wild.test"])).await;
    let mut apex = outside.serve_once(8102);
    let blocked = wild.reach("wild.test", 8102).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");
    let _ = apex.kill();
    let _ = apex.wait();
    let mut below = outside.serve_once_on(&second, 8103);
    assert_eq!(wild.reach("api.wild.test", 8103).await, outside.host());
    let _ = below.wait();
    // Over TCP the forwarder answers as well.
    let host_end = wild.info.net.host.to_string();
    assert_eq!(
        wild.sh(&tcp_query_script(&host_end, "deep.api.wild.test"))
            .await,
        second
    );

    // A denied name: reachable by the egress default until its answer is seen, then closed.
    let denied = Listed::start_with(&fx, |s| {
        s.egress = true;
        s.egress_deny_names = names(&["other.test"]);
    })
    .await;
    let mut open = outside.serve_once_on(&second, 8104);
    assert_eq!(denied.reach(&second, 8104).await, outside.host());
    let _ = open.wait();
    let mut closed = outside.serve_once_on(&second, 8105);
    let blocked = denied.reach("other.test", 8105).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");
    assert_eq!(plain.reach(&second, 8105).await, outside.host());
    let _ = closed.wait();

    for sb in [named, plain, wild, denied] {
        sb.destroy(&fx).await;
    }
}

/// A sandbox outlives the process that started its forwarder: a runtime starting up on the same
/// state starts it again, and the sandbox's names resolve and admit as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_runtime_restarts_the_forwarders_of_running_sandboxes() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(6));
    let _forwarding = Forwarding::on();
    let _dns = serve_names(&outside);
    let server = outside.server();
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-dns-")
        .tempdir()
        .unwrap();
    let mut config = common::config(dir.path());
    config.dns_upstreams = vec![SocketAddr::new(ip(&server).into(), 53)];
    let slot = test_slot();
    let (first_config, n) = (config.clone(), slot.slot);
    // The first runtime lives on a thread of its own: its end takes its tasks (the forwarder) with
    // it, as a daemon's death does.
    let info = std::thread::spawn(move || {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio.block_on(async move {
            let rt = NamespaceRuntime::new(first_config).await.unwrap();
            let mut s = spec(n, ResourceLimits::default());
            s.egress_allow_names = names(&["allowed.test"]);
            rt.create(&s).await.unwrap();
            let info = rt.start(&s.id).await.unwrap();
            assert!(rt.has_forwarder(&s.id));
            info
        })
    })
    .join()
    .unwrap();
    let sb = Listed::of(info, slot);
    let id = sb.info.id().to_string();
    let gone = sb.sh(&resolve_script(&["allowed.test"])).await;
    assert!(gone.starts_with("allowed.test unresolved"), "{gone}");

    let fx = Fixture {
        rt: NamespaceRuntime::new(config).await.unwrap(),
        dir,
    };
    assert!(fx.rt.has_forwarder(&id));
    assert_eq!(
        sb.sh(&resolve_script(&["allowed.test"])).await,
        format!("allowed.test {server}")
    );
    let mut listening = outside.serve_once(8110);
    assert_eq!(sb.reach("allowed.test", 8110).await, outside.host());
    let _ = listening.wait();
    sb.destroy(&fx).await;
    assert!(!fx.rt.has_forwarder(&id));
}

/// Invariant: a running sandbox's lists change at once ([`Runtime::set_egress_lists`]): an address
/// added to its allow list is reachable at its next connection, and closed again once the list no
/// longer names it; names added later give it its own forwarder as resolver, and taking them away
/// gives it the host's resolver back; the change is what a restarted runtime reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sandboxs_lists_change_at_once() {
    if !require_root() {
        return;
    }
    let outside = Outside::new(outside_index(7));
    let _forwarding = Forwarding::on();
    let dns = serve_names(&outside);
    let server = outside.server();
    let upstream = SocketAddr::new(ip(&server).into(), 53);
    let fx = fixture_with(|c| c.dns_upstreams = vec![upstream]).await;
    let sb = Listed::start(&fx, false, &[], &[]).await;
    let id = sb.info.id().to_string();
    let mut first = outside.serve_once(8110);
    let closed = sb.reach(&server, 8110).await;
    assert!(closed.starts_with("unreachable"), "{closed}");

    // An address allowed: reachable without egress, from the next connection on.
    let only_server = EgressLists {
        allow: vec![format!("{server}/32").parse().unwrap()],
        ..Default::default()
    };
    fx.rt
        .set_egress_lists(&id, only_server.clone())
        .await
        .unwrap();
    assert_eq!(sb.reach(&server, 8110).await, outside.host());
    let _ = first.wait();
    let spec = fx.rt.inspect(&id).await.unwrap().unwrap().spec;
    assert_eq!(spec.egress_allow, only_server.allow, "the record follows");

    // Names added: the sandbox's own forwarder becomes its resolver, and admits what it resolves.
    let with_names = EgressLists {
        allow_names: names(&["allowed.test"]),
        ..Default::default()
    };
    fx.rt.set_egress_lists(&id, with_names).await.unwrap();
    assert_eq!(
        sb.sh("cat /etc/resolv.conf").await,
        format!("nameserver {}", sb.info.net.host)
    );
    let mut named = outside.serve_once(8111);
    assert_eq!(sb.reach("allowed.test", 8111).await, outside.host());
    let _ = named.wait();
    assert!(dns.answered() >= 1);

    // Everything taken away: closed again, and the host's resolver is back.
    fx.rt
        .set_egress_lists(&id, EgressLists::default())
        .await
        .unwrap();
    let mut none = outside.serve_once(8112);
    let blocked = sb.reach(&server, 8112).await;
    assert!(blocked.starts_with("unreachable"), "{blocked}");
    let _ = none.kill();
    let _ = none.wait();
    assert_ne!(
        sb.sh("cat /etc/resolv.conf").await,
        format!("nameserver {}", sb.info.net.host)
    );
    assert!(!nft_table().contains(&egress::chain_name(sb.info.net.sandbox)));
    sb.destroy(&fx).await;
}
