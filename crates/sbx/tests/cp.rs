//! `sbx cp` against `FakeDaemonForTests`: both directions byte-exact, stdio, refusals.

mod common;

use common::{code, sbx, sbx_at, stderr, FakeDaemonForTests, Reap, TOKEN};
use std::io::Write;
use std::process::Stdio;

#[test]
fn cp_uploads_and_downloads_byte_exact() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes: Vec<u8> = (0..=255u8).rev().cycle().take(300_000).collect();
    let src = dir.path().join("in.bin");
    std::fs::write(&src, &bytes).expect("write");
    let src = src.to_string_lossy().into_owned();

    let out = sbx(&fake, &["cp", &src, "sb-1:/data/"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stored = fake
        .state()
        .files
        .get(&("sb-1".to_string(), "/data/in.bin".to_string()))
        .cloned();
    assert_eq!(stored.as_deref(), Some(bytes.as_slice()));

    let dst = dir.path().join("out.bin");
    let out = sbx(&fake, &["cp", "sb-1:/data/in.bin", &dst.to_string_lossy()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read(&dst).expect("read"), bytes);

    let out = sbx(
        &fake,
        &["cp", "sb-1:/data/in.bin", &dir.path().to_string_lossy()],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read(dir.path().join("in.bin")).expect("read"),
        bytes
    );

    let out = sbx(&fake, &["cp", "sb-1:/data/in.bin", "-"]);
    assert_eq!(out.stdout, bytes);
}

#[test]
fn cp_from_stdin_uploads_it() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let mut child = Reap(
        sbx_at(&fake.url, TOKEN)
            .args(["cp", "-", "sb-1:/in.txt"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let mut stdin = child.0.stdin.take().expect("stdin");
    stdin.write_all(b"from stdin\0\xff").expect("write stdin");
    drop(stdin);
    assert_eq!(child.0.wait().expect("wait").code(), Some(0));
    let stored = fake
        .state()
        .files
        .get(&("sb-1".to_string(), "/in.txt".to_string()))
        .cloned();
    assert_eq!(stored.as_deref(), Some(&b"from stdin\0\xff"[..]));
}

#[test]
fn failed_download_leaves_no_file_behind() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let dir = tempfile::tempdir().expect("temp dir");
    let dst = dir.path().join("x");
    let out = sbx(&fake, &["cp", "sb-1:/missing", &dst.to_string_lossy()]);
    assert_eq!(code(&out), 1);
    assert_eq!(stderr(&out), "error: no file /missing (not_found)\n");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn cp_of_a_directory_is_refused_clearly() {
    let fake = FakeDaemonForTests::start();
    fake.add_sandbox("sb-1", "");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = sbx(&fake, &["cp", &dir.path().to_string_lossy(), "sb-1:/x"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    assert!(fake.state().files.is_empty());
}
