//! Interactive and long-lived processes against the real agent binary: terminals, attaching to
//! running processes, streamed input, and processes outliving the call that started them.

mod support;

use bytes::Bytes;
use futures::StreamExt;
use sandboxd_envd::process::{
    DataEvent, EndEvent, ProcessConfig, ProcessEvent, ProcessInput, ProcessSelector, Pty, PtySize,
    Signal, StartRequest,
};
use sandboxd_envd::{Code, ProcessStream};
use std::time::{Duration, Instant};
use support::Agent;

fn request(cmd: &[&str], tag: Option<&str>, stdin: bool, pty: Option<PtySize>) -> StartRequest {
    StartRequest {
        process: ProcessConfig {
            cmd: cmd[0].into(),
            args: cmd[1..].iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        pty: pty.map(|size| Pty { size: Some(size) }),
        tag: tag.map(Into::into),
        stdin: Some(stdin),
    }
}

async fn pid_of(stream: &mut ProcessStream) -> u32 {
    match stream.next().await {
        Some(Ok(ProcessEvent::Start(s))) => s.pid,
        other => panic!("expected a start event, got {other:?}"),
    }
}

/// Output (of any kind) read from `stream` until it contains `needle`; panics after 10 s.
async fn read_until(stream: &mut ProcessStream, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(ProcessEvent::Data(d)))) => {
                let (DataEvent::Stdout(b) | DataEvent::Stderr(b) | DataEvent::Pty(b)) = d;
                seen.push_str(&String::from_utf8_lossy(&b));
            }
            Ok(Some(Ok(ProcessEvent::Keepalive(_)))) => {}
            other => panic!("waiting for {needle:?} in {seen:?}, got {other:?}"),
        }
    }
}

/// The events left on `stream`, returning the end event.
async fn end_of(stream: &mut ProcessStream, out: &mut String) -> EndEvent {
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("stream ends in time")
    {
        match ev.expect("event") {
            ProcessEvent::Data(DataEvent::Stdout(b) | DataEvent::Stderr(b) | DataEvent::Pty(b)) => {
                out.push_str(&String::from_utf8_lossy(&b))
            }
            ProcessEvent::End(end) => return end,
            _ => {}
        }
    }
    panic!("stream ended without an end event")
}

#[tokio::test]
async fn pty_session_has_a_terminal_that_resizes_and_takes_input() {
    let agent = Agent::start().await;
    let client = agent.client();
    let script = "tty; echo TERM=$TERM; stty size; read line; stty size; echo got:$line; read more";
    let mut stream = client
        .start(request(
            &["/bin/sh", "-c", script],
            None,
            false,
            Some(PtySize { cols: 80, rows: 24 }),
        ))
        .await
        .unwrap();
    let pid = pid_of(&mut stream).await;
    let sel = ProcessSelector::Pid(pid);
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "24 80").await;
    assert!(seen.contains("/dev/pts/"), "{seen:?}");
    assert!(seen.contains("TERM=xterm-256color"), "{seen:?}");

    client
        .resize_pty(
            sel.clone(),
            PtySize {
                cols: 111,
                rows: 33,
            },
        )
        .await
        .unwrap();
    client
        .send_pty(sel.clone(), Bytes::from_static(b"hello\n"))
        .await
        .unwrap();
    read_until(&mut stream, &mut seen, "got:hello").await;
    assert!(seen.contains("33 111"), "{seen:?}");

    // A terminal takes terminal input only, and has no stdin to close.
    let err = client
        .send_stdin(sel.clone(), Bytes::from_static(b"x\n"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition));
    let err = client.close_stdin(sel.clone()).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition));

    let input = futures::stream::iter([ProcessInput::Pty(Bytes::from_static(b"bye\n"))]);
    client.stream_input(sel, input).await.unwrap();
    let mut rest = String::new();
    let end = end_of(&mut stream, &mut rest).await;
    assert_eq!(end.exit_code, 0, "{seen}{rest}");
}

#[tokio::test]
async fn pty_output_arrives_as_pty_events() {
    let agent = Agent::start().await;
    let mut stream = agent
        .client()
        .start(request(
            &["/bin/echo", "on-the-terminal"],
            None,
            false,
            Some(PtySize { cols: 40, rows: 10 }),
        ))
        .await
        .unwrap();
    pid_of(&mut stream).await;
    let mut pty = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            ProcessEvent::Data(DataEvent::Pty(b)) => pty.extend_from_slice(&b),
            ProcessEvent::Data(other) => panic!("non-pty output from a terminal: {other:?}"),
            _ => {}
        }
    }
    // The line discipline turns \n into \r\n.
    assert_eq!(pty, b"on-the-terminal\r\n");
}

#[tokio::test]
async fn background_process_survives_a_dropped_start_stream_and_is_reattached_then_killed() {
    let agent = Agent::start().await;
    let client = agent.client();
    let ticker = "i=0; while [ $i -lt 600 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done";
    let mut stream = client
        .start(request(
            &["/bin/sh", "-c", ticker],
            Some("ticker"),
            false,
            None,
        ))
        .await
        .unwrap();
    let pid = pid_of(&mut stream).await;
    drop(stream);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        client.list().await.unwrap().iter().any(|p| p.pid == pid),
        "the process died with its start stream"
    );

    // Two clients attach, by tag and by pid; each sees the output from now on, not a replay.
    let mut by_tag = client
        .connect(ProcessSelector::Tag("ticker".into()))
        .await
        .unwrap();
    let mut by_pid = client.connect(ProcessSelector::Pid(pid)).await.unwrap();
    assert_eq!(pid_of(&mut by_tag).await, pid);
    assert_eq!(pid_of(&mut by_pid).await, pid);
    for attached in [&mut by_tag, &mut by_pid] {
        let mut seen = String::new();
        read_until(attached, &mut seen, "tick").await;
        let first: u32 = seen
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no tick number in {seen:?}"));
        assert!(first >= 5, "attached stream replayed old output: {seen:?}");
    }

    client
        .send_signal(ProcessSelector::Tag("ticker".into()), Signal::Sigkill)
        .await
        .unwrap();
    for attached in [&mut by_tag, &mut by_pid] {
        let end = end_of(attached, &mut String::new()).await;
        assert_eq!(end.status, "signal: killed");
    }
    assert!(client.list().await.unwrap().iter().all(|p| p.pid != pid));
    let gone = match client.connect(ProcessSelector::Pid(pid)).await {
        Ok(mut s) => s.next().await.and_then(Result::err),
        Err(e) => Some(e),
    };
    assert_eq!(gone.and_then(|e| e.code()), Some(Code::NotFound));
}

#[tokio::test]
async fn stream_input_feeds_cat_as_it_arrives_and_close_stdin_ends_it() {
    let agent = Agent::start().await;
    let client = agent.client();
    let mut stream = client
        .start(request(&["cat"], Some("cat"), true, None))
        .await
        .unwrap();
    let pid = pid_of(&mut stream).await;

    let (tx, rx) = futures::channel::mpsc::unbounded::<ProcessInput>();
    let sender = client.clone();
    let streaming = tokio::spawn(async move {
        sender
            .stream_input(ProcessSelector::Tag("cat".into()), rx)
            .await
    });
    tx.unbounded_send(ProcessInput::Stdin(Bytes::from_static(b"first\n")))
        .unwrap();
    let mut seen = String::new();
    // The first chunk reaches cat while the input stream is still open.
    read_until(&mut stream, &mut seen, "first\n").await;
    tx.unbounded_send(ProcessInput::Stdin(Bytes::from_static(b"second\n")))
        .unwrap();
    drop(tx);
    streaming.await.unwrap().unwrap();
    client
        .send_stdin(ProcessSelector::Pid(pid), Bytes::from_static(b"third\n"))
        .await
        .unwrap();
    let err = client
        .send_pty(ProcessSelector::Pid(pid), Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition));

    client.close_stdin(ProcessSelector::Pid(pid)).await.unwrap();
    let end = end_of(&mut stream, &mut seen).await;
    assert_eq!(seen, "first\nsecond\nthird\n");
    assert_eq!((end.exit_code, end.exited), (0, true));

    let err = client
        .stream_input(
            ProcessSelector::Pid(pid),
            futures::stream::iter([ProcessInput::Stdin(Bytes::from_static(b"late"))]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
}

#[tokio::test]
async fn update_refuses_processes_without_a_terminal() {
    let agent = Agent::start().await;
    let client = agent.client();
    let mut stream = client
        .start(request(&["sleep", "30"], None, false, None))
        .await
        .unwrap();
    let pid = pid_of(&mut stream).await;
    let err = client
        .resize_pty(ProcessSelector::Pid(pid), PtySize { cols: 1, rows: 1 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition));
    let err = client
        .resize_pty(
            ProcessSelector::Tag("nope".into()),
            PtySize { cols: 1, rows: 1 },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
    client
        .send_signal(ProcessSelector::Pid(pid), Signal::Sigkill)
        .await
        .unwrap();
}
