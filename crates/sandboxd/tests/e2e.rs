//! End-to-end tests of the real `sandboxd` binary, driven over HTTP, WebSocket and the real `sbx` CLI.
//!
//! Every test starts its own daemon on a fresh data dir (see `common` for the isolation and cleanup
//! guarantees) and runs serially with the others; the whole binary takes well under two minutes.

mod common;

use common::{
    assert_success, authed_client, cgroup_dirs_of, e2e, expect_error, id_of, random_bytes,
    recorded_init, stderr, stdout, Daemon, TOKEN,
};
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Stated requirement: `sandboxd serve` answers `/health` within 2 s of being started.
const READY_BUDGET: Duration = Duration::from_secs(2);

#[test]
fn serve_is_ready_within_two_seconds() {
    e2e(|| async {
        // Built (or located) before the clock starts: the budget is the daemon's, not cargo's.
        sandboxd_test_support::agent_binary();
        let started = Instant::now();
        let mut daemon = Daemon::spawn_fresh(Some(TOKEN.to_string()));
        daemon.wait_ready(Duration::from_secs(15)).await;
        let ready = started.elapsed();
        eprintln!("timing: fresh data dir, spawn to first 200 on /health: {ready:?}");
        assert!(
            ready < READY_BUDGET,
            "sandboxd took {ready:?} to become ready on a fresh data dir (budget {READY_BUDGET:?})"
        );
        // Ready means ready: the API and the runtime answer right away.
        let resp = daemon
            .http()
            .get(daemon.endpoint("/v1/sandboxes"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let id = daemon.create_id().await;
        let out = daemon.exec(&id, &["true"]).await;
        assert_eq!(out.exit_code, 0);
    });
}

#[test]
fn generated_admin_token_is_private_printed_once_and_stable() {
    e2e(|| async {
        let mut daemon = Daemon::start_with_generated_token().await;
        let path = daemon.data_dir().join("admin-token");
        let token = daemon.saved_token();
        assert!(
            token.len() >= 32,
            "generated token {token:?} is too short to be a secret"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            0o600,
            "{} must be readable by its owner only",
            path.display()
        );
        let first = daemon.stdout_of_start(1);
        assert_eq!(
            first.matches(&token).count(),
            1,
            "the first start prints the token exactly once; stdout was:\n{first}"
        );
        let list = |client: reqwest::Client, url: String| async move {
            client.get(url).send().await.unwrap().status()
        };
        let url = daemon.endpoint("/v1/sandboxes");
        assert_eq!(list(daemon.http().clone(), url.clone()).await, 200);
        assert_eq!(list(authed_client("sb_wrong"), url.clone()).await, 401);

        daemon.restart().await;
        assert_eq!(
            daemon.saved_token(),
            token,
            "the token must survive a restart"
        );
        let second = daemon.stdout_of_start(2);
        assert!(
            !second.contains(&token),
            "a restart must not print the token again; stdout was:\n{second}"
        );
        assert_eq!(list(daemon.http().clone(), url).await, 200);
    });
}

#[test]
fn sbx_create_exec_prints_two_and_propagates_exit_code() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let created = daemon.sbx(&["create"]);
        assert_success("sbx create", &created);
        let id = stdout(&created).trim().to_string();
        assert!(
            id.starts_with("sb") && id.len() == 16,
            "sbx create printed {id:?}, not an id"
        );
        let resp = daemon
            .http()
            .get(daemon.endpoint(&format!("/v1/sandboxes/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.json::<Value>().await.unwrap()["state"], "running");

        let two = daemon.sbx(&["exec", &id, "--", "python3", "-c", "print(1+1)"]);
        assert_success("sbx exec python3", &two);
        assert_eq!(stdout(&two), "2\n");
        assert_eq!(stderr(&two), "");

        let three = daemon.sbx(&["exec", &id, "--", "sh", "-c", "exit 3"]);
        assert_eq!(
            three.status.code(),
            Some(3),
            "sbx exec must exit with the command's code; stderr: {}",
            stderr(&three)
        );

        let err = daemon.sbx(&["exec", &id, "--", "sh", "-c", "echo e >&2"]);
        assert_success("sbx exec echo to stderr", &err);
        assert_eq!(stderr(&err), "e\n");
        assert_eq!(stdout(&err), "");
    });
}

/// Runs `script` in the background in sandbox `id` through `sbx exec`, which must return at once.
fn start_in_background(daemon: &Daemon, id: &str, script: &str) {
    let started = Instant::now();
    let line = format!("nohup {script} >/dev/null 2>&1 &");
    let out = daemon.sbx(&["exec", id, "--", "sh", "-c", &line]);
    assert_success("sbx exec (background server)", &out);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "starting a background server took {:?}",
        started.elapsed()
    );
}

/// Exposes `port` through `sbx --json expose`, retrying while the daemon answers 409
/// `port_not_listening` (the server is still starting). Any other failure fails the test.
fn expose_when_listening(daemon: &Daemon, id: &str, port: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    let port = port.to_string();
    loop {
        let out = daemon.sbx(&["--json", "expose", id, &port]);
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).expect("sbx --json expose prints JSON");
        }
        let err: Value = serde_json::from_slice(&out.stderr)
            .unwrap_or_else(|_| panic!("sbx --json error is not JSON: {}", stderr(&out)));
        assert_eq!(
            err["code"], "port_not_listening",
            "expose failed for another reason: {err}"
        );
        assert!(
            Instant::now() < deadline,
            "port {port} of {id} never started listening"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn exposed_http_server_is_reachable_through_the_proxy() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        start_in_background(&daemon, &id, "python3 -m http.server 8000");
        let first = expose_when_listening(&daemon, &id, 8000);
        let expected = format!("http://8000-{id}.localhost:{}", daemon.port());
        assert_eq!(first["publicUrl"], expected.as_str());

        // The text form prints the URL; exposing again returns the same one.
        let again = daemon.sbx(&["expose", &id, "8000"]);
        assert_success("sbx expose (again)", &again);
        assert_eq!(stdout(&again).trim(), expected);
        let resp = daemon
            .http()
            .post(daemon.endpoint(&format!("/v1/sandboxes/{id}/ports")))
            .json(&json!({ "port": 8000 }))
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            200,
            "re-exposing answers 200 (exists), not 201"
        );
        assert_eq!(resp.json::<Value>().await.unwrap()["publicUrl"], expected);
        let ports: Value = daemon.get_json(&format!("/v1/sandboxes/{id}/ports")).await;
        assert_eq!(
            ports.as_array().map(Vec::len),
            Some(1),
            "one exposure, however often it was asked for: {ports}"
        );

        // The URL as printed, with its host resolved to the daemon (curl --resolve).
        let host = format!("8000-{id}.localhost");
        let via_host = reqwest::Client::builder()
            .resolve(&host, daemon.addr())
            .build()
            .unwrap();
        let resp = via_host.get(&expected).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("Directory listing"),
            "not the server's listing: {body}"
        );

        // The E2B header route to the same port.
        let resp = reqwest::Client::new()
            .get(daemon.url())
            .header("E2b-Sandbox-Id", &id)
            .header("E2b-Sandbox-Port", "8000")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("Directory listing"),
            "not the server's listing: {body}"
        );
    });
}

/// A WebSocket echo server with the standard library only: the RFC 6455 handshake, and an echo of
/// text/binary frames (client frames are masked; server frames are not), close answered with close.
const WS_ECHO_SERVER: &str = r#"
import base64, hashlib, socket, struct, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b

def serve(c):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk:
            return
        data += chunk
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in
                   (line.partition(b":") for line in data.split(b"\r\n")[1:] if b":" in line))
    accept = base64.b64encode(hashlib.sha1(headers[b"sec-websocket-key"] + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    while True:
        b1, b2 = exact(c, 2)
        opcode, n = b1 & 0x0F, b2 & 0x7F
        if n == 126:
            n = struct.unpack(">H", exact(c, 2))[0]
        elif n == 127:
            n = struct.unpack(">Q", exact(c, 8))[0]
        mask = exact(c, 4) if b2 & 0x80 else b"\0\0\0\0"
        payload = bytes(x ^ mask[i % 4] for i, x in enumerate(exact(c, n)))
        if opcode == 8:
            c.sendall(b"\x88\x00")
            return
        if opcode in (1, 2):
            size = bytes([n]) if n < 126 else b"\x7e" + struct.pack(">H", n)
            c.sendall(bytes([0x80 | opcode]) + size + payload)

def guarded(c):
    try:
        serve(c)
    except Exception:
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8765))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=guarded, args=(conn,), daemon=True).start()
"#;

#[test]
fn websocket_echo_through_the_proxy() {
    e2e(|| async {
        use tokio_tungstenite::tungstenite::Message;
        let daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        daemon
            .put_file(&id, "/home/user/ws.py", WS_ECHO_SERVER.as_bytes().to_vec())
            .await;
        start_in_background(&daemon, &id, "python3 /home/user/ws.py");
        expose_when_listening(&daemon, &id, 8765);

        let tcp = tokio::net::TcpStream::connect(daemon.addr()).await.unwrap();
        let url = format!("ws://8765-{id}.localhost:{}/echo", daemon.port());
        let (mut ws, response) = tokio_tungstenite::client_async(url.as_str(), tcp)
            .await
            .unwrap_or_else(|e| panic!("WebSocket handshake through the proxy failed: {e}"));
        assert_eq!(response.status(), 101);

        let long = "x".repeat(1000);
        for text in ["hello through the proxy", long.as_str()] {
            ws.send(Message::text(text)).await.unwrap();
            let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
                .await
                .expect("no echo within 5 s")
                .expect("the connection closed instead of echoing")
                .unwrap();
            match reply {
                Message::Text(echo) => assert_eq!(echo.as_str(), text),
                other => panic!("expected a text echo, got {other:?}"),
            }
        }
        ws.close(None).await.unwrap();
    });
}

#[test]
fn sandboxes_survive_kill9_of_the_daemon() {
    e2e(|| async {
        let mut daemon = Daemon::start().await;
        let mut ids = Vec::new();
        for i in 0..3 {
            let id = daemon.create_id().await;
            daemon
                .put_file(
                    &id,
                    "/home/user/mark.txt",
                    format!("mark {i} {id}").into_bytes(),
                )
                .await;
            ids.push(id);
        }
        start_in_background(&daemon, &ids[0], "python3 -m http.server 8000");
        let url = expose_when_listening(&daemon, &ids[0], 8000)["publicUrl"]
            .as_str()
            .unwrap()
            .to_string();
        daemon.kill9();
        let ready = daemon.restart().await;
        eprintln!("timing: restart after kill -9 with 3 sandboxes, ready in {ready:?}");

        let listed = daemon.list_all().await;
        let mut listed_ids: Vec<String> = listed.iter().map(id_of).collect();
        listed_ids.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(
            listed_ids, expected,
            "after kill -9 and restart the same 3 sandboxes are listed, none lost or doubled"
        );
        for s in &listed {
            assert_eq!(s["state"], "running", "adopted sandbox: {s}");
        }
        for (i, id) in ids.iter().enumerate() {
            let out = daemon.exec(id, &["cat", "/home/user/mark.txt"]).await;
            assert_eq!(out.exit_code, 0, "exec in adopted {id}: {}", out.stderr);
            assert_eq!(out.stdout, format!("mark {i} {id}"));
        }
        // Exposures survive too: the proxy finds the adopted sandbox's server.
        let proxied = reqwest::Client::builder()
            .resolve(&format!("8000-{}.localhost", ids[0]), daemon.addr())
            .build()
            .unwrap()
            .get(&url)
            .send()
            .await
            .unwrap();
        assert_eq!(proxied.status(), 200, "exposed port after restart");
        assert!(proxied.text().await.unwrap().contains("Directory listing"));
        // The adopted sandboxes still hold their network slots: a new one gets another and works.
        let fresh = daemon.create_id().await;
        let out = daemon.exec(&fresh, &["echo", "ok"]).await;
        assert_eq!(out.stdout, "ok\n");
        for id in &ids {
            let out = daemon.exec(id, &["true"]).await;
            assert_eq!(
                out.exit_code, 0,
                "{id} broke when a sandbox was created after adoption"
            );
        }
        // Every sandbox is wired on its own slot inside this daemon's --net-slot-base block.
        let mut slots = BTreeSet::new();
        for id in ids.iter().chain([&fresh]) {
            let state: Value = serde_json::from_slice(
                &std::fs::read(daemon.sandbox_dir(id).join("state.json")).unwrap(),
            )
            .unwrap();
            let slot = state["spec"]["net_slot"].as_u64().expect("net_slot") as u32;
            assert!(
                daemon.slot_range().contains(&slot),
                "{id} got slot {slot}, outside the daemon's {:?}",
                daemon.slot_range()
            );
            assert!(
                std::path::Path::new(&format!("/sys/class/net/{}", daemon.host_ifname(slot)))
                    .exists(),
                "no host interface {} for {id}",
                daemon.host_ifname(slot)
            );
            assert!(slots.insert(slot), "slot {slot} leased twice");
        }
    });
}

#[test]
fn files_round_trip_and_listing() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        const SIZE: usize = 5 * 1024 * 1024;
        let big = random_bytes(SIZE, 0x5eed);
        let started = Instant::now();
        daemon
            .put_file(&id, "/home/user/big.bin", big.clone())
            .await;
        let back = daemon.get_file(&id, "/home/user/big.bin").await;
        eprintln!(
            "timing: 5 MiB up and down through the API: {:?}",
            started.elapsed()
        );
        assert_eq!(back.len(), SIZE);
        assert!(back == big, "the 5 MiB file came back different");

        let listing: Value = daemon
            .http()
            .get(daemon.endpoint(&format!("/v1/sandboxes/{id}/files/list")))
            .query(&[("path", "/home/user")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let entry = listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "big.bin")
            .unwrap_or_else(|| panic!("big.bin is not listed: {listing}"));
        assert_eq!(entry["size"], SIZE as u64);
        assert_eq!(entry["type"], "file");
        assert_eq!(entry["path"], "/home/user/big.bin");

        // sbx cp, in and out.
        let local = tempfile::tempdir().unwrap();
        let src = local.path().join("up.bin");
        let up = random_bytes(1024 * 1024 + 7, 0xc0ffee);
        std::fs::write(&src, &up).unwrap();
        let remote = format!("{id}:/home/user/sub/up.bin");
        let out = daemon.sbx(&["cp", src.to_str().unwrap(), &remote]);
        assert_success("sbx cp in", &out);
        assert!(
            daemon.get_file(&id, "/home/user/sub/up.bin").await == up,
            "sbx cp in changed the bytes"
        );
        let dst = local.path().join("down.bin");
        let out = daemon.sbx(&["cp", &remote, dst.to_str().unwrap()]);
        assert_success("sbx cp out", &out);
        assert!(
            std::fs::read(&dst).unwrap() == up,
            "sbx cp out changed the bytes"
        );
        let dst_big = local.path().join("big.bin");
        let out = daemon.sbx(&[
            "cp",
            &format!("{id}:/home/user/big.bin"),
            dst_big.to_str().unwrap(),
        ]);
        assert_success("sbx cp out (5 MiB)", &out);
        assert!(
            std::fs::read(&dst_big).unwrap() == big,
            "sbx cp out changed the 5 MiB file"
        );
    });
}

#[test]
fn expired_sandbox_is_destroyed() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let created_at = Instant::now();
        let sandbox = daemon.create(json!({ "timeoutSec": 4 })).await;
        let id = id_of(&sandbox);
        assert!(
            sandbox["expiresAt"].is_string(),
            "a sandbox with a timeout has expiresAt: {sandbox}"
        );
        let url = daemon.endpoint(&format!("/v1/sandboxes/{id}"));
        let status = || async { daemon.http().get(&url).send().await.unwrap().status() };
        assert_eq!(status().await, 200);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(status().await, 200, "expired before its 4 s were up");
        assert!(daemon.sandbox_dir(&id).is_dir());

        let deadline = created_at + Duration::from_secs(8);
        while status().await != StatusCode::NOT_FOUND {
            assert!(
                Instant::now() < deadline,
                "a sandbox with timeoutSec 4 still exists after 8 s (sweep interval 1 s)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "timing: timeoutSec 4 sandbox gone after {:?}",
            created_at.elapsed()
        );
        daemon.wait_torn_down(&id).await;
        assert!(daemon.list_all().await.is_empty());
    });
}

#[test]
fn delete_is_404_the_second_time() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        let url = daemon.endpoint(&format!("/v1/sandboxes/{id}"));
        let first = daemon.http().delete(&url).send().await.unwrap();
        assert_eq!(first.status(), 204);
        let second = daemon.http().delete(&url).send().await.unwrap();
        expect_error("second delete", second, 404, Some("not_found")).await;
        let get = daemon.http().get(&url).send().await.unwrap();
        expect_error("get after delete", get, 404, Some("not_found")).await;
        daemon.wait_torn_down(&id).await;

        let out = daemon.sbx(&["rm", &id]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "sbx rm of a deleted sandbox fails"
        );
        assert!(
            stderr(&out).contains("not_found"),
            "sbx rm says why: {}",
            stderr(&out)
        );

        // sbx rm deletes (once) too.
        let other = daemon.create_id().await;
        let out = daemon.sbx(&["rm", &other]);
        assert_success("sbx rm", &out);
        assert_eq!(stdout(&out).trim(), other);
        assert_eq!(daemon.sbx(&["rm", &other]).status.code(), Some(1));
        assert!(daemon.list_all().await.is_empty());
    });
}

#[test]
fn list_filters_by_metadata_and_pages_with_cursor() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let mut team_a = BTreeSet::new();
        for _ in 0..3 {
            let s = daemon
                .create(json!({ "metadata": { "team": "a", "x": "1" } }))
                .await;
            team_a.insert(id_of(&s));
        }
        let b = id_of(&daemon.create(json!({ "metadata": { "team": "b" } })).await);

        let page = |query: String| {
            let http = daemon.http().clone();
            let url = daemon.endpoint(&format!("/v1/sandboxes?{query}"));
            async move {
                let resp = http.get(url).send().await.unwrap();
                assert_eq!(resp.status(), 200, "list ?{query}");
                resp.json::<Value>().await.unwrap()
            }
        };
        let ids = |page: &Value| -> Vec<String> {
            page["sandboxes"]
                .as_array()
                .unwrap()
                .iter()
                .map(id_of)
                .collect()
        };
        let first = page("metadata=team=a&limit=2".into()).await;
        assert_eq!(ids(&first).len(), 2, "first page: {first}");
        let cursor = first["nextCursor"]
            .as_str()
            .unwrap_or_else(|| panic!("a full page has a nextCursor: {first}"))
            .to_string();
        let next = reqwest::Url::parse_with_params(
            "http://x/?metadata=team=a&limit=2",
            &[("cursor", cursor.as_str())],
        )
        .unwrap();
        let second = page(next.query().unwrap().to_string()).await;
        assert_eq!(ids(&second).len(), 1, "second page: {second}");
        assert!(
            second.get("nextCursor").is_none() || second["nextCursor"].is_null(),
            "the last page has no nextCursor: {second}"
        );
        let walked: Vec<String> = ids(&first).into_iter().chain(ids(&second)).collect();
        let walked_set: BTreeSet<String> = walked.iter().cloned().collect();
        assert_eq!(walked.len(), walked_set.len(), "a page repeated a sandbox");
        assert_eq!(walked_set, team_a, "the walk yields exactly team a");
        for s in first["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .chain(second["sandboxes"].as_array().unwrap())
        {
            assert_eq!(s["metadata"]["team"], "a");
        }
        let only_b = page("metadata=team%3Db".into()).await;
        assert_eq!(ids(&only_b), vec![b.clone()]);
        let both = page("metadata=team=a&metadata=x=1".into()).await;
        assert_eq!(ids(&both).into_iter().collect::<BTreeSet<_>>(), team_a);
        let none = page("metadata=team=c".into()).await;
        assert!(ids(&none).is_empty(), "{none}");

        let out = daemon.sbx(&["ls", "--json"]);
        assert_success("sbx ls --json", &out);
        let all: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("sbx ls --json is not JSON ({e}): {}", stdout(&out)));
        let listed: BTreeSet<String> = all.as_array().unwrap().iter().map(id_of).collect();
        let mut everyone = team_a.clone();
        everyone.insert(b);
        assert_eq!(listed, everyone);
        let out = daemon.sbx(&["ls", "--json", "--metadata", "team=a"]);
        assert_success("sbx ls --json --metadata team=a", &out);
        let a: Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed: BTreeSet<String> = a.as_array().unwrap().iter().map(id_of).collect();
        assert_eq!(listed, team_a);
    });
}

#[test]
fn metrics_and_openapi_are_served() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        daemon.create_id().await;
        let anonymous = reqwest::Client::new();
        let resp = anonymous
            .get(daemon.endpoint("/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(content_type.starts_with("text/plain"), "{content_type}");
        let text = resp.text().await.unwrap();
        let running: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(r#"sandboxd_sandboxes{state="running"}"#))
            .collect();
        assert_eq!(
            running,
            vec![r#"sandboxd_sandboxes{state="running"} 1"#],
            "one running sandbox:\n{text}"
        );
        assert!(
            text.contains("sandboxd_http_request_duration_seconds"),
            "{text}"
        );
        let create_observed = text.lines().any(|l| {
            l.starts_with("sandboxd_http_request_duration_seconds_count")
                && l.contains(r#"route="/v1/sandboxes""#)
                && l.contains(r#"method="POST""#)
                && l.contains(r#"status="201""#)
        });
        assert!(
            create_observed,
            "the create is recorded under its route template:\n{text}"
        );

        let resp = anonymous
            .get(daemon.endpoint("/v1/openapi.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let doc: Value = resp.json().await.expect("the OpenAPI document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().expect("paths");
        for path in ["/v1/sandboxes", "/v1/sandboxes/{id}/exec"] {
            assert!(
                paths.contains_key(path),
                "{path} missing from {:?}",
                paths.keys()
            );
        }
        assert!(doc["paths"]["/v1/sandboxes"]["post"].is_object());
    });
}

/// The fixture's promise, checked: even with the daemon dead (so no `DELETE` is possible), dropping a
/// [`Daemon`] kills its sandboxes' processes and removes their cgroups.
#[test]
fn fixture_teardown_leaves_no_sandbox_behind_even_with_the_daemon_dead() {
    e2e(|| async {
        let mut daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        let (pid, _) =
            recorded_init(&daemon.sandbox_dir(&id)).expect("the runtime records the init pid");
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert!(!cgroup_dirs_of(&id).is_empty(), "the sandbox has cgroups");
        daemon.kill9();
        drop(daemon);
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        assert!(gone(pid), "sandbox init {pid} survived the fixture");
        assert_eq!(cgroup_dirs_of(&id), Vec::<std::path::PathBuf>::new());
    });
}

/// Invariant (`sandboxd_service::env`, one environment change per sandbox at a time): of 100
/// concurrent changes through Daytona's toolbox `/env`, each setting `A` and `B` to its own number,
/// the agent (a new command), the row (`GET /api/sandbox/{id}`) and the runtime's record (a command
/// after a stop and a start) all end on the same one, `A` and `B` together. Bad names and values
/// are each a 400 that changes nothing.
#[test]
fn concurrent_env_changes_leave_agent_row_and_record_agreeing() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let env_path = format!("/api/toolbox/{id}/env");
        let answers = futures::future::join_all((0..100).map(|n| {
            let body = json!({"set": {"A": n.to_string(), "B": n.to_string()}});
            let path = env_path.clone();
            let d = &d;
            async move { d.post_json(&path, &body).await.status() }
        }))
        .await;
        assert!(answers.iter().all(|s| *s == 200), "{answers:?}");
        let seen = d.exec(&id, &["sh", "-c", "echo $A $B"]).await.stdout;
        let (a, b) = seen.trim().split_once(' ').expect("two values");
        assert_eq!(a, b, "A and B changed together: {seen}");
        let row = d.get_json(&format!("/api/sandbox/{id}")).await;
        assert_eq!(row["env"]["A"], a, "the row agrees with the agent: {row}");
        assert_eq!(row["env"]["B"], a, "{row}");

        for bad in [
            json!({"set": {"1BAD": "x"}}),
            json!({"set": {"A=B": "x"}}),
            json!({"set": {"": "x"}}),
            json!({"set": {"OK": "a\u{0}b"}}),
            json!({"unset": ["BAD NAME"]}),
            json!({"set": "A=1"}),
            json!({"sett": {"A": "1"}}),
        ] {
            let resp = d.post_json(&env_path, &bad).await;
            assert_eq!(resp.status(), 400, "{bad}: {}", resp.text().await.unwrap());
        }
        let row = d.get_json(&format!("/api/sandbox/{id}")).await;
        assert_eq!(
            row["env"]["A"], a,
            "a refused change changed nothing: {row}"
        );
        assert!(row["env"].get("OK").is_none(), "{row}");

        for step in ["stop", "start"] {
            let resp = d
                .post_json(&format!("/api/sandbox/{id}/{step}"), &json!({}))
                .await;
            assert!(resp.status().is_success(), "{step}: {}", resp.status());
        }
        let after = d.exec(&id, &["sh", "-c", "echo $A $B"]).await.stdout;
        assert_eq!(
            after.trim(),
            format!("{a} {a}"),
            "the next boot starts with it"
        );
    });
}
