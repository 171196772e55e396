use super::*;
use crate::process::ProcessEvent;
use crate::{EnvdClient, ExecOptions};
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A test double of an agent on a unix socket: answers `/health` with 204, `/endless` with one
/// chunk of a body that never ends, and `Start` with a process that started and ended at once (the
/// end-of-stream frame in a chunk of its own); counts the connections it accepted.
struct FakeAgent {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    accepted: Arc<AtomicUsize>,
}

impl FakeAgent {
    /// `keep_alive: false` closes each connection after its first answer.
    fn start(keep_alive: bool) -> FakeAgent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let body: Body = match req.uri().path() {
                        path if path.ends_with("/Start") => {
                            let event = |event| {
                                crate::connect::encode_message(&crate::process::StartResponse {
                                    event,
                                })
                                .unwrap()
                            };
                            let frames = [
                                event(ProcessEvent::Start(crate::process::StartEvent { pid: 7 })),
                                event(ProcessEvent::End(crate::process::EndEvent {
                                    exited: true,
                                    status: "exit status 0".into(),
                                    ..Default::default()
                                })),
                                crate::connect::encode_end_stream(None),
                            ];
                            let frames = frames.map(|f| Ok::<_, std::io::Error>(Frame::data(f)));
                            BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)))
                        }
                        "/endless" => {
                            let first =
                                futures::stream::iter([Ok(Frame::data(Bytes::from("first")))]);
                            let never = futures::stream::pending();
                            BodyExt::boxed(StreamBody::new(futures::StreamExt::chain(first, never)))
                        }
                        _ => super::super::wire::empty(),
                    };
                    let status = if req.uri().path() == "/health" {
                        204
                    } else {
                        200
                    };
                    Response::builder().status(status).body(body)
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        FakeAgent {
            _dir: dir,
            socket,
            accepted,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn client(&self, pool: Option<&AgentConnections>) -> EnvdClient {
        let client = EnvdClient::new(&self.socket, "token");
        match pool {
            Some(pool) => client.with_connections(pool),
            None => client,
        }
    }
}

#[tokio::test]
async fn calls_one_after_another_share_one_connection() {
    let agent = FakeAgent::start(true);
    let pool = AgentConnections::new();
    let client = agent.client(Some(&pool));
    for _ in 0..5 {
        client.health().await.unwrap();
    }
    assert_eq!(agent.accepted(), 1);
}

/// An exec reads its stream's end when it comes with the process's end, so the next call takes
/// the same connection.
#[tokio::test]
async fn commands_one_after_another_share_one_connection() {
    let agent = FakeAgent::start(true);
    let pool = AgentConnections::new();
    let client = agent.client(Some(&pool));
    for _ in 0..3 {
        let out = client
            .exec(&["true".to_string()], ExecOptions::default())
            .await
            .unwrap();
        assert_eq!((out.pid, out.exit_code), (7, 0));
    }
    assert_eq!(agent.accepted(), 1);
}

#[tokio::test]
async fn a_client_without_the_pool_connects_per_call() {
    let agent = FakeAgent::start(true);
    let client = agent.client(None);
    for _ in 0..3 {
        client.health().await.unwrap();
    }
    assert_eq!(agent.accepted(), 3);
}

#[tokio::test]
async fn a_connection_the_agent_closes_carries_no_more_calls() {
    let agent = FakeAgent::start(false);
    let pool = AgentConnections::new();
    let client = agent.client(Some(&pool));
    for _ in 0..3 {
        client.health().await.unwrap();
    }
    assert_eq!(agent.accepted(), 3);
}

#[tokio::test]
async fn a_response_dropped_half_read_takes_its_connection_with_it() {
    let agent = FakeAgent::start(true);
    let pool = AgentConnections::new();
    let req = Request::get("/endless")
        .body(super::super::wire::empty())
        .unwrap();
    let mut body = pool.send(&agent.socket, req).await.unwrap().into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "first");
    drop(body);
    agent.client(Some(&pool)).health().await.unwrap();
    assert_eq!(agent.accepted(), 2);
}

#[tokio::test]
async fn each_socket_has_connections_of_its_own() {
    let (a, b) = (FakeAgent::start(true), FakeAgent::start(true));
    let pool = AgentConnections::new();
    for _ in 0..3 {
        a.client(Some(&pool)).health().await.unwrap();
        b.client(Some(&pool)).health().await.unwrap();
    }
    assert_eq!((a.accepted(), b.accepted()), (1, 1));
}

#[tokio::test]
async fn a_socket_nobody_listens_on_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let client = EnvdClient::new(dir.path().join("none.sock"), "t")
        .with_connections(&AgentConnections::new());
    let err = client.health().await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}

#[test]
fn authorities_name_any_socket_path() {
    for path in [
        "/tmp/a b/agent.sock",
        "/x/\u{e9}t\u{e9}/s",
        "/proc/self/fd/7/agent.sock",
    ] {
        let authority = authority_of(Path::new(path));
        let uri: Uri = format!("http://{authority}/health").parse().unwrap();
        assert_eq!(socket_of(&uri).unwrap(), Path::new(path));
    }
    let bad: Uri = "http://localhost/health".parse().unwrap();
    assert!(socket_of(&bad).is_err());
}
