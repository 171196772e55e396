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

/// Kills the daemon with SIGKILL, empties sandbox `own`'s allow set (what the old forwarder
/// admitted, so the new one's admission shows), and restarts it.
async fn restart_forgetting_admissions(daemon: &mut Daemon, own: &str) {
    daemon.kill9();
    let flushed = std::process::Command::new("nft")
        .args(["flush", "set", "ip", "sandboxd", &name_set(own)])
        .status()
        .unwrap();
    assert!(flushed.success());
    daemon.restart().await;
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

        restart_forgetting_admissions(&mut daemon, &own).await;
        assert_eq!(probe(&daemon, &id).await[1], ALLOWED_AT.to_string());
        let set = allowed_now(&own).expect("the set survives the restart");
        assert!(set.contains(&ALLOWED_AT.to_string()), "{set}");

        let resp = daemon.delete(&format!("/v1/sandboxes/{id}")).await;
        assert!(resp.status().is_success(), "{}", resp.status());
        daemon.wait_torn_down(&id).await;
        assert!(allowed_now(&own).is_none(), "the set outlived its sandbox");
    });
}

/// `PUT /v1/sandboxes/{id}/network` changes a running sandbox's lists at once: names added give it
/// its own forwarder (the name resolves and its address is admitted), which a daemon killed with
/// SIGKILL and restarted starts again from the changed record; an update that would give the
/// gateway rules to a sandbox created without (the gateway is not in its path), or one of a stopped
/// sandbox, is refused and changes nothing; lists taken away
/// give it the host's resolver back and leave no set behind.
#[test]
fn a_running_sandboxs_network_changes_and_the_change_survives_a_restart() {
    e2e(|| async {
        let upstream = format!("127.0.0.1:{}", dns_double());
        let mut daemon = Daemon::start_with(&["--dns-upstream", &upstream], &[]).await;
        // Egress on, so the probe finds its own address by its default route.
        let sandbox = daemon.create(json!({"network": {"egress": true}})).await;
        let id = id_of(&sandbox);
        let path = format!("/v1/sandboxes/{id}/network");
        let own = probe(&daemon, &id).await[0].clone();
        assert!(allowed_now(&own).is_none(), "no lists, no set");

        let resp = daemon
            .put_json(
                &path,
                &json!({"egress": true, "allowOut": ["Allowed.test", "1.1.1.1"]}),
            )
            .await;
        assert_eq!(resp.status(), 200);
        let changed: Value = resp.json().await.unwrap();
        let expected = json!({"egress": true, "allowOut": ["1.1.1.1/32", "allowed.test"]});
        assert_eq!(changed["network"], expected, "{changed}");
        let lines = probe(&daemon, &id).await;
        assert_eq!(
            &lines[1..],
            [ALLOWED_AT.to_string(), "unresolved gaierror".to_string()]
        );
        let set = allowed_now(&own).expect("the sandbox has its allow set now");
        assert!(set.contains(&ALLOWED_AT.to_string()), "{set}");

        // Refused, and nothing changes: rules for a sandbox the gateway is not in the path of, an
        // entry that cannot be enforced.
        for body in [
            json!({"egress": true, "allowOut": ["allowed.test"],
                "rules": {"allowed.test": [{"transform": {"headers": {"X": "y"}}}]}}),
            json!({"egress": true, "denyOut": ["::/0"]}),
        ] {
            let resp = daemon.put_json(&path, &body).await;
            assert_eq!(resp.status(), 400, "{body}");
        }
        assert_eq!(
            daemon.get_json(&format!("/v1/sandboxes/{id}")).await["network"],
            expected
        );
        // Whether its ports are public changes only when an update says so.
        let mut private = expected.clone();
        private["allowPublicTraffic"] = json!(false);
        let resp = daemon.put_json(&path, &private).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.json::<Value>().await.unwrap()["network"], private);

        // The change is the record a restarted daemon starts the forwarder from.
        restart_forgetting_admissions(&mut daemon, &own).await;
        assert_eq!(probe(&daemon, &id).await[1], ALLOWED_AT.to_string());

        // Taken away: the host's resolver again (it knows no `.test`), no set.
        let resp = daemon.put_json(&path, &json!({"egress": true})).await;
        assert_eq!(resp.status(), 200);
        let kept = json!({"egress": true, "allowPublicTraffic": false});
        assert_eq!(resp.json::<Value>().await.unwrap()["network"], kept);
        let lines = probe(&daemon, &id).await;
        assert_eq!(lines[1], "unresolved gaierror", "{lines:?}");
        assert!(allowed_now(&own).is_none(), "the set outlived its lists");

        // A stopped sandbox's network does not change.
        let stopped = daemon
            .post_json(&format!("/v1/sandboxes/{id}/stop"), &json!({}))
            .await;
        assert!(stopped.status().is_success());
        let resp = daemon.put_json(&path, &json!({"egress": true})).await;
        assert_eq!(resp.status(), 409);
    });
}

/// A Python line that connects to `host:port` and prints what it answers (or `unreachable`).
fn connect_script(host: &str, port: u16) -> String {
    format!(
        "import socket\ns = socket.socket(); s.settimeout(3)\n\
         try:\n  s.connect(('{host}', {port})); print(s.recv(16).decode())\n\
         except Exception as e: print('unreachable', type(e).__name__)"
    )
}

/// On the gVisor tier a running sandbox's address lists change at once, enforced on the host as
/// the namespace tier's are: the host's own address, reachable while its allow list names it,
/// is not once another address takes its place, and is again when named again. What gVisor reads
/// only at boot is refused with a 400 saying so, changing nothing: names where there were none
/// (its resolver), and egress for a sandbox made unable to send out (its route).
#[test]
fn a_gvisor_sandboxs_address_lists_change_and_what_it_reads_at_boot_is_refused() {
    if !common::require_gvisor() {
        return;
    }
    e2e(|| async {
        let daemon = Daemon::start().await;
        let host = common::host_address().to_string();
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = conn.write_all(b"hello").await;
            }
        });
        let made = daemon
            .create(json!({"isolation": "gvisor", "network": {"allowOut": [host]}}))
            .await;
        let id = id_of(&made);
        let path = format!("/v1/sandboxes/{id}/network");
        let reach = || async {
            let out = daemon
                .exec(&id, &["python3", "-c", &connect_script(&host, port)])
                .await;
            out.stdout.trim().to_string()
        };
        assert_eq!(reach().await, "hello");

        let elsewhere = json!({"allowOut": ["192.0.2.1"]});
        assert_eq!(daemon.put_json(&path, &elsewhere).await.status(), 200);
        assert!(reach().await.starts_with("unreachable"), "still reached");
        let again = json!({"allowOut": [host]});
        assert_eq!(daemon.put_json(&path, &again).await.status(), 200);
        assert_eq!(reach().await, "hello");

        for (body, why) in [
            (
                json!({"allowOut": [host, "allowed.test"]}),
                "name domains is fixed",
            ),
            (json!({"egress": true, "allowOut": [host]}), ""),
        ] {
            let resp = daemon.put_json(&path, &body).await;
            if why.is_empty() {
                // Egress on for one that could already send out: its route is there.
                assert_eq!(resp.status(), 200, "{body}");
                continue;
            }
            assert_eq!(resp.status(), 400, "{body}");
            let said: Value = resp.json().await.unwrap();
            assert!(said.to_string().contains(why), "{said}");
        }
        let shut = json!({"allowOut": []});
        assert_eq!(daemon.put_json(&path, &shut).await.status(), 200);
        let resp = daemon.put_json(&path, &again).await;
        assert_eq!(resp.status(), 400, "let out again after it was shut");
        assert!(reach().await.starts_with("unreachable"));
        assert_eq!(
            daemon.get_json(&format!("/v1/sandboxes/{id}")).await["network"],
            json!({"egress": false})
        );
    });
}
