//! `sandboxd mcp`: the daemon's MCP tools on stdio, for desktop agents and IDEs that launch their MCP
//! servers as processes.
//!
//! Contract: this process holds no sandbox and no tool of its own. It is an MCP server on stdio that
//! relays `tools/list` and `tools/call` to the daemon's `/mcp` endpoint (Streamable HTTP, with the
//! API key as bearer) through the SDK's client, so there is one implementation of the tools: the
//! daemon's (`sandboxd_mcp`). When the daemon cannot be reached or refuses the key, the stdio
//! server still starts and answers every call with an MCP error saying why, which is what an agent
//! shows its user.

use crate::config::McpConfig;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use std::sync::Arc;

/// The relay: the daemon's session, or why there is none.
#[derive(Clone)]
struct Relay {
    daemon: Result<Arc<RunningService<RoleClient, ()>>, String>,
}

impl Relay {
    fn daemon(&self) -> Result<&RunningService<RoleClient, ()>, ErrorData> {
        self.daemon
            .as_deref()
            .map_err(|why| ErrorData::internal_error(why.clone(), None))
    }
}

/// A failure of the call to the daemon, as the MCP error to relay.
fn relayed(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the daemon's MCP endpoint: {other}"), None),
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        let remote = self.daemon.as_ref().ok().and_then(|d| d.peer_info());
        if let Some(remote) = remote {
            if let Some(server) = &remote.server_info {
                info.server_info = server.clone();
            }
            info.instructions = remote.instructions.clone();
        }
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.daemon()?.list_tools(request).await.map_err(relayed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = self.daemon()?.call_tool(request).await.map_err(relayed)?;
        Ok(result.into())
    }
}

/// Serves the relay on stdio until the client closes it.
pub async fn run(config: McpConfig) -> anyhow::Result<()> {
    let url = format!("{}/mcp", config.api_url.trim_end_matches('/'));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(config.token),
    );
    let daemon = ().serve(transport).await.map(Arc::new).map_err(|e| {
        let why = format!("cannot use the daemon's MCP endpoint {url}: {e}");
        tracing::error!("{why}");
        why
    });
    let relay = Relay { daemon };
    let server = relay.serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
