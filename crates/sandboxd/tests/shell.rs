//! `sbx shell` and `GET /v1/sandboxes/{id}/terminal` against the real daemon: an interactive session
//! driven through tmux (a real terminal: raw mode, window size, Ctrl-C, the remote exit code), the
//! same from a pipe, the terminal's HTTP errors and hang-up, and its end when its sandbox pauses.

mod common;

use common::{e2e, sbx_binary, Daemon};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

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
    let count = "ps -eo args | grep -c '^sleep 4242'";
    d.exec(id, &["sh", "-c", count])
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

        let ws = |query: &str| {
            let url = format!("ws://{}{path}?{query}", d.addr());
            let mut req = url.into_client_request().unwrap();
            let bearer = format!("Bearer {}", d.token()).parse().unwrap();
            req.headers_mut().insert("authorization", bearer);
            req
        };
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
/// and the terminal's process is paused with it, not killed: it goes on after the resume.
#[test]
fn a_pause_ends_a_terminal_and_its_process_goes_on() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let url = format!(
            "ws://{}/v1/sandboxes/{id}/terminal?cmd=sleep&cmd=4242",
            d.addr()
        );
        let mut req = url.into_client_request().unwrap();
        let bearer = format!("Bearer {}", d.token()).parse().unwrap();
        req.headers_mut().insert("authorization", bearer);
        let (mut socket, _) = tokio_tungstenite::connect_async(req)
            .await
            .expect("open a terminal");
        assert_eq!(running(&d, &id).await, "1", "the terminal's process runs");

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

        let resumed = d
            .post_json(
                &format!("/v1/sandboxes/{id}/resume"),
                &serde_json::json!({}),
            )
            .await;
        assert_eq!(resumed.status(), 200);
        assert_eq!(
            running(&d, &id).await,
            "1",
            "the process goes on after the resume"
        );
    });
}
