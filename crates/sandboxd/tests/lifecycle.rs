//! What a sandbox's timeout does, against the real binary: by default it deletes the sandbox
//! (`e2e.rs`); with `lifecycle.onTimeout: "pause"` it pauses it in place — processes and memory
//! kept, no deadline while paused, never deleted by the expiry sweep — and with `autoResume` the next
//! request that needs the sandbox resumes it and gives it its timeout again. A paused sandbox without
//! auto-resume refuses commands until `POST /v1/sandboxes/{id}/resume`.

mod common;

use common::{
    authed_client, e2e, eventually, id_of, query, register_outbox_webhook, restart_and_reconcile,
    runtime_ids, slot_holders, wait_for_row, Daemon,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Polls sandbox `id` until its state is `want`; panics after `within`.
async fn wait_for_state(d: &Daemon, id: &str, want: &str, within: Duration) -> Value {
    wait_for_sandbox(d, id, want, within, |s| s["state"] == want).await
}

/// Polls sandbox `id` until `done` holds for it (`what` names that for the panic after `within`).
async fn wait_for_sandbox(
    d: &Daemon,
    id: &str,
    what: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let sandbox = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        if done(&sandbox) {
            return sandbox;
        }
        assert!(
            Instant::now() < deadline,
            "{id} not {what} within {within:?}: {sandbox}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a process that outlives its command; returns its pid.
async fn start_sleeper(d: &Daemon, id: &str) -> String {
    let started = d
        .exec(
            id,
            &["sh", "-c", "nohup sleep 1000 >/dev/null 2>&1 & echo $!"],
        )
        .await;
    let pid = started.stdout.trim().to_string();
    assert!(pid.parse::<u32>().is_ok(), "{started:?}");
    pid
}

#[test]
fn a_timeout_pauses_in_place_and_a_command_resumes() {
    e2e(|| async {
        let d = Daemon::start().await;
        let lifecycle = json!({"onTimeout": "pause", "autoResume": true});
        // Long enough for the sleeper to start first: a pause during that exec would end it with a
        // conflict (see the in-flight test below).
        let created = d
            .create(json!({"timeoutSec": 4, "lifecycle": lifecycle}))
            .await;
        assert_eq!(created["lifecycle"], lifecycle, "{created}");
        let id = id_of(&created);
        let pid = start_sleeper(&d, &id).await;

        // Pausing at the deadline is two steps (freeze, then drop the deadline; see the kill9 test
        // below): wait for both.
        let paused = |s: &Value| s["state"] == "paused" && s.get("expiresAt").is_none();
        wait_for_sandbox(
            &d,
            &id,
            "paused without a deadline",
            Duration::from_secs(10),
            paused,
        )
        .await;
        assert_eq!(d.cgroup_frozen(&id), Some(true), "paused but not frozen");
        // Past its deadline and more expiry sweeps (every 1 s): kept, still paused.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let still = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(still["state"], "paused", "{still}");

        // A command resumes it; the process started before the pause is alive.
        let alive = d
            .exec(&id, &["sh", "-c", &format!("kill -0 {pid} && echo alive")])
            .await;
        assert_eq!(alive.stdout, "alive\n", "{alive:?}");
        // The resume gave it its timeout again, which pauses it again. (Its state is not read in
        // between: a starved host can spend the 4 s before the read.)
        wait_for_sandbox(
            &d,
            &id,
            "paused again by the timeout the resume gave back",
            Duration::from_secs(30),
            paused,
        )
        .await;
        assert_eq!(d.cgroup_frozen(&id), Some(true), "paused but not frozen");

        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}

#[test]
fn without_auto_resume_a_paused_sandbox_waits_for_resume() {
    e2e(|| async {
        let d = Daemon::start().await;
        // Long enough for the sleeper to start first: a pause during that exec would end it with a
        // conflict (see the in-flight test below).
        let created = d
            .create(json!({"timeoutSec": 4, "lifecycle": {"onTimeout": "pause"}}))
            .await;
        assert_eq!(
            created["lifecycle"],
            json!({"onTimeout": "pause", "autoResume": false})
        );
        let id = id_of(&created);
        let pid = start_sleeper(&d, &id).await;
        wait_for_state(&d, &id, "paused", Duration::from_secs(10)).await;

        let (status, body) = d.exec_raw(&id, &json!({"cmd": ["true"]})).await;
        assert_eq!(status, 409, "{body}");
        let resp = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(resp.status(), 409, "pausing a paused sandbox");

        let resp = d
            .post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
            .await;
        assert_eq!(resp.status(), 200);
        let resumed: Value = resp.json().await.unwrap();
        assert_eq!(resumed["state"], "running", "{resumed}");
        assert!(resumed["expiresAt"].is_string(), "{resumed}");
        // The sleeper survived. The resume gave the sandbox its 4 s timeout again, which a starved
        // host can spend before the check runs: the check is then refused like any command of a
        // paused sandbox, and the sandbox is resumed again.
        let check = json!({"cmd": ["sh", "-c", format!("kill -0 {pid} && echo alive")]});
        let alive = eventually(
            || "the check never ran between a resume and the next timeout".into(),
            Duration::from_secs(60),
            || async {
                let (status, body) = d.exec_raw(&id, &check).await;
                if status == 409 {
                    d.post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
                        .await;
                    return None;
                }
                assert_eq!(status, 200, "{body}");
                Some(serde_json::from_str::<Value>(&body).unwrap())
            },
        )
        .await;
        assert_eq!(alive["stdout"], "alive\n", "{alive}");
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);

        // The same by hand, from the CLI, on a sandbox whose timeout is minutes away: no timer
        // races the commands.
        let created = d
            .create(json!({"timeoutSec": 600, "lifecycle": {"onTimeout": "pause"}}))
            .await;
        let id = id_of(&created);
        let paused = d.sbx(&["pause", &id]);
        assert_eq!(String::from_utf8_lossy(&paused.stdout), format!("{id}\n"));
        assert_eq!(d.cgroup_frozen(&id), Some(true));
        let shown = d.sbx(&["get", &id]);
        let shown = String::from_utf8_lossy(&shown.stdout).to_string();
        let line = |key: &str| {
            shown
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_default()
        };
        assert!(line("state:").ends_with(" paused"), "{shown}");
        assert!(line("onTimeout:").ends_with(" pause"), "{shown}");
        // The answer says where the memory is: frozen in RAM, on this tier.
        let shown = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(shown["pausedMemory"], "ram", "{shown}");
        let resumed = d.sbx(&["resume", &id, "--json"]);
        let resumed: Value = serde_json::from_slice(&resumed.stdout).expect("sbx resume --json");
        assert_eq!(resumed["state"], "running", "{resumed}");
        assert!(resumed.get("pausedMemory").is_none(), "{resumed}");

        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}

/// Prints whether a `sleep 4242` runs in the sandbox: `alive` or `gone` (the pattern does not match
/// the grep itself).
const SLEEPER_ALIVE: &str =
    "for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done 2>/dev/null \
                             | grep -q 'sleep 424[2]' && echo alive || echo gone";

/// A pause of mode `filesystem` keeps only the files: the sandbox is stopped (twice is a 409), and
/// a resume boots it again on them. An unknown mode is a 400.
#[test]
fn a_filesystem_pause_is_a_stop_that_resume_boots_again() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = id_of(&d.create(json!({})).await);
        // A pid of the old boot may be reused by the new one: the sleeper is known by its argument.
        d.exec(&id, &["sh", "-c", "nohup sleep 4242 >/dev/null 2>&1 &"])
            .await;
        // The check sees the sleeper once it has run `sleep` (a process in the middle of its exec
        // shows an empty command line).
        eventually(
            || "the check never saw the sleeper alive".into(),
            Duration::from_secs(10),
            || async {
                let alive = d.exec(&id, &["sh", "-c", SLEEPER_ALIVE]).await;
                (alive.stdout == "alive\n").then_some(())
            },
        )
        .await;
        // Paused to its files: stopped, the sleeper gone once a resume boots it again.
        let paused = d.sbx(&["pause", "--filesystem", &id, "--json"]);
        let paused: Value = serde_json::from_slice(&paused.stdout).expect("sbx pause --json");
        assert_eq!(paused["state"], "stopped", "{paused}");
        let resp = d
            .post_json(
                &format!("/v1/sandboxes/{id}/pause"),
                &json!({"mode": "filesystem"}),
            )
            .await;
        assert_eq!(resp.status(), 409, "paused to its files twice");
        let resp = d
            .post_json(
                &format!("/v1/sandboxes/{id}/pause"),
                &json!({"mode": "disk"}),
            )
            .await;
        assert_eq!(resp.status(), 400, "an unknown mode");
        let resumed = d.sbx(&["resume", &id, "--json"]);
        let resumed: Value = serde_json::from_slice(&resumed.stdout).expect("sbx resume --json");
        assert_eq!(resumed["state"], "running", "{resumed}");
        let gone = d.exec(&id, &["sh", "-c", SLEEPER_ALIVE]).await;
        assert_eq!(gone.stdout, "gone\n", "{gone:?}");
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}

/// Lifecycles that cannot be honoured are 400s that create nothing.
#[test]
fn an_impossible_lifecycle_is_refused() {
    e2e(|| async {
        let d = Daemon::start().await;
        for (lifecycle, says) in [
            (json!({"autoResume": true}), "autoResume needs"),
            (
                json!({"onTimeout": "kill", "autoResume": true}),
                "autoResume needs",
            ),
            (json!({"onTimeout": "sleep"}), "unknown variant `sleep`"),
            (
                json!({"onTimeout": "pause", "keepMemory": true}),
                "keepMemory",
            ),
        ] {
            let resp = d
                .post_json("/v1/sandboxes", &json!({"lifecycle": lifecycle}))
                .await;
            assert_eq!(resp.status(), 400, "{lifecycle}");
            let body: Value = resp.json().await.unwrap();
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{lifecycle}: {body}");
        }
        assert!(
            d.list_all().await.is_empty(),
            "a refused create made a sandbox"
        );
    });
}

/// Traffic through the proxy resumes an auto-resuming sandbox too: the requests that wake it are
/// answered by the server that was frozen. 20 of them at once resume it once (one
/// `sandbox.resumed`).
///
/// Paused by hand, so that it keeps its deadline (minutes away) and the test holds no race with a
/// timer: in the Debian VM, which runs beside the host's suite on a starved emulated CPU, a 5 s
/// timeout paused it again before the 20 answers came, and 30 s client deadlines ran out before the
/// resume. `a_timeout_pauses_in_place_and_a_command_resumes` covers the auto-pause by the timeout;
/// what paused a sandbox does not matter to the proxy's resume. The deadlines here are long and
/// only bound a hang.
///
/// The server is Python's directory listing with an accept queue of 128: `python3 -m http.server`
/// keeps five, and twenty connections at once would overflow it.
#[test]
fn proxied_traffic_resumes_an_auto_resuming_sandbox() {
    e2e(|| async {
        let d = Daemon::start().await;
        register_outbox_webhook(&d, &["sandbox.resumed"]).await;
        let created = d
            .create(
                json!({"timeoutSec": 600, "lifecycle": {"onTimeout": "pause", "autoResume": true}}),
            )
            .await;
        let id = id_of(&created);
        d.exec(
            &id,
            &[
                "sh",
                "-c",
                &format!("nohup python3 -c \"{DEEP_QUEUE_SERVER}\" >/dev/null 2>&1 &"),
            ],
        )
        .await;
        let get = || async {
            reqwest::Client::new()
                .get(d.url())
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "8000")
                .timeout(Duration::from_secs(120))
                .send()
                .await
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !get().await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "the server never answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let resp = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(resp.status(), 200);
        let resumes = || {
            query(
                &d,
                &format!(
                    "SELECT count(*) FROM webhook_outbox WHERE kind = 'sandbox.resumed' \
                     AND sandbox_id = '{id}'"
                ),
            )[0]
            .parse::<u64>()
            .unwrap()
        };
        assert_eq!(resumes(), 0);

        // Each answer is read whole in its own future: its client's deadline covers its own
        // exchange, not the wait for the slowest of the twenty.
        let answers = futures::future::join_all((0..20).map(|_| async {
            let resp = get().await.expect("every proxied request is answered");
            (resp.status(), resp.text().await)
        }))
        .await;
        for (status, body) in answers {
            assert_eq!(status, 200);
            let body = body.expect("every answer is read whole");
            assert!(body.contains("Directory listing"), "{body}");
        }
        let sandbox = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(sandbox["state"], "running", "{sandbox}");
        assert_eq!(resumes(), 1, "one resume for 20 requests");
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}

/// A directory-listing server on port 8000 whose accept queue holds 128 connections.
const DEEP_QUEUE_SERVER: &str = "import http.server as h; \
    S = type('S', (h.ThreadingHTTPServer,), {'request_queue_size': 128}); \
    S(('', 8000), h.SimpleHTTPRequestHandler).serve_forever()";

/// Crash: the daemon is killed (`kill -9`) after an auto-pause froze the sandbox and recorded it
/// `paused` but before its deadline was dropped (`expiry.after-pause`). After a restart the sandbox
/// is still there, paused and frozen, in store and runtime alike; the next sweep finishes the step
/// (no deadline) and never deletes it; a command then finds its process.
#[test]
fn kill9_between_auto_pause_and_dropping_the_deadline_keeps_the_sandbox() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "expiry.after-pause=return(60000)")]).await;
        // Long enough for the sleeper to start first (see the test above).
        let created = d
            .create(
                json!({"timeoutSec": 4, "lifecycle": {"onTimeout": "pause", "autoResume": true}}),
            )
            .await;
        let id = id_of(&created);
        let pid = start_sleeper(&d, &id).await;
        wait_for_row(
            &d,
            &format!(
                "SELECT id FROM sandboxes WHERE id = '{id}' AND state = 'paused' \
                 AND expires_at IS NOT NULL"
            ),
        )
        .await;
        assert_eq!(d.cgroup_frozen(&id), Some(true));
        d.kill9();
        restart_and_reconcile(&mut d).await;

        let held = std::collections::BTreeSet::from([id.clone()]);
        assert_eq!(runtime_ids(&d), held, "runtime vs store");
        assert_eq!(slot_holders(&d), held, "the paused sandbox keeps its slot");
        wait_for_row(
            &d,
            &format!("SELECT id FROM sandboxes WHERE id = '{id}' AND expires_at IS NULL"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let listed = d.list_all().await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["state"], "paused", "{listed:?}");
        assert_eq!(d.cgroup_frozen(&id), Some(true));
        let alive = d
            .exec(&id, &["sh", "-c", &format!("kill -0 {pid} && echo alive")])
            .await;
        assert_eq!(alive.stdout, "alive\n", "{alive:?}");
    });
}

/// Creates Daytona session `s1` in sandbox `id`; the sessions' path.
async fn create_session(d: &Daemon, http: &reqwest::Client, id: &str) -> String {
    let session = format!("/api/toolbox/{id}/process/session");
    let created = http
        .post(d.endpoint(&session))
        .json(&json!({"sessionId": "s1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    session
}

/// `request` (a spawned call) was answered 409, the command it waited on paused.
async fn assert_paused_mid_command(
    request: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    what: &str,
) {
    let answer = request
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what} is answered, not given up on: {e}"));
    assert_eq!(answer.status(), 409, "{what}");
    let text = answer.text().await.unwrap();
    assert!(
        text.contains("was paused while the command ran"),
        "{what}: {text}"
    );
}

/// What a sandbox's requests in flight get when it is paused (by hand here; the deadline's
/// auto-pause is the same flow): a frozen sandbox answers nothing until it resumes, so each ends
/// at once instead of waiting on it until its client gives up. The daemon's exec answers 409, its
/// stream ends with an `error` event; through the proxy, a request not yet answered gets 502 and a
/// response streaming back is cut short; a Daytona session's command waited on answers 409 too.
/// Each client here would give up after 30 s (on commands
/// and answers that wait longer): an end by that timeout fails the test. The command is not lost:
/// after the resume it goes on.
#[test]
fn a_pause_ends_the_requests_in_flight_and_their_commands_go_on_after_the_resume() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = id_of(&d.create(json!({})).await);
        // A server whose `/stream` sends its head and a first chunk, then holds the rest;
        // `/slow-head` holds its head. Each holds until `/go` is asked (after the resume), and
        // `/slow-head` marks a file once the request reached it.
        let server = r#"
import http.server, threading
go = threading.Event()
def hold():
    go.wait()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/go":
            go.set()
        if self.path == "/slow-head":
            open("/tmp/head-asked", "w").close()
            hold()
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"5\r\nfirst\r\n")
        self.wfile.flush()
        if self.path == "/stream":
            hold()
        self.wfile.write(b"0\r\n\r\n")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"#;
        d.put_file(&id, "/tmp/server.py", server.as_bytes().to_vec())
            .await;
        d.exec(
            &id,
            &["sh", "-c", "nohup python3 /tmp/server.py >/dev/null 2>&1 &"],
        )
        .await;
        let http = authed_client(d.token());
        let proxied = |path: &str| {
            http.get(format!("{}{path}", d.url()))
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "8000")
                .send()
        };
        eventually(
            || "the server in the sandbox never answered".into(),
            Duration::from_secs(30),
            || async { proxied("/").await.ok().filter(|r| r.status() == 200) },
        )
        .await;

        // It holds on a FIFO until the test writes to it (after the resume).
        let waits = "mkfifo /tmp/go && touch /tmp/ran && read _ < /tmp/go && touch /tmp/went-on";
        let command = json!({"cmd": ["sh", "-c", waits]});
        let exec = http
            .post(d.endpoint(&format!("/v1/sandboxes/{id}/exec")))
            .json(&command)
            .send();
        let streamed = json!({"cmd": ["sh", "-c", "echo started; sleep 120"]});
        let mut stream = http
            .post(d.endpoint(&format!("/v1/sandboxes/{id}/exec/stream")))
            .json(&streamed)
            .send()
            .await
            .expect("the stream's head");
        assert_eq!(stream.status(), 200);
        let mut body = proxied("/stream").await.expect("the proxied head");
        assert_eq!(body.status(), 200);
        let first = body.chunk().await.expect("the first chunk");
        assert_eq!(first.as_deref(), Some(&b"first"[..]));
        let slow_head = tokio::spawn(proxied("/slow-head"));
        let exec = tokio::spawn(exec);
        // A Daytona session's command run synchronously: the request waits for its end.
        let session = create_session(&d, &http, &id).await;
        let held =
            "mkfifo /tmp/gs && touch /tmp/session-ran && read _ < /tmp/gs && touch /tmp/s-on";
        let session_exec = tokio::spawn(
            http.post(d.endpoint(&format!("{session}/s1/exec")))
                .json(&json!({"command": held}))
                .send(),
        );
        // Every request is in flight: the command and the slow head have reached the sandbox, the
        // stream printed its first line.
        let mut lines = String::new();
        while !lines.contains("\n") {
            let chunk = stream.chunk().await.expect("the stream's first event");
            lines.push_str(&String::from_utf8_lossy(
                &chunk.expect("an event before the end"),
            ));
        }
        eventually(
            || "the commands and the slow head never reached the sandbox".into(),
            Duration::from_secs(30),
            || async {
                let seen = d
                    .exec(
                        &id,
                        &["ls", "/tmp/ran", "/tmp/head-asked", "/tmp/session-ran"],
                    )
                    .await;
                (seen.exit_code == 0).then_some(())
            },
        )
        .await;

        let resp = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(resp.status(), 200);

        assert_paused_mid_command(exec, "the exec").await;
        let rest = stream
            .text()
            .await
            .expect("the stream ends, not given up on");
        let last: Value = serde_json::from_str(rest.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {lines}{rest}"));
        assert_eq!(last["type"], "error", "{lines}{rest}");
        assert!(
            last["message"]
                .as_str()
                .is_some_and(|m| m.contains("was paused while the command ran")),
            "{last}"
        );
        let cut = body
            .chunk()
            .await
            .expect_err("the proxied body is cut short");
        assert!(!cut.is_timeout(), "the client gave up: {cut}");
        assert_paused_mid_command(session_exec, "the session's command").await;
        let head = slow_head.await.unwrap().expect("the slow head is answered");
        assert_eq!(head.status(), 502);
        let text = head.text().await.unwrap();
        assert!(
            text.contains("was paused before port 8000 answered"),
            "{text}"
        );

        // The command goes on once the sandbox resumes.
        let resp = d
            .post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
            .await;
        assert_eq!(resp.status(), 200);
        let go = d
            .exec(&id, &["sh", "-c", "echo go > /tmp/go; echo go > /tmp/gs"])
            .await;
        assert_eq!(go.exit_code, 0, "{go:?}");
        let go = proxied("/go")
            .await
            .expect("the server lets its requests go");
        assert_eq!(go.status(), 200);
        eventually(
            || "the paused command did not go on after the resume".into(),
            Duration::from_secs(30),
            || async {
                let seen = d.exec(&id, &["ls", "/tmp/went-on", "/tmp/s-on"]).await;
                (seen.exit_code == 0).then_some(())
            },
        )
        .await;
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}

/// A Daytona session's command waited on while its sandbox is paused ends with the pause's answer
/// whenever the wait's polls run: the failpoint `pause.after-record` holds the pause 3 s after it
/// recorded the sandbox `paused` and before the freeze, and the wait, polling the command every
/// 20 ms meanwhile, answers "paused while the command ran", not "paused, not running".
#[test]
fn a_session_wait_polling_while_a_pause_is_recorded_ends_with_the_pause() {
    e2e(|| async {
        let d = Daemon::start_with(&[], &[("FAILPOINTS", "pause.after-record=return(3000)")]).await;
        let id = id_of(&d.create(json!({})).await);
        let http = authed_client(d.token());
        let session = create_session(&d, &http, &id).await;
        let held = "touch /tmp/session-ran && sleep 120";
        let session_exec = tokio::spawn(
            http.post(d.endpoint(&format!("{session}/s1/exec")))
                .json(&json!({"command": held}))
                .send(),
        );
        eventually(
            || "the session's command never started".into(),
            Duration::from_secs(30),
            || async {
                let seen = d.exec(&id, &["ls", "/tmp/session-ran"]).await;
                (seen.exit_code == 0).then_some(())
            },
        )
        .await;
        let pause = tokio::spawn({
            let http = http.clone();
            let url = d.endpoint(&format!("/v1/sandboxes/{id}/pause"));
            async move { http.post(url).json(&json!({})).send().await }
        });
        assert_paused_mid_command(session_exec, "the session's command").await;
        let paused = pause.await.unwrap().expect("the pause is answered");
        assert_eq!(paused.status(), 200);
        assert_eq!(d.cgroup_frozen(&id), Some(true));
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}
