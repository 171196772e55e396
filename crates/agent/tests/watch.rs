//! Watching directories against the real agent binary: the `WatchDir` stream and the polling
//! watchers.

mod support;

use futures::StreamExt;
use sandboxd_envd::client::WatchStream;
use sandboxd_envd::filesystem::{EventType, FilesystemEvent, WatchDirRequest, WatchEvent};
use sandboxd_envd::Code;
use std::time::{Duration, Instant};
use support::Agent;

fn watch(path: &std::path::Path, recursive: bool) -> WatchDirRequest {
    WatchDirRequest {
        path: path.to_string_lossy().into_owned(),
        recursive,
        ..Default::default()
    }
}

/// Filesystem events from `stream` until `done` holds for them (panics after 10 s).
async fn events_until(
    stream: &mut WatchStream,
    done: impl Fn(&[FilesystemEvent]) -> bool,
) -> Vec<FilesystemEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !done(&seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(WatchEvent::Filesystem(e)))) => seen.push(e),
            Ok(Some(Ok(WatchEvent::Keepalive(_)))) => {}
            other => panic!("watching, saw {seen:?}, then {other:?}"),
        }
    }
    seen
}

fn has(events: &[FilesystemEvent], name: &str, kind: EventType) -> bool {
    events
        .iter()
        .any(|e| e.name == name && e.event_type == kind)
}

#[tokio::test]
async fn watch_dir_reports_create_write_rename_remove_in_the_directory_only() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let mut stream = agent
        .client()
        .watch_dir(watch(dir.path(), false))
        .await
        .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Start(_)))
    ));

    std::fs::write(dir.path().join("sub/hidden.txt"), b"not reported").unwrap();
    std::fs::write(dir.path().join("a.txt"), b"hello").unwrap();
    std::fs::rename(dir.path().join("a.txt"), dir.path().join("b.txt")).unwrap();
    std::fs::remove_file(dir.path().join("b.txt")).unwrap();
    let seen = events_until(&mut stream, |e| has(e, "b.txt", EventType::Remove)).await;
    assert!(has(&seen, "a.txt", EventType::Create), "{seen:?}");
    assert!(has(&seen, "a.txt", EventType::Write), "{seen:?}");
    assert!(has(&seen, "a.txt", EventType::Rename), "{seen:?}");
    assert!(has(&seen, "b.txt", EventType::Create), "{seen:?}");
    assert!(
        seen.iter().all(|e| !e.name.contains("hidden")),
        "a non-recursive watch reported a subdirectory: {seen:?}"
    );
    assert!(seen.iter().all(|e| e.entry.is_none()));
}

#[tokio::test]
async fn recursive_watch_dir_follows_subdirectories_with_entries() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let req = WatchDirRequest {
        include_entry: true,
        ..watch(dir.path(), true)
    };
    let mut stream = agent.client().watch_dir(req).await.unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Start(_)))
    ));

    std::fs::write(dir.path().join("sub/deep.txt"), b"x").unwrap();
    let seen = events_until(&mut stream, |e| has(e, "sub/deep.txt", EventType::Create)).await;
    let created = seen
        .iter()
        .find(|e| e.name == "sub/deep.txt")
        .and_then(|e| e.entry.clone())
        .expect("entry info on the create event");
    assert_eq!(
        created.path,
        dir.path().join("sub/deep.txt").to_string_lossy()
    );

    std::fs::create_dir(dir.path().join("fresh")).unwrap();
    events_until(&mut stream, |e| has(e, "fresh", EventType::Create)).await;
    std::fs::write(dir.path().join("fresh/inner.txt"), b"y").unwrap();
    std::fs::remove_file(dir.path().join("fresh/inner.txt")).unwrap();
    let seen = events_until(&mut stream, |e| {
        has(e, "fresh/inner.txt", EventType::Remove)
    })
    .await;
    // Gone by the time of its remove event: no entry to describe.
    let removed = seen
        .iter()
        .find(|e| e.event_type == EventType::Remove)
        .expect("remove event");
    assert!(removed.entry.is_none());
}

#[tokio::test]
async fn watch_dir_keeps_idle_streams_alive_and_refuses_bad_paths() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = agent.client().with_keepalive_interval(1);
    let mut stream = client.watch_dir(watch(dir.path(), false)).await.unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Start(_)))
    ));
    for _ in 0..2 {
        let next = tokio::time::timeout(Duration::from_secs(3), stream.next()).await;
        assert!(
            matches!(next, Ok(Some(Ok(WatchEvent::Keepalive(_))))),
            "{next:?}"
        );
    }

    let first_error = |mut s: WatchStream| async move { s.next().await.and_then(Result::err) };
    let missing = client
        .watch_dir(watch(&dir.path().join("missing"), false))
        .await
        .unwrap();
    let err = first_error(missing).await.expect("an error");
    assert_eq!(err.code(), Some(Code::NotFound));
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let file = client
        .watch_dir(watch(&dir.path().join("file"), false))
        .await
        .unwrap();
    let err = first_error(file).await.expect("an error");
    assert_eq!(err.code(), Some(Code::InvalidArgument));
}

#[tokio::test]
async fn watchers_buffer_events_until_polled_and_can_be_removed() {
    let agent = Agent::start().await;
    let client = agent.client();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let id = client
        .create_watcher(watch(dir.path(), true))
        .await
        .unwrap();
    assert!(id.starts_with('w'), "{id}");

    std::fs::write(dir.path().join("one.txt"), b"1").unwrap();
    std::fs::write(dir.path().join("sub/two.txt"), b"2").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !(has(&seen, "one.txt", EventType::Create) && has(&seen, "sub/two.txt", EventType::Write))
    {
        assert!(Instant::now() < deadline, "events never arrived: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen.extend(client.get_watcher_events(&id).await.unwrap());
    }
    // Polling drains the buffer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = client.get_watcher_events(&id).await.unwrap();
    assert!(
        again
            .iter()
            .all(|e| !has(std::slice::from_ref(e), "one.txt", EventType::Create)),
        "events were delivered twice: {again:?}"
    );

    client.remove_watcher(&id).await.unwrap();
    let err = client.get_watcher_events(&id).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
    let err = client.remove_watcher(&id).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
    let err = client
        .create_watcher(watch(&dir.path().join("missing"), false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));
}
