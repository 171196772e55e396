//! `/files` beyond the basics, against the real agent binary: several files per multipart upload,
//! gzip bodies both ways, file metadata, and a full disk.

mod support;

use sandboxd_envd::files::WriteInfo;
use std::collections::HashMap;
use support::{filter, Agent, TOKEN};

/// Some megabyte of mixed text and noise, so gzip has both kinds of block to produce.
fn sample() -> Vec<u8> {
    let mut data = Vec::new();
    let mut x: u32 = 12345;
    for i in 0..20_000 {
        data.extend_from_slice(format!("line {i} of the sample file\n").as_bytes());
        for _ in 0..(i % 40) {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            data.push((x >> 16) as u8);
        }
    }
    data
}

fn multipart(boundary: &str, parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, data) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

#[tokio::test]
async fn one_multipart_upload_writes_several_files_with_metadata() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_str().unwrap();
    let paths = [
        format!("{base}/a.txt"),
        format!("{base}/nested/b.txt"),
        format!("{base}/nested/deeper/c.bin"),
    ];
    let body = multipart(
        "b0undary",
        &[
            (&paths[0], b"alpha"),
            (&paths[1], b"bravo"),
            (&paths[2], &[0, 1, 2, 255]),
        ],
    );
    let headers = [
        ("content-type", "multipart/form-data; boundary=b0undary"),
        ("x-access-token", TOKEN),
        ("X-Metadata-Author", "mish"),
        ("x-metadata-purpose", "upload"),
    ];
    let (status, resp) = agent.raw("POST", "/files", &headers, body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let written: Vec<WriteInfo> = serde_json::from_slice(&resp).unwrap();
    let written_paths: Vec<&str> = written.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        written_paths,
        paths.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let expected = HashMap::from([
        ("author".to_string(), "mish".to_string()),
        ("purpose".to_string(), "upload".to_string()),
    ]);
    assert!(
        written.iter().all(|w| w.metadata == expected),
        "{written:?}"
    );
    assert_eq!(std::fs::read(&paths[1]).unwrap(), b"bravo");
    assert_eq!(std::fs::read(&paths[2]).unwrap(), [0, 1, 2, 255]);
    for path in &paths {
        let st = agent.client().stat(path).await.unwrap();
        assert_eq!(st.metadata, expected, "{path}");
    }

    // The same path twice in one request is refused.
    let body = multipart("b0undary", &[(&paths[0], b"1"), (&paths[0], b"2")]);
    let (status, _) = agent.raw("POST", "/files", &headers[..2], body).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn metadata_round_trips_through_stat_and_list_dir() {
    let agent = Agent::start().await;
    let client = agent.client();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagged.txt");
    let path = path.to_str().unwrap();
    let metadata = HashMap::from([
        ("owner-team".to_string(), "infra".to_string()),
        ("Review".to_string(), "done".to_string()),
    ]);
    let info = client
        .write_file_with_metadata(path, None, "data", &metadata)
        .await
        .unwrap();
    // Keys come back lowercased, as header names are.
    let expected = HashMap::from([
        ("owner-team".to_string(), "infra".to_string()),
        ("review".to_string(), "done".to_string()),
    ]);
    assert_eq!(info.metadata, expected);
    assert_eq!(client.stat(path).await.unwrap().metadata, expected);
    let listed = client
        .list_dir(dir.path().to_str().unwrap(), 1)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].metadata, expected);
    // Without metadata headers an entry reports none.
    let plain = dir.path().join("plain.txt");
    client
        .write_file(plain.to_str().unwrap(), None, "x")
        .await
        .unwrap();
    assert!(client
        .stat(plain.to_str().unwrap())
        .await
        .unwrap()
        .metadata
        .is_empty());
}

#[tokio::test]
async fn gzip_uploads_are_decoded_octet_stream_and_multipart() {
    let Some(_) = filter("gzip", &["-c"], b"probe") else {
        eprintln!("skipping: no gzip binary");
        return;
    };
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = sample();
    let target = dir.path().join("up/data.bin");
    let uri = format!("/files?path={}", target.display());
    let gz = filter("gzip", &["-c", "-6"], &data).unwrap();
    let headers = [
        ("content-type", "application/octet-stream"),
        ("content-encoding", "gzip"),
        ("x-access-token", TOKEN),
    ];
    let (status, resp) = agent.raw("POST", &uri, &headers, gz).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    assert_eq!(std::fs::read(&target).unwrap(), data);

    let path = dir.path().join("multi.txt");
    let form = multipart("zzz", &[(path.to_str().unwrap(), b"inside a gzipped form")]);
    let headers = [
        ("content-type", "multipart/form-data; boundary=zzz"),
        ("content-encoding", "gzip"),
        ("x-access-token", TOKEN),
    ];
    let (status, resp) = agent
        .raw(
            "POST",
            "/files",
            &headers,
            filter("gzip", &["-c"], &form).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    assert_eq!(std::fs::read(&path).unwrap(), b"inside a gzipped form");

    // A corrupt body and an unknown coding are the client's fault.
    let headers = [
        ("content-type", "application/octet-stream"),
        ("content-encoding", "gzip"),
        ("x-access-token", TOKEN),
    ];
    let (status, _) = agent
        .raw(
            "POST",
            &uri,
            &headers,
            b"\x1f\x8b\x08\0\0\0\0\0\0\xffjunk".to_vec(),
        )
        .await;
    assert_eq!(status, 400);
    let headers = [
        ("content-type", "application/octet-stream"),
        ("content-encoding", "br"),
        ("x-access-token", TOKEN),
    ];
    let (status, _) = agent.raw("POST", &uri, &headers, b"x".to_vec()).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn downloads_are_gzip_when_the_client_accepts_it() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = sample();
    let path = dir.path().join("down.bin");
    std::fs::write(&path, &data).unwrap();
    let uri = format!("/files?path={}", path.display());

    let accept = [
        ("x-access-token", TOKEN),
        ("accept-encoding", "gzip, deflate"),
    ];
    let (status, headers, body) = agent.raw_with_headers("GET", &uri, &accept, vec![]).await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("content-encoding").unwrap(), "gzip");
    assert!(
        body.len() < data.len(),
        "not compressed: {} bytes",
        body.len()
    );
    match filter("gzip", &["-dc"], &body) {
        Some(plain) => assert_eq!(plain, data, "gzip -d disagrees"),
        None => eprintln!("no gzip binary: skipping the independent check"),
    }
    if let Some(plain) = filter(
        "python3",
        &[
            "-c",
            "import sys,gzip; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))",
        ],
        &body,
    ) {
        assert_eq!(plain, data, "python's gzip disagrees");
    }

    let plain = [("x-access-token", TOKEN)];
    let (status, headers, body) = agent.raw_with_headers("GET", &uri, &plain, vec![]).await;
    assert_eq!(status, 200);
    assert!(headers.get("content-encoding").is_none());
    assert_eq!(
        headers.get("content-length").unwrap().to_str().unwrap(),
        data.len().to_string()
    );
    assert_eq!(body, data);

    // An empty file is a valid (empty) gzip stream too.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let (status, _, body) = agent
        .raw_with_headers(
            "GET",
            &format!("/files?path={}", empty.display()),
            &accept,
            vec![],
        )
        .await;
    assert_eq!(status, 200);
    if let Some(plain) = filter("gzip", &["-dc"], &body) {
        assert!(plain.is_empty());
    }
}

#[tokio::test]
async fn a_full_disk_answers_507() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipping: no /dev/full");
        return;
    }
    let agent = Agent::start().await;
    let err = agent
        .client()
        .write_file("/dev/full", None, vec![0u8; 1 << 16])
        .await
        .unwrap_err();
    assert!(
        matches!(err, sandboxd_envd::Error::Status { status: 507, .. }),
        "{err:?}"
    );
}
