//! The Daytona toolbox's file system and git end to end: the real, unmodified `daytona` Python SDK
//! (`tests/daytona/test_files.py`, installed by `scripts/daytona-sdks`) against a real daemon, with
//! a real git server (`git http-backend` behind basic auth, run by the script on the host's address
//! and reached by a sandbox whose `allowOut` names it). The script's docs list what it proves.
//!
//! The TypeScript SDK too (`tests/daytona/test_sdk.mjs`, `@daytonaio/sdk` pinned by its
//! `package-lock.json`): create, get, list, names, exec, files, sessions with input, PTYs,
//! previews, stop and start, delete.
//!
//! Beyond the script:
//! - The git password the script's server wants (chosen here) never appears in the daemon's log.
//! - The caller's mistakes over plain HTTP are 400s and 404s in Daytona's error shape, never 500s:
//!   a `..` path (`INVALID_FILE_PATH`), a bad depth, an empty bulk download, a malformed body, an
//!   unknown sandbox, an option smuggled in as a branch name.

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test, run_script};
use sandboxd_test_support::workspace_root;
use serde_json::json;

#[test]
fn the_daytona_sdk_moves_files_and_drives_git_in_a_sandbox() {
    e2b_test(async {
        let git = std::process::Command::new("git").arg("--version").output();
        assert!(
            git.is_ok_and(|o| o.status.success()),
            "git is not installed on the host (scripts/test installs it)"
        );
        let python = workspace_root().join(".venv-daytona/bin/python");
        assert!(
            python.exists(),
            "the Daytona SDK is not installed: run scripts/daytona-sdks"
        );
        let d = e2b_support::start().await;

        // The caller's mistakes, over plain HTTP.
        let id = common::id_of(&d.create(json!({ "template": "base" })).await);
        let t = format!("/api/toolbox/{id}");
        use reqwest::Method as M;
        let cases = [
            (
                M::GET,
                format!("{t}/files/info?path=/home/../etc"),
                None,
                400,
                "INVALID_FILE_PATH",
            ),
            (
                M::GET,
                format!("{t}/files/info?path=/no/such"),
                None,
                404,
                "FILE_NOT_FOUND",
            ),
            (
                M::GET,
                format!("{t}/files?path=/home/user&depth=0"),
                None,
                400,
                "BAD_REQUEST",
            ),
            (
                M::GET,
                format!("{t}/files/find?path=/home/user"),
                None,
                400,
                "BAD_REQUEST",
            ),
            (
                M::GET,
                format!("{t}/files/search?path=/home/user&pattern=a["),
                None,
                400,
                "BAD_REQUEST",
            ),
            (
                M::POST,
                format!("{t}/files/bulk-download"),
                Some(json!({ "paths": [] })),
                400,
                "BAD_REQUEST",
            ),
            (
                M::POST,
                format!("{t}/files/replace"),
                Some(json!({ "files": 3 })),
                400,
                "BAD_REQUEST",
            ),
            (
                M::POST,
                format!("{t}/files/folder?path=/home/user/x&mode=999"),
                None,
                400,
                "BAD_REQUEST",
            ),
            (
                M::DELETE,
                format!("{t}/files?path=/"),
                None,
                400,
                "BAD_REQUEST",
            ),
            (
                M::POST,
                format!("{t}/git/checkout"),
                Some(json!({ "path": "/home/user", "branch": "-f" })),
                400,
                "BAD_REQUEST",
            ),
            (
                M::GET,
                format!("{t}/git/status?path=/home/user/none"),
                None,
                404,
                "GIT_REPO_NOT_FOUND",
            ),
            (
                M::GET,
                "/api/toolbox/nosuchsandbox/files?path=/".to_string(),
                None,
                404,
                "not_found",
            ),
        ];
        for (method, path, body, status, code) in cases {
            let (got, answer) = call(&d, method.clone(), &path, body).await;
            assert_eq!(got, status, "{method} {path}: {answer}");
            assert_eq!(answer["code"], code, "{method} {path}: {answer}");
            assert_eq!(answer["statusCode"], status, "{method} {path}: {answer}");
        }
        let (status, _) = call(&d, M::DELETE, &format!("/v1/sandboxes/{id}"), None).await;
        assert!(status < 300, "delete: {status}");

        // The real SDK, and a git server whose password the daemon must never print.
        let password = format!("pw-{}", std::process::id());
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
            ("SANDBOXD_TEST_GIT_PASSWORD", password.as_str()),
        ];
        run_script(&d, &python, &["tests/daytona/test_files.py"], &env).await;
        let log = d.log_tail(usize::MAX);
        assert!(
            !log.contains(&password),
            "the daemon logged the git password"
        );
    });
}

#[test]
fn the_daytona_typescript_sdk_drives_sandboxes() {
    e2b_test(async {
        let sdk = workspace_root().join("tests/daytona/node_modules/@daytonaio/sdk/package.json");
        assert!(
            sdk.is_file(),
            "the Daytona TypeScript SDK is not installed: run scripts/daytona-sdks"
        );
        let d = e2b_support::start().await;
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
        ];
        let node = std::path::Path::new("node");
        run_script(&d, node, &["tests/daytona/test_sdk.mjs"], &env).await;
    });
}

/// A Daytona create's `networkAllowList` (comma-separated CIDRs) is the sandbox's `allowOut`, and
/// `networkBlockAll` its egress switch (the API lists the blocks in order); a domain name there is
/// refused (Daytona's list takes none) and creates nothing.
#[test]
fn a_daytona_create_carries_its_network_allow_list() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let named =
            json!({"snapshot": "base", "networkAllowList": "203.0.113.7/32, api.openai.com"});
        let (status, refused) = call(&d, reqwest::Method::POST, "/api/sandbox", Some(named)).await;
        assert_eq!(status, 400, "{refused}");
        assert!(
            refused
                .to_string()
                .contains("networkAllowList entry \\\"api.openai.com\\\""),
            "{refused}"
        );
        assert!(
            d.list_all().await.is_empty(),
            "a refused create made a sandbox"
        );
        let body = json!({
            "snapshot": "base",
            "networkBlockAll": true,
            "networkAllowList": "203.0.113.7/32, 198.51.100.0/24",
        });
        let (status, made) = call(&d, reqwest::Method::POST, "/api/sandbox", Some(body)).await;
        assert_eq!(status, 200, "{made}");
        assert_eq!(made["networkBlockAll"], true, "{made}");
        let id = made["id"].as_str().expect("an id").to_string();
        let sandbox = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(sandbox["network"]["egress"], false, "{sandbox}");
        assert_eq!(
            sandbox["network"]["allowOut"],
            json!(["198.51.100.0/24", "203.0.113.7/32"]),
            "{sandbox}"
        );
        let (status, _) = call(
            &d,
            reqwest::Method::DELETE,
            &format!("/api/sandbox/{id}"),
            None,
        )
        .await;
        assert_eq!(status, 200);
    });
}
