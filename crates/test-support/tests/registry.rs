//! The registry fixture against the real tools: images built with umoci reach a real docker-registry
//! with their layers and configuration, its blob-GET counts are exact, basic auth is enforced, and
//! both archive kinds are readable. Each test skips (prints SKIPPED) on a machine without the tools.

use std::path::Path;
use std::process::Command;

use sandboxd_test_support::registry::{
    require_tools, skopeo, ImageBuilder, TestRegistry, REGISTRY_TOOLS,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn two_layer_image_with_env_and_workdir_arrives_with_its_layers_and_config() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox()
        .layer(|root| {
            std::fs::create_dir_all(root.join("app")).unwrap();
            std::fs::write(root.join("app/hello.txt"), "hello\n").unwrap();
        })
        .env("GREETING=hello")
        .workdir("/app")
        .user("0:0")
        .entrypoint(&["/bin/sh", "-c"])
        .cmd(&["cat hello.txt"])
        .build();
    let registry = TestRegistry::start();
    let pushed = registry.push(&image, "tests/two-layers:v1");
    assert_eq!(pushed, image.manifest_digest());
    assert_eq!(registry.manifest_digest("tests/two-layers:v1"), pushed);
    assert!(
        registry.blob_gets().is_empty(),
        "a push GETs no blob: {:?}",
        registry.blob_gets()
    );

    let inspected = json(&registry.inspect("tests/two-layers:v1", &[]));
    assert_eq!(inspected["Digest"], pushed.as_str());
    let layers = strings(&inspected["Layers"]);
    assert_eq!(layers.len(), 2);
    assert_eq!(layers, image.layer_digests());
    let env = strings(&inspected["Env"]);
    assert!(env.contains(&"GREETING=hello".to_string()), "{env:?}");
    assert!(env.iter().any(|kv| kv.starts_with("PATH=")), "{env:?}");

    let config = json(&registry.inspect("tests/two-layers:v1", &["--config"]));
    assert_eq!(config["config"]["WorkingDir"], "/app");
    assert_eq!(config["config"]["User"], "0:0");
    assert_eq!(strings(&config["config"]["Entrypoint"]), ["/bin/sh", "-c"]);
    assert_eq!(strings(&config["config"]["Cmd"]), ["cat hello.txt"]);
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
}

#[test]
fn a_served_blob_get_is_counted_exactly_once_and_heads_and_misses_are_not() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox().build();
    let registry = TestRegistry::start();
    registry.push(&image, "tests/busybox:1");
    let layer = image.layer_digests().remove(0);
    let path = format!("/v2/tests/busybox/blobs/{layer}");

    let head = registry.request("HEAD", &path, None);
    assert_eq!(head.status, 200);
    let missing = format!("sha256:{}", "0".repeat(64));
    let miss = registry.request("GET", &format!("/v2/tests/busybox/blobs/{missing}"), None);
    assert_eq!(miss.status, 404);
    assert!(
        registry.blob_gets().is_empty(),
        "{:?}",
        registry.blob_gets()
    );

    let get = registry.request("GET", &path, None);
    assert_eq!(get.status, 200);
    let served = format!("sha256:{}", hex::encode(Sha256::digest(&get.body)));
    assert_eq!(served, layer, "the registry served the layer's bytes");
    let gets = registry.blob_gets();
    assert_eq!(gets.get(&layer), Some(&1), "{gets:?}");
    assert_eq!(gets.len(), 1, "{gets:?}");

    registry.request("GET", &path, None);
    assert_eq!(registry.blob_gets().get(&layer), Some(&2));
}

#[test]
fn basic_auth_refuses_anonymous_and_wrong_credentials_and_admits_the_account() {
    if !require_tools(&["docker-registry", "htpasswd"]) {
        return;
    }
    let registry = TestRegistry::start_with_basic_auth("alice", "s3cret");
    let anonymous = registry.request("GET", "/v2/", None);
    assert_eq!(anonymous.status, 401);
    assert!(
        anonymous
            .header("www-authenticate")
            .is_some_and(|h| h.starts_with("Basic ")),
        "{:?}",
        anonymous.headers
    );
    assert_eq!(
        registry
            .request("GET", "/v2/", Some(("alice", "wrong")))
            .status,
        401
    );
    assert_eq!(
        registry
            .request("GET", "/v2/", registry.credentials())
            .status,
        200
    );

    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox().build();
    let pushed = registry.push(&image, "private/busybox:1");
    assert_eq!(registry.manifest_digest("private/busybox:1"), pushed);
    let layer = image.layer_digests().remove(0);
    let path = format!("/v2/private/busybox/blobs/{layer}");
    assert_eq!(registry.request("GET", &path, None).status, 401);
    assert!(
        registry.blob_gets().is_empty(),
        "a refused GET is not counted"
    );
    assert_eq!(
        registry
            .request("GET", &path, registry.credentials())
            .status,
        200
    );
    assert_eq!(registry.blob_gets().get(&layer), Some(&1));
}

#[test]
fn oci_and_docker_archives_hold_the_image() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox().layers(2).tag("v2").build();
    let inspect = |reference: String| {
        let out = skopeo().arg("inspect").arg(&reference).output().unwrap();
        assert!(
            out.status.success(),
            "{reference}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        json(&String::from_utf8(out.stdout).unwrap())
    };
    let oci = inspect(format!("oci-archive:{}:v2", image.oci_archive().display()));
    assert_eq!(oci["Digest"], image.manifest_digest().as_str());
    let docker_archive = image.docker_archive("tests/archived:v2");
    let docker = inspect(format!("docker-archive:{}", docker_archive.display()));
    assert_eq!(docker["Layers"].as_array().unwrap().len(), 3);
    let manifest = Command::new("tar")
        .arg("-xOf")
        .arg(&docker_archive)
        .arg("manifest.json")
        .output()
        .unwrap();
    assert!(manifest.status.success());
    let manifest = json(&String::from_utf8(manifest.stdout).unwrap());
    // skopeo names a reference without a registry host the way docker does.
    assert_eq!(
        strings(&manifest[0]["RepoTags"]),
        ["docker.io/tests/archived:v2"]
    );
}

/// The entries of a gzipped layer tar.
fn layer_entries(image_layout: &Path, digest: &str) -> Vec<String> {
    let blob = image_layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    let out = Command::new("tar").arg("-tzf").arg(&blob).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect()
}

#[test]
fn layers_see_the_root_below_them_and_deletions_become_whiteouts() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox()
        .layer(|root| {
            assert!(
                root.join("bin/busybox").is_file(),
                "the busybox layer is below"
            );
            std::fs::remove_file(root.join("bin/ls")).unwrap();
        })
        .random_file("/data/random.bin", 1 << 20)
        .build();
    let layers = image.layer_digests();
    assert_eq!(layers.len(), 3);
    let base = layer_entries(&image.layout(), &layers[0]);
    for applet in [
        "sh", "ls", "cat", "echo", "id", "env", "pwd", "mkdir", "rm", "dd", "sleep", "true",
        "false", "wc", "head", "touch", "ln",
    ] {
        assert!(base.contains(&format!("bin/{applet}")), "no /bin/{applet}");
    }
    for file in ["bin/busybox", "etc/passwd", "etc/group", "tmp/"] {
        assert!(base.contains(&file.to_string()), "no /{file}: {base:?}");
    }
    assert!(layer_entries(&image.layout(), &layers[1]).contains(&"bin/.wh.ls".to_string()));
    let random = image
        .layout()
        .join("blobs/sha256")
        .join(layers[2].trim_start_matches("sha256:"));
    let size = std::fs::metadata(random).unwrap().len();
    assert!(
        size >= 1 << 20,
        "random data does not compress: {size} bytes"
    );
}

#[test]
fn a_real_pull_is_counted_one_get_per_blob() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox()
        .random_file("/data/random.bin", 1 << 20)
        .build();
    let registry = TestRegistry::start();
    registry.push(&image, "tests/pull:1");
    let pulled = tempfile::tempdir().unwrap();
    let out = skopeo()
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{}", registry.image_ref("tests/pull:1")))
        .arg(format!("oci:{}:pulled", pulled.path().display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gets = registry.blob_gets();
    for layer in image.layer_digests() {
        assert_eq!(gets.get(&layer), Some(&1), "{gets:?}");
    }
    // The two layers and the config blob.
    assert_eq!(gets.len(), 3, "{gets:?}");
    assert!(gets.values().all(|&n| n == 1), "{gets:?}");
}

#[test]
fn a_multi_platform_index_pushes_with_a_manifest_per_platform() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::busybox().build_index(&["linux/amd64", "linux/arm64/v8"]);
    let platforms = image.platform_manifests();
    assert_eq!(platforms.len(), 2);
    let registry = TestRegistry::start();
    let pushed = registry.push(&image, "tests/multi:1");
    assert_eq!(pushed, image.manifest_digest());
    assert_eq!(registry.manifest_digest("tests/multi:1"), pushed);

    let index = registry.request("GET", "/v2/tests/multi/manifests/1", None);
    assert_eq!(index.status, 200);
    let index: Value = serde_json::from_slice(&index.body).unwrap();
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let listed: Vec<(String, String)> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let p = &m["platform"];
            let mut platform = format!(
                "{}/{}",
                p["os"].as_str().unwrap(),
                p["architecture"].as_str().unwrap()
            );
            if let Some(variant) = p["variant"].as_str() {
                platform += &format!("/{variant}");
            }
            (platform, m["digest"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(listed, platforms);
    for (platform, digest) in platforms {
        let arch = platform.split('/').nth(1).unwrap();
        let config = json(&registry.inspect(&format!("tests/multi@{digest}"), &["--config"]));
        assert_eq!(config["architecture"], arch, "{platform}");
        assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn dropping_the_registry_kills_and_reaps_it() {
    if !require_tools(&["docker-registry"]) {
        return;
    }
    let registry = TestRegistry::start();
    let (pid, addr) = (registry.pid(), registry.addr());
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    drop(registry);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the registry's process is gone, not a zombie"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "nothing listens on {addr}"
    );
}
