//! Egress: off unless asked for; when on, NAT is in place before the sandbox's first instruction, and
//! sandboxes still cannot reach one another nor the host's own services. Allow and deny lists: a denied
//! destination is unreachable (forwarded or on the host itself), an allowed one reachable even without
//! egress (a host address too), allow wins over deny, a re-applied static setup keeps every sandbox's
//! lists, and destroy leaves no rule behind.
//!
//! "Outside" is a network namespace each test makes, joined to the host by its own veth pair: a server
//! there sees a masqueraded source address exactly when the sandbox's traffic was NATed by the host.
//! The host end of that pair (`198.18.<n>.1`) is one of the host's own addresses: a server bound there
//! is reached through the host's input path, not forwarded.

mod common;

use common::{connect_within, fixture, spec, text, Fixture};
use sandboxd_envd::{EnvdClient, ExecOptions};
use sandboxd_runtime::namespace::egress;
use sandboxd_runtime::{Ipv4Net, ResourceLimits, Runtime, SandboxInfo};
use sandboxd_test_support::{require_root, test_slot, TestSlot};
use std::io::Write;
use std::net::TcpListener;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A network namespace with one server address, torn down on drop.
struct Outside {
    n: u8,
    name: String,
    host_if: String,
}

impl Outside {
    /// `198.18.<n>.1` on the host end, `198.18.<n>.2` and `198.19.<n>.2` inside.
    fn new(n: u8) -> Self {
        let name = format!("sbtest-out-{}-{n}", std::process::id());
        let host_if = format!("sbo{}x{n}", std::process::id() % 100_000);
        let ip = |args: &str| {
            let ok = Command::new("ip")
                .args(args.split_whitespace())
                .status()
                .unwrap()
                .success();
            assert!(ok, "ip {args}");
        };
        ip(&format!("netns add {name}"));
        ip(&format!(
            "link add {host_if} type veth peer name eth0 netns {name}"
        ));
        ip(&format!("addr add 198.18.{n}.1/30 dev {host_if}"));
        ip(&format!("link set {host_if} up"));
        ip(&format!("-n {name} addr add 198.18.{n}.2/30 dev eth0"));
        ip(&format!("-n {name} link set eth0 up"));
        ip(&format!("-n {name} link set lo up"));
        ip(&format!("-n {name} addr add 198.19.{n}.2/32 dev eth0"));
        ip(&format!(
            "route add 198.19.{n}.2/32 via 198.18.{n}.2 dev {host_if}"
        ));
        Outside { n, name, host_if }
    }

    /// The server's address, outside the host.
    fn server(&self) -> String {
        format!("198.18.{}.2", self.n)
    }

    /// A second server address outside the host, in another network.
    fn second(&self) -> String {
        format!("198.19.{}.2", self.n)
    }

    /// The host's own address on this pair (what NAT rewrites sources to).
    fn host(&self) -> String {
        format!("198.18.{}.1", self.n)
    }

    /// Serves one connection on `198.18.<n>.2:port`, answering with the peer's address.
    fn serve_once(&self, port: u16) -> std::process::Child {
        self.serve_once_on(&self.server(), port)
    }

    /// Serves one connection on `address:port` inside, answering with the peer's address; returns
    /// once the server listens (it says so on stdout).
    fn serve_once_on(&self, address: &str, port: u16) -> std::process::Child {
        let script = format!(
            "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{address}', {port})); s.listen(1); s.settimeout(20)\n\
             print('listening', flush=True)\n\
             c,a=s.accept(); c.sendall(a[0].encode()); c.close()"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "python3", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(
            line, "listening\n",
            "the server in {} did not start",
            self.name
        );
        child
    }

    /// Serves connections on the host's own `198.18.<n>.1:port` for 20 s, answering with the peer's
    /// address.
    fn serve_on_host(&self, port: u16) {
        answer_with_peer(TcpListener::bind((self.host().as_str(), port)).unwrap());
    }
}

/// Answers every connection to `listener` for 20 s with the peer's address.
fn answer_with_peer(listener: TcpListener) {
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut c, peer)) => {
                    let _ = c.write_all(peer.ip().to_string().as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// IPv4 forwarding on for as long as any test holds one; the last one restores what it was.
struct Forwarding;

static FORWARDING: Mutex<(usize, Option<String>)> = Mutex::new((0, None));

impl Forwarding {
    fn on() -> Self {
        let mut held = FORWARDING.lock().unwrap_or_else(|p| p.into_inner());
        if held.0 == 0 {
            held.1 = Some(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap());
            // The runtime turns it on once per process: after a restore, it is this guard's job.
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").unwrap();
        }
        held.0 += 1;
        Forwarding
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        let mut held = FORWARDING.lock().unwrap_or_else(|p| p.into_inner());
        held.0 -= 1;
        if held.0 == 0 && held.1.take().is_some_and(|v| v.trim() == "0") {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", "0");
        }
    }
}

/// A distinct `198.18.<n>.0/30` per test (`k` < 4) and per test process.
fn outside_index(k: u8) -> u8 {
    (std::process::id() % 45) as u8 * 5 + 20 + k
}

fn client_script(host: &str, port: u16) -> String {
    format!(
        "python3 -c \"import socket\ns=socket.socket(); s.settimeout(3)\n\
         try:\n  s.connect(('{host}', {port})); print(s.recv(64).decode())\n\
         except Exception as e: print('unreachable', type(e).__name__)\""
    )
}

/// A sandbox on its own slot, with the given egress and lists.
struct Listed {
    info: SandboxInfo,
    client: EnvdClient,
    _slot: TestSlot,
    destroyed: bool,
}

impl Drop for Listed {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // A test that failed never reached its destroy: no sandbox, pair or rule outlives it.
        if let Some(pid) = self.info.pid {
            // SAFETY: kill with a pid we started; harmless if it is gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = Command::new("ip")
            .args(["link", "del", &format!("sbh{}", self.info.net.slot)])
            .stderr(std::process::Stdio::null())
            .status();
        let address = self.info.net.sandbox;
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(egress::revoke(address))
        })
        .join();
    }
}

impl Listed {
    async fn start(fx: &Fixture, egress: bool, allow: &[&str], deny: &[&str]) -> Listed {
        let slot = test_slot();
        let mut s = spec(slot.slot, ResourceLimits::default());
        let nets =
            |list: &[&str]| -> Vec<Ipv4Net> { list.iter().map(|n| n.parse().unwrap()).collect() };
        s.egress = egress;
        s.egress_allow = nets(allow);
        s.egress_deny = nets(deny);
        fx.rt.create(&s).await.unwrap();
        let info = fx.rt.start(&s.id).await.unwrap();
        let client = EnvdClient::new(&info.agent.socket, &info.agent.token);
        Listed {
            info,
            client,
            _slot: slot,
            destroyed: false,
        }
    }

    /// What the sandbox's client prints connecting to `host:port`: the peer address the server saw,
    /// or `unreachable …`.
    async fn reach(&self, host: &str, port: u16) -> String {
        let cmd = [
            "/bin/sh".to_string(),
            "-c".to_string(),
            client_script(host, port),
        ];
        let out = self
            .client
            .exec(&cmd, ExecOptions::default())
            .await
            .unwrap();
        format!("{}{}", text(&out.stdout).trim(), text(&out.stderr).trim())
    }

    /// Destroys the sandbox and checks that no rule of it is left in the table.
    async fn destroy(mut self, fx: &Fixture) {
        fx.rt.destroy(self.info.id()).await.unwrap();
        self.destroyed = true;
        let table = nft_table();
        let address = self.info.net.sandbox.to_string();
        let chain = egress::chain_name(self.info.net.sandbox);
        let mentioned = table
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .any(|word| word == address);
        assert!(!mentioned, "{address} left in the table:\n{table}");
        assert!(!table.contains(&chain), "{chain} left behind:\n{table}");
    }
}

fn nft_table() -> String {
    let out = Command::new("nft")
        .args(["list", "table", "ip", egress::TABLE])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

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
    connect_within((target, 8081).into(), Duration::from_secs(30)).await;
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
