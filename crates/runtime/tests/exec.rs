//! Running code in a real namespace sandbox through its agent, and ending it.

mod common;

use common::{fixture, text};
use futures::StreamExt;
use sandboxd_envd::process::{DataEvent, ProcessConfig, ProcessEvent, StartRequest};
use sandboxd_runtime::namespace::rootfs;
use sandboxd_runtime::Runtime;
use sandboxd_test_support::require_root;

#[tokio::test]
async fn python_prints_two_and_exits_zero() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    let sb = fx.sandbox().await;
    let out = sb.sh("python3 -c 'print(1+1)'").await;
    assert_eq!(out.exit_code, 0, "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2\n");
    fx.destroy(&sb).await;
}

/// A sandbox's hostname is its id and its resolver configuration the one the host gives sandboxes
/// now (its own, or systemd-resolved's upstreams when it names only a loopback resolver).
#[tokio::test]
async fn hostname_and_resolver_are_the_sandboxs_own() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    let sb = fx.sandbox().await;
    let out = sb.sh("hostname; cat /etc/resolv.conf").await;
    let out = text(&out.stdout);
    let (hostname, resolver) = out.split_once('\n').unwrap_or_default();
    assert_eq!(hostname, sb.info.spec.id);
    assert_eq!(Some(resolver.to_string()), rootfs::current_resolv_conf());
    fx.destroy(&sb).await;
}

#[tokio::test]
async fn exit_codes_and_stderr_propagate() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    let sb = fx.sandbox().await;
    let out = sb.sh("echo oops >&2; echo fine; exit 3").await;
    assert_eq!(out.exit_code, 3);
    assert_eq!(text(&out.stdout), "fine\n");
    assert_eq!(text(&out.stderr), "oops\n");
    let whoami = sb.sh("id -un; echo $HOME; pwd").await;
    assert_eq!(text(&whoami.stdout), "user\n/home/user\n/home/user\n");
    let root = sb.sh_as(Some("root"), "id -u").await;
    assert_eq!(text(&root.stdout), "0\n");
    fx.destroy(&sb).await;
}

/// 100 MB of output streams through; the agent relays it in chunks rather than collecting it.
#[tokio::test]
async fn hundred_megabytes_stream_through() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    let sb = fx.sandbox().await;
    let req = StartRequest {
        process: ProcessConfig {
            cmd: "/bin/sh".into(),
            args: vec!["-c".into(), "head -c 100000000 /dev/zero".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut stream = sb.client.start(req).await.expect("start");
    let (mut total, mut chunks, mut largest, mut exit) = (0usize, 0usize, 0usize, None);
    while let Some(event) = stream.next().await {
        match event.expect("event") {
            ProcessEvent::Data(DataEvent::Stdout(bytes)) => {
                total += bytes.len();
                chunks += 1;
                largest = largest.max(bytes.len());
            }
            ProcessEvent::End(end) => exit = Some(end.exit_code),
            _ => {}
        }
    }
    assert_eq!(total, 100_000_000);
    assert_eq!(exit, Some(0));
    assert!(chunks > 100, "output arrived in only {chunks} chunks");
    assert!(
        largest <= 4 * 1024 * 1024,
        "a single chunk of {largest} bytes"
    );
    // The agent's peak memory stays far below the volume it relayed.
    let hwm = sb
        .sh_as(Some("root"), "for p in /proc/[0-9]*; do grep -q sandboxd-agent $p/cmdline 2>/dev/null && grep VmHWM $p/status; done")
        .await;
    for line in text(&hwm.stdout).lines() {
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(
            kb < 60 * 1024,
            "agent peak RSS {kb} kB after streaming 100 MB"
        );
    }
    fx.destroy(&sb).await;
}

/// A halt answers once the sandbox's processes are gone, its mount namespace still held by the
/// runtime (the unmounts, with the sync of the writable layer, wait for the destroy); the destroy
/// then lets it go.
#[tokio::test]
async fn a_halt_ends_the_processes_and_leaves_the_mounts_to_the_destroy() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    let sb = fx.sandbox().await;
    let pid = sb.info.pid.expect("a started sandbox's init");
    let mounts = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
    fx.rt.halt(sb.info.id()).await.unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
    assert!(status.is_err(), "init {pid} outlived the halt: {status:?}");
    assert!(
        held_here(&mounts),
        "the halted sandbox's mount namespace {mounts:?} is not held"
    );
    fx.destroy(&sb).await;
    assert!(
        !held_here(&mounts),
        "the destroyed sandbox's mount namespace {mounts:?} is still held"
    );
}

/// Whether a descriptor of this process names namespace `ns` (as `/proc/<pid>/ns/*` links do).
fn held_here(ns: &std::path::Path) -> bool {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == ns))
}
