//! `process.Process` against the real agent binary, driven by `EnvdClient`.

mod support;

use futures::StreamExt;
use sandboxd_envd::process::{
    DataEvent, ProcessConfig, ProcessEvent, ProcessSelector, Signal, StartRequest,
};
use sandboxd_envd::{Code, ExecOptions};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::{sh, user_exists, Agent};

fn start_req(cmd: &[&str], tag: Option<&str>, stdin: bool) -> StartRequest {
    StartRequest {
        process: ProcessConfig {
            cmd: cmd[0].into(),
            args: cmd[1..].iter().map(|s| s.to_string()).collect(),
            envs: HashMap::new(),
            cwd: None,
        },
        pty: None,
        tag: tag.map(Into::into),
        stdin: Some(stdin),
    }
}

#[tokio::test]
async fn exec_collects_stdout_and_exit_zero() {
    let agent = Agent::start().await;
    let cmd = ["python3", "-c", "print(1+1)"].map(String::from);
    let out = agent
        .client()
        .exec(&cmd, ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n");
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.end.status, "exit status 0");
    assert!(out.end.exited && out.end.error.is_none());
    assert!(out.pid > 0);
}

#[tokio::test]
async fn exec_reports_stderr_and_nonzero_exit() {
    let agent = Agent::start().await;
    let out = agent
        .client()
        .exec(
            &sh("echo out; echo err >&2; exit 3"),
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    assert_eq!(out.end.status, "exit status 3");
    assert_eq!(out.end.error.as_deref(), Some("exit status 3"));
}

#[tokio::test]
async fn environment_cwd_and_oom_score_are_set_for_children() {
    let agent = Agent::start().await;
    let opts = ExecOptions {
        envs: HashMap::from([("GREETING".into(), "hello".into())]),
        cwd: Some("/tmp".into()),
        ..Default::default()
    };
    let script = "echo $GREETING $HOME $USER $LOGNAME; pwd; cat /proc/self/oom_score_adj; ps -o pgid= -p $$ | tr -d ' '; echo $$";
    let out = agent.client().exec(&sh(script), opts).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "hello /root root root", "{text}");
    assert_eq!(lines[1], "/tmp");
    assert_eq!(lines[2], "0");
    // Its own process group: pgid == pid.
    if lines.len() == 5 {
        assert_eq!(lines[3], lines[4], "{text}");
    }
}

#[tokio::test]
async fn hundred_megabytes_stream_through_with_bounded_agent_memory() {
    let agent = Agent::start().await;
    let before = agent.status_kb("VmHWM");
    let mut stream = agent
        .client()
        .start(start_req(
            &["head", "-c", "100000000", "/dev/zero"],
            None,
            false,
        ))
        .await
        .unwrap();
    let (mut bytes, mut end) = (0usize, None);
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            ProcessEvent::Data(DataEvent::Stdout(b)) => bytes += b.len(),
            ProcessEvent::End(e) => end = Some(e),
            _ => {}
        }
    }
    assert_eq!(bytes, 100_000_000);
    assert_eq!(end.unwrap().exit_code, 0);
    let peak = agent.status_kb("VmHWM");
    eprintln!("agent VmHWM {before} kB before, {peak} kB after 100 MB");
    assert!(
        peak < 40 * 1024,
        "agent peak RSS {peak} kB (was {before} kB before)"
    );
}

#[tokio::test]
async fn slow_reader_backpressures_the_child() {
    let agent = Agent::start().await;
    let mut stream = agent
        .client()
        .start(start_req(
            &["head", "-c", "50000000", "/dev/zero"],
            None,
            false,
        ))
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, ProcessEvent::Start(_)));
    // Stop reading for a while: the agent must not buffer the output meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let peak = agent.status_kb("VmHWM");
    assert!(
        peak < 32 * 1024,
        "agent buffered output while the client paused: {peak} kB"
    );
    let mut bytes = 0;
    while let Some(ev) = stream.next().await {
        if let ProcessEvent::Data(DataEvent::Stdout(b)) = ev.unwrap() {
            bytes += b.len();
        }
    }
    assert_eq!(bytes, 50_000_000);
}

#[tokio::test]
async fn signal_list_and_tags() {
    let agent = Agent::start().await;
    let client = agent.client();
    let mut stream = client
        .start(start_req(&["sleep", "100"], Some("napper"), false))
        .await
        .unwrap();
    let Some(Ok(ProcessEvent::Start(start))) = stream.next().await else {
        panic!("no start event")
    };
    let listed = client.list().await.unwrap();
    let me = listed
        .iter()
        .find(|p| p.pid == start.pid)
        .expect("running process listed");
    assert_eq!(me.tag.as_deref(), Some("napper"));
    assert_eq!(me.config.cmd, "sleep");
    assert_eq!(me.config.args, vec!["100".to_string()]);

    client
        .send_signal(ProcessSelector::Tag("napper".into()), Signal::Sigkill)
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut end = None;
    while let Some(ev) = stream.next().await {
        if let ProcessEvent::End(e) = ev.unwrap() {
            end = Some(e);
        }
    }
    let end = end.expect("end event");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!((end.exit_code, end.exited), (-1, false));
    assert_eq!(end.status, "signal: killed");
    assert!(client
        .list()
        .await
        .unwrap()
        .iter()
        .all(|p| p.pid != start.pid));
    let err = client
        .send_signal(ProcessSelector::Pid(start.pid), Signal::Sigterm)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
}

#[tokio::test]
async fn sigterm_reports_terminated() {
    let agent = Agent::start().await;
    let client = agent.client();
    let mut stream = client
        .start(start_req(&["sleep", "100"], None, false))
        .await
        .unwrap();
    let Some(Ok(ProcessEvent::Start(start))) = stream.next().await else {
        panic!("no start event")
    };
    client
        .send_signal(ProcessSelector::Pid(start.pid), Signal::Sigterm)
        .await
        .unwrap();
    let mut status = String::new();
    while let Some(ev) = stream.next().await {
        if let ProcessEvent::End(e) = ev.unwrap() {
            status = e.status;
        }
    }
    assert_eq!(status, "signal: terminated");
}

#[tokio::test]
async fn stdin_is_written_and_closed() {
    let agent = Agent::start().await;
    let client = agent.client();
    let mut stream = client.start(start_req(&["cat"], None, true)).await.unwrap();
    let Some(Ok(ProcessEvent::Start(start))) = stream.next().await else {
        panic!("no start event")
    };
    let sel = ProcessSelector::Pid(start.pid);
    client
        .send_stdin(sel.clone(), "ping\n".into())
        .await
        .unwrap();
    client.close_stdin(sel.clone()).await.unwrap();
    let mut out = Vec::new();
    let mut code = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            ProcessEvent::Data(DataEvent::Stdout(b)) => out.extend_from_slice(&b),
            ProcessEvent::End(e) => code = Some(e.exit_code),
            _ => {}
        }
    }
    assert_eq!(out, b"ping\n");
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn keepalives_flow_on_idle_streams_and_start_comes_first() {
    let agent = Agent::start().await;
    let client = agent.client().with_keepalive_interval(1);
    let mut stream = client
        .start(start_req(&["sleep", "2.5"], None, false))
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while let Some(ev) = stream.next().await {
        kinds.push(match ev.unwrap() {
            ProcessEvent::Start(_) => "start",
            ProcessEvent::Keepalive(_) => "keepalive",
            ProcessEvent::End(_) => "end",
            ProcessEvent::Data(_) => "data",
        });
    }
    assert_eq!(kinds.first(), Some(&"start"));
    assert_eq!(kinds.last(), Some(&"end"));
    assert!(
        kinds.iter().filter(|k| **k == "keepalive").count() >= 2,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn deadline_kills_and_background_children_do_not_hold_the_stream() {
    let agent = Agent::start().await;
    let client = agent.client();
    let opts = ExecOptions {
        timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let out = client.exec(&sh("sleep 30"), opts).await.unwrap();
    assert_eq!(out.end.status, "signal: killed");

    let t0 = Instant::now();
    let out = client
        .exec(&sh("sleep 30 & echo started"), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.stdout, b"started\n");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stream waited for the background child"
    );
}

#[tokio::test]
async fn bad_start_requests_are_refused_with_codes() {
    let agent = Agent::start().await;
    let client = agent.client();
    let missing = client
        .exec(&["/no/such/binary".to_string()], ExecOptions::default())
        .await;
    assert_eq!(missing.unwrap_err().code(), Some(Code::InvalidArgument));
    let bad_cwd = ExecOptions {
        cwd: Some("/no/such/dir".into()),
        ..Default::default()
    };
    let err = client.exec(&sh("true"), bad_cwd).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument));
    let err = client
        .as_user("ghost-user-x")
        .exec(&sh("true"), ExecOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated));
}

#[tokio::test]
async fn runs_as_the_requested_user() {
    if !user_exists("nobody") {
        eprintln!("skipping: no user 'nobody' in /etc/passwd");
        return;
    }
    let agent = Agent::start().await;
    let out = agent
        .client()
        .as_user("nobody")
        .exec(
            &sh("id -u; id -g; echo $USER"),
            ExecOptions {
                cwd: Some("/".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "65534\n65534\nnobody\n"
    );
}

/// `POST /init` gives later commands the environment of the sandbox that took the agent (a warm
/// pool's), replacing the one it had; without the token it is refused and changes nothing.
#[tokio::test]
async fn init_replaces_the_environment_of_later_commands() {
    let agent = Agent::start().await;
    let echo = sh("echo \"${FROM_CREATE:-unset}\"");
    let (status, _) = agent
        .raw(
            "POST",
            "/init",
            &[("content-type", "application/json")],
            br#"{"envVars":{"FROM_CREATE":"stolen"}}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 401);
    let out = agent
        .client()
        .exec(&echo, ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unset\n");
    let env = HashMap::from([("FROM_CREATE".to_string(), "yes".to_string())]);
    agent.client().init(env).await.unwrap();
    let out = agent
        .client()
        .exec(&echo, ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yes\n");
}
