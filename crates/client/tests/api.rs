//! The client against `FakeDaemonForTests`: wire shapes, error mapping, NDJSON over real chunked HTTP.

#[path = "support/fake_daemon.rs"]
mod fake_daemon;

use fake_daemon::{labelled, FakeDaemonForTests, TOKEN};
use futures::StreamExt;
use sandboxd_client::types::{CreateSandbox, ExecEvent, ExecRequest};
use sandboxd_client::{decode_data, Client, ClientError, ListQuery};

fn client(fake: &FakeDaemonForTests) -> Client {
    Client::new(&fake.url, TOKEN).expect("client")
}

fn cmd(words: &[&str]) -> ExecRequest {
    ExecRequest {
        cmd: words.iter().map(|w| w.to_string()).collect(),
        ..ExecRequest::default()
    }
}

async fn collect(client: &Client, id: &str, words: &[&str]) -> Vec<Result<ExecEvent, ClientError>> {
    client.exec_stream(id, &cmd(words)).collect().await
}

#[tokio::test]
async fn exec_stream_yields_events_in_order_and_ends_at_exit() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let events = collect(&client(&fake), "sb-1", &["out:2", "err:oops", "exit:3"]).await;
    let events: Vec<ExecEvent> = events.into_iter().map(|e| e.expect("event")).collect();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0], ExecEvent::Start { pid: 42 });
    let ExecEvent::Stdout { data } = &events[1] else {
        panic!("expected stdout, got {:?}", events[1]);
    };
    assert_eq!(decode_data(data).expect("base64"), b"2\n");
    assert!(matches!(&events[2], ExecEvent::Stderr { .. }));
    assert_eq!(events[3], ExecEvent::Exit { exit_code: 3 });
}

#[tokio::test]
async fn exec_stream_without_exit_ends_with_a_protocol_error() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let events = collect(&client(&fake), "sb-1", &["out:x", "cut"]).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        matches!(events[2], Err(ClientError::Protocol(_))),
        "{events:?}"
    );
}

#[tokio::test]
async fn exec_stream_error_event_is_terminal() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let events = collect(&client(&fake), "sb-1", &["fail:agent gone"]).await;
    let last = events.last().expect("events").as_ref().expect("event");
    assert_eq!(
        last,
        &ExecEvent::Error {
            message: "agent gone".into()
        }
    );
}

#[tokio::test]
async fn exec_stream_on_unknown_sandbox_yields_the_api_error_only() {
    let fake = FakeDaemonForTests::start();
    let events = collect(&client(&fake), "nope", &["exit:0"]).await;
    assert_eq!(events.len(), 1);
    match &events[0] {
        Err(ClientError::Api { status, code, .. }) => {
            assert_eq!((*status, code.as_str()), (404, "not_found"))
        }
        other => panic!("expected Api error, got {other:?}"),
    }
}

#[tokio::test]
async fn exec_collected_returns_the_result_and_sends_the_options() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let mut request = cmd(&["out:hi", "exit:7"]);
    request.cwd = Some("/work".into());
    request.timeout_ms = Some(1500);
    let result = client(&fake).exec("sb-1", &request).await.expect("exec");
    assert_eq!((result.exit_code, result.stdout.as_str()), (7, "hi\n"));
    assert_eq!(fake.state().last_exec.as_ref(), Some(&request));
}

#[tokio::test]
async fn wrong_token_is_an_api_error_with_the_daemon_code() {
    let fake = FakeDaemonForTests::start();
    let client = Client::new(&fake.url, "wrong").expect("client");
    match client.list(&ListQuery::default()).await {
        Err(ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (401, "unauthorized"))
        }
        other => panic!("expected 401, got {other:?}"),
    }
}

#[tokio::test]
async fn non_json_error_keeps_status_and_text() {
    let fake = FakeDaemonForTests::start();
    match client(&fake).get("sb-teapot").await {
        Err(ClientError::Http { status, body }) => {
            assert_eq!((status, body.as_str()), (503, "upstream down"))
        }
        other => panic!("expected Http error, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_daemon_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port(); // the listener is dropped: nothing listens there any more
    let client = Client::new(&format!("http://127.0.0.1:{port}"), TOKEN).expect("client");
    assert!(matches!(
        client.get("x").await,
        Err(ClientError::Transport(_))
    ));
}

#[tokio::test]
async fn list_all_follows_cursors_and_sends_filters() {
    let fake = FakeDaemonForTests::start();
    for i in 0..5 {
        let sandbox = labelled(&format!("sb-{i}"), &[("team", "a")]);
        fake.state().sandboxes.insert(sandbox.id.clone(), sandbox);
    }
    let other = labelled("sb-x", &[("team", "b")]);
    fake.state().sandboxes.insert(other.id.clone(), other);
    let query = ListQuery {
        metadata: vec![("team".into(), "a".into())],
        ..ListQuery::default()
    };
    let client = client(&fake);
    let first = client.list(&query).await.expect("page");
    assert_eq!(first.sandboxes.len(), 2);
    assert!(first.next_cursor.is_some());
    let all = client.list_all(&query).await.expect("all pages");
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["sb-0", "sb-1", "sb-2", "sb-3", "sb-4"]);
    assert!(fake.state().list_queries[0].contains("metadata=team%3Da"));
}

#[tokio::test]
async fn create_sends_the_body_and_idempotency_key() {
    let fake = FakeDaemonForTests::start();
    let body = CreateSandbox {
        name: Some("web".into()),
        memory_mb: Some(256),
        ..CreateSandbox::default()
    };
    let created = client(&fake)
        .create(&body, Some("key-1"))
        .await
        .expect("create");
    assert_eq!(created.name, "web");
    let state = fake.state();
    let (sent, key) = state.last_create.as_ref().expect("create seen");
    assert_eq!((sent, key.as_deref()), (&body, Some("key-1")));
}

#[tokio::test]
async fn files_round_trip_byte_exact() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let client = client(&fake);
    let bytes: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    client
        .upload("sb-1", "/tmp/a.bin", bytes.clone())
        .await
        .expect("upload");
    assert_eq!(
        client
            .download("sb-1", "/tmp/a.bin")
            .await
            .expect("download"),
        bytes
    );

    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let local = dir.join("b.bin");
    std::fs::write(&local, &bytes[..77_777]).expect("write local");
    client
        .upload_file("sb-1", "/tmp/b.bin", &local)
        .await
        .expect("upload_file");
    assert_eq!(fake.state().last_upload_len, Some(Some(77_777)));
    let mut out = Vec::new();
    let n = client
        .download_to("sb-1", "/tmp/b.bin", &mut out)
        .await
        .expect("download_to");
    assert_eq!((n, out.as_slice()), (77_777, &bytes[..77_777]));

    let names: Vec<String> = client
        .list_files("sb-1", "/tmp")
        .await
        .expect("list")
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a.bin", "b.bin"]);
    assert!(matches!(
        client.upload_file("sb-1", "/tmp/d", dir).await,
        Err(ClientError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn ports_expose_list_unexpose() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let client = client(&fake);
    let exposed = client.expose("sb-1", 8080, "http").await.expect("expose");
    assert_eq!(exposed.public_url, "http://8080-sb-1.sandbox.test");
    assert_eq!(client.ports("sb-1").await.expect("ports"), vec![exposed]);
    client.unexpose("sb-1", 8080).await.expect("unexpose");
    let again = client.unexpose("sb-1", 8080).await;
    assert!(
        again.as_ref().is_err_and(ClientError::is_not_found),
        "{again:?}"
    );
}

#[tokio::test]
async fn delete_of_unknown_id_is_not_found() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let client = client(&fake);
    client.delete("sb-1").await.expect("delete");
    let err = client.delete("sb-1").await.expect_err("second delete");
    assert!(err.is_not_found(), "{err:?}");
}
