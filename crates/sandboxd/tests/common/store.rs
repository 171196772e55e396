//! Looking behind the daemon: its store (read-only, beside it) and its runtime directory, and the
//! callback socket its sandboxes' agents report to.

use super::Daemon;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The sandbox ids the runtime holds a directory for.
pub fn runtime_ids(d: &Daemon) -> BTreeSet<String> {
    std::fs::read_dir(d.data_dir().join("runtime/sandboxes"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Rows of `sql` against the daemon's database, opened read-only beside it (one line per row, columns
/// joined by `|`). Reads the store directly, so it works while a failpoint holds one of the daemon's
/// worker threads.
pub fn query(d: &Daemon, sql: &str) -> Vec<String> {
    sqlite(d, "ro", sql)
}

/// Runs the write `sql` against the daemon's database: while the daemon is down, to leave what a
/// crash, an older build or a damaged copy would; or under a flow a failpoint holds, to make a
/// state no path of the daemon's is known to (SQLite's locking keeps the daemon's writes whole).
pub fn tamper(d: &Daemon, sql: &str) {
    sqlite(d, "rw", sql);
}

fn sqlite(d: &Daemon, mode: &str, sql: &str) -> Vec<String> {
    let db = d.data_dir().join("sandboxd.db");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect('file:' + sys.argv[1] + '?mode=' + sys.argv[3], uri=True)\n\
             for row in c.execute(sys.argv[2]):\n\
             \x20   print('|'.join(str(v) for v in row))\n\
             c.commit()",
        )
        .arg(&db)
        .arg(sql)
        .arg(mode)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The holders of the store's leased network slots.
pub fn slot_holders(d: &Daemon) -> BTreeSet<String> {
    query(
        d,
        "SELECT sandbox_id FROM network_slots WHERE sandbox_id IS NOT NULL",
    )
    .into_iter()
    .collect()
}

/// Registers a webhook for `events` whose receiver is down: the outbox then holds one row per event
/// of those kinds, which is what the tests count.
pub async fn register_outbox_webhook(d: &Daemon, events: &[&str]) {
    let resp = d
        .post_json(
            "/v1/webhooks",
            &serde_json::json!({"url": "http://127.0.0.1:9/hook", "events": events,
                                "secret": "0123456789abcdef"}),
        )
        .await;
    assert_eq!(resp.status(), 201);
}

/// Polls the store until `sql` returns a row; returns its first line.
pub async fn wait_for_row(d: &Daemon, sql: &str) -> String {
    for _ in 0..400 {
        if let Some(row) = query(d, sql).into_iter().next() {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no row for {sql}");
}

/// The agent token of sandbox `id`, from the store.
pub fn agent_token(d: &Daemon, id: &str) -> String {
    query(
        d,
        &format!("SELECT agent_token FROM sandboxes WHERE id = '{id}'"),
    )
    .into_iter()
    .next()
    .unwrap_or_else(|| panic!("no sandbox {id} in the store"))
}

/// POSTs `event` to the daemon's callback socket as sandbox `token`'s agent would; returns the
/// status and the JSON answer.
pub async fn post_agent_event(d: &Daemon, token: &str, event: &Value) -> (u16, Value) {
    let socket = d.data_dir().join("callback/daemon.sock");
    let mut stream = tokio::net::UnixStream::connect(&socket)
        .await
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    let body = event.to_string();
    let request = format!(
        "POST /callbacks/v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send event");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read answer");
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// An `environment-ready` event of sandbox `id` with delivery id `delivery`.
pub fn ready_event(id: &str, delivery: &str) -> Value {
    serde_json::json!({"deliveryId": delivery, "sandboxId": id, "event": "environment-ready",
                       "envdVersion": "0.6.4"})
}

/// An `environment-failed` event of sandbox `id` with delivery id `delivery`.
pub fn failed_event(id: &str, delivery: &str, reason: &str) -> Value {
    serde_json::json!({"deliveryId": delivery, "sandboxId": id, "event": "environment-failed",
                       "reason": reason})
}
