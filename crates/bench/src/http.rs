//! `bench http`: the daemon's proxy against the same server reached directly, and API create→first-exec.
//!
//! Against a running daemon (`--api`/`SB_API_URL`, `--token`/`SB_PAT_TOKEN`): one sandbox runs
//! `python3 -m http.server 8000` (or, with `--server keepalive`, the same handler over HTTP/1.1 with a
//! deeper listen backlog: the stock server closes every connection and its backlog of 5 overflows
//! under 32 concurrent connects, so SYN retransmits of 1 s and more dominate its tail); the same GET load ([`crate::load`]) goes (a) straight to the
//! sandbox's address on its veth pair and (b) to the daemon's listener with the `Host` of the port's
//! public URL (`8000-<id>.<domain>:<port>`), so the only difference is the proxy hop. Then N sandboxes
//! are created and each runs `true` once, over the API.
//!
//! Guarantees: every sandbox is created with the label `sandboxd-bench=<run>` and a lifetime of
//! [`SANDBOX_TIMEOUT_SECS`] (unless its figure asks for another); at the end (success, error or Ctrl-C) every sandbox carrying this run's
//! label is deleted, including one whose create answer was lost, and the daemon's own expiry is the
//! backstop if the bench dies. Assumes this process can reach the sandbox's address (same network
//! namespace as the daemon).

use crate::load::{self, LoadResult, LoadTarget};
use crate::report::{verdict, Latency, Target};
use crate::steps::{StepBreakdown, StepSamples};
use crate::{interrupted, Interrupt};
use anyhow::{bail, Context};
use futures::StreamExt;
use sandboxd_client::timing::Timed;
use sandboxd_client::types::{CreateSandbox, ExecRequest, ExecResult};
use sandboxd_client::{Client, ClientError, ListQuery};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lifetime asked for every bench sandbox: the daemon's sweeper removes what a killed bench left.
pub const SANDBOX_TIMEOUT_SECS: u64 = 900;
const LABEL: &str = "sandboxd-bench";
const SERVER_PORT: u16 = 8000;
const ETH0_ADDRESS: &str = "import fcntl,socket,struct;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);print(socket.inet_ntoa(fcntl.ioctl(s.fileno(),0x8915,struct.pack('256s',b'eth0'))[20:24]))";
/// The goal for a delete, which answers once the sandbox's processes are gone.
const DELETE_TARGET: Target = Target {
    p50_ms: Some(5.0),
    p99_ms: None,
};
/// The longest a delete's teardown behind its answer may take in the delete figure.
const TEARDOWN_WAIT: Duration = Duration::from_secs(10);
/// Deletes in flight at once when a fleet is torn down.
const TEARDOWN_CONCURRENCY: usize = 4;
/// Cold API create→first exec relative to a bare bwrap sandbox that the issue asks for.
const COLD_OVER_BWRAP: f64 = 1.2;
/// Proxy throughput relative to direct that the issue asks for.
const RATIO_TARGET: f64 = 0.8;
/// How long the server gets to start listening.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemon gets to answer `/health`.
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Options of `bench http`.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// The daemon's URL.
    #[arg(long, env = "SB_API_URL", default_value = "http://127.0.0.1:21212")]
    pub api: String,
    /// The daemon's admin token.
    #[arg(long, env = "SB_PAT_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// How much load `bench http` applies (shared with `bench all`).
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Total GET requests per path (direct, proxy).
    #[arg(long, default_value_t = 20000)]
    pub requests: usize,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Sandboxes created over the API for the API create→first-exec figure.
    #[arg(long, default_value_t = 20)]
    pub creates: usize,
    /// The server in the sandbox.
    #[arg(long, value_enum, default_value_t = Server::HttpServer)]
    pub server: Server,
}

/// Which HTTP server the sandbox runs on port 8000 (both serve the directory listing of the home).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Server {
    /// `python3 -m http.server 8000`: HTTP/1.0 (a new connection per request), listen backlog 5.
    HttpServer,
    /// The same handler speaking HTTP/1.1 keep-alive, with a listen backlog of 128.
    Keepalive,
}

impl Server {
    /// The shell command that starts it in the background.
    fn start_command(self) -> &'static str {
        match self {
            Server::HttpServer => "nohup python3 -m http.server 8000 >/dev/null 2>&1 &",
            Server::Keepalive => concat!(
                "nohup python3 -c 'import http.server as h; ",
                "h.SimpleHTTPRequestHandler.protocol_version = \"HTTP/1.1\"; ",
                "h.ThreadingHTTPServer.request_queue_size = 128; ",
                "h.ThreadingHTTPServer((\"\", 8000), h.SimpleHTTPRequestHandler).serve_forever()' ",
                ">/dev/null 2>&1 &"
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::HttpServer => "python3 -m http.server (HTTP/1.0)",
            Server::Keepalive => "python3 http.server handler, HTTP/1.1 keep-alive",
        }
    }
}

impl LoadArgs {
    /// The same options as command-line arguments (for a child `bench http`).
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--requests={}", self.requests),
            format!("--concurrency={}", self.concurrency),
            format!("--creates={}", self.creates),
            format!(
                "--server={}",
                clap::ValueEnum::to_possible_value(&self.server)
                    .expect("no skipped variants")
                    .get_name()
            ),
        ]
    }
}

/// One load run, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFigure {
    pub target: String,
    #[serde(flatten)]
    pub result: LoadResult,
}

/// Figures of `bench http`.
#[derive(Debug, Clone, Serialize)]
pub struct HttpReport {
    pub server: Server,
    pub requests: usize,
    pub concurrency: usize,
    pub direct: LoadFigure,
    pub proxy: LoadFigure,
    /// Proxy req/s over direct req/s.
    pub ratio: f64,
    pub ratio_target: f64,
    pub ratio_met: bool,
    pub api_create_to_first_exec: Latency,
    /// Where its time went: the create's steps, then the first exec's.
    pub api_breakdown: Vec<StepBreakdown>,
    /// Its peer: `bwrap --unshare-all … true` ([`crate::runtime::bwrap_floor`]); `None` without
    /// bwrap.
    pub bwrap_floor: Option<Latency>,
    /// API delete of a sandbox, each once the previous one's teardown (behind its answer) ended:
    /// what one delete waits for.
    pub api_delete: Option<Latency>,
    /// API deletes back to back, each while the teardowns of those before it run.
    pub api_delete_back_to_back: Option<Latency>,
    /// Where the deletes' time went, one at a time, then back to back.
    pub delete_breakdown: Vec<StepBreakdown>,
    /// API create→first-exec, each right after the delete of the sandbox before it was answered:
    /// with that sandbox's teardown running behind, as when an agent replaces its sandbox.
    pub api_create_after_delete: Latency,
    /// Where its time went: the create's steps, then the first exec's.
    pub after_delete_breakdown: Vec<StepBreakdown>,
    /// API create→first-exec taking a sandbox from a full warm pool ([`crate::warm_pool`]).
    pub pool_create_to_first_exec: Latency,
    /// Where its time went: the create's steps, then the first exec's.
    pub pool_breakdown: Vec<StepBreakdown>,
    /// API exec round trip beside the spawn floor.
    pub api_exec: crate::api_exec::ApiExecFigure,
    /// API pause, and resume→first exec, of one sandbox.
    pub resume: crate::resume::ResumeFigure,
    /// The volume file API against the same bytes through a sandbox.
    pub volume_files: crate::volume_files::VolumeFilesFigure,
}

impl HttpReport {
    /// Lines for people.
    pub fn print(&self) {
        println!(
            "== http ({} in a sandbox; {} GETs, {} client connections)",
            self.server.name(),
            self.requests,
            self.concurrency
        );
        for (label, f) in [("direct", &self.direct), ("proxy", &self.proxy)] {
            let r = &f.result;
            let lat = r
                .latency
                .map(|s| {
                    format!(
                        "p50 {} ms  p99 {} ms",
                        crate::report::ms(s.p50_ms),
                        crate::report::ms(s.p99_ms)
                    )
                })
                .unwrap_or_else(|| "no answers".into());
            println!(
                "{label:<7} {:>8.0} req/s  {lat}  ({} ok, {} non-2xx, {} errors, {} connections; {})",
                r.req_per_sec, r.ok, r.non_2xx, r.errors, r.connections, f.target
            );
            if let Some(e) = &r.first_error {
                println!("        first error: {e}");
            }
        }
        println!(
            "proxy/direct ratio {:.2}  (target ≥{}: {})",
            self.ratio,
            self.ratio_target,
            verdict(self.ratio_met)
        );
        print_with_breakdown(
            &self.api_create_to_first_exec,
            "API create→first-exec",
            &self.api_breakdown,
        );
        match &self.bwrap_floor {
            Some(bwrap) => {
                println!("{}", bwrap.line("floor: bwrap … true"));
                let ratio = self.api_create_to_first_exec.summary.p50_ms / bwrap.summary.p50_ms;
                println!(
                    "  API create→first-exec / bwrap p50 ratio {ratio:.2}  (target ≤{COLD_OVER_BWRAP}: {})",
                    verdict(ratio <= COLD_OVER_BWRAP)
                );
            }
            None => println!("floor: bwrap not installed (apt install bubblewrap)"),
        }
        print_with_breakdown(
            &self.api_create_after_delete,
            "API create→first-exec after a delete",
            &self.after_delete_breakdown,
        );
        println!(
            "  after a delete / alone p50 ratio {:.2}",
            self.api_create_after_delete.summary.p50_ms
                / self.api_create_to_first_exec.summary.p50_ms
        );
        print_with_breakdown(
            &self.pool_create_to_first_exec,
            "API create→first-exec (warm pool)",
            &self.pool_breakdown,
        );
        if let Some(d) = &self.api_delete {
            println!("{}", d.line("API delete"));
        }
        if let Some(d) = &self.api_delete_back_to_back {
            println!("{}", d.line("  … back to back"));
        }
        for b in &self.delete_breakdown {
            println!("{}", b.line());
        }
        self.api_exec.print();
        self.resume.print();
        self.volume_files.print();
    }
}

/// Prints figure `latency` as `label`, then where its time went.
pub(crate) fn print_with_breakdown(latency: &Latency, label: &str, breakdown: &[StepBreakdown]) {
    println!("{}", latency.line(label));
    for b in breakdown {
        println!("{}", b.line());
    }
}

/// Runs `bench http`.
pub async fn run(args: &HttpArgs, interrupt: Interrupt) -> anyhow::Result<HttpReport> {
    let load = &args.load;
    if load.requests == 0 || load.concurrency == 0 || load.creates == 0 {
        bail!("--requests, --concurrency and --creates must be at least 1");
    }
    let (api, load) = (args.api.clone(), load.clone());
    with_fleet(&args.api, &args.token, interrupt, move |fleet| {
        measure(fleet, api, load)
    })
    .await
}

/// Runs `measure` against the daemon at `api` with a fleet of its own: waits for the daemon, runs
/// the measuring future on its own task (aborted on interrupt), then tears the fleet down whatever
/// happened; the measurement's error first, then the teardown's.
pub(crate) async fn with_fleet<T, F, Fut>(
    api: &str,
    token: &str,
    interrupt: Interrupt,
    measure: F,
) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce(Arc<ApiFleet>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let client = Client::new(api, token.to_string())?;
    wait_for_daemon(&client).await?;
    let fleet = Arc::new(ApiFleet::new(client));
    let work = tokio::spawn(measure(fleet.clone()));
    let abort = work.abort_handle();
    let outcome = tokio::select! {
        r = work => r.unwrap_or_else(|e| Err(anyhow::anyhow!("the measuring task failed: {e}"))),
        _ = interrupted(interrupt) => {
            abort.abort();
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    let cleaned = fleet.teardown().await;
    let report = outcome?;
    cleaned?;
    Ok(report)
}

/// A sandbox serving `server` on its port 8000, exposed: its address and its public host.
async fn server_sandbox(fleet: &ApiFleet, server: Server) -> anyhow::Result<(Ipv4Addr, String)> {
    let client = &fleet.client;
    let sandbox = fleet.create().await.context("creating a server sandbox")?;
    let id = sandbox.id.as_str();
    run_ok(client, id, &["sh", "-c", server.start_command()]).await?;
    let address: Ipv4Addr = run_ok(client, id, &["python3", "-c", ETH0_ADDRESS])
        .await?
        .trim()
        .parse()
        .context("the sandbox's eth0 address")?;
    let exposed = expose_when_listening(client, id).await?;
    let public: hyper::Uri = exposed
        .public_url
        .parse()
        .context("the port's public URL")?;
    let host = public
        .authority()
        .context("the port's public URL has no host")?
        .to_string();
    Ok((address, host))
}

async fn measure(fleet: Arc<ApiFleet>, api: String, args: LoadArgs) -> anyhow::Result<HttpReport> {
    // One sandbox per path. With a connection per request, one path's thousands of closed
    // connections (TIME-WAIT on both ends) would crowd the four-tuples of the next path to the same
    // address: its connects then wait on SYN retries, and the figure measures the order of the runs.
    let (address, _) = server_sandbox(&fleet, args.server).await?;
    let (_, host) = server_sandbox(&fleet, args.server).await?;
    let daemon = daemon_addr(&api).await?;
    let direct = LoadTarget {
        addr: SocketAddr::from((address, SERVER_PORT)),
        host: format!("{address}:{SERVER_PORT}"),
        path: "/".into(),
    };
    let proxied = LoadTarget {
        addr: daemon,
        host,
        path: "/".into(),
    };
    // One request each way first: a broken path fails loudly instead of as 20000 errors.
    for t in [&direct, &proxied] {
        let r = load::drive(t, 1, 1).await;
        if r.ok != 1 {
            bail!(
                "GET http://{}/ with Host {} failed: {}",
                t.addr,
                t.host,
                r.first_error.unwrap_or_else(|| "non-2xx answer".into())
            );
        }
    }
    let warmup = (args.requests / 10).clamp(1, 1000);
    let mut figures = Vec::new();
    for t in [&direct, &proxied] {
        load::drive(t, warmup, args.concurrency).await;
        let result = load::drive(t, args.requests, args.concurrency).await;
        figures.push(LoadFigure {
            target: format!("{} Host {}", t.addr, t.host),
            result,
        });
    }
    let proxy = figures.pop().expect("two figures");
    let direct = figures.pop().expect("two figures");
    let ratio = proxy.result.req_per_sec / direct.result.req_per_sec;
    let (create, (delete, back_to_back), api_breakdown, delete_breakdown) =
        api_create_first_exec(&fleet, args.creates).await?;
    let (after_delete, after_delete_breakdown) = create_after_delete(&fleet, args.creates).await?;
    // Its peer, in the same run: a bare sandbox of a well-known tool.
    let bwrap = crate::runtime::bwrap_floor(args.creates).await?;
    let (pooled, pool_breakdown) =
        crate::warm_pool::create_first_exec(&fleet, args.creates).await?;
    let api_exec = crate::api_exec::measure(&fleet).await?;
    let resume = crate::resume::measure(&fleet, args.creates).await?;
    let volume_files = crate::volume_files::measure(&fleet).await?;
    Ok(HttpReport {
        server: args.server,
        requests: args.requests,
        concurrency: args.concurrency,
        direct,
        proxy,
        ratio,
        ratio_target: RATIO_TARGET,
        ratio_met: ratio >= RATIO_TARGET,
        api_create_to_first_exec: Latency::new("API create→first-exec", &create, None)?,
        bwrap_floor: bwrap.map(|b| Latency::new("bwrap", &b, None)).transpose()?,
        api_breakdown,
        pool_breakdown,
        api_delete: Latency::new("API delete", &delete, Some(DELETE_TARGET)).ok(),
        api_delete_back_to_back: Latency::new("API delete", &back_to_back, None).ok(),
        delete_breakdown,
        api_create_after_delete: Latency::new(
            "API create→first-exec after a delete",
            &after_delete,
            None,
        )?,
        after_delete_breakdown,
        pool_create_to_first_exec: pooled,
        api_exec,
        resume,
        volume_files,
    })
}

/// The breakdowns of a create→first-exec run: the create's, then the first exec's.
pub(crate) fn create_exec_samples() -> [StepSamples; 2] {
    [StepSamples::new("create"), StepSamples::new("first exec")]
}

/// `n` times: create, run `true`; then delete each: the first half one at a time, each once the
/// daemon reported the previous one's teardown done (`sandbox.deleted`), the rest back to back.
/// Returns the create latencies, both sets of delete latencies, the create's and first exec's
/// breakdowns and the deletes'.
async fn api_create_first_exec(
    fleet: &ApiFleet,
    n: usize,
) -> anyhow::Result<(
    Vec<Duration>,
    (Vec<Duration>, Vec<Duration>),
    Vec<StepBreakdown>,
    Vec<StepBreakdown>,
)> {
    let mut created = Vec::with_capacity(n);
    let mut took = Vec::with_capacity(n);
    let mut samples = create_exec_samples();
    for _ in 0..n {
        let (id, t) = fleet.create_then_true(&mut samples).await?;
        took.push(t);
        created.push(id);
    }
    let mut events = std::pin::pin!(fleet.client.events().await?);
    let (alone, rest) = created.split_at(n / 2);
    let mut deleted = Vec::with_capacity(alone.len());
    let mut deletes = [
        StepSamples::new("delete"),
        StepSamples::new("… back to back"),
    ];
    for id in alone {
        deleted.push(fleet.timed_delete(id, &mut deletes[0]).await?);
        let torn_down = async {
            while let Some(event) = events.next().await {
                let event = event?;
                if event.kind == "sandbox.deleted" && event.data["id"] == id.as_str() {
                    return Ok(());
                }
            }
            bail!("the event feed ended before {id}'s teardown did")
        };
        tokio::time::timeout(TEARDOWN_WAIT, torn_down)
            .await
            .with_context(|| format!("{id}'s teardown took over {TEARDOWN_WAIT:?}"))??;
    }
    let mut back_to_back = Vec::with_capacity(rest.len());
    for id in rest {
        back_to_back.push(fleet.timed_delete(id, &mut deletes[1]).await?);
    }
    let breakdown = samples.iter().filter_map(StepSamples::summary).collect();
    let delete_breakdown = deletes.iter().filter_map(StepSamples::summary).collect();
    Ok((took, (deleted, back_to_back), breakdown, delete_breakdown))
}

/// `n` times: delete the sandbox made last (once answered), then at once create one and run
/// `true` in it, timed; the last one is deleted too. Returns the latencies and the create's and
/// first exec's breakdowns.
async fn create_after_delete(
    fleet: &ApiFleet,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<StepBreakdown>)> {
    let mut samples = create_exec_samples();
    let (mut last, _) = fleet.create_then_true(&mut create_exec_samples()).await?;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        fleet.delete(&last).await?;
        let (id, t) = fleet.create_then_true(&mut samples).await?;
        took.push(t);
        last = id;
    }
    fleet.delete(&last).await?;
    let breakdown = samples.iter().filter_map(StepSamples::summary).collect();
    Ok((took, breakdown))
}

/// Waits, polling every `every`, until template `name` is `ready` (an error when it failed or is
/// still building after `within`); how long that took.
pub(crate) async fn template_ready(
    client: &Client,
    name: &str,
    within: Duration,
    every: Duration,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    loop {
        let template = client.template(name).await?;
        match template.state.as_str() {
            "ready" => return Ok(t.elapsed()),
            "building" if t.elapsed() < within => tokio::time::sleep(every).await,
            "building" => bail!("{name} is still building after {within:?}"),
            _ => bail!(
                "{name} failed to build: {}",
                template.error.unwrap_or_default()
            ),
        }
    }
}

/// Runs `cmd` in sandbox `id` and returns its stdout; a non-zero exit is an error.
pub(crate) async fn run_ok(client: &Client, id: &str, cmd: &[&str]) -> anyhow::Result<String> {
    let req = ExecRequest {
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        ..ExecRequest::default()
    };
    let out = client
        .exec(id, &req)
        .await
        .with_context(|| format!("exec {cmd:?} in {id}"))?;
    if out.exit_code != 0 {
        bail!(
            "{cmd:?} in {id} exited {}: {}",
            out.exit_code,
            out.stderr.trim()
        );
    }
    Ok(out.stdout)
}

/// Exposes the server's port, retrying while the server is not listening yet.
async fn expose_when_listening(
    client: &Client,
    id: &str,
) -> anyhow::Result<sandboxd_client::types::ExposedPort> {
    let deadline = Instant::now() + SERVER_READY_TIMEOUT;
    loop {
        match client.expose(id, SERVER_PORT, "http").await {
            Ok(p) => return Ok(p),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e).context("exposing port 8000 (is http.server running?)"),
        }
    }
}

pub(crate) async fn wait_for_daemon(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + DAEMON_READY_TIMEOUT;
    loop {
        match client.list(&ListQuery::default()).await {
            Ok(_) => return Ok(()),
            Err(e @ (ClientError::Api { .. } | ClientError::Http { .. })) => {
                return Err(e).context("the daemon refused the token")
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(e).context(format!("no daemon answers at {}", client.base_url()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The daemon's listen address, from its URL.
async fn daemon_addr(api: &str) -> anyhow::Result<SocketAddr> {
    let uri: hyper::Uri = api.parse().context("--api")?;
    let host = uri.host().context("--api has no host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let mut addrs = tokio::net::lookup_host((host, port)).await?;
    addrs
        .next()
        .with_context(|| format!("{host} has no address"))
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The sandboxes of this run (also those of `bench images`).
pub(crate) struct ApiFleet {
    pub(crate) client: Client,
    /// Value of this run's label.
    run: String,
    ids: Mutex<Vec<String>>,
}

impl ApiFleet {
    /// A fleet with a label value of its own (process id and time).
    pub(crate) fn new(client: Client) -> ApiFleet {
        ApiFleet {
            client,
            run: format!("{}-{}", std::process::id(), unix_nanos()),
            ids: Mutex::new(Vec::new()),
        }
    }

    /// This run's label: its key and value.
    pub(crate) fn label(&self) -> (String, String) {
        (LABEL.to_string(), self.run.clone())
    }

    /// Creates a `base` sandbox with this run's label and lifetime.
    pub(crate) async fn create(&self) -> anyhow::Result<sandboxd_client::types::Sandbox> {
        self.create_from(None).await
    }

    /// Creates a sandbox from `image` (`None`: the `base` template) with this run's label and
    /// lifetime, and records it.
    pub(crate) async fn create_from(
        &self,
        image: Option<&str>,
    ) -> anyhow::Result<sandboxd_client::types::Sandbox> {
        self.create_with(CreateSandbox {
            image: image.map(str::to_string),
            ..CreateSandbox::default()
        })
        .await
    }

    /// One sandbox as `body` says: create, run `true`, timed; then deleted, untimed.
    pub(crate) async fn create_exec_delete(&self, body: CreateSandbox) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let sandbox = self.create_with(body).await?;
        run_ok(&self.client, &sandbox.id, &["true"]).await?;
        let took = t.elapsed();
        self.delete(&sandbox.id).await?;
        Ok(took)
    }

    /// Creates a sandbox as `body` says, with this run's label and lifetime, and records it.
    pub(crate) async fn create_with(
        &self,
        body: CreateSandbox,
    ) -> anyhow::Result<sandboxd_client::types::Sandbox> {
        let sandbox = self.client.create(&self.labelled(body), None).await?;
        self.record(&sandbox.id);
        Ok(sandbox)
    }

    /// [`ApiFleet::create_with`], with the steps the daemon's create took.
    pub(crate) async fn create_timed_with(
        &self,
        body: CreateSandbox,
    ) -> anyhow::Result<Timed<sandboxd_client::types::Sandbox>> {
        let body = self.labelled(body);
        let timed = self.client.create_timed(&body).await?;
        self.record(&timed.value.id);
        Ok(timed)
    }

    /// `body` with this run's label, and its lifetime ([`SANDBOX_TIMEOUT_SECS`] unless `body`
    /// names one).
    fn labelled(&self, body: CreateSandbox) -> CreateSandbox {
        CreateSandbox {
            metadata: Some(BTreeMap::from([(LABEL.to_string(), self.run.clone())])),
            timeout_sec: body.timeout_sec.or(Some(SANDBOX_TIMEOUT_SECS)),
            ..body
        }
    }

    fn record(&self, id: &str) {
        self.ids.lock().expect("fleet lock").push(id.to_string());
    }

    /// Creates a sandbox and runs `true` in it, adding each call's time and steps to `samples`
    /// (create, first exec); returns its id and the time of both.
    pub(crate) async fn create_then_true(
        &self,
        samples: &mut [StepSamples; 2],
    ) -> anyhow::Result<(String, Duration)> {
        self.create_then_true_with(CreateSandbox::default(), samples)
            .await
    }

    /// [`ApiFleet::create_then_true`] of a sandbox as `body` says.
    pub(crate) async fn create_then_true_with(
        &self,
        body: CreateSandbox,
        samples: &mut [StepSamples; 2],
    ) -> anyhow::Result<(String, Duration)> {
        let t = Instant::now();
        let created = self.create_timed_with(body).await?;
        let created_in = t.elapsed();
        let id = created.value.id;
        let ran = self.run_true(&id).await?;
        let took = t.elapsed();
        samples[0].add(created_in, &created.steps);
        samples[1].add(took - created_in, &ran.steps);
        Ok((id, took))
    }

    /// Runs `true` in sandbox `id`; an error unless it exits 0.
    pub(crate) async fn run_true(&self, id: &str) -> anyhow::Result<Timed<ExecResult>> {
        let req = ExecRequest {
            cmd: vec!["true".into()],
            ..ExecRequest::default()
        };
        let ran = self
            .client
            .exec_timed(id, &req)
            .await
            .with_context(|| format!("exec true in {id}"))?;
        if ran.value.exit_code != 0 {
            bail!("true in {id} exited {}", ran.value.exit_code);
        }
        Ok(ran)
    }

    /// Deletes sandbox `id` and forgets it.
    pub(crate) async fn delete(&self, id: &str) -> anyhow::Result<()> {
        self.client
            .delete(id)
            .await
            .with_context(|| format!("deleting {id}"))?;
        self.forget(id);
        Ok(())
    }

    /// [`ApiFleet::delete`], timed, its steps added to `samples`.
    async fn timed_delete(&self, id: &str, samples: &mut StepSamples) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let deleted = self
            .client
            .delete_timed(id)
            .await
            .with_context(|| format!("deleting {id}"))?;
        let took = t.elapsed();
        self.forget(id);
        samples.add(took, &deleted.steps);
        Ok(took)
    }

    fn forget(&self, id: &str) {
        self.ids.lock().expect("fleet lock").retain(|i| i != id);
    }

    /// Deletes every sandbox this run created or labelled; tries all before reporting failures.
    pub(crate) async fn teardown(&self) -> anyhow::Result<()> {
        let mut ids = std::mem::take(&mut *self.ids.lock().expect("fleet lock"));
        let labelled = ListQuery {
            metadata: vec![(LABEL.to_string(), self.run.clone())],
            ..ListQuery::default()
        };
        match self.client.list_all(&labelled).await {
            Ok(found) => ids.extend(found.into_iter().map(|s| s.id)),
            Err(e) => eprintln!("bench: listing this run's sandboxes failed: {e}"),
        }
        ids.sort();
        ids.dedup();
        let mut failed = Vec::new();
        // A few at a time: a run cut short may leave thousands (`bench density`).
        let outcomes: Vec<_> = futures::stream::iter(ids)
            .map(|id| async move { (self.client.delete(&id).await, id) })
            .buffer_unordered(TEARDOWN_CONCURRENCY)
            .collect()
            .await;
        for (outcome, id) in outcomes {
            match outcome {
                Ok(()) | Err(ClientError::Api { status: 404, .. }) => {}
                Err(e) => failed.push(format!("{id}: {e}")),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            bail!("deleting bench sandboxes failed: {}", failed.join("; "))
        }
    }
}
