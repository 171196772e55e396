//! Daytona's images, builds and snapshots end to end: the real, unmodified `daytona` Python SDK
//! (`tests/daytona/test_images.py`) and `@daytonaio/sdk` (`tests/daytona/test_images.mjs`), both
//! installed by `scripts/daytona-sdks`, against a real daemon that
//! pulls through `--registry-mirror` from a real registry (Debian's `docker-registry` on loopback,
//! filled with an image made by `umoci` and pushed by `skopeo`). The script's docs list what it
//! proves.
//!
//! Beyond the script, over plain HTTP: the caller's snapshot mistakes are 400s and 404s in
//! Daytona's error shape, and without a TLS listener a build with local files is refused with a
//! 400 that says what to configure.

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test, run_script};
use sandboxd_test_support::registry::{require_tools, REGISTRY_TOOLS};
use serde_json::json;

#[test]
fn the_daytona_sdk_makes_sandboxes_and_snapshots_from_images_and_builds() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2b_test(async {
        let python = e2b_support::daytona_python();
        let registry =
            e2b_support::registry_with_app_image(&["library/python:3.12-slim", "team/app:v1"]);
        let d = e2b_support::start_with_mirror(&registry).await;

        // The caller's snapshot mistakes.
        let post = reqwest::Method::POST;
        for (body, why) in [
            (json!({ "imageName": "alpine" }), "a name"),
            (json!({ "name": "x" }), "imageName or a buildInfo"),
            (
                json!({ "name": "x", "imageName": "alpine", "buildInfo": { "dockerfileContent": "FROM alpine" } }),
                "imageName or a buildInfo",
            ),
            (
                json!({ "name": "x", "imageName": "alpine", "cpu": 2 }),
                "resources",
            ),
            (
                json!({ "name": "Bad Name", "imageName": "alpine" }),
                "invalid template name",
            ),
        ] {
            let (status, answer) = call(&d, post.clone(), "/api/snapshots", Some(body)).await;
            assert_eq!(status, 400, "{answer}");
            assert_eq!(answer["statusCode"], 400, "{answer}");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(message.contains(why), "{why}: {answer}");
        }
        let get = reqwest::Method::GET;
        let (status, answer) = call(&d, get.clone(), "/api/snapshots/no-such", None).await;
        assert_eq!(
            (status, &answer["statusCode"]),
            (404, &json!(404)),
            "{answer}"
        );
        let (status, _) = call(&d, get.clone(), "/api/snapshots?page=0", None).await;
        assert_eq!(status, 400);
        let (status, _) = call(
            &d,
            get.clone(),
            "/api/snapshots/base/build-logs?follow=maybe",
            None,
        )
        .await;
        assert_eq!(status, 400);
        // Without a TLS listener there is no object store: local files are refused, saying why.
        let body = json!({ "buildInfo": {
            "dockerfileContent": "FROM alpine\nCOPY [\"x\", \"/x\"]\n",
            "contextHashes": ["0123456789abcdef0123456789abcdef"],
        } });
        for (method, path, body) in [
            (get, "/api/object-storage/push-access", None),
            (post.clone(), "/api/sandbox", Some(body)),
        ] {
            let (status, answer) = call(&d, method, path, body).await;
            assert_eq!(status, 400, "{path}: {answer}");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(message.contains("--tls-listen"), "{path}: {answer}");
        }

        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
        ];
        run_script(&d, &python, &["tests/daytona/test_images.py"], &env).await;
        let node = std::path::Path::new("node");
        run_script(&d, node, &["tests/daytona/test_images.mjs"], &env).await;
    });
}
