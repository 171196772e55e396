//! How a test daemon is set up: its token and how clients send it, its flags, environment,
//! address and binary.

use super::*;

/// How a [`Daemon`] is set up; [`Setup::default`] is what [`Daemon::start`] does.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Passed as `SB_PAT_TOKEN`; `None` lets the daemon generate one into the data dir.
    pub token: Option<String>,
    /// How [`Daemon::http`] and the cleanup in `Drop` send the token.
    pub auth: Auth,
    /// Timeout of [`Daemon::http`] and [`Daemon::client_as`].
    pub http_timeout: Duration,
    /// `--cgroup-parent` of the daemon; [`Daemon::cgroup_dirs`] looks there. Also names the temp dir.
    pub cgroup_parent: &'static str,
    /// Longest the daemon may take to answer `/health` on each (re)start.
    pub ready_timeout: Duration,
    /// Flags added to every `sandboxd serve` of this daemon.
    pub args: Vec<String>,
    /// Environment added to every start (replaced per key by [`Daemon::set_env`]).
    pub env: Vec<(String, String)>,
    /// `--net-slot-base` and `--net-slots` instead of the block the daemon holds (to make daemons
    /// meet on purpose).
    pub slots: Option<(u32, u32)>,
    /// The address of `--listen` (with a free port); a cluster test gives each node its own.
    pub listen_ip: std::net::Ipv4Addr,
    /// Another `sandboxd` binary to run (an installed one), which then finds its agent itself (no
    /// `--agent-bin`).
    pub binary: Option<PathBuf>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            token: Some(TOKEN.to_string()),
            auth: Auth::Bearer,
            http_timeout: Duration::from_secs(30),
            cgroup_parent: CGROUP_PARENT,
            ready_timeout: READY_TIMEOUT,
            args: Vec::new(),
            env: Vec::new(),
            slots: None,
            listen_ip: std::net::Ipv4Addr::LOCALHOST,
            binary: None,
        }
    }
}

/// How a client sends the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer,
    /// `X-API-KEY: <token>`, as the E2B SDKs send it.
    ApiKey,
}

impl Auth {
    /// The header carrying `token`: (lowercase name, value).
    pub(super) fn header(self, token: &str) -> (&'static str, String) {
        match self {
            Auth::Bearer => ("authorization", format!("Bearer {token}")),
            Auth::ApiKey => ("x-api-key", token.to_string()),
        }
    }

    /// A client with `timeout`, sending `token` this way when given (none: no credentials at all).
    pub fn client(self, token: Option<&str>, timeout: Duration) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = token {
            let (name, value) = self.header(token);
            if let Ok(value) = value.parse() {
                headers.insert(name, value);
            }
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            .build()
            .expect("http client")
    }
}
