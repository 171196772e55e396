//! The MCP surface with the official MCP Python client (`mcp`, installed by `scripts/mcp-sdk`),
//! unmodified: over stdio through `sandboxd mcp` and over Streamable HTTP at `/mcp`, with a `user`
//! key minted by `POST /v1/api-keys` (`tests/mcp/test_mcp.py`).

mod common;
mod e2b_support;

use e2b_support::{e2b_test, run_script};
use sandboxd_test_support::workspace_root;
use serde_json::json;

/// Invariant: every MCP call is authenticated with an API key, on both transports; the tools
/// create, run, read, write, list, delete and drive git through the daemon's own flows, and their
/// failures are tool results with `isError` carrying the API's message, code and status (an unknown
/// tool is a protocol error).
#[test]
fn the_official_mcp_client_drives_the_tools_over_stdio_and_http() {
    e2b_test(async {
        let python = workspace_root().join(".venv-mcp/bin/python");
        assert!(
            python.exists(),
            "the MCP SDK is not installed: run scripts/mcp-sdk"
        );
        let d = e2b_support::start().await;
        let (key, id) = d.mint_key("mcp", "user").await;
        let sandboxd = std::path::Path::new(env!("CARGO_BIN_EXE_sandboxd"));
        let env = [
            ("SANDBOXD_URL", d.url()),
            ("SANDBOXD_TOKEN", key.clone()),
            ("SANDBOXD_BIN", sandboxd.display().to_string()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_script(&d, &python, &["tests/mcp/test_mcp.py"], &env).await;

        // Revoked, the key is refused at /mcp on its next request.
        let revoked = d.delete(&format!("/v1/api-keys/{id}")).await;
        assert_eq!(revoked.status(), 204);
        let refused = d
            .http_plain()
            .post(d.endpoint("/mcp"))
            .bearer_auth(&key)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
    });
}
