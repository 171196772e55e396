//! Images end to end: the real `sandboxd` binary pulling from a real registry (Debian's
//! `docker-registry` on loopback, filled with images made by `umoci` and pushed by `skopeo`).

mod common;

use common::{e2e, id_of, Daemon, Setup};
use sandboxd_test_support::registry::{require_tools, ImageBuilder, TestRegistry, REGISTRY_TOOLS};
use serde_json::{json, Value};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// A two-layer image: busybox, then `/app/hello.txt`; `FOO=bar`, working dir `/app`.
fn app_image() -> sandboxd_test_support::registry::TestImage {
    ImageBuilder::busybox()
        .layer(|root| {
            std::fs::create_dir_all(root.join("app")).unwrap();
            std::fs::write(root.join("app/hello.txt"), "hello from the image\n").unwrap();
        })
        .env("FOO=bar")
        .workdir("/app")
        .build()
}

async fn daemon_with_mirror(registry: &TestRegistry) -> Daemon {
    Daemon::start_setup(Setup {
        args: vec![format!("--registry-mirror=docker.io={}", registry.url())],
        ..Setup::default()
    })
    .await
}

async fn exec_as(d: &Daemon, id: &str, user: &str, cmd: &[&str]) -> (i64, String) {
    let (status, text) = d.exec_raw(id, &json!({ "cmd": cmd, "user": user })).await;
    assert_eq!(status, 200, "exec {cmd:?}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    (
        v["exitCode"].as_i64().unwrap(),
        v["stdout"].as_str().unwrap_or_default().trim().to_string(),
    )
}

/// A create names an image by its Docker short name (through a `docker.io` mirror) or by its full
/// reference; the sandbox has the image's files, environment and working directory, and runs
/// commands as `user` and as `root`.
#[test]
fn sandboxes_are_made_from_images_by_short_name_and_by_full_reference() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let image = app_image();
        let digest = registry.push(&image, "library/python:3.12-slim");
        registry.push(&image, "team/app:v1");
        let d = daemon_with_mirror(&registry).await;

        let s = d
            .create(json!({ "image": "python:3.12-slim", "memoryMB": 128 }))
            .await;
        assert_eq!(s["template"], "docker.io/library/python:3.12-slim", "{s}");
        assert_eq!(s["image"], digest.as_str(), "{s}");
        let id = id_of(&s);
        assert_eq!(
            exec_as(&d, &id, "user", &["cat", "hello.txt"]).await,
            (0, "hello from the image".into()),
            "the working directory is the image's and its files are there"
        );
        assert_eq!(exec_as(&d, &id, "user", &["pwd"]).await.1, "/app");
        assert_eq!(
            exec_as(&d, &id, "user", &["sh", "-c", "echo $FOO"]).await.1,
            "bar"
        );
        assert_eq!(exec_as(&d, &id, "user", &["id", "-u"]).await.1, "1000");
        assert_eq!(exec_as(&d, &id, "root", &["id", "-u"]).await.1, "0");
        assert_eq!(
            exec_as(&d, &id, "user", &["sh", "-c", "echo $HOME"])
                .await
                .1,
            "/home/user"
        );
        // The image is read-only underneath: what the sandbox writes stays in its own layer.
        assert_eq!(
            exec_as(&d, &id, "root", &["sh", "-c", "echo x > /app/new"])
                .await
                .0,
            0
        );
        // Nothing of the host's system is there: the image's busybox is /bin/sh.
        assert_eq!(
            exec_as(
                &d,
                &id,
                "user",
                &["sh", "-c", "test -e /usr/bin/python3 && echo host"]
            )
            .await
            .1,
            ""
        );

        let full = registry.image_ref("team/app:v1");
        let s2 = d.create(json!({ "image": full, "memoryMB": 128 })).await;
        assert_eq!(s2["image"], digest.as_str(), "one image under two names");
        assert_eq!(
            exec_as(&d, &id_of(&s2), "user", &["cat", "/app/hello.txt"])
                .await
                .0,
            0
        );
        // A tag already pulled is not fetched again, under either name.
        let gets = registry.blob_gets();
        assert!(gets.values().all(|n| *n == 1), "{gets:?}");

        let list = d.get_json("/v1/images").await;
        let images = list["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{list}");
        assert_eq!(images[0]["state"], "ready");
        assert_eq!(images[0]["workingDir"], "/app");
        let tags: Vec<&str> = images[0]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(
            tags.contains(&"docker.io/library/python:3.12-slim"),
            "{tags:?}"
        );
        assert!(tags.contains(&full.as_str()), "{tags:?}");

        // In use: the image cannot be removed and a prune frees none of its layers; once its
        // sandboxes are gone it can, and pruning frees its layers.
        let layers_dir = d.data_dir().join("images/layers");
        let pruned: Value = d
            .post_json("/v1/images/prune", &json!({}))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(pruned["layers"], 0, "{pruned}");
        assert_eq!(std::fs::read_dir(&layers_dir).unwrap().count(), 2);
        let key = digest.replace(':', "%3A");
        assert_eq!(d.delete(&format!("/v1/images/{key}")).await.status(), 409);
        for sid in [id, id_of(&s2)] {
            assert_eq!(
                d.delete(&format!("/v1/sandboxes/{sid}")).await.status(),
                204
            );
        }
        assert_eq!(d.delete(&format!("/v1/images/{key}")).await.status(), 204);
        let pruned = d.post_json("/v1/images/prune", &json!({})).await;
        assert_eq!(pruned.status(), 200);
        let pruned: Value = pruned.json().await.unwrap();
        assert_eq!(pruned["layers"], 2, "{pruned}");
        assert_eq!(std::fs::read_dir(&layers_dir).unwrap().count(), 0);
    });
}

/// Invariant: N creates needing one uncached image at once cause one download — the registry
/// serves each blob once — and all of them succeed.
#[test]
fn concurrent_creates_of_one_uncached_image_fetch_each_blob_once() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let image = ImageBuilder::busybox().layers(3).build();
        registry.push(&image, "team/many:1");
        let d = Daemon::start().await;
        let reference = registry.image_ref("team/many:1");
        let creates = (0..20).map(|_| {
            let body = json!({ "image": reference, "memoryMB": 64 });
            let client = d.http().clone();
            let url = d.endpoint("/v1/sandboxes");
            async move {
                let resp = client.post(url).json(&body).send().await.unwrap();
                (
                    resp.status().as_u16(),
                    resp.text().await.unwrap_or_default(),
                )
            }
        });
        let answers = futures::future::join_all(creates).await;
        for (status, text) in &answers {
            assert_eq!(*status, 201, "{text}");
        }
        let gets = registry.blob_gets();
        let expected: Vec<String> = image.layer_digests();
        for layer in &expected {
            assert_eq!(gets.get(layer), Some(&1), "layer {layer}: {gets:?}");
        }
        assert!(
            gets.values().all(|n| *n == 1),
            "a blob fetched twice: {gets:?}"
        );
        assert_eq!(
            gets.len(),
            expected.len() + 1,
            "the layers and the config: {gets:?}"
        );
    });
}

/// Each way an image can be missing has its own answer, and a failed create leaves nothing: no
/// sandbox, no image row, no layer.
#[test]
fn registry_failures_are_told_apart_and_create_nothing() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let open = TestRegistry::start();
        open.push(&app_image(), "team/app:v1");
        let locked = TestRegistry::start_with_basic_auth("alice", "s3cret");
        locked.push(&app_image(), "team/secret:v1");
        let d = Daemon::start().await;
        let cases = [
            (
                json!({ "image": open.image_ref("team/app:nope") }),
                404,
                "image_not_found",
            ),
            (
                json!({ "image": open.image_ref("team/none:v1") }),
                404,
                "image_not_found",
            ),
            (
                json!({ "image": locked.image_ref("team/secret:v1") }),
                403,
                "registry_auth_failed",
            ),
            (
                json!({ "image": locked.image_ref("team/secret:v1"),
                        "registryAuth": { "username": "alice", "password": "wrong" } }),
                403,
                "registry_auth_failed",
            ),
            (
                json!({ "image": "127.0.0.1:1/team/app:v1" }),
                502,
                "registry_unavailable",
            ),
            (json!({ "image": "Not A Ref" }), 400, "invalid_request"),
            (
                json!({ "image": "busybox", "template": "base" }),
                400,
                "invalid_request",
            ),
        ];
        for (body, status, code) in cases {
            let resp = d.post_json("/v1/sandboxes", &body).await;
            let got = resp.status().as_u16();
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            assert_eq!(
                (got, v["code"].as_str()),
                (status, Some(code)),
                "{body}: {v}"
            );
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        }
        assert!(
            d.list_all().await.is_empty(),
            "a failed create left a sandbox"
        );
        let images = d.get_json("/v1/images").await;
        assert_eq!(
            images["images"],
            json!([]),
            "a failed pull left an image: {images}"
        );
        let layers = d.data_dir().join("images/layers");
        assert_eq!(std::fs::read_dir(&layers).unwrap().count(), 0);
        let staging = d.data_dir().join("images/staging");
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);

        // The right credentials pull it; they are used for the pull and stored nowhere.
        let s = d
            .create(
                json!({ "image": locked.image_ref("team/secret:v1"), "memoryMB": 64,
                            "registryAuth": { "username": "alice", "password": "s3cret" } }),
            )
            .await;
        assert_eq!(s["state"], "running");
        let db = std::fs::read(d.data_dir().join("sandboxd.db")).unwrap();
        assert!(
            !db.windows(6).any(|w| w == b"s3cret"),
            "the password reached the store"
        );
        assert!(
            !d.log_tail(10_000).contains("s3cret"),
            "the password reached the log"
        );
    });
}

/// A pull killed mid-download leaves a `pulling` row, a pending claim and a partial layer; after a
/// restart none of them is used: the next create pulls again and gets the whole image.
#[test]
fn kill9_mid_pull_leaves_nothing_the_next_create_uses() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let image = ImageBuilder::busybox()
            .random_file("/data/blob", 48 << 20)
            .build();
        registry.push(&image, "team/big:1");
        // The daemon pulls through a valve that lets 4 MiB of answers by (the manifest, the config,
        // the base layer and the start of the big one), then holds: caught mid-blob on any host.
        let valve = Valve::start(registry.addr(), 4 << 20).await;
        let mut d = Daemon::start().await;
        let reference = format!("{}/team/big:1", valve.addr);
        let body = json!({ "image": reference, "memoryMB": 64 });
        let pending = {
            let req = d
                .http()
                .post(d.endpoint("/v1/sandboxes"))
                .json(&body)
                .send();
            tokio::spawn(req)
        };
        let d_ref = &d;
        common::eventually(
            || "the pull never started".to_string(),
            Duration::from_secs(30),
            move || async move {
                let images = d_ref.get_json("/v1/images").await;
                (images["images"][0]["pulledBytes"].as_u64().unwrap_or(0) > 0).then_some(())
            },
        )
        .await;
        let images = d.get_json("/v1/images").await;
        assert_eq!(images["images"][0]["state"], "pulling", "{images}");
        d.kill9();
        let _ = pending.await;
        valve.open();

        d.restart().await;
        let images = d.get_json("/v1/images").await;
        assert_eq!(
            images["images"],
            json!([]),
            "the interrupted pull's row stayed: {images}"
        );
        let staging = d.data_dir().join("images/staging");
        assert_eq!(
            std::fs::read_dir(&staging).unwrap().count(),
            0,
            "a partial layer stayed"
        );
        let s = d.create(body.clone()).await;
        assert_eq!(s["state"], "running");
        let (code, size) =
            exec_as(&d, &id_of(&s), "user", &["sh", "-c", "wc -c < /data/blob"]).await;
        assert_eq!((code, size), (0, (48u64 << 20).to_string()));
    });
}

/// A loopback TCP relay to a server that passes at most `budget` bytes of its answers (all
/// connections together), then holds them, reading no more, until [`Valve::open`].
struct Valve {
    addr: std::net::SocketAddr,
    opened: tokio::sync::watch::Sender<bool>,
}

impl Valve {
    async fn start(upstream: std::net::SocketAddr, budget: usize) -> Valve {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (opened, _) = tokio::sync::watch::channel(false);
        let left = Arc::new(AtomicUsize::new(budget));
        let watch = opened.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if let Ok(server) = tokio::net::TcpStream::connect(upstream).await {
                    tokio::spawn(Valve::relay(
                        client,
                        server,
                        left.clone(),
                        watch.subscribe(),
                    ));
                }
            }
        });
        Valve { addr, opened }
    }

    /// Relays one connection: the requests as they come, the answers within what is `left` of the
    /// budget until `opened`.
    async fn relay(
        client: tokio::net::TcpStream,
        server: tokio::net::TcpStream,
        left: Arc<AtomicUsize>,
        mut opened: tokio::sync::watch::Receiver<bool>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut client_read, &mut server_write).await });
        let mut buf = vec![0; 64 * 1024];
        loop {
            let want = if *opened.borrow() {
                buf.len()
            } else {
                buf.len().min(left.load(SeqCst))
            };
            if want == 0 {
                if opened.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let n = match server_read.read(&mut buf[..want]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let _ = left.fetch_update(SeqCst, SeqCst, |l| Some(l.saturating_sub(n)));
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    /// Lets everything by from now on.
    fn open(&self) {
        self.opened.send_replace(true);
    }
}

/// `docker save` tarballs and OCI layout tars import without a registry; sandboxes are made from
/// the imported names; a tar that is neither is a 400 that leaves nothing.
#[test]
fn image_archives_import_and_make_sandboxes() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let d = Daemon::start().await;
        let image = app_image();
        let import = |bytes: Vec<u8>, query: &str| {
            let url = d.endpoint(&format!("/v1/images/import{query}"));
            let client = d.http().clone();
            async move {
                let resp = client.post(url).body(bytes).send().await.unwrap();
                let status = resp.status().as_u16();
                (status, resp.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        let docker = std::fs::read(image.docker_archive("team/saved:1")).unwrap();
        let (status, saved) = import(docker, "").await;
        assert_eq!(status, 200, "{saved}");
        assert_eq!(saved["tags"], json!(["docker.io/team/saved:1"]), "{saved}");
        let s = d
            .create(json!({ "image": "team/saved:1", "memoryMB": 64 }))
            .await;
        assert_eq!(
            exec_as(&d, &id_of(&s), "user", &["cat", "hello.txt"]).await,
            (0, "hello from the image".into())
        );

        let oci = std::fs::read(image.oci_archive()).unwrap();
        let (status, laid_out) = import(oci, "?tag=example.com/oci/app:2").await;
        assert_eq!(status, 200, "{laid_out}");
        assert_eq!(laid_out["digest"], image.manifest_digest().as_str());
        let s = d
            .create(json!({ "image": "example.com/oci/app:2", "memoryMB": 64 }))
            .await;
        assert_eq!(exec_as(&d, &id_of(&s), "user", &["pwd"]).await.1, "/app");

        let (status, refused) = import(b"not an archive at all".to_vec(), "").await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("invalid_archive")),
            "{refused}"
        );
        let listed = d.get_json("/v1/images").await;
        assert_eq!(listed["images"].as_array().unwrap().len(), 2, "{listed}");
        let staging = d.data_dir().join("images/staging");
        assert_eq!(
            std::fs::read_dir(&staging).unwrap().count(),
            0,
            "the upload was left behind"
        );
    });
}

/// Past `--image-cache-max-mb` the sweep evicts images nothing uses, least recently used first,
/// and never an image a sandbox runs on.
#[test]
fn the_cache_sweep_evicts_unused_images_and_keeps_used_ones() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let used = ImageBuilder::busybox()
            .random_file("/used", 1 << 20)
            .build();
        let idle = ImageBuilder::busybox()
            .random_file("/idle", 1 << 20)
            .build();
        registry.push(&used, "team/used:1");
        registry.push(&idle, "team/idle:1");
        let d = Daemon::start_setup(Setup {
            args: vec![
                "--image-cache-max-mb=1".into(),
                "--reconcile-interval-secs=0".into(),
            ],
            ..Setup::default()
        })
        .await;
        let s = d
            .create(json!({ "image": registry.image_ref("team/used:1"), "memoryMB": 64 }))
            .await;
        let pulled = d
            .post_json(
                "/v1/images",
                &json!({ "reference": registry.image_ref("team/idle:1") }),
            )
            .await;
        assert_eq!(pulled.status(), 200);
        assert_eq!(
            d.get_json("/v1/images").await["images"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let report = common::reconcile(&d).await;
        let images = d.get_json("/v1/images").await;
        let left: Vec<&str> = images["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["digest"].as_str().unwrap())
            .collect();
        assert_eq!(left, [s["image"].as_str().unwrap()], "{report}");
        let layers = d.data_dir().join("images/layers");
        assert_eq!(
            std::fs::read_dir(&layers).unwrap().count(),
            used.layer_digests().len(),
            "the evicted image's own layer stayed"
        );
        assert_eq!(
            exec_as(&d, &id_of(&s), "user", &["sh", "-c", "wc -c < /used"])
                .await
                .1,
            "1048576"
        );
    });
}

/// An OCI layout holding one gzip layer whose tar is `tar` (raw bytes, so it may say anything),
/// pushed to `registry` as `repo_tag`.
fn push_raw_layer(registry: &TestRegistry, tar: &[u8], repo_tag: &str) {
    use sha2::{Digest, Sha256};
    use std::io::Write;
    let digest = |b: &[u8]| format!("sha256:{}", hex_of(&Sha256::digest(b)));
    let dir = tempfile::tempdir().unwrap();
    let blobs = dir.path().join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |b: &[u8]| {
        let d = digest(b);
        std::fs::write(blobs.join(d.trim_start_matches("sha256:")), b).unwrap();
        d
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(tar).unwrap();
    let layer = gz.finish().unwrap();
    let layer_digest = put(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": { "type": "layers", "diff_ids": [digest(tar)] }
    }))
    .unwrap();
    let config_digest = put(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest, "size": config.len() },
        "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                     "digest": layer_digest, "size": layer.len() }]
    }))
    .unwrap();
    let manifest_digest = put(&manifest);
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{ "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest, "size": manifest.len(),
                        "annotations": { "org.opencontainers.image.ref.name": "hostile" } }]
    });
    std::fs::write(dir.path().join("index.json"), index.to_string()).unwrap();
    std::fs::write(
        dir.path().join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let status = sandboxd_test_support::registry::skopeo()
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:hostile", dir.path().display()))
        .arg(format!("docker://{}", registry.image_ref(repo_tag)))
        .status()
        .unwrap();
    assert!(status.success(), "skopeo could not push the hostile image");
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A raw tar header for `name` (written byte for byte, so `..` and absolute names survive).
fn raw_member(out: &mut Vec<u8>, name: &str, kind: u8, link: &str, data: &[u8]) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// Hostile layers — a `../` path, a symlink followed by files under it, a hardlink to a host file —
/// are refused with `422 image_invalid` naming the member, write and link nothing outside their
/// layer, and leave no layer in the cache.
#[test]
fn hostile_layers_are_refused_and_touch_nothing_outside() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "untouched").unwrap();
        let target_s = target.display().to_string();
        let outside_s = outside.path().display().to_string();
        let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
        let mut dotdot = Vec::new();
        raw_member(
            &mut dotdot,
            &format!("../../../../../..{target_s}"),
            b'0',
            "",
            b"pwned",
        );
        cases.push(("dotdot", dotdot, ".."));
        let mut via_link = Vec::new();
        raw_member(&mut via_link, "evil", b'2', &outside_s, b"");
        raw_member(&mut via_link, "evil/victim", b'0', "", b"pwned");
        cases.push(("symlink", via_link, "evil/victim"));
        let mut hardlink = Vec::new();
        raw_member(&mut hardlink, "grab", b'1', &target_s, b"");
        cases.push(("hardlink", hardlink, "grab"));
        let d = Daemon::start().await;
        for (repo, mut tar, member) in cases {
            tar.extend_from_slice(&[0u8; 1024]);
            push_raw_layer(&registry, &tar, &format!("hostile/{repo}:1"));
            let resp = d
                .post_json(
                    "/v1/sandboxes",
                    &json!({ "image": registry.image_ref(&format!("hostile/{repo}:1")) }),
                )
                .await;
            let status = resp.status().as_u16();
            let v: Value = resp.json().await.unwrap();
            assert_eq!(
                (status, v["code"].as_str()),
                (422, Some("image_invalid")),
                "{repo}: {v}"
            );
            assert!(
                v["message"].as_str().unwrap().contains(member),
                "{repo}: {v}"
            );
            assert_eq!(
                std::fs::read_to_string(&target).unwrap(),
                "untouched",
                "{repo}"
            );
            let meta = std::fs::metadata(&target).unwrap();
            assert_eq!(
                std::os::unix::fs::MetadataExt::nlink(&meta),
                1,
                "{repo}: linked"
            );
            assert_eq!(
                std::fs::read_dir(outside.path()).unwrap().count(),
                1,
                "{repo}"
            );
        }
        let layers = d.data_dir().join("images/layers");
        assert_eq!(
            std::fs::read_dir(&layers).unwrap().count(),
            0,
            "a hostile layer was kept"
        );
        let staging = d.data_dir().join("images/staging");
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
        assert_eq!(d.get_json("/v1/images").await["images"], json!([]));
        assert!(d.list_all().await.is_empty());
    });
}

/// A multi-platform image (an OCI index) resolves to this host's platform.
#[test]
fn a_manifest_list_resolves_to_this_hosts_platform() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        let image = ImageBuilder::busybox().build_index(&["linux/arm64/v8", "linux/amd64"]);
        registry.push(&image, "multi/app:1");
        let amd64 = image
            .platform_manifests()
            .iter()
            .find(|(p, _)| p == "linux/amd64")
            .map(|(_, d)| d.clone())
            .expect("an amd64 manifest");
        let d = Daemon::start().await;
        let s = d
            .create(json!({ "image": registry.image_ref("multi/app:1"), "memoryMB": 64 }))
            .await;
        assert_eq!(s["image"], amd64.as_str(), "{s}");
        assert_eq!(
            exec_as(&d, &id_of(&s), "user", &["uname", "-m"]).await.1,
            "x86_64"
        );
    });
}
