//! Network posture against the real binary: the allow and deny lists set through `sbx create`
//! (addresses, blocks and domain names), shown as enforced, and refused when they cannot be
//! enforced; a sandbox with names resolves through its own forwarder, also after the daemon was
//! killed and restarted. (Enforcement itself is proved at the runtime level,
//! `crates/runtime/tests/egress.rs`, against an "outside" network namespace.)

mod common;

use common::{assert_success, e2e, id_of, stderr, stdout, Daemon};
use hickory_proto::op::Message;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use serde_json::{json, Value};
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

/// `sbx create --allow-out/--deny-out` sets the lists; the sandbox shows them as enforced (canonical:
/// `/32` added, sorted, a block inside another dropped; names lowercased, sorted, deduplicated,
/// after the blocks); an entry that cannot be enforced is refused.
#[test]
fn sbx_create_sets_network_lists_and_the_sandbox_shows_them() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let created = daemon.sbx(&[
            "create",
            "--json",
            "--allow-out",
            "10.1.0.0/16",
            "--allow-out",
            "1.1.1.1",
            "--allow-out",
            "10.0.0.0/8",
            "--allow-out",
            "API.OpenAI.com.",
            "--allow-out",
            "*.Example.COM",
            "--allow-out",
            "api.openai.com",
            "--deny-out",
            "0.0.0.0/0",
            "--deny-out",
            "bad.example.com",
        ]);
        assert_success("sbx create --allow-out", &created);
        let sandbox: Value = serde_json::from_str(&stdout(&created)).unwrap();
        let expected = json!({"egress": false,
            "allowOut": ["1.1.1.1/32", "10.0.0.0/8", "*.example.com", "api.openai.com"],
            "denyOut": ["0.0.0.0/0", "bad.example.com"]});
        assert_eq!(sandbox["network"], expected, "{sandbox}");
        let id = id_of(&sandbox);
        let got = daemon.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(got["network"], expected);
        assert_eq!(daemon.exec(&id, &["true"]).await.exit_code, 0);

        for (entry, why) in [
            ("bad_name.example.com", "it has the character '_'"),
            ("a..example.com", "it has an empty label"),
            ("::/0", "IPv6 in network.denyOut is not supported"),
        ] {
            let refused = daemon.sbx(&["create", "--deny-out", entry]);
            assert!(!refused.status.success(), "{entry}");
            assert!(
                stderr(&refused).contains(why),
                "{entry}: {}",
                stderr(&refused)
            );
        }
        assert_eq!(
            daemon.list_all().await.len(),
            1,
            "the refused create made nothing"
        );
    });
}

/// A DNS server test double on the host's loopback (the forwarders run on the host, so it is an
/// upstream they reach): answers an A query for `allowed.test` with [`ALLOWED_AT`], anything else
/// with NXDOMAIN; stops after 120 s.
fn dns_double() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(120);
        let mut buf = [0u8; 4096];
        while std::time::Instant::now() < until {
            let Ok((n, peer)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Ok(asked) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut reply = Message::response(asked.metadata.id, asked.metadata.op_code);
            reply.metadata.recursion_desired = asked.metadata.recursion_desired;
            reply.metadata.recursion_available = true;
            reply.add_queries(asked.queries.iter().cloned());
            match asked.queries.first() {
                Some(q) if q.name.to_ascii().eq_ignore_ascii_case("allowed.test.") => {
                    if q.query_type == RecordType::A {
                        reply.add_answer(Record::from_rdata(
                            q.name.clone(),
                            0,
                            RData::A(A(ALLOWED_AT)),
                        ));
                    }
                }
                _ => reply.metadata.response_code = hickory_proto::op::ResponseCode::NXDomain,
            }
            if let Ok(bytes) = reply.to_vec() {
                let _ = socket.send_to(&bytes, peer);
            }
        }
    });
    port
}

/// What the double answers for `allowed.test` (a benchmarking address nothing here connects to).
const ALLOWED_AT: Ipv4Addr = Ipv4Addr::new(198, 18, 250, 9);

/// Prints the sandbox's own address (its gateway's next one), then what its libc resolves
/// `allowed.test` and `other.test` to.
const PROBE: &str = "import socket, struct\n\
    gw = [l.split()[2] for l in open('/proc/net/route') if l.split()[1] == '00000000'][0]\n\
    gw = struct.unpack('<L', struct.pack('<L', int(gw, 16)))[0]\n\
    print(socket.inet_ntoa(struct.pack('<L', gw + (1 << 24))))\n\
    for n in ['allowed.test', 'other.test']:\n\
    \x20 try: print(socket.gethostbyname(n))\n\
    \x20 except Exception as e: print('unresolved', type(e).__name__)";

/// [`PROBE`]'s lines.
async fn probe(daemon: &Daemon, id: &str) -> Vec<String> {
    let out = daemon.exec(id, &["python3", "-c", PROBE]).await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    out.stdout.lines().map(str::to_string).collect()
}

fn name_set(sandbox: &str) -> String {
    format!("names_allow_{}", sandbox.replace('.', "_"))
}

/// The elements of the daemon's allow set for `sandbox` (`None`: there is no such set).
fn allowed_now(sandbox: &str) -> Option<String> {
    let out = std::process::Command::new("nft")
        .args(["list", "set", "ip", "sandboxd", &name_set(sandbox)])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A create with a name in `allowOut` gets the daemon's forwarder as its resolver: the name
/// resolves through the configured upstream (`--dns-upstream`) and its address lands in the
/// sandbox's set. The daemon killed with SIGKILL and restarted starts the forwarder again (the
/// sandbox kept running): the name resolves and is admitted anew. Delete leaves no set.
#[test]
fn names_resolve_through_the_forwarder_and_survive_a_daemon_restart() {
    e2e(|| async {
        let upstream = format!("127.0.0.1:{}", dns_double());
        let mut daemon = Daemon::start_with(&["--dns-upstream", &upstream], &[]).await;
        let sandbox = daemon
            .create(json!({"network": {"allowOut": ["allowed.test"]}}))
            .await;
        let id = id_of(&sandbox);
        assert_eq!(sandbox["network"]["allowOut"], json!(["allowed.test"]));
        let lines = probe(&daemon, &id).await;
        let own = lines[0].clone();
        assert_eq!(
            &lines[1..],
            [ALLOWED_AT.to_string(), "unresolved gaierror".to_string()]
        );
        let set = allowed_now(&own).expect("the sandbox has its allow set");
        assert!(set.contains(&ALLOWED_AT.to_string()), "{set}");

        daemon.kill9();
        // Forget what the old forwarder admitted, so the new one's admission shows.
        let flushed = std::process::Command::new("nft")
            .args(["flush", "set", "ip", "sandboxd", &name_set(&own)])
            .status()
            .unwrap();
        assert!(flushed.success());
        daemon.restart().await;
        assert_eq!(probe(&daemon, &id).await[1], ALLOWED_AT.to_string());
        let set = allowed_now(&own).expect("the set survives the restart");
        assert!(set.contains(&ALLOWED_AT.to_string()), "{set}");

        let resp = daemon.delete(&format!("/v1/sandboxes/{id}")).await;
        assert!(resp.status().is_success(), "{}", resp.status());
        daemon.wait_torn_down(&id).await;
        assert!(allowed_now(&own).is_none(), "the set outlived its sandbox");
    });
}
