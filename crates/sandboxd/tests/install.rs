//! Running sandboxd as an installed service: its config file, `sandboxd doctor`, the Debian
//! package with its systemd readiness, and the JSON log a service's journal keeps.

mod common;

use common::{assert_success, e2e, expect_error, id_of, Daemon};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// `serve` reads its config file: a key the command line leaves alone takes the file's value, a
/// flag wins over the file's, and a file with a key `serve` does not know stops the daemon before
/// it makes anything, naming the file's line.
#[test]
fn serve_reads_its_config_file_under_its_flags_and_refuses_an_unknown_key() {
    e2e(|| async {
        let daemon = Daemon::start_prepared(Default::default(), |data_dir, setup| {
            let file = data_dir.with_extension("toml");
            std::fs::write(
                &file,
                "# the harness passes --listen: the flag wins\n\
                 listen = \"127.0.0.1:1\"\n\
                 max_disk_mb = 64\n",
            )
            .unwrap();
            setup
                .args
                .extend(["--config".into(), file.display().to_string()]);
        })
        .await;
        let big = daemon
            .post_json("/v1/sandboxes", &json!({"diskMB": 128}))
            .await;
        expect_error("past the file's max_disk_mb", big, 400, None).await;
        let id = id_of(&daemon.create(json!({"diskMB": 64})).await);
        assert_eq!(daemon.exec(&id, &["true"]).await.exit_code, 0);

        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "listen = \"127.0.0.1:1\"\nnet_slot = 5\n").unwrap();
        let data = dir.path().join("data");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["serve", "--config"])
            .arg(&bad)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("SB_CONFIG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("{}:2: unknown key `net_slot`", bad.display())),
            "{said}"
        );
        assert!(!data.exists(), "the refused daemon made its data dir");
    });
}

/// `sandboxd doctor` on a host that runs these tests finds nothing missing, runs the daemon's own
/// probes (the disk-quota choice, idmapped mounts) beside the data dir and leaves nothing there or
/// mounted; a daemon that could not start (no agent) is `missing` and exit status 1.
#[test]
fn doctor_checks_the_host_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let doctor = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["doctor", "--json", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .args(extra)
            .env_remove("SB_CONFIG")
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (out.status.code(), report)
    };
    let agent = sandboxd_test_support::agent_binary();
    let (code, report) = doctor(&["--agent-bin", agent.to_str().unwrap()]);
    let checks = report["checks"].as_array().unwrap();
    let names: BTreeSet<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for name in [
        "root",
        "kernel",
        "cgroups",
        "user namespaces",
        "overlayfs",
        "nftables",
        "agent",
        "data dir",
        "listen",
        "gvisor tier",
        "open files",
        "disk quota",
        "id ranges",
    ] {
        assert!(names.contains(name), "no {name} check: {report}");
    }
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["canRun"], true);
    for c in checks {
        let status = c["status"].as_str().unwrap();
        assert!(["ok", "degraded"].contains(&status), "{c}");
        assert_eq!(
            c["fix"].is_null(),
            status == "ok",
            "a fix for what is not ok: {c}"
        );
    }
    let cgroups = checks.iter().find(|c| c["name"] == "cgroups").unwrap();
    assert!(cgroups["detail"].as_str().unwrap().contains("memory, pids"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the doctor left {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(".sandboxd-doctor-"),
        "a probe stays mounted"
    );

    let (code, report) = doctor(&["--agent-bin", "/nonexistent/sandboxd-agent"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["canRun"], false);
    let agent = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent")
        .unwrap();
    assert_eq!(agent["status"], "missing", "{agent}");
}

/// The Debian package (`scripts/package`, here of this test build) holds a daemon that runs as
/// installed: unpacked, its `sandboxd` reads the packaged config file, finds the packaged agent in
/// `/usr/lib/sandboxd`, tells systemd READY=1 once it serves and STOPPING=1 on SIGTERM (the unit is
/// `Type=notify`), and its unit passes `systemd-analyze verify` without a warning.
#[test]
fn the_debian_package_holds_a_daemon_that_tells_systemd_when_it_serves() {
    e2e(|| async {
        let work = tempfile::tempdir().unwrap();
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let sbx = common::sbx_binary();
        let agent = sandboxd_test_support::agent_binary();
        let out = std::process::Command::new(repo.join("scripts/package"))
            .arg("--sandboxd")
            .arg(env!("CARGO_BIN_EXE_sandboxd"))
            .arg("--sbx")
            .arg(&sbx)
            .arg("--agent")
            .arg(&agent)
            .args(["--compress", "none", "--out"])
            .arg(work.path())
            .output()
            .unwrap();
        assert_success("scripts/package", &out);
        let deb = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let field = |name: &str| {
            let out = std::process::Command::new("dpkg-deb")
                .args(["-f", &deb, name])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(field("Package"), "sandboxd");
        assert!(
            field("Depends").contains("nftables"),
            "{}",
            field("Depends")
        );
        let root = work.path().join("root");
        let unpacked = std::process::Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .output()
            .unwrap();
        assert_success("dpkg-deb -x", &unpacked);
        let control = work.path().join("control");
        let control_out = std::process::Command::new("dpkg-deb")
            .arg("-e")
            .arg(&deb)
            .arg(&control)
            .output()
            .unwrap();
        assert_success("dpkg-deb -e", &control_out);
        assert_eq!(
            std::fs::read_to_string(control.join("conffiles")).unwrap(),
            "/etc/sandboxd/config.toml\n"
        );
        for path in [
            "usr/bin/sandboxd",
            "usr/bin/sbx",
            "usr/lib/sandboxd/sandboxd-agent",
            "lib/systemd/system/sandboxd.service",
            "etc/sandboxd/config.toml",
        ] {
            assert!(root.join(path).is_file(), "the package has no /{path}");
        }
        // The unit, pointed at the unpacked binary (verify wants ExecStart to exist).
        let unit = std::fs::read_to_string(root.join("lib/systemd/system/sandboxd.service"))
            .unwrap()
            .replace(
                "ExecStart=/usr/bin/sandboxd",
                &format!("ExecStart={}", root.join("usr/bin/sandboxd").display()),
            );
        for line in ["Type=notify", "KillMode=process", "Restart=on-failure"] {
            assert!(unit.contains(line), "the unit lacks {line}");
        }
        let unit_path = work.path().join("sandboxd.service");
        std::fs::write(&unit_path, unit).unwrap();
        let verify = std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit_path)
            .output()
            .unwrap();
        assert_success("systemd-analyze verify", &verify);
        assert!(
            verify.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&verify.stderr)
        );

        // The unpacked daemon on the packaged config file, under a stand-in for systemd's socket.
        let notify = work.path().join("notify.sock");
        let systemd = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
        systemd
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let config = root.join("etc/sandboxd/config.toml");
        let mut daemon = Daemon::start_setup(common::Setup {
            binary: Some(root.join("usr/bin/sandboxd")),
            args: vec!["--config".into(), config.display().to_string()],
            env: vec![("NOTIFY_SOCKET".into(), notify.display().to_string())],
            ..Default::default()
        })
        .await;
        let mut said = String::new();
        let mut buf = [0u8; 1024];
        while !said.contains("READY=1") {
            let n = systemd.recv(&mut buf).expect("READY=1 within 30 s");
            said.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert!(said.contains("STATUS=serving on"), "{said}");
        let id = daemon.create_id().await;
        assert_eq!(daemon.exec(&id, &["true"]).await.exit_code, 0);
        let log = std::fs::read_to_string(daemon.log_path(1, "err")).unwrap();
        assert!(
            log.contains("usr/lib/sandboxd/sandboxd-agent"),
            "the daemon did not run the packaged agent"
        );
        assert_eq!(
            daemon.delete(&format!("/v1/sandboxes/{id}")).await.status(),
            204
        );
        let status = daemon.terminate();
        assert!(status.success(), "{status:?}");
        let n = systemd.recv(&mut buf).expect("STOPPING=1 on SIGTERM");
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
    });
}

/// `--log-format json`: every line the daemon writes is one JSON object, and a line logged while a
/// request is served lists the request's span with its id — the caller's `X-Request-Id`, echoed in
/// the answer, or a new one when the caller's is unusable — and the sandbox its path names.
#[test]
fn a_json_log_names_each_request_and_the_sandbox_it_is_for() {
    e2e(|| async {
        let daemon = Daemon::start_with(
            &["--log-format", "json"],
            &[("SB_LOG", "info,sandboxd_api::request_log=debug")],
        )
        .await;
        let id = daemon.create_id().await;
        let exec = daemon
            .http()
            .post(daemon.endpoint(&format!("/v1/sandboxes/{id}/exec")))
            .header("x-request-id", "exec-7f3")
            .json(&json!({"cmd": ["true"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(exec.status(), 200);
        assert_eq!(exec.headers()["x-request-id"], "exec-7f3");
        let list = daemon
            .http()
            .get(daemon.endpoint("/v1/sandboxes"))
            .header("x-request-id", "two words")
            .send()
            .await
            .unwrap();
        let made = list.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert!(
            made.len() == 32 && made.bytes().all(|b| b.is_ascii_hexdigit()),
            "{made}"
        );

        // A proxied request (nothing listens on the port: a 502) names the sandbox the proxy found.
        let proxied = daemon
            .http_plain()
            .get(daemon.endpoint("/"))
            .header("host", format!("8000-{id}.localhost:{}", daemon.port()))
            .header("x-request-id", "proxied-1")
            .send()
            .await
            .unwrap();
        assert_eq!(proxied.headers()["x-request-id"], "proxied-1");

        let request_of = |line: &Value| -> Option<Value> {
            let spans = line["spans"].as_array()?;
            spans.iter().find(|s| s["name"] == "request").cloned()
        };
        let answered = |request_id: &str| -> Option<(Value, Value)> {
            let log = std::fs::read_to_string(daemon.log_path(1, "err")).unwrap();
            log.lines().find_map(|l| {
                let line: Value = serde_json::from_str(l).ok()?;
                let request = request_of(&line)?;
                (line["message"] == "answered" && request["request_id"] == request_id)
                    .then_some((line, request))
            })
        };
        // Each answer's line is written before the answer leaves, so all three are there now.
        let (line, request) = answered("exec-7f3").expect("the exec's answer is logged");
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(request["sandbox"], id.as_str(), "{line}");
        assert_eq!(request["method"], "POST", "{line}");
        assert_eq!(
            request["path"],
            format!("/v1/sandboxes/{id}/exec"),
            "{line}"
        );
        let (line, request) = answered("proxied-1").expect("the proxied answer is logged");
        assert_eq!(request["sandbox"], id.as_str(), "{line}");
        assert_eq!(line["level"], "WARN", "{line}");
        let (_, request) = answered(&made).expect("the list's answer is logged");
        assert!(request.get("sandbox").is_none(), "{request}");

        let log = std::fs::read_to_string(daemon.log_path(1, "err")).unwrap();
        for l in log.lines().filter(|l| !l.is_empty()) {
            let line: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(
                line["level"].is_string() && line["timestamp"].is_string(),
                "{l}"
            );
        }
    });
}

/// This process's soft and hard limits on open files.
fn limit(resource: libc::__rlimit_resource_t) -> (libc::rlim_t, libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut limit) }, 0);
    (limit.rlim_cur, limit.rlim_max)
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: libc::rlim_t, hard: libc::rlim_t) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(resource, &limit) }, 0);
}

/// The soft and hard limits of `name` (`Max open files`, …) in `/proc/<pid>/limits`, as written.
fn limits_of(pid: u32, name: &str) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
    let fields: Vec<&str> = line.trim_start_matches(name).split_whitespace().collect();
    (fields[0].to_string(), fields[1].to_string())
}

/// `serve` raises its soft limit on open files to the hard one at start (each idle sandbox holds
/// descriptors in the daemon): a daemon started under a soft limit of 1023 runs with the hard one.
#[test]
fn serve_raises_its_soft_limit_on_open_files_to_the_hard_one() {
    e2e(|| async {
        let (soft, hard) = limit(libc::RLIMIT_NOFILE);
        let low = hard.min(1024) - 1;
        set_limit(libc::RLIMIT_NOFILE, low, hard);
        let daemon = Daemon::start().await;
        set_limit(libc::RLIMIT_NOFILE, soft, hard);
        let hard = hard.to_string();
        assert_eq!(
            limits_of(daemon.pid(), "Max open files"),
            (hard.clone(), hard),
            "started under {low}"
        );
    });
}

/// The daemon holds secrets' values, so it writes no core file: started under an unlimited soft
/// limit on core files, it runs with 0 (its hard limit unchanged, for sandboxes to raise theirs).
#[test]
fn serve_turns_off_its_core_files() {
    e2e(|| async {
        let (soft, hard) = limit(libc::RLIMIT_CORE);
        set_limit(libc::RLIMIT_CORE, hard, hard);
        let daemon = Daemon::start().await;
        set_limit(libc::RLIMIT_CORE, soft, hard);
        let (daemon_soft, daemon_hard) = limits_of(daemon.pid(), "Max core file size");
        assert_eq!(daemon_soft, "0", "its soft limit");
        let written = |l: libc::rlim_t| match l {
            libc::RLIM_INFINITY => "unlimited".to_string(),
            n => n.to_string(),
        };
        assert_eq!(daemon_hard, written(hard), "its hard limit");
    });
}

/// Spans a collector took: (trace id, span id, parent span id, name, attributes as text).
type Taken = Vec<(Vec<u8>, Vec<u8>, Vec<u8>, String, Vec<(String, String)>)>;

/// A collector of our own on loopback, taking OTLP/HTTP protobuf on `/v1/traces`.
async fn collector() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Taken>>,
    std::sync::Arc<tokio::sync::Notify>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Taken::new()));
    let into = taken.clone();
    // Told after each export (a permit is kept when nobody waits, so none is missed).
    let arrived = std::sync::Arc::new(tokio::sync::Notify::new());
    let told = arrived.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (into, told) = (into.clone(), told.clone());
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let spans = request
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans);
                for span in spans {
                    let attributes = span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                                Some(Any::StringValue(s)) => s,
                                other => format!("{other:?}"),
                            };
                            (kv.key.clone(), value)
                        })
                        .collect();
                    into.lock().unwrap().push((
                        span.trace_id,
                        span.span_id,
                        span.parent_span_id,
                        span.name,
                        attributes,
                    ));
                }
                told.notify_one();
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, taken, arrived)
}

/// `--otlp-endpoint`: a create is exported to the collector as a `request` span (its request id
/// and sandbox) with the steps of its flow — the store's write that admits it, the runtime's
/// create and start — as child spans of the same trace, whatever `SB_LOG` says; an endpoint that
/// is no http URL stops the daemon before it starts, saying so.
#[test]
fn traces_of_a_create_reach_an_otlp_collector() {
    e2e(|| async {
        let (addr, taken, arrived) = collector().await;
        let endpoint = format!("http://{addr}");
        let daemon = Daemon::start_with(
            &["--otlp-endpoint", &endpoint],
            &[("OTEL_BSP_SCHEDULE_DELAY", "100"), ("SB_LOG", "warn")],
        )
        .await;
        let resp = daemon
            .http()
            .post(daemon.endpoint("/v1/sandboxes"))
            .header("x-request-id", "traced-create-1")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let id = id_of(&resp.json::<Value>().await.unwrap());
        let attr = |attrs: &[(String, String)], key: &str| {
            attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let (request, steps) = loop {
            let spans = taken.lock().unwrap().clone();
            let request = spans.iter().find(|s| {
                s.3 == "request" && attr(&s.4, "request_id").as_deref() == Some("traced-create-1")
            });
            if let Some(request) = request.cloned() {
                // The steps under it, directly or through another step.
                let mut under = BTreeSet::from([request.1.clone()]);
                let mut steps = BTreeSet::new();
                loop {
                    let before = under.len();
                    let found: Vec<_> = spans
                        .iter()
                        .filter(|s| s.0 == request.0 && under.contains(&s.2))
                        .collect();
                    for s in found {
                        under.insert(s.1.clone());
                        steps.insert(s.3.clone());
                    }
                    if under.len() == before {
                        break;
                    }
                }
                if ["admit", "runtime-create", "start"]
                    .iter()
                    .all(|s| steps.contains(*s))
                {
                    break (request, steps);
                }
            }
            // Wait for the next export.
            assert!(
                tokio::time::timeout_at(deadline, arrived.notified())
                    .await
                    .is_ok(),
                "the create's spans did not all reach the collector: {spans:?}"
            );
        };
        assert_eq!(attr(&request.4, "method").as_deref(), Some("POST"));
        assert_eq!(attr(&request.4, "path").as_deref(), Some("/v1/sandboxes"));
        assert!(steps.contains("ready"), "{steps:?}");
        drop(id);

        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["serve", "--otlp-endpoint", "127.0.0.1:4318", "--data-dir"])
            .arg(tempfile::tempdir().unwrap().path().join("d"))
            .env_remove("SB_CONFIG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("--otlp-endpoint \"127.0.0.1:4318\" is not an http:// or https:// URL"),
            "{said}"
        );
    });
}
