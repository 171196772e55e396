//! The Daytona SDKs' whole surface against the daemon: `tests/daytona/test_surface.py` lists every
//! public method of the real, unmodified `daytona` Python SDK by introspection and calls each one,
//! under a deadline, in one of two columns — works (its result asserted) or refused (the SDK's own
//! `DaytonaError`, at once, with the daemon's message saying what is not supported and what to use
//! instead) — and compares the table it makes with the checked-in `tests/daytona/surface/python.md`.
//! The script's docs say how. `tests/daytona/test_surface.mjs` does the same with
//! `@daytonaio/sdk` (TypeScript), against `tests/daytona/surface/typescript.md`.
//!
//! Beyond the scripts: every refused route ([`sandboxd_facade_daytona::unsupported`]) answers 501
//! in Daytona's error shape over plain HTTP, for any sandbox id, without a sandbox existing; and
//! no request of a whole run answered a 5xx other than those 501s. Each daemon starts with the code
//! interpreter template (the default snapshot of `language="python"`) restored from the build's
//! seed, not built again.

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test, run_script};
use sandboxd_test_support::registry::{require_tools, REGISTRY_TOOLS};
use sandboxd_test_support::workspace_root;
use serde_json::json;

#[test]
fn every_method_of_the_daytona_python_sdk_works_or_is_refused_at_once() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2b_test(async {
        let python = e2b_support::daytona_python();
        let registry = e2b_support::registry_with_app_image(&["team/app:v1"]);
        let d = e2b_support::start_seeded_with_mirror(&registry).await;

        use reqwest::Method as M;
        let (s, t) = ("/api/sandbox/nosuch", "/api/toolbox/nosuch");
        let refused = [
            (M::POST, format!("{s}/archive")),
            (M::POST, format!("{s}/recover")),
            (M::POST, format!("{s}/ssh-access")),
            (M::DELETE, format!("{s}/ssh-access?token=x")),
            (
                M::GET,
                "/api/sandbox/ssh-access/validate?token=x".to_string(),
            ),
            (M::GET, format!("{t}/process/session/entrypoint")),
            (M::GET, format!("{t}/process/session/entrypoint/logs")),
            (M::POST, format!("{t}/computeruse/mouse/click")),
            (M::GET, format!("{t}/computeruse/recordings/r/download")),
        ];
        for (method, path) in refused {
            let (status, answer) = call(&d, method.clone(), &path, None).await;
            assert_eq!(status, 501, "{method} {path}: {answer}");
            assert_eq!(answer["statusCode"], 501, "{method} {path}: {answer}");
            assert_eq!(
                answer["code"], "not_implemented",
                "{method} {path}: {answer}"
            );
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("not supported") || message.contains("not kept"),
                "{method} {path}: {answer}"
            );
        }
        // What works now: an unknown sandbox is not found, the configuration is served.
        for (method, path) in [
            (M::POST, format!("{s}/ttl/5")),
            (M::POST, format!("{s}/autopause/5")),
            (M::POST, format!("{s}/network-settings")),
            (M::GET, format!("{s}/telemetry/metrics")),
            (M::GET, format!("{t}/system/metrics")),
        ] {
            let (status, answer) = call(&d, method.clone(), &path, None).await;
            assert_eq!(status, 404, "{method} {path}: {answer}");
        }
        let (status, config) = call(&d, M::GET, "/api/config", None).await;
        assert_eq!(status, 200, "{config}");
        assert!(config["analyticsApiUrl"].is_null(), "{config}");
        // A create's lists: addresses in one, names in the other, each refused in the wrong one.
        let lists = json!({"snapshot": "base", "networkBlockAll": true,
            "networkAllowList": "1.1.1.1", "domainAllowList": "Example.com"});
        let (status, made) = call(&d, M::POST, "/api/sandbox", Some(lists)).await;
        assert_eq!(status, 200, "{made}");
        assert_eq!(
            (&made["networkAllowList"], &made["domainAllowList"]),
            (&json!("1.1.1.1/32"), &json!("example.com")),
            "{made}"
        );
        let id = made["id"].as_str().unwrap().to_string();
        for wrong in [
            json!({"snapshot": "base", "networkAllowList": "example.com"}),
            json!({"snapshot": "base", "domainAllowList": "1.1.1.1"}),
        ] {
            let (status, answer) = call(&d, M::POST, "/api/sandbox", Some(wrong)).await;
            assert_eq!(status, 400, "{answer}");
        }
        let (status, _) = call(&d, M::DELETE, &format!("/api/sandbox/{id}"), None).await;
        assert!(status < 300, "{status}");
        // A sandbox session that is not the entrypoint is still looked up.
        let (status, answer) = call(&d, M::GET, &format!("{t}/process/session/mine"), None).await;
        assert_eq!(status, 404, "{answer}");

        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
            ("SURFACE_IMAGE", "team/app:v1"),
        ];
        run_script(&d, &python, &["tests/daytona/test_surface.py"], &env).await;
        assert_no_server_errors(&d);
    });
}

#[test]
fn every_method_of_the_daytona_typescript_sdk_works_or_is_refused_at_once() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2b_test(async {
        let sdk = workspace_root().join("tests/daytona/node_modules/@daytonaio/sdk/package.json");
        assert!(
            sdk.is_file(),
            "the Daytona TypeScript SDK is not installed: run scripts/daytona-sdks"
        );
        let registry = e2b_support::registry_with_app_image(&["team/app:v1"]);
        let d = e2b_support::start_seeded_with_mirror(&registry).await;
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
            ("SURFACE_IMAGE", "team/app:v1"),
        ];
        let node = std::path::Path::new("node");
        run_script(&d, node, &["tests/daytona/test_surface.mjs"], &env).await;
        assert_no_server_errors(&d);
    });
}

/// The daemon's log names no answer with a 5xx status but the refusals' 501 (which it names).
fn assert_no_server_errors(d: &common::Daemon) {
    let log = d.log_tail(usize::MAX);
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // A colour: ESC [ ... m.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    assert!(
        plain.contains("answered status=501"),
        "the log names no answer's status: {}",
        d.log_tail(20)
    );
    let errors: Vec<&str> = plain
        .lines()
        .filter(|line| line.contains("answered status=5") && !line.contains("status=501"))
        .collect();
    assert!(errors.is_empty(), "server errors:\n{}", errors.join("\n"));
}
