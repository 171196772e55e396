//! Daytona builds with local files end to end: the real, unmodified `daytona` Python SDK
//! (`tests/daytona/test_contexts.py`) and `@daytonaio/sdk` (`tests/daytona/test_contexts.mjs`)
//! upload an `Image`'s local files to the daemon's object store on its TLS listener and build from
//! them. The daemon has a certificate for `localhost` from a CA made here; the SDKs trust that CA
//! the way a user's machine would trust one, through the system's store (the Python SDK's storage
//! client reads no environment: the script runs in a mount namespace whose
//! `/etc/ssl/certs/ca-certificates.crt` holds the CA too) and `NODE_EXTRA_CA_CERTS`. The scripts'
//! docs list what they prove.
//!
//! Beyond the scripts: a build naming a context that was never uploaded is a 400 that says so, and
//! the store holds the contexts the scripts uploaded, the large ones completed in several parts.

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test, run_script};
use sandboxd_test_support::registry::{require_tools, REGISTRY_TOOLS};
use serde_json::json;
use std::path::Path;

/// A CA, and a certificate for `localhost` it signed: (CA PEM, certificate PEM, key PEM).
fn localhost_certificate() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key pair");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sandboxd test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("key pair");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&key, &ca, &ca_key)
        .expect("certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The files of `dir` whose names end with `suffix`.
fn files_ending(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_ending(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_daytona_sdks_build_images_with_local_files_through_the_object_store() {
    if !require_tools(REGISTRY_TOOLS) || !require_tools(&["unshare"]) {
        return;
    }
    e2b_test(async {
        let python = e2b_support::daytona_python();
        let registry = e2b_support::registry_with_app_image(&["team/app:v1"]);

        let (ca, cert, key) = localhost_certificate();
        let tls_port = free_port();
        let mut setup = e2b_support::setup();
        setup.args = vec![
            format!("--registry-mirror=docker.io={}", registry.url()),
            format!("--tls-listen=127.0.0.1:{tls_port}"),
        ];
        let d = common::Daemon::start_prepared(setup, |data_dir, _| {
            let certs = data_dir.join("certs");
            std::fs::create_dir_all(&certs).unwrap();
            std::fs::write(certs.join("localhost.crt"), &cert).unwrap();
            std::fs::write(certs.join("localhost.key"), &key).unwrap();
        })
        .await;

        // A context nobody uploaded: a 400 that names it, nothing created.
        let missing = "0123456789abcdef0123456789abcdef";
        let body = json!({
            "buildInfo": {
                "dockerfileContent": "FROM team/app:v1\nCOPY [\"x\", \"/x\"]\n",
                "contextHashes": [missing],
            }
        });
        let (status, answer) = call(&d, reqwest::Method::POST, "/api/sandbox", Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(missing) && message.contains("not uploaded"),
            "{answer}"
        );
        let body = json!({ "buildInfo": { "dockerfileContent": "FROM team/app:v1", "contextHashes": ["../x"] } });
        let (status, answer) = call(&d, reqwest::Method::POST, "/api/sandbox", Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        assert!(d.list_all().await.is_empty());

        let work = tempfile::tempdir().unwrap();
        let ca_file = work.path().join("ca.pem");
        std::fs::write(&ca_file, &ca).unwrap();
        let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
        bundle.extend_from_slice(ca.as_bytes());
        let bundle_file = work.path().join("bundle.crt");
        std::fs::write(&bundle_file, bundle).unwrap();

        let api = format!("http://localhost:{}/api", d.port());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
            ("NODE_EXTRA_CA_CERTS", ca_file.to_str().unwrap()),
        ];
        let trusting = "mount --bind \"$0\" /etc/ssl/certs/ca-certificates.crt && exec \"$@\"";
        run_script(
            &d,
            Path::new("unshare"),
            &[
                "--mount",
                "--propagation=private",
                "sh",
                "-c",
                trusting,
                bundle_file.to_str().unwrap(),
                python.to_str().unwrap(),
                "tests/daytona/test_contexts.py",
            ],
            &env,
        )
        .await;
        run_script(
            &d,
            Path::new("node"),
            &["tests/daytona/test_contexts.mjs"],
            &env,
        )
        .await;

        // What the scripts uploaded is in the store: contexts, and the large trees' multipart
        // uploads completed (one by each SDK's storage client).
        let objects = d.data_dir().join("objects");
        let contexts = files_ending(&objects.join("objects"), ".json")
            .iter()
            .filter(|m| std::fs::read_to_string(m).unwrap().contains("context.tar"))
            .count();
        assert!(contexts >= 4, "{contexts} contexts in the store");
        let completed = files_ending(&objects.join("uploads"), "done.json");
        assert!(
            completed.len() >= 2,
            "{} multipart uploads completed",
            completed.len()
        );
    });
}
