//! `sbx shell` and `GET /v1/sandboxes/{id}/terminal` against the real daemon: an interactive session
//! driven through tmux (a real terminal: raw mode, window size, Ctrl-C, the remote exit code), the
//! same from a pipe, the terminal's HTTP errors and hang-up, and its end when its sandbox pauses.

mod common;

use common::{e2e, eventually, sbx_binary, Daemon};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tmux server of this test's own, with one window running a command.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str, cols: u16, rows: u16) -> Tmux {
        let tmux = Tmux {
            socket: format!("sbx-shell-test-{}", std::process::id()),
        };
        let (x, y) = (cols.to_string(), rows.to_string());
        tmux.run(&["new-session", "-d", "-s", "t", "-x", &x, "-y", &y, cmd]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux (apt install tmux)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits until the screen satisfies `done`; panics with the screen after 15 s.
    async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} on the screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// How many processes in sandbox `id` run `sleep 4242`.
async fn running(d: &Daemon, id: &str) -> String {
    sleeping(d, id, 4242).await
}

/// How many processes in sandbox `id` run `sleep SECONDS`.
async fn sleeping(d: &Daemon, id: &str, seconds: u32) -> String {
    let count = format!("ps -eo args | grep -c '^sleep {seconds}$'");
    d.exec(id, &["sh", "-c", &count])
        .await
        .stdout
        .trim()
        .to_string()
}

/// Lines of the screen that are exactly `line` (trailing blanks ignored).
fn count_lines(screen: &str, line: &str) -> usize {
    screen.lines().filter(|l| l.trim_end() == line).count()
}

/// The claim: `sbx shell` is a real terminal. Typed keys reach a login shell, `stty size` reports the
/// local window and follows a resize, Ctrl-C interrupts the remote foreground command (not sbx),
/// and sbx exits with the remote exit code.
#[test]
fn sbx_shell_is_a_real_terminal() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let cmd = format!(
            "SB_API_URL={} SB_PAT_TOKEN={} {} shell {id}; echo SBX-EXIT=$?; sleep 600",
            d.url(),
            d.token(),
            sbx_binary().display()
        );
        let tmux = Tmux::start(&cmd, 100, 30);
        tmux.wait_for("prompt", |s| s.contains(&format!("@{id}:~$")))
            .await;

        tmux.keys(&["stty size", "Enter"]);
        tmux.wait_for("30 100", |s| count_lines(s, "30 100") == 1)
            .await;
        tmux.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
        // The resize reaches the sandbox asynchronously: ask until the new size is the answer.
        let deadline = Instant::now() + Duration::from_secs(15);
        while count_lines(&tmux.screen(), "40 120") == 0 {
            assert!(
                Instant::now() < deadline,
                "stty size never said 40 120:\n{}",
                tmux.screen()
            );
            tmux.keys(&["stty size", "Enter"]);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        tmux.keys(&["sleep 100; echo NOT-INTERRUPTED", "Enter"]);
        tmux.wait_for("sleep", |s| s.contains("sleep 100;")).await;
        tmux.keys(&["C-c"]);
        tmux.keys(&["echo AFTER-$((40+2))", "Enter"]);
        let screen = tmux
            .wait_for("the shell after Ctrl-C", |s| {
                count_lines(s, "AFTER-42") == 1
            })
            .await;
        assert_eq!(count_lines(&screen, "NOT-INTERRUPTED"), 0, "{screen}");
        assert!(
            !screen.contains("SBX-EXIT"),
            "Ctrl-C ended sbx instead of the remote command:\n{screen}"
        );

        tmux.keys(&["exit 3", "Enter"]);
        tmux.wait_for("sbx's exit code", |s| count_lines(s, "SBX-EXIT=3") == 1)
            .await;
    });
}

/// The claim: from a pipe, the input is typed into the terminal and its end is the end of input;
/// the remote exit code is sbx's. `sbx exec -it` is the same terminal.
#[test]
fn sbx_shell_from_a_pipe_and_exec_it() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let mut child = d
            .sbx_command(&["shell", &id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"echo piped-$((6*7))\nexit 5\n").unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("piped-42"), "{stdout}");
        assert_eq!(out.status.code(), Some(5), "{stdout}");

        // A partial last line still reaches the command, and its end ends `cat`.
        let mut child = d
            .sbx_command(&["exec", "-it", &id, "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"no-newline")
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("no-newlineno-newline"));

        let out = d.sbx(&["exec", "-t", &id, "--", "sh", "-c", "stty size; exit 4"]);
        assert_eq!(out.status.code(), Some(4));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("24 80"),
            "the default window"
        );

        let out = d.sbx(&["shell", "no-such-sandbox"]);
        assert_eq!(out.status.code(), Some(255));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
    });
}

/// The claim: a terminal's mistakes are HTTP errors before any upgrade, and a client that leaves
/// hangs the terminal up (its process is killed).
#[test]
fn terminal_errors_and_hang_up() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let path = format!("/v1/sandboxes/{id}/terminal");
        let plain = d.http().get(d.endpoint(&path)).send().await.unwrap();
        assert_eq!(plain.status(), 400, "not a WebSocket");

        let ws = |query: &str| d.terminal_request(&id, query);
        for (query, status) in [
            ("cols=0", 400),
            ("rows=5000", 400),
            ("colour=red", 400),
            ("cmd=", 400),
        ] {
            match tokio_tungstenite::connect_async(ws(query)).await {
                Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                    assert_eq!(resp.status(), status, "{query}")
                }
                other => panic!("{query}: expected HTTP {status}, got {other:?}"),
            }
        }
        let anonymous = format!("ws://{}{path}", d.addr());
        match tokio_tungstenite::connect_async(anonymous).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 401)
            }
            other => panic!("expected 401, got {other:?}"),
        }

        let (socket, _) = tokio_tungstenite::connect_async(ws("cmd=sleep&cmd=4242"))
            .await
            .expect("open a terminal");
        assert_eq!(running(&d, &id).await, "1", "the terminal's process runs");
        drop(socket);
        let deadline = Instant::now() + Duration::from_secs(10);
        while running(&d, &id).await != "0" {
            assert!(
                Instant::now() < deadline,
                "the terminal's process outlived its client"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// The claim: a pause of the sandbox ends its terminals with an error notice naming the pause (a
/// frozen sandbox writes nothing, so the terminal would otherwise hang until its client gave up),
/// and the terminal's process, which nobody can attach to again, is hung up when the sandbox
/// resumes (not at the pause: its frozen agent cannot end it, and the process stays frozen).
#[test]
fn a_pause_ends_a_terminal_and_the_resume_hangs_it_up() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let mut socket = open_sleeper(&d, &id).await;

        let paused = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &serde_json::json!({}))
            .await;
        assert_eq!(paused.status(), 200);
        // The deadline only bounds a hang: the notice comes at the pause.
        let notice = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match socket.next().await {
                    Some(Ok(Message::Text(text))) => return text.to_string(),
                    Some(Ok(_)) => continue,
                    other => panic!("the terminal ended without a notice: {other:?}"),
                }
            }
        })
        .await
        .expect("a pause ends the terminal");
        let notice: serde_json::Value = serde_json::from_str(&notice).unwrap();
        assert_eq!(notice["type"], "error", "{notice}");
        let message = notice["message"].as_str().unwrap_or_default();
        assert!(message.contains("was paused"), "{notice}");
        drop(socket);

        // The resume ends it (`orphan_terminals`); a hang-up that comes after the resume, when
        // the terminal's end does, ends it at once.
        resume_and_wait_for_the_end(&d, &id).await;
    });
}

/// Opens a terminal of sandbox `id` running `sleep 4242`, and checks that it runs.
async fn open_sleeper(
    d: &Daemon,
    id: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let (socket, _) = tokio_tungstenite::connect_async(sleeper_terminal(d, id))
        .await
        .expect("open a terminal");
    assert_eq!(running(d, id).await, "1", "the terminal's process runs");
    socket
}

/// A request for a terminal of sandbox `id` running `sleep 4242`.
fn sleeper_terminal(
    d: &Daemon,
    id: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    sleep_terminal(d, id, 4242)
}

/// A request for a terminal of sandbox `id` running `sleep SECONDS`.
fn sleep_terminal(
    d: &Daemon,
    id: &str,
    seconds: u32,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    d.terminal_request(id, &format!("cmd=sleep&cmd={seconds}"))
}

/// The claim: a pause that comes after a terminal's process started but before the terminal was
/// attached (the failpoint `terminal.before-attach` holds it there 3 s) answers the open with a
/// 409, and the process, which nobody can reach, is ended when the sandbox resumes.
#[test]
fn a_pause_before_a_terminal_is_attached_refuses_it_and_the_resume_ends_its_process() {
    use tokio_tungstenite::tungstenite::Error as WsError;
    e2e(|| async {
        let d = Daemon::start_with(
            &[],
            &[("FAILPOINTS", "terminal.before-attach=return(3000)")],
        )
        .await;
        let id = d.create_id().await;
        let open = tokio::spawn(tokio_tungstenite::connect_async(sleeper_terminal(&d, &id)));
        eventually(
            || "the terminal's process never started".into(),
            Duration::from_secs(30),
            || async { (running(&d, &id).await == "1").then_some(()) },
        )
        .await;
        let paused = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &serde_json::json!({}))
            .await;
        assert_eq!(paused.status(), 200);
        match open.await.unwrap() {
            Err(WsError::Http(answer)) => assert_eq!(answer.status(), 409, "{answer:?}"),
            Err(other) => panic!("the open failed otherwise: {other}"),
            Ok(_) => panic!("a terminal paused before it was attached was opened"),
        }
        resume_and_wait_for_the_end(&d, &id).await;
    });
}

/// The claim (`orphan_terminals`): a daemon killed while it served a terminal leaves the terminal's
/// process to nobody, so the daemon started after it ends that process; a terminal the new daemon
/// opens meanwhile is its own and goes on.
#[test]
fn a_restarted_daemon_ends_the_terminals_the_one_before_it_served() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let id = d.create_id().await;
        let _before = open_sleeper(&d, &id).await;
        d.kill9();
        d.restart().await;
        let (_after, _) = tokio_tungstenite::connect_async(sleep_terminal(&d, &id, 4343))
            .await
            .expect("open a terminal after the restart");
        eventually(
            || "the restart did not end the terminal of the daemon before it".into(),
            Duration::from_secs(30),
            || async { (running(&d, &id).await == "0").then_some(()) },
        )
        .await;
        assert_eq!(
            sleeping(&d, &id, 4343).await,
            "1",
            "the new daemon's terminal runs"
        );
    });
}

/// The claim (`orphan_terminals`): a terminal a pause cut off is ended at the resume even when the
/// daemon that paused the sandbox was killed before it: the resume does not rely on what that
/// daemon remembered.
#[test]
fn a_resume_after_a_restart_ends_the_terminals_the_pause_cut_off() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let id = d.create_id().await;
        let socket = open_sleeper(&d, &id).await;
        let paused = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &serde_json::json!({}))
            .await;
        assert_eq!(paused.status(), 200);
        drop(socket);
        d.kill9();
        d.restart().await;
        resume_and_wait_for_the_end(&d, &id).await;
    });
}

/// Resumes sandbox `id` and waits (30 s at most) until its terminal's `sleep 4242` is gone.
async fn resume_and_wait_for_the_end(d: &Daemon, id: &str) {
    let resumed = d
        .post_json(
            &format!("/v1/sandboxes/{id}/resume"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(resumed.status(), 200);
    eventually(
        || "the resume did not end the terminal's process".into(),
        Duration::from_secs(30),
        || async { (running(d, id).await == "0").then_some(()) },
    )
    .await;
}
