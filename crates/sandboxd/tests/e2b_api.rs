//! The E2B control API of the real daemon, over HTTP as the E2B SDKs speak it (`X-API-KEY`, E2B's JSON
//! names, `{code, message}` errors): create dedupe, error shapes, timeouts, listings (pause and resume
//! are in `e2b_pause.rs`).

mod common;
mod e2b_support;

use common::Daemon;
use e2b_support::e2b_test;
use e2b_support::http::{create, exec, expect_e2b_error, get, post, sandbox_id};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The create's replay window (sandboxd_service::e2b::REPLAY_WINDOW).
const REPLAY_WINDOW: Duration = Duration::from_secs(10);

/// The seed's create dedupe: 200 identical creates at once make exactly one sandbox and every caller
/// gets its id; after the 10 s replay window the same body makes a second one; a duplicate of that one
/// inside its own window gets it again — unless it was killed meanwhile.
#[test]
fn concurrent_identical_creates_make_one_sandbox_until_the_window_closes() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let body = json!({
            "templateID": "base",
            "timeout": 120,
            "metadata": {"test": "dedupe", "run": std::process::id().to_string()},
            "envVars": {"B": "2", "A": "1"},
            "allow_internet_access": true,
            "autoPause": false,
        });
        let calls: Vec<_> = (0..200)
            .map(|_| {
                let client = d.http().clone();
                let url = d.endpoint("/v2/sandboxes");
                let body = body.clone();
                tokio::spawn(async move {
                    let resp = client.post(url).json(&body).send().await.expect("create");
                    let status = resp.status().as_u16();
                    (status, resp.json::<Value>().await.unwrap_or_default())
                })
            })
            .collect();
        let mut ids = HashSet::new();
        for call in calls {
            let (status, answer) = call.await.unwrap();
            assert_eq!(status, 201, "create: {answer}");
            assert_eq!(answer["state"], "running", "{answer}");
            ids.insert(sandbox_id(&answer));
        }
        let done = Instant::now();
        assert_eq!(ids.len(), 1, "every caller gets the same sandbox: {ids:?}");
        let first = ids.into_iter().next().unwrap();
        let all = d.list_all().await;
        assert_eq!(all.len(), 1, "exactly one sandbox exists: {all:?}");
        assert_eq!(all[0]["id"], json!(first));

        // Still inside the window: a duplicate replays.
        let (status, again) = create(&d, &body).await;
        assert_eq!((status, sandbox_id(&again)), (201, first.clone()));

        // After the window: a legitimate repeat gets a new sandbox.
        tokio::time::sleep(
            (REPLAY_WINDOW + Duration::from_millis(500)).saturating_sub(done.elapsed()),
        )
        .await;
        let (status, second) = create(&d, &body).await;
        assert_eq!(status, 201, "{second}");
        let second = sandbox_id(&second);
        assert_ne!(
            second, first,
            "a create after the replay window is a new sandbox"
        );
        let (status, dup) = create(&d, &body).await;
        assert_eq!((status, sandbox_id(&dup)), (201, second.clone()));
        let ids: HashSet<String> = d
            .list_all()
            .await
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, HashSet::from([first.clone(), second.clone()]));

        // A duplicate of a sandbox killed inside its window is never handed the dead sandbox (nor its
        // id): it waits for the window to close and gets a new one.
        let killed = d
            .http()
            .delete(d.endpoint(&format!("/sandboxes/{second}")))
            .send()
            .await
            .unwrap();
        assert_eq!(killed.status(), 204);
        let asked = Instant::now();
        let (status, third) = create(&d, &body).await;
        assert_eq!(status, 201, "{third}");
        let third = sandbox_id(&third);
        assert!(
            ![&first, &second].contains(&&third),
            "{third} was handed out before"
        );
        assert!(asked.elapsed() <= REPLAY_WINDOW + Duration::from_secs(2));

        // A different body is a different request.
        let mut other = body.clone();
        other["envVars"]["A"] = json!("changed");
        let (status, fourth) = create(&d, &other).await;
        assert_eq!(status, 201, "{fourth}");
        assert!(![first, second, third].contains(&sandbox_id(&fourth)));
    });
}

/// `Idempotency-Key` is honoured on top of the body dedupe: the same key replays the first answer
/// (also after the body's window), and the same key with another body is refused.
#[test]
fn idempotency_key_replays_the_first_answer() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let body = json!({"templateID": "base", "metadata": {"test": "key"}});
        let send = |body: Value| {
            d.http()
                .post(d.endpoint("/v2/sandboxes"))
                .header("Idempotency-Key", "create-1")
                .json(&body)
                .send()
        };
        let first = send(body.clone()).await.unwrap();
        assert_eq!(first.status(), 201);
        let first: Value = first.json().await.unwrap();
        let replay = send(body.clone()).await.unwrap();
        assert_eq!(replay.status(), 201);
        assert_eq!(
            replay
                .headers()
                .get("idempotent-replayed")
                .map(|v| v.to_str().unwrap()),
            Some("true")
        );
        let replay: Value = replay.json().await.unwrap();
        assert_eq!(sandbox_id(&replay), sandbox_id(&first));
        let mut other = body.clone();
        other["metadata"]["test"] = json!("other");
        expect_e2b_error(
            "key reused for another body",
            send(other).await.unwrap(),
            422,
        )
        .await;
        assert_eq!(d.list_all().await.len(), 1);
    });
}

/// Refused requests answer `{code, message}` with their status and create nothing.
#[test]
fn refused_requests_answer_in_the_e2b_shape_and_create_nothing() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let create_url = d.endpoint("/v2/sandboxes");
        let bad_template = d
            .http()
            .post(&create_url)
            .json(&json!({"templateID": "no-such-template"}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("unknown template", bad_template, 404).await;
        let bad_json = d
            .http()
            .post(&create_url)
            .header("content-type", "application/json")
            .body("{\"templateID\": ")
            .send()
            .await
            .unwrap();
        expect_e2b_error("bad JSON", bad_json, 400).await;
        let wrong_type = d
            .http()
            .post(d.endpoint("/sandboxes"))
            .json(&json!({"templateID": "base", "metadata": {"n": 1}}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("metadata value not a string", wrong_type, 400).await;
        let unknown_volume = d
            .http()
            .post(&create_url)
            .json(&json!({"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("an unknown volume", unknown_volume, 404).await;
        let hiding_the_system = d
            .http()
            .post(&create_url)
            .json(&json!({"templateID": "base", "volumeMounts": [{"name": "v", "path": "/etc"}]}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("a mount over /etc", hiding_the_system, 400).await;
        let too_long = d
            .http()
            .post(&create_url)
            .json(&json!({"templateID": "base", "timeout": 10_000_000}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("timeout over the maximum", too_long, 400).await;
        let resume_alone = d
            .http()
            .post(&create_url)
            .json(&json!({"templateID": "base", "autoResume": {"enabled": true}}))
            .send()
            .await
            .unwrap();
        expect_e2b_error("autoResume without autoPause", resume_alone, 400).await;
        for key in [Some("wrong-key"), None] {
            let resp = d
                .client_as(key)
                .post(&create_url)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            expect_e2b_error(&format!("key {key:?}"), resp, 401).await;
            let resp = d
                .client_as(key)
                .get(d.endpoint("/v2/sandboxes"))
                .send()
                .await
                .unwrap();
            expect_e2b_error(&format!("list with key {key:?}"), resp, 401).await;
        }
        let unknown = "doesnotexist0000";
        let http = d.http();
        for (what, req) in [
            (
                "get",
                http.get(d.endpoint(&format!("/sandboxes/{unknown}"))),
            ),
            (
                "kill",
                http.delete(d.endpoint(&format!("/sandboxes/{unknown}"))),
            ),
            (
                "metrics",
                http.get(d.endpoint(&format!("/sandboxes/{unknown}/metrics"))),
            ),
            (
                "pause",
                http.post(d.endpoint(&format!("/sandboxes/{unknown}/pause"))),
            ),
            (
                "timeout",
                http.post(d.endpoint(&format!("/sandboxes/{unknown}/timeout")))
                    .json(&json!({"timeout": 30})),
            ),
            (
                "connect",
                http.post(d.endpoint(&format!("/v2/sandboxes/{unknown}/connect")))
                    .json(&json!({"timeout": 30})),
            ),
            ("unknown route", http.get(d.endpoint("/sandboxes/x/logs"))),
        ] {
            expect_e2b_error(what, req.send().await.unwrap(), 404).await;
        }
        let wrong_method = http.put(d.endpoint("/v2/sandboxes")).send().await.unwrap();
        expect_e2b_error("wrong method", wrong_method, 405).await;
        assert!(
            d.list_all().await.is_empty(),
            "refused requests created sandboxes"
        );
    });
}

/// Python that connects to `port` on the sandbox's gateway (the host end of its pair, one of the
/// host's own addresses) and prints `reached` or `unreachable <why>`.
fn gateway_probe(port: u16) -> String {
    format!(
        "import socket, struct\n\
         gw = [l.split()[2] for l in open('/proc/net/route') if l.split()[1] == '00000000'][0]\n\
         ip = socket.inet_ntoa(struct.pack('<L', int(gw, 16)))\n\
         s = socket.socket(); s.settimeout(3)\n\
         try:\n  s.connect((ip, {port})); print('reached')\n\
         except Exception as e: print('unreachable', type(e).__name__)"
    )
}

/// E2B's `network`: an invalid entry is a 400 in E2B's shape that creates nothing; a domain name in
/// `allowOut` (as the SDK sends it) is accepted, and such a sandbox resolves through its own
/// forwarder on its gateway; IPv4 allow and deny lists are enforced. A host service on the sandbox's
/// gateway (10.201.x.x, one of the host's own addresses) is out of reach of a sandbox without lists
/// and of one that denies `10.0.0.0/8`; a sandbox whose `allowOut` names `10.0.0.0/8` reaches it.
#[test]
fn network_lists_are_enforced_and_domain_names_accepted() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let resp = post(
            &d,
            "/v2/sandboxes",
            json!({"templateID": "base", "network": {"allowOut": ["api.openai.com", "bad_name.example.com"]}}),
        )
        .await;
        assert_eq!(resp.status().as_u16(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], json!(400), "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("network.allowOut entry \"bad_name.example.com\" is not")
                && message.ends_with("it has the character '_'; labels hold ASCII letters, digits and '-' (write an internationalised name in its xn-- form)"),
            "{body}"
        );
        let resp = post(
            &d,
            "/v2/sandboxes",
            // A rule grants no egress: without internet access its host must be in allowOut.
            json!({"templateID": "base", "allow_internet_access": false,
                   "network": {"rules": {"a.com": [{"transform": {"headers": {"x-a": "1"}}}]}}}),
        )
        .await;
        expect_e2b_error("a rule for a host the sandbox cannot reach", resp, 400).await;
        assert!(
            d.list_all().await.is_empty(),
            "a refused create made a sandbox"
        );

        let service = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = service.local_addr().unwrap().port();
        let (status, listed) = create(
            &d,
            &json!({"templateID": "base",
                    "network": {"denyOut": ["10.0.0.0/8"], "allowOut": ["1.1.1.1"]}}),
        )
        .await;
        assert_eq!(status, 201, "{listed}");
        let listed = sandbox_id(&listed);
        let (status, plain) = create(&d, &json!({"templateID": "base"})).await;
        assert_eq!(status, 201, "{plain}");
        let plain = sandbox_id(&plain);
        let (status, opened) = create(
            &d,
            &json!({"templateID": "base", "network": {"allowOut": ["10.0.0.0/8"]}}),
        )
        .await;
        assert_eq!(status, 201, "{opened}");
        let opened = sandbox_id(&opened);
        let (status, named) = create(
            &d,
            &json!({"templateID": "base",
                    "network": {"allowOut": ["api.openai.com", "*.Example.com"], "dnsServers": ["8.8.8.8"]}}),
        )
        .await;
        assert_eq!(status, 201, "{named}");
        let named = sandbox_id(&named);
        let route = "gw=$(awk '$2 == \"00000000\" {print $3}' /proc/net/route); \
                     printf '%d.%d.%d.%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2}; echo; cat /etc/resolv.conf";
        let (status, out) = exec(&d, &named, &["bash", "-c", route]).await;
        assert_eq!(status, 200, "{out}");
        let stdout = out["stdout"].as_str().unwrap_or_default();
        let (gateway, resolv) = stdout.split_once('\n').unwrap_or_default();
        assert!(gateway.starts_with("10."), "{out}");
        assert_eq!(resolv, format!("nameserver {gateway}\n"), "{out}");
        let probe = gateway_probe(port);
        for (id, want) in [
            (&listed, "unreachable"),
            (&plain, "unreachable"),
            (&opened, "reached"),
        ] {
            let (status, out) = exec(&d, id, &["python3", "-c", &probe]).await;
            assert_eq!(status, 200, "{out}");
            assert_eq!(out["exitCode"], 0, "{out}");
            let stdout = out["stdout"].as_str().unwrap_or_default();
            assert!(stdout.starts_with(want), "{id}: want {want}: {out}");
        }
        for id in [&listed, &plain, &opened, &named] {
            let resp = d
                .http()
                .delete(d.endpoint(&format!("/sandboxes/{id}")))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 204);
        }
        drop(service);
    });
}

/// `timeout` moves the deadline both ways; a sandbox past it is deleted by the sweeper. Metrics answer
/// one sample with every field the SDKs read.
#[test]
fn timeout_moves_the_deadline_and_metrics_sample_the_cgroup() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let (status, created) =
            create(&d, &json!({"timeout": 30, "metadata": {"test": "timeout"}})).await;
        assert_eq!(status, 201, "{created}");
        let id = sandbox_id(&created);

        let metrics: Vec<Value> =
            serde_json::from_value(d.get_json(&format!("/sandboxes/{id}/metrics")).await).unwrap();
        assert_eq!(metrics.len(), 1);
        for field in [
            "timestamp",
            "timestampUnix",
            "cpuCount",
            "cpuUsedPct",
            "memUsed",
            "memTotal",
            "memCache",
            "diskUsed",
            "diskTotal",
        ] {
            assert!(
                metrics[0].get(field).is_some(),
                "{field} missing: {metrics:?}"
            );
        }
        assert_eq!(metrics[0]["memTotal"], json!(512u64 * 1024 * 1024));
        assert!(metrics[0]["memUsed"].as_u64().unwrap() > 0);

        let end_at = |v: &Value| v["endAt"].as_str().unwrap().to_string();
        let resp = post(
            &d,
            &format!("/sandboxes/{id}/timeout"),
            json!({"timeout": 3600}),
        )
        .await;
        assert_eq!(resp.status(), 204);
        let (_, later) = get(&d, &id).await;
        assert!(
            end_at(&later) > end_at(&created),
            "{} !> {}",
            end_at(&later),
            end_at(&created)
        );
        let resp = post(
            &d,
            &format!("/sandboxes/{id}/timeout"),
            json!({"timeout": 1}),
        )
        .await;
        assert_eq!(resp.status(), 204);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, _) = get(&d, &id).await;
            if status == 404 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the expired sandbox was not swept"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // E2B reports a sandbox being deleted as gone already; the row itself follows once the
        // runtime has torn it down.
        while !d.list_all().await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "the expired sandbox was never deleted"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// `GET /v2/sandboxes` filters by metadata (URL-encoded as the SDKs send it) and pages with
/// `x-next-token`; `GET /sandboxes` (older SDKs) lists every running one.
#[test]
fn listings_filter_by_metadata_and_page() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let mut mine = HashSet::new();
        for i in 0..3 {
            let (status, body) = create(
                &d,
                &json!({"metadata": {"group": "list me", "i": i.to_string()}}),
            )
            .await;
            assert_eq!(status, 201, "{body}");
            mine.insert(sandbox_id(&body));
        }
        let (status, _) = create(&d, &json!({"metadata": {"group": "other"}})).await;
        assert_eq!(status, 201);

        // Python: urlencode({quote("group"): quote("list me")}) as the `metadata` parameter.
        let mut seen = HashSet::new();
        let mut token: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut url = d.endpoint("/v2/sandboxes?metadata=group%3Dlist%252520me&limit=2");
            if let Some(t) = &token {
                url.push_str(&format!("&nextToken={}", urlencode(t)));
            }
            let resp = d.http().get(url).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            token = resp
                .headers()
                .get("x-next-token")
                .map(|v| v.to_str().unwrap().to_string());
            let page: Vec<Value> = resp.json().await.unwrap();
            assert!(page.len() <= 2);
            for s in &page {
                assert_eq!(s["metadata"]["group"], "list me", "{s}");
                assert!(
                    s.get("envdAccessToken").is_none(),
                    "listings carry no tokens"
                );
                seen.insert(s["sandboxID"].as_str().unwrap().to_string());
            }
            pages += 1;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(seen, mine);
        assert_eq!(pages, 2);
        let old: Vec<Value> = serde_json::from_value(d.get_json("/sandboxes").await).unwrap();
        assert_eq!(old.len(), 4);
    });
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An upload the agent refuses before reading it (here: a wrong access token) reaches the client
/// through the proxy with the agent's answer, not a 502 from a broken pipe half-way through the body.
#[test]
fn an_upload_refused_early_reaches_the_client_through_the_proxy() {
    e2b_test(async {
        let daemon = Daemon::start().await;
        let id = daemon.create_id().await;
        for _ in 0..3 {
            let resp = reqwest::Client::new()
                .post(format!("{}/files?path=/tmp/big.bin", daemon.url()))
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "49983")
                .header("X-Access-Token", "not-the-token")
                .header("content-type", "application/octet-stream")
                .body(vec![b'x'; 8 * 1024 * 1024])
                .send()
                .await
                .expect("an answer, not a dropped connection");
            assert_eq!(resp.status(), 401);
        }
    });
}

/// E2B's `network.allowPublicTraffic: false`: the create answers the sandbox's `trafficAccessToken`,
/// and its ports answer only requests carrying it in `e2b-traffic-access-token` (401 otherwise);
/// envd's own port keeps answering its access token; a public sandbox needs nothing.
#[test]
fn a_sandbox_without_public_traffic_answers_only_its_traffic_token() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let (status, private) = create(
            &d,
            &json!({"templateID": "base", "network": {"allowPublicTraffic": false}}),
        )
        .await;
        assert_eq!(status, 201, "{private}");
        let token = private["trafficAccessToken"]
            .as_str()
            .expect("a private sandbox's create answers its traffic token")
            .to_string();
        let id = sandbox_id(&private);
        let (status, public) = create(&d, &json!({"templateID": "base"})).await;
        assert_eq!(status, 201, "{public}");
        assert!(public.get("trafficAccessToken").is_none(), "{public}");
        let public = sandbox_id(&public);
        for sandbox in [&id, &public] {
            common::serve_port(&d, sandbox, 8000).await;
        }
        let get = |sandbox: &str, header: Option<(&'static str, String)>| {
            let mut req = d
                .http_plain()
                .get(d.endpoint("/"))
                .header("Host", format!("8000-{sandbox}.localhost:{}", d.port()));
            if let Some((name, value)) = header {
                req = req.header(name, value);
            }
            async move { req.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(get(&id, None).await, 401);
        assert_eq!(
            get(&id, Some(("e2b-traffic-access-token", "0".repeat(32)))).await,
            401
        );
        assert_eq!(
            get(&id, Some(("e2b-traffic-access-token", token.clone()))).await,
            200
        );
        assert_eq!(get(&public, None).await, 200);
        // The token is the sandbox's own: it opens no other private sandbox.
        // (Another body: an identical create within the replay window is the same sandbox.)
        let (_, other) = create(
            &d,
            &json!({"templateID": "base", "metadata": {"n": "2"},
                    "network": {"allowPublicTraffic": false}}),
        )
        .await;
        let other = sandbox_id(&other);
        assert_ne!(other, id);
        common::serve_port(&d, &other, 8000).await;
        assert_eq!(
            get(&other, Some(("e2b-traffic-access-token", token))).await,
            401
        );
        // envd's port answers its own access token, as the SDK sends it, without a traffic token.
        let health = d
            .http_plain()
            .get(d.endpoint("/health"))
            .header("Host", format!("49983-{id}.localhost:{}", d.port()))
            .header(
                "X-Access-Token",
                private["envdAccessToken"].as_str().unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 204, "envd's port is gated");
    });
}
