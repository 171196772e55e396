//! Egress: off unless asked for; when on, NAT is in place before the sandbox's first instruction, and
//! sandboxes still cannot reach one another.
//!
//! "Outside" is a network namespace this test makes, joined to the host by its own veth pair: a server
//! there sees a masqueraded source address exactly when the sandbox's traffic was NATed by the host.

mod common;

use common::{fixture, spec, text};
use sandboxd_envd::{EnvdClient, ExecOptions};
use sandboxd_runtime::{ResourceLimits, Runtime};
use sandboxd_test_support::{require_root, test_slot};
use std::process::Command;

/// A network namespace with one server address, torn down on drop.
struct Outside {
    name: String,
    host_if: String,
}

impl Outside {
    /// `198.18.<n>.1` on the host end, `198.18.<n>.2` inside.
    fn new(n: u8) -> Self {
        let name = format!("sbtest-out-{}", std::process::id());
        let host_if = format!("sbo{}", std::process::id() % 100_000);
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
        Outside { name, host_if }
    }

    /// Serves one connection on `198.18.<n>.2:port`, answering with the peer's address.
    fn serve_once(&self, n: u8, port: u16) -> std::process::Child {
        let script = format!(
            "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('198.18.{n}.2', {port})); s.listen(1); s.settimeout(20)\n\
             c,a=s.accept(); c.sendall(a[0].encode()); c.close()"
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name, "python3", "-c", &script])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        child
    }
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

fn client_script(host: &str, port: u16) -> String {
    format!(
        "python3 -c \"import socket\ns=socket.socket(); s.settimeout(3)\n\
         try:\n  s.connect(('{host}', {port})); print(s.recv(64).decode())\n\
         except Exception as e: print('unreachable', type(e).__name__)\""
    )
}

#[tokio::test]
async fn egress_is_natted_when_asked_for_and_absent_otherwise() {
    if !require_root() {
        return;
    }
    let n = (std::process::id() % 200) as u8 + 20;
    let outside = Outside::new(n);
    let forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let fx = fixture().await;

    // Without egress: no route off the sandbox's own /30.
    let closed = fx.sandbox().await;
    let mut server = outside.serve_once(n, 8080);
    let out = closed
        .sh(&client_script(&format!("198.18.{n}.2"), 8080))
        .await;
    assert!(
        text(&out.stdout).starts_with("unreachable"),
        "{}",
        text(&out.stdout)
    );

    // With egress: the first command already leaves, masqueraded as the host's address.
    let slot = test_slot();
    let mut s = spec(slot.slot, ResourceLimits::default());
    s.egress = true;
    fx.rt.create(&s).await.unwrap();
    let info = fx.rt.start(&s.id).await.unwrap();
    let open = EnvdClient::new(&info.agent.socket, &info.agent.token);
    let cmd = [
        "/bin/sh".to_string(),
        "-c".to_string(),
        client_script(&format!("198.18.{n}.2"), 8080),
    ];
    let seen = open.exec(&cmd, ExecOptions::default()).await.unwrap();
    assert_eq!(
        text(&seen.stdout).trim(),
        format!("198.18.{n}.1"),
        "{}",
        text(&seen.stderr)
    );
    let _ = server.wait();

    // Egress does not open the way to another sandbox.
    let target = closed.info.net.sandbox;
    closed
        .sh("nohup python3 -m http.server 8081 >/dev/null 2>&1 & sleep 0.5")
        .await;
    let cmd = [
        "/bin/sh".to_string(),
        "-c".to_string(),
        client_script(&target.to_string(), 8081),
    ];
    let across = open.exec(&cmd, ExecOptions::default()).await.unwrap();
    assert!(
        text(&across.stdout).starts_with("unreachable"),
        "{}",
        text(&across.stdout)
    );

    fx.rt.destroy(&s.id).await.unwrap();
    fx.destroy(&closed).await;
    // The sandbox's address left the egress set with it.
    let set = Command::new("nft")
        .args(["list", "set", "ip", "sandboxd", "egress"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&set.stdout).contains(&info.net.sandbox.to_string()));
    if forwarding.trim() == "0" {
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", "0");
    }
}
