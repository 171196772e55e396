//! `filesystem.Filesystem`, `/files`, `/health` and access control against the real agent binary.

mod support;

use sandboxd_envd::files::{signature, Operation};
use sandboxd_envd::filesystem::FileType;
use sandboxd_envd::{Code, EnvdClient, Error};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use support::{user_exists, Agent, TOKEN};

#[tokio::test]
async fn wrong_or_missing_token_is_refused_everywhere_but_health() {
    let agent = Agent::start().await;
    let wrong = EnvdClient::new(&agent.socket, "wrong");
    let err = wrong.list().await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated));
    assert!(matches!(err, Error::Rpc(_)));
    let err = wrong.stat("/").await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated));
    let err = wrong.read_file("/etc/hostname", None).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 401, .. }), "{err:?}");
    let err = wrong.write_file("/tmp/x", None, "x").await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 401, .. }), "{err:?}");
    assert!(wrong.start(Default::default()).await.is_err());

    // No token at all.
    let json = [("content-type", "application/json")];
    let (status, body) = agent
        .raw("POST", "/process.Process/List", &json, b"{}".to_vec())
        .await;
    assert_eq!(status, 401);
    assert!(String::from_utf8_lossy(&body).contains("\"unauthenticated\""));
    let (status, _) = agent
        .raw("GET", "/files?path=/etc/hostname", &[], vec![])
        .await;
    assert_eq!(status, 401);
    let (status, _) = agent.raw("GET", "/anything", &[], vec![]).await;
    assert_eq!(status, 401);
    let (status, _) = agent.raw("GET", "/health", &[], vec![]).await;
    assert_eq!(status, 204);
}

#[tokio::test]
async fn signed_file_urls_work_without_the_token() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signed.txt");
    std::fs::write(&path, b"signed").unwrap();
    let p = path.to_str().unwrap();
    let sig = signature(p, Operation::Read, "", TOKEN, None);
    let enc = sig.replace('+', "%2B").replace('/', "%2F");
    let (status, body) = agent
        .raw(
            "GET",
            &format!("/files?path={p}&signature={enc}"),
            &[],
            vec![],
        )
        .await;
    assert_eq!((status, body.as_slice()), (200, &b"signed"[..]));
    let bad = signature(p, Operation::Write, "", TOKEN, None)
        .replace('+', "%2B")
        .replace('/', "%2F");
    let (status, _) = agent
        .raw(
            "GET",
            &format!("/files?path={p}&signature={bad}"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(status, 401);
    let expired = signature(p, Operation::Read, "", TOKEN, Some(1))
        .replace('+', "%2B")
        .replace('/', "%2F");
    let uri = format!("/files?path={p}&signature={expired}&signature_expiration=1");
    let (status, _) = agent.raw("GET", &uri, &[], vec![]).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn file_round_trips() {
    let agent = Agent::start().await;
    let c = agent.client();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_str().unwrap().to_string();

    let info = c
        .write_file(&format!("{base}/a/b/hello.txt"), None, "hello world")
        .await
        .unwrap();
    assert_eq!(info.path, format!("{base}/a/b/hello.txt"));
    assert_eq!(info.name, "hello.txt");
    assert_eq!(
        &c.read_file(&info.path, None).await.unwrap()[..],
        b"hello world"
    );

    let st = c.stat(&info.path).await.unwrap();
    assert_eq!(
        (st.file_type, st.size, st.owner.as_str()),
        (FileType::File, 11, "root")
    );
    assert_eq!(st.permissions, "-rw-r--r--");
    assert!(st
        .modified_time
        .as_deref()
        .is_some_and(|t| t.ends_with('Z')));

    let made = c.make_dir(&format!("{base}/x/y")).await.unwrap();
    assert_eq!(made.file_type, FileType::Directory);
    let again = c.make_dir(&format!("{base}/x/y")).await.unwrap_err();
    assert_eq!(again.code(), Some(Code::AlreadyExists));
    let onfile = c.make_dir(&info.path).await.unwrap_err();
    assert_eq!(onfile.code(), Some(Code::InvalidArgument));

    let top = c.list_dir(&base, 1).await.unwrap();
    let names: Vec<&str> = top.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, vec!["a", "x"]);
    let deep = c.list_dir(&base, 3).await.unwrap();
    assert!(deep.iter().any(|e| e.path == info.path), "{deep:?}");
    assert!(deep.iter().any(|e| e.path == format!("{base}/x/y")));

    let moved = c
        .move_(&info.path, &format!("{base}/m/moved.txt"))
        .await
        .unwrap();
    assert_eq!(moved.name, "moved.txt");
    assert_eq!(
        c.stat(&info.path).await.unwrap_err().code(),
        Some(Code::NotFound)
    );
    let err = c
        .move_(&info.path, &format!("{base}/m/again.txt"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));

    c.remove(&format!("{base}/m")).await.unwrap();
    c.remove(&format!("{base}/m")).await.unwrap();
    assert_eq!(
        c.stat(&moved.path).await.unwrap_err().code(),
        Some(Code::NotFound)
    );
    let err = c.read_file(&moved.path, None).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 404, .. }), "{err:?}");
    let err = c.read_file(&base, None).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 400, .. }), "{err:?}");
    assert_eq!(
        c.list_dir(&format!("{base}/nope"), 1)
            .await
            .unwrap_err()
            .code(),
        Some(Code::NotFound)
    );
    // Relative paths resolve against the user's home (root: /root).
    assert_eq!(c.stat("").await.unwrap().path, "/root");
}

#[tokio::test]
async fn multipart_uploads_use_path_or_part_filename() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_str().unwrap();
    let b = "XyZb0undary";
    let part = |name: &str, data: &str| {
        format!("--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n{data}\r\n")
    };
    let body = format!(
        "{}{}--{b}--\r\n",
        part(&format!("{base}/one.txt"), "1"),
        part(&format!("{base}/d/two.txt"), "22")
    );
    let ct = format!("multipart/form-data; boundary={b}");
    let headers = [("content-type", ct.as_str()), ("x-access-token", TOKEN)];
    let (status, resp) = agent
        .raw("POST", "/files", &headers, body.into_bytes())
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let written: Vec<serde_json::Value> = serde_json::from_slice(&resp).unwrap();
    assert_eq!(written.len(), 2);
    assert_eq!(written[1]["type"], "file");
    assert_eq!(std::fs::read(format!("{base}/d/two.txt")).unwrap(), b"22");

    let body = format!("{}--{b}--\r\n", part("ignored-name", "via query"));
    let uri = format!("/files?path={base}/q.txt");
    let (status, _) = agent.raw("POST", &uri, &headers, body.into_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(
        std::fs::read(format!("{base}/q.txt")).unwrap(),
        b"via query"
    );

    let (status, _) = agent
        .raw(
            "POST",
            &uri,
            &[("content-type", "text/plain"), ("x-access-token", TOKEN)],
            vec![],
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn malformed_rpc_input_gets_clear_4xx() {
    let agent = Agent::start().await;
    let auth = ("x-access-token", TOKEN);
    let json = ("content-type", "application/json");
    let (status, body) = agent
        .raw(
            "POST",
            "/filesystem.Filesystem/Stat",
            &[auth, json],
            b"{not json".to_vec(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("invalid_argument"));
    let (status, _) = agent
        .raw(
            "POST",
            "/filesystem.Filesystem/Stat",
            &[auth, ("content-type", "application/proto")],
            vec![1, 2],
        )
        .await;
    assert_eq!(status, 415);
    let (status, body) = agent
        .raw(
            "POST",
            "/process.Process/Nope",
            &[auth, json],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("unimplemented"));
    let stream_ct = ("content-type", "application/connect+json");
    // Stream calls report refusals in the end-of-stream frame, as Connect clients expect.
    let (status, body) = agent
        .raw(
            "POST",
            "/process.Process/Start",
            &[auth, stream_ct],
            vec![0, 0, 0],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body[0], 0x02, "not an end-of-stream frame");
    assert!(String::from_utf8_lossy(&body).contains("invalid_argument"));
    let (status, _) = agent
        .raw(
            "GET",
            "/files?path=/x&signature_expiration=soon",
            &[auth],
            vec![],
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn file_operations_run_with_the_users_permissions() {
    if !user_exists("nobody") {
        eprintln!("skipping: no user 'nobody' in /etc/passwd");
        return;
    }
    let agent = Agent::start().await;
    let nobody = agent.client().as_user("nobody");
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let base = open.path().to_str().unwrap();

    let info = nobody
        .write_file(&format!("{base}/sub/n.txt"), None, "n")
        .await
        .unwrap();
    let md = std::fs::metadata(&info.path).unwrap();
    assert_eq!((md.uid(), md.gid()), (65534, 65534));
    assert_eq!(
        std::fs::metadata(format!("{base}/sub")).unwrap().uid(),
        65534
    );
    let made = nobody.make_dir(&format!("{base}/made")).await.unwrap();
    assert_eq!(made.owner, "nobody");

    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = closed.path().join("secret");
    std::fs::write(&secret, "s").unwrap();
    let err = nobody
        .read_file(secret.to_str().unwrap(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Status { status: 403, .. }), "{err:?}");
    let err = nobody.stat(secret.to_str().unwrap()).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied));
    let err = nobody.remove(secret.to_str().unwrap()).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied));
    assert!(secret.exists());
    let err = nobody
        .write_file(&format!("{}/new", closed.path().display()), None, "x")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Status { status: 403, .. }), "{err:?}");
    // The username query parameter selects the user for /files too.
    let err = agent
        .client()
        .read_file(secret.to_str().unwrap(), Some("nobody"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Status { status: 403, .. }), "{err:?}");
}

/// An early answer (here a refused token, before the upload's body is read) keeps its connection:
/// the rest of the body is drained, so a client still sending it can finish and read the answer
/// instead of failing with a broken pipe — and can send its next request on the same connection.
#[tokio::test]
async fn an_early_answer_drains_the_unread_body_and_keeps_the_connection() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let agent = Agent::start().await;
    let stream = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    let len = 8 * 1024 * 1024;
    let head = format!(
        "POST /files?path=/tmp/never HTTP/1.1\r\nhost: localhost\r\nx-access-token: wrong\r\n\
         content-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n"
    );
    write.write_all(head.as_bytes()).await.unwrap();
    write.write_all(&vec![b'x'; 64 * 1024]).await.unwrap();
    let mut status = String::new();
    read.read_line(&mut status).await.unwrap();
    assert!(status.starts_with("HTTP/1.1 401"), "{status:?}");
    // The answer came first; the rest of the body still goes through (without draining, the agent
    // closes the connection and this write fails with a broken pipe).
    write
        .write_all(&vec![b'x'; len - 64 * 1024])
        .await
        .expect("the rest of the body is accepted after the early answer");
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        read.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; content_length];
    read.read_exact(&mut body).await.unwrap();
    // The same connection serves the next request.
    write
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut next = String::new();
    read.read_line(&mut next).await.unwrap();
    assert!(next.starts_with("HTTP/1.1 204"), "{next:?}");
}
