//! The world outside the host for network tests: a network namespace joined to the host by its own
//! veth pair, with servers in it, and IPv4 forwarding held on while a test needs it.

use std::io::Write;
use std::net::TcpListener;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A network namespace with one server address, torn down on drop.
pub struct Outside {
    n: u8,
    /// The namespace's name (under `/run/netns`).
    pub name: String,
    host_if: String,
}

impl Outside {
    /// `198.18.<n>.1` on the host end, `198.18.<n>.2` and `198.19.<n>.2` inside.
    pub fn new(n: u8) -> Self {
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
    pub fn server(&self) -> String {
        format!("198.18.{}.2", self.n)
    }

    /// A second server address outside the host, in another network.
    pub fn second(&self) -> String {
        format!("198.19.{}.2", self.n)
    }

    /// The host's own address on this pair (what NAT rewrites sources to).
    pub fn host(&self) -> String {
        format!("198.18.{}.1", self.n)
    }

    /// Serves one connection on `198.18.<n>.2:port`, answering with the peer's address.
    pub fn serve_once(&self, port: u16) -> std::process::Child {
        self.serve_once_on(&self.server(), port)
    }

    /// Serves one connection on `address:port` inside, answering with the peer's address; returns
    /// once the server listens (it says so on stdout).
    pub fn serve_once_on(&self, address: &str, port: u16) -> std::process::Child {
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
    pub fn serve_on_host(&self, port: u16) {
        answer_with_peer(TcpListener::bind((self.host().as_str(), port)).unwrap());
    }
}

/// Answers every connection to `listener` for 120 s with the peer's address: longer than a test's
/// checks take in the emulated Debian 12 VM (four sandboxes' checks outlasted 20 s there).
pub fn answer_with_peer(listener: TcpListener) {
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while let Some((mut c, peer)) = super::accept_within(
            &listener,
            deadline.saturating_duration_since(Instant::now()),
        ) {
            let _ = c.write_all(peer.ip().to_string().as_bytes());
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
pub struct Forwarding;

pub static FORWARDING: Mutex<(usize, Option<String>)> = Mutex::new((0, None));

impl Forwarding {
    pub fn on() -> Self {
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

/// A distinct `198.18.<n>.0/30` per test (`k` < 8) and per test process.
pub fn outside_index(k: u8) -> u8 {
    (std::process::id() % 28) as u8 * 8 + 20 + k
}

pub fn client_script(host: &str, port: u16) -> String {
    format!(
        "python3 -c \"import socket\ns=socket.socket(); s.settimeout(3)\n\
         try:\n  s.connect(('{host}', {port})); print(s.recv(64).decode())\n\
         except Exception as e: print('unreachable', type(e).__name__)\""
    )
}
