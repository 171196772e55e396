//! The MCP surface: the daemon's sandboxes as Model Context Protocol tools, over Streamable HTTP at
//! `/mcp` (and over stdio through `sandboxd mcp`, which bridges to it).
//!
//! Contract:
//! - The protocol is the official Rust SDK's (`rmcp`); this module only declares the tools
//!   ([`tools::SandboxTools`]) and mounts them. Each tool translates onto the same service flow the
//!   `/v1` route of the same name uses: nothing here creates, runs or reads anything by itself.
//! - `/mcp` sits behind the daemon's authentication like `/v1`: a request without a valid API key is
//!   answered 401 before any MCP message is read.
//! - The server is stateless (no MCP session is kept between requests; answers are plain JSON), so a
//!   daemon restart loses nothing a client holds.
//! - A tool's failure is a tool result with `isError: true`, as the MCP specification asks, so the
//!   model sees it and can correct itself: its text is the API's message, its structured content
//!   the API's `{code, status, message}`. An unknown tool is a protocol error.

pub mod tools;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sandboxd_service::Service;

/// The `/mcp` endpoint's service, to be nested under the authenticated router.
pub fn service(
    service: Service,
) -> StreamableHttpService<tools::SandboxTools, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // Host validation guards unauthenticated local servers against DNS rebinding; every request
        // here carries an API key a rebound page cannot have, and the daemon may be reached by any name.
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(tools::SandboxTools::new(service.clone())),
        Default::default(),
        config,
    )
}
