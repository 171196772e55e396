//! Small checks and helpers the end-to-end tests share: output decoding, the error shape, a sandbox
//! web server.

use super::*;

/// The `id` of a sandbox body.
pub fn id_of(sandbox: &Value) -> String {
    sandbox["id"].as_str().expect("sandbox id").to_string()
}

/// Stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Panics (showing both streams) unless `out` exited 0.
pub fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} exited {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
}

/// `n` pseudo-random bytes (xorshift; different per `seed`), incompressible enough for transfer tests.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Checks that `resp` is `status` with an `{code, message}` body (and the given code, if any).
pub async fn expect_error(what: &str, resp: reqwest::Response, status: u16, code: Option<&str>) {
    let got = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert!(
        !got.is_server_error(),
        "{what}: a client mistake got {got}: {text}"
    );
    assert_eq!(got.as_u16(), status, "{what}: {text}");
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e}): {text:?}"));
    let obj = body.as_object().unwrap_or_else(|| panic!("{what}: {body}"));
    assert_eq!(
        obj.keys().collect::<BTreeSet<_>>(),
        BTreeSet::from([&"code".to_string(), &"message".to_string()]),
        "{what}: the error shape is exactly {{code, message}}: {body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        !message.trim().is_empty(),
        "{what}: empty error message: {body}"
    );
    assert!(
        body["code"].as_str().is_some_and(|c| !c.is_empty()),
        "{what}: {body}"
    );
    if let Some(code) = code {
        assert_eq!(body["code"], code, "{what}: {body}");
    }
}

/// Starts `python3 -m http.server PORT` in sandbox `id` and waits until it accepts connections.
pub async fn serve_port(d: &Daemon, id: &str, port: u16) {
    let script = format!("nohup python3 -m http.server {port} >/dev/null 2>&1 &");
    d.exec(id, &["sh", "-c", &script]).await;
    for _ in 0..100 {
        let probe = format!(
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 1)\""
        );
        if d.exec(id, &["sh", "-c", &probe]).await.exit_code == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing listens on {port} in {id}");
}

/// Free bytes of the filesystem holding `path`.
pub fn free_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::statvfs(c.as_ptr(), &mut stat) },
        0,
        "statvfs"
    );
    stat.f_bavail * stat.f_frsize
}

/// Waits until template `name` is no longer building; returns it.
pub async fn built(d: &Daemon, name: &str) -> Value {
    built_within(d, name, Duration::from_secs(120)).await
}

/// [`built`], waiting at most `within`.
pub async fn built_within(d: &Daemon, name: &str, within: Duration) -> Value {
    let last = std::cell::RefCell::new(Value::Null);
    let said = || format!("template {name} still building: {}", last.borrow());
    let last = &last;
    eventually(said, within, move || async move {
        let t = d.get_json(&format!("/v1/templates/{name}")).await;
        *last.borrow_mut() = t.clone();
        (t["state"] != "building").then_some(t)
    })
    .await
}

/// The URLs of the webhooks `GET /v1/webhooks` lists.
pub async fn webhook_urls(d: &Daemon) -> Vec<String> {
    let hooks = d.get_json("/v1/webhooks").await;
    hooks["webhooks"]
        .as_array()
        .unwrap_or_else(|| panic!("webhooks: {hooks}"))
        .iter()
        .map(|h| h["url"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Whether this host runs the gVisor tier; see the runtime's tests for the same rule.
pub fn require_gvisor() -> bool {
    match sandboxd_runtime::gvisor::probe(&Default::default()) {
        Ok(_) => true,
        Err(why) if std::env::var_os("SANDBOXD_SKIP_GVISOR_TESTS").is_some() => {
            eprintln!("SKIPPED: no gVisor tier here ({why}; SANDBOXD_SKIP_GVISOR_TESTS is set)");
            false
        }
        Err(why) => panic!("this test needs the gVisor tier: {why}"),
    }
}

/// The host's first global IPv4 address: where a test's servers are, as a sandbox reaches them.
pub fn host_address() -> std::net::Ipv4Addr {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next()?.parse().ok())
        .expect("the host has a global IPv4 address")
}

/// Runs `script` with `sh -c` in sandbox `id`.
pub async fn sh(d: &Daemon, id: &str, script: &str) -> ExecResult {
    d.exec(id, &["sh", "-c", script]).await
}
