//! The MCP tools, each a translation onto a service flow (see the crate contract in [`crate`]).

use futures::StreamExt;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use sandboxd_api_types as api;
use sandboxd_service::code::code_lines;
use sandboxd_service::git::{Credentials, GitClone, GitCommit, GitSync};
use sandboxd_service::sandboxes::to_api;
use sandboxd_service::volumes::volume_to_api;
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::SandboxFilter;
use sandboxd_surface::auth::Caller;
use sandboxd_surface::error::Error;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The most of a file `read_file` returns; larger files are refused with a pointer to `/v1`.
const MAX_READ_BYTES: usize = 4 << 20;

/// The tools, over one daemon's service.
#[derive(Clone)]
pub struct SandboxTools {
    service: Service,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateSandboxArgs {
    /// Template to start from (default `base`; `code-interpreter-v1` has Python and Jupyter kernels
    /// for `run_code`).
    pub template: Option<String>,
    /// An OCI image to make the root of, instead of a template (e.g. `python:3.12-slim`).
    pub image: Option<String>,
    /// A unique name for the sandbox.
    pub name: Option<String>,
    /// Seconds until the sandbox is deleted (default the daemon's).
    pub timeout_sec: Option<u64>,
    /// Memory limit in MiB.
    pub memory_mb: Option<u64>,
    /// CPUs (may be fractional).
    pub cpu: Option<f64>,
    /// Key/value labels.
    pub metadata: Option<BTreeMap<String, String>>,
    /// Isolation tier: `namespace` (the host's kernel behind namespaces; fast) or `gvisor`
    /// (gVisor's user-space kernel in between; pause keeps memory, fork copies a sandbox).
    pub isolation: Option<String>,
    /// Volumes to mount (made with `create_volume`); several sandboxes may share one.
    pub volumes: Option<Vec<VolumeMountArgs>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct VolumeMountArgs {
    /// The volume's name.
    pub name: String,
    /// Where it appears in the sandbox, e.g. `/data`.
    pub path: String,
    /// Mount it read-only.
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateVolumeArgs {
    /// Unique name: letters, digits, '-', '_' or '.'.
    pub name: String,
    /// Size limit in MiB (default none).
    pub size_mb: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SandboxArgs {
    /// Sandbox id or name.
    pub sandbox: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunCommandArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// A shell command line, run with `sh -c`.
    pub command: String,
    /// Working directory (default the user's home).
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// Kill the command after this many milliseconds.
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunCodeArgs {
    /// Sandbox id or name (its template must have the code interpreter, e.g. `code-interpreter-v1`).
    pub sandbox: String,
    /// The code.
    pub code: String,
    /// `python` (default) or `bash`; state is kept between calls in each.
    pub language: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PathArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// Absolute path inside the sandbox.
    pub path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteFileArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// Absolute path inside the sandbox (parent directories are created).
    pub path: String,
    /// The file's new content (UTF-8 text).
    pub content: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ExposePortArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The port a server in the sandbox listens on.
    pub port: u16,
    /// `http` (default: a URL through the daemon's proxy) or `tcp` (a host port).
    pub protocol: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GitRepoArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository: absolute, or relative to the user's home.
    pub path: String,
}

// No `Debug`: these carry a password.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct GitCloneArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository's URL.
    pub url: String,
    /// Where to clone: absolute, or relative to the user's home (default the URL's last segment
    /// without `.git`).
    pub path: Option<String>,
    /// The branch to check out (default the remote's HEAD).
    pub branch: Option<String>,
    /// A shallow clone of this many commits.
    pub depth: Option<u32>,
    /// User name for the remote (default `x-access-token` when only a password is given).
    pub username: Option<String>,
    /// Password or token for the remote: used for this command only, never stored.
    pub password: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct GitSyncArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository: absolute, or relative to the user's home.
    pub path: String,
    /// The remote (push: default `origin`; pull: default the upstream's).
    pub remote: Option<String>,
    /// The branch (push: default the checked-out one; pull: default the upstream's).
    pub branch: Option<String>,
    /// Push only: make the pushed branch the upstream.
    pub set_upstream: Option<bool>,
    /// User name for the remote (default `x-access-token` when only a password is given).
    pub username: Option<String>,
    /// Password or token for the remote: used for this command only, never stored.
    pub password: Option<String>,
}

impl GitSyncArgs {
    /// The sandbox and the service's push or pull.
    fn into_sync(self) -> (String, GitSync) {
        let sync = GitSync {
            credentials: Credentials::of(self.username.as_deref(), self.password.as_deref()),
            path: self.path,
            remote: self.remote,
            branch: self.branch,
            set_upstream: self.set_upstream == Some(true),
        };
        (self.sandbox, sync)
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GitAddArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository: absolute, or relative to the user's home.
    pub path: String,
    /// Paths in the repository to stage (`.` for all), deletions included.
    pub files: Vec<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GitCommitArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository: absolute, or relative to the user's home.
    pub path: String,
    /// The commit message.
    pub message: String,
    /// Author (and committer) name.
    pub author: String,
    /// Author (and committer) email.
    pub email: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GitCheckoutArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// The repository: absolute, or relative to the user's home.
    pub path: String,
    /// A branch, or any revision (checked out detached).
    pub branch: String,
    /// Create the branch at HEAD first.
    pub create: Option<bool>,
}

/// A tool that failed: the model sees a result with `isError` (not a protocol error), its text the
/// API's message and its structured content the API's `{code, status, message}`, so that it can
/// correct itself. An unknown tool stays a protocol error (rmcp's own).
#[derive(Debug)]
pub struct ToolFailure(Error);

impl IntoCallToolResult for ToolFailure {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let Error {
            status,
            code,
            message,
            ..
        } = self.0;
        let mut result = CallToolResult::structured_error(json!({
            "code": code,
            "status": status.as_u16(),
            "message": message,
        }));
        result.content = vec![rmcp::model::ContentBlock::text(message)];
        Ok(result.into())
    }
}

/// What a tool answers.
type Answer = Result<CallToolResult, ToolFailure>;

/// A service failure as the tool's failure.
fn mcp_error(e: ServiceError) -> ToolFailure {
    ToolFailure(Error::from(e))
}

fn structured(value: impl serde::Serialize) -> Answer {
    serde_json::to_value(value)
        .map(CallToolResult::structured)
        .map_err(|e| {
            mcp_error(ServiceError::InvalidRequest(format!(
                "unserializable answer: {e}"
            )))
        })
}

#[tool_router]
impl SandboxTools {
    pub fn new(service: Service) -> Self {
        SandboxTools { service }
    }

    #[tool(
        description = "Create a sandbox (an isolated Linux machine) and wait until it runs; returns it, with its id."
    )]
    async fn create_sandbox(
        &self,
        Extension(http): Extension<http::request::Parts>,
        Parameters(a): Parameters<CreateSandboxArgs>,
    ) -> Answer {
        // The daemon's authentication put the caller on the request before it reached MCP.
        let owner = http
            .extensions
            .get::<Caller>()
            .map_or_else(String::new, |c| c.key.id.0.clone());
        let req = api::CreateSandbox {
            name: a.name,
            template: a.template,
            image: a.image,
            cpu: a.cpu,
            memory_mb: a.memory_mb,
            metadata: a.metadata,
            timeout_sec: a.timeout_sec,
            isolation: a.isolation,
            volumes: a.volumes.map(|mounts| {
                mounts
                    .into_iter()
                    .map(|m| api::VolumeMount {
                        name: m.name,
                        path: m.path,
                        read_only: m.read_only,
                        subpath: None,
                    })
                    .collect()
            }),
            ..Default::default()
        };
        let sandbox = self
            .service
            .create_as(&owner, req)
            .await
            .map_err(mcp_error)?;
        structured(to_api(&sandbox))
    }

    #[tool(
        description = "Create a volume: named storage that outlives sandboxes; mount it with create_sandbox's `volumes`."
    )]
    async fn create_volume(&self, Parameters(a): Parameters<CreateVolumeArgs>) -> Answer {
        let req = api::CreateVolume {
            name: a.name,
            size_mb: a.size_mb,
            labels: None,
        };
        let volume = self.service.create_volume(req).await.map_err(mcp_error)?;
        structured(volume_to_api(&volume))
    }

    #[tool(description = "List the volumes.")]
    async fn list_volumes(&self) -> Answer {
        let volumes = self.service.list_volumes().await.map_err(mcp_error)?;
        let volumes: Vec<api::Volume> = volumes.iter().map(volume_to_api).collect();
        structured(json!({ "volumes": volumes }))
    }

    #[tool(description = "List the sandboxes.")]
    async fn list_sandboxes(&self) -> Answer {
        let filter = SandboxFilter {
            limit: 1000,
            ..Default::default()
        };
        let (sandboxes, _) = self.service.list(filter).await.map_err(mcp_error)?;
        let sandboxes: Vec<api::Sandbox> = sandboxes.iter().map(to_api).collect();
        structured(json!({ "sandboxes": sandboxes }))
    }

    #[tool(description = "Delete a sandbox and everything in it.")]
    async fn delete_sandbox(&self, Parameters(a): Parameters<SandboxArgs>) -> Answer {
        self.service.delete(&a.sandbox).await.map_err(mcp_error)?;
        structured(json!({ "deleted": a.sandbox }))
    }

    #[tool(
        description = "Run a shell command in a sandbox and wait for it; returns its exit code, stdout and stderr."
    )]
    async fn run_command(&self, Parameters(a): Parameters<RunCommandArgs>) -> Answer {
        let req = api::ExecRequest {
            cmd: vec!["sh".into(), "-c".into(), a.command],
            env: a.env,
            cwd: a.cwd,
            user: None,
            timeout_ms: a.timeout_ms,
        };
        let result = self
            .service
            .exec(&a.sandbox, req)
            .await
            .map_err(mcp_error)?;
        structured(result)
    }

    #[tool(
        description = "Run code in a sandbox's code interpreter (Jupyter kernels; state is kept between calls); returns its output lines: stdout, stderr, results (text, images, charts) and an error if it raised."
    )]
    async fn run_code(&self, Parameters(a): Parameters<RunCodeArgs>) -> Answer {
        let req = api::RunCode {
            code: a.code,
            context_id: None,
            language: a.language,
            envs: None,
        };
        let output = self
            .service
            .run_code(&a.sandbox, req)
            .await
            .map_err(mcp_error)?;
        let mut lines = code_lines(output);
        let mut kept = Vec::new();
        while let Some(line) = lines.next().await {
            let line: Value = line.map_err(mcp_error)?;
            if matches!(
                line["type"].as_str(),
                Some("stdout" | "stderr" | "result" | "error")
            ) {
                kept.push(line);
            }
        }
        structured(json!({ "output": kept }))
    }

    #[tool(description = "Read a text file from a sandbox (at most 4 MiB).")]
    async fn read_file(&self, Parameters(a): Parameters<PathArgs>) -> Answer {
        let mut chunks = std::pin::pin!(self
            .service
            .read_file(&a.sandbox, &a.path, None)
            .await
            .map_err(mcp_error)?);
        let mut content = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| mcp_error(sandboxd_service::exec::agent_error(e)))?;
            content.extend_from_slice(&chunk);
            if content.len() > MAX_READ_BYTES {
                return Err(ToolFailure(Error::new(
                    http::StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!(
                        "{} is larger than 4 MiB: download it with GET /v1/sandboxes/{{id}}/files",
                        a.path
                    ),
                )));
            }
        }
        let text = String::from_utf8(content).map_err(|_| {
            ToolFailure(Error::new(
                http::StatusCode::BAD_REQUEST,
                "not_text",
                format!(
                    "{} is not UTF-8 text: download it with GET /v1/sandboxes/{{id}}/files",
                    a.path
                ),
            ))
        })?;
        structured(json!({ "path": a.path, "content": text }))
    }

    #[tool(description = "Write a text file in a sandbox, creating parent directories.")]
    async fn write_file(&self, Parameters(a): Parameters<WriteFileArgs>) -> Answer {
        let bytes = a.content.len();
        let body = futures::stream::iter([Ok(bytes::Bytes::from(a.content))]);
        self.service
            .write_file(&a.sandbox, &a.path, None, body)
            .await
            .map_err(mcp_error)?;
        structured(json!({ "path": a.path, "bytes": bytes }))
    }

    #[tool(description = "List a directory of a sandbox.")]
    async fn list_files(&self, Parameters(a): Parameters<PathArgs>) -> Answer {
        let list = self
            .service
            .list_files(&a.sandbox, &a.path)
            .await
            .map_err(mcp_error)?;
        structured(list)
    }

    #[tool(
        description = "Expose a port a server in the sandbox listens on; returns its public URL."
    )]
    async fn expose_port(&self, Parameters(a): Parameters<ExposePortArgs>) -> Answer {
        let req = api::ExposePort {
            port: a.port,
            protocol: a.protocol.unwrap_or_else(|| "http".into()),
            skip_listen_check: false,
        };
        let (exposed, _) = self
            .service
            .expose(&a.sandbox, req)
            .await
            .map_err(mcp_error)?;
        structured(exposed)
    }

    #[tool(
        description = "Clone a git repository into a sandbox; returns the clone's path. Credentials serve this command only and are never written to the sandbox's disk."
    )]
    async fn git_clone(&self, Parameters(a): Parameters<GitCloneArgs>) -> Answer {
        let clone = GitClone {
            credentials: Credentials::of(a.username.as_deref(), a.password.as_deref()),
            path: a.path,
            url: a.url,
            branch: a.branch,
            depth: a.depth,
            ..Default::default()
        };
        let path = self
            .service
            .git_clone(&a.sandbox, clone)
            .await
            .map_err(mcp_error)?;
        structured(json!({ "path": path }))
    }

    #[tool(
        description = "A git repository's status in a sandbox: its branch, upstream, ahead/behind, and every changed file with its staged and worktree state."
    )]
    async fn git_status(&self, Parameters(a): Parameters<GitRepoArgs>) -> Answer {
        let status = self
            .service
            .git_status(&a.sandbox, &a.path)
            .await
            .map_err(mcp_error)?;
        structured(api::GitStatus::from(status))
    }

    #[tool(description = "Stage files of a git repository in a sandbox (`.` for all).")]
    async fn git_add(&self, Parameters(a): Parameters<GitAddArgs>) -> Answer {
        self.service
            .git_add(&a.sandbox, &a.path, a.files.clone())
            .await
            .map_err(mcp_error)?;
        structured(json!({ "added": a.files }))
    }

    #[tool(
        description = "Commit what is staged in a git repository of a sandbox; returns the commit's hash."
    )]
    async fn git_commit(&self, Parameters(a): Parameters<GitCommitArgs>) -> Answer {
        let commit = GitCommit {
            path: a.path,
            message: a.message,
            author: a.author,
            email: a.email,
            allow_empty: false,
        };
        let hash = self
            .service
            .git_commit(&a.sandbox, commit)
            .await
            .map_err(mcp_error)?;
        structured(json!({ "hash": hash }))
    }

    #[tool(
        description = "The local branches of a git repository in a sandbox, and the checked-out one."
    )]
    async fn git_branches(&self, Parameters(a): Parameters<GitRepoArgs>) -> Answer {
        let branches = self
            .service
            .git_branches(&a.sandbox, &a.path)
            .await
            .map_err(mcp_error)?;
        structured(branches)
    }

    #[tool(
        description = "Check out a branch or revision of a git repository in a sandbox; with `create`, create the branch at HEAD first."
    )]
    async fn git_checkout(&self, Parameters(a): Parameters<GitCheckoutArgs>) -> Answer {
        let done = if a.create == Some(true) {
            self.service
                .git_create_branch(&a.sandbox, &a.path, &a.branch)
                .await
        } else {
            self.service
                .git_checkout(&a.sandbox, &a.path, &a.branch)
                .await
        };
        done.map_err(mcp_error)?;
        structured(json!({ "checkedOut": a.branch }))
    }

    #[tool(
        description = "Push a branch of a git repository in a sandbox to its remote. Credentials serve this command only and are never written to the sandbox's disk."
    )]
    async fn git_push(&self, Parameters(a): Parameters<GitSyncArgs>) -> Answer {
        let (sandbox, push) = a.into_sync();
        let path = push.path.clone();
        self.service
            .git_push(&sandbox, push)
            .await
            .map_err(mcp_error)?;
        structured(json!({ "pushed": path }))
    }

    #[tool(
        description = "Pull (fast-forward only) into a git repository in a sandbox. Credentials serve this command only and are never written to the sandbox's disk."
    )]
    async fn git_pull(&self, Parameters(a): Parameters<GitSyncArgs>) -> Answer {
        let (sandbox, pull) = a.into_sync();
        let path = pull.path.clone();
        self.service
            .git_pull(&sandbox, pull)
            .await
            .map_err(mcp_error)?;
        structured(json!({ "pulled": path }))
    }
}

#[tool_handler(
    name = "sandboxd",
    instructions = "Sandboxes are isolated Linux machines: create one, run commands or code in it, move files, work with git repositories, expose a port, delete it."
)]
impl ServerHandler for SandboxTools {}
