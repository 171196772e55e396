//! One Jupyter kernel process and the client side of its messaging protocol (ZeroMQ, through
//! `jupyter-zmq-client`).
//!
//! Contract:
//! - [`Kernel::start`] launches the kernelspec's command with a fresh connection file (loopback TCP,
//!   HMAC-signed) in the context's directory and returns once the kernel answered `kernel_info` on
//!   its shell channel and its iopub channel delivers (so no output of the first execution is
//!   lost), or fails within [`START_TIMEOUT`].
//! - One iopub reader task per kernel routes every message to the execution whose request is its
//!   parent; messages of no current execution are dropped.
//! - [`Kernel::execute`] runs one request at a time (a kernel executes serially anyway) and streams
//!   [`Event`]s until the kernel reports the request idle. The returned receiver is bounded: a slow
//!   reader holds the kernel's output back instead of the agent buffering it.
//! - When the receiver goes away before the end (a client that hung up, a timeout) the kernel is
//!   interrupted and the execution drained, so the kernel stays usable for the next one.
//! - A kernel whose process exits is dead for good: a running execution ends with
//!   [`Event::Died`], and [`Kernel::is_alive`] turns false (the context restarts it).

use jupyter_protocol::{
    ConnectionInfo, ExecuteRequest, ExecutionState, InterruptRequest, JupyterMessage,
    JupyterMessageContent, KernelInfoRequest, ShutdownRequest,
};
use jupyter_zmq_client as zmq;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// How long a kernel may take to answer its first `kernel_info`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted execution may take to report idle before the kernel is declared stuck.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Events of one execution held between the kernel and a slow reader.
const EVENT_BUFFER: usize = 64;

/// What an execution emits, in order.
#[derive(Debug)]
pub enum Event {
    /// An iopub message that is a child of the request.
    Message(JupyterMessageContent),
    /// The kernel's process exited while the request ran.
    Died(String),
}

/// Failure to start or talk to a kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No kernelspec of this name is installed.
    #[error("no Jupyter kernel {name:?} is installed (looked in the Jupyter data directories)")]
    NoKernelspec {
        name: String,
        #[source]
        source: zmq::RuntimeError,
    },
    /// The kernel's process could not be launched.
    #[error("cannot launch the {name} kernel")]
    Launch {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// The kernel did not come up in time or exited while starting.
    #[error("the {name} kernel did not start: {why}")]
    NotStarted { name: String, why: String },
    /// A ZeroMQ channel failed.
    #[error("the kernel's {channel} channel failed")]
    Channel {
        channel: &'static str,
        #[source]
        source: zmq::RuntimeError,
    },
    /// The kernel is dead.
    #[error("the kernel is dead: {0}")]
    Dead(String),
}

type Routes = Arc<Mutex<HashMap<String, mpsc::Sender<JupyterMessageContent>>>>;

/// A running kernel.
pub struct Kernel {
    name: String,
    pid: i32,
    interrupt_by_message: bool,
    shell: tokio::sync::Mutex<zmq::ClientShellConnection>,
    control: tokio::sync::Mutex<zmq::ClientControlConnection>,
    routes: Routes,
    alive: Arc<AtomicBool>,
    died: Arc<Notify>,
    death: Arc<Mutex<String>>,
    connection_file: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Kernel {
    /// Starts kernelspec `name` in `cwd`, writing its connection file under `runtime_dir`.
    pub async fn start(name: &str, cwd: &Path, runtime_dir: &Path) -> Result<Kernel, KernelError> {
        let spec =
            zmq::find_kernelspec(name)
                .await
                .map_err(|source| KernelError::NoKernelspec {
                    name: name.to_string(),
                    source,
                })?;
        let interrupt_by_message = spec.kernelspec.interrupt_mode.as_deref() == Some("message");
        // IPC sockets in the interpreter's private directory: no ports to race for, nothing another
        // user of the sandbox can connect to.
        let kernel_id = uuid::Uuid::new_v4();
        let info = ConnectionInfo {
            transport: jupyter_protocol::connection_info::Transport::IPC,
            ip: runtime_dir
                .join(format!("kernel-{kernel_id}"))
                .to_string_lossy()
                .into_owned(),
            stdin_port: 1,
            control_port: 2,
            hb_port: 3,
            shell_port: 4,
            iopub_port: 5,
            signature_scheme: "hmac-sha256".to_string(),
            key: uuid::Uuid::new_v4().to_string(),
            kernel_name: Some(name.to_string()),
        };
        let connection_file = runtime_dir.join(format!("kernel-{kernel_id}.json"));
        let body = serde_json::to_vec(&info).expect("connection info serializes");
        write_private(&connection_file, &body)
            .map_err(|e| not_started(name, format!("cannot write its connection file: {e}")))?;
        let mut command = spec
            // The kernel's own diagnostics go where the interpreter's go.
            .command(&connection_file, Some(std::process::Stdio::inherit()), None)
            .map_err(|e| not_started(name, e.to_string()))?;
        // Its own process group: an interrupt reaches the kernel, not the server.
        command.current_dir(cwd).process_group(0).kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| KernelError::Launch {
            name: name.to_string(),
            source,
        })?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);

        let alive = Arc::new(AtomicBool::new(true));
        let died = Arc::new(Notify::new());
        let death = Arc::new(Mutex::new(String::new()));
        let watcher = {
            let (alive, died, death) = (alive.clone(), died.clone(), death.clone());
            tokio::spawn(async move {
                let why = match child.wait().await {
                    Ok(status) => format!("its process exited ({status})"),
                    Err(e) => format!("its process cannot be waited for: {e}"),
                };
                *death.lock().unwrap_or_else(|p| p.into_inner()) = why;
                alive.store(false, Ordering::SeqCst);
                died.notify_waiters();
            })
        };
        let session = uuid::Uuid::new_v4().to_string();
        // The kernel binds its sockets some time after it starts; connecting earlier fails.
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let (iopub, shell, control) = loop {
            match connect(&info, &session).await {
                Ok(connected) => break connected,
                Err(e)
                    if tokio::time::Instant::now() >= deadline || !alive.load(Ordering::SeqCst) =>
                {
                    let why = death.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    return Err(if why.is_empty() {
                        e
                    } else {
                        not_started(name, why)
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let mut kernel = Kernel {
            name: name.to_string(),
            pid,
            interrupt_by_message,
            shell: tokio::sync::Mutex::new(shell),
            control: tokio::sync::Mutex::new(control),
            routes: Routes::default(),
            alive,
            died,
            death,
            connection_file,
            tasks: vec![watcher],
        };
        let routes = kernel.routes.clone();
        kernel.tasks.push(tokio::spawn(route_iopub(iopub, routes)));
        let died = kernel.died.notified();
        tokio::select! {
            handshake = tokio::time::timeout(START_TIMEOUT, kernel.handshake()) => handshake
                .map_err(|_| not_started(name, format!("no answer within {START_TIMEOUT:?}")))??,
            _ = died => return Err(not_started(name, kernel.death())),
        }
        Ok(kernel)
    }

    /// Asks `kernel_info` until the iopub channel delivers one of its status messages: ZeroMQ
    /// subscriptions take effect asynchronously, and output sent before would be lost. Each reply
    /// is read whole (reads are not cut short: a cancelled read could lose a frame).
    async fn handshake(&self) -> Result<(), KernelError> {
        let mut shell = self.shell.lock().await;
        loop {
            if !self.is_alive() {
                return Err(not_started(&self.name, self.death()));
            }
            let request: JupyterMessage = KernelInfoRequest {}.into();
            let (route_tx, mut route_rx) = mpsc::channel(EVENT_BUFFER);
            self.routes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(request.header.msg_id.clone(), route_tx);
            let _unroute = Unroute(self.routes.clone(), request.header.msg_id.clone());
            let channel = |source| KernelError::Channel {
                channel: "shell",
                source,
            };
            shell.send(request).await.map_err(channel)?;
            // Any answer will do: some kernels' replies miss fields the typed protocol wants
            // (bash_kernel's `language_info.version`), which makes the read an error after it.
            if let Err(e) = shell.read().await {
                tracing::debug!(kernel = %self.name, error = %e, "kernel_info reply not understood");
            }
            let heard = tokio::time::timeout(Duration::from_millis(500), route_rx.recv()).await;
            if matches!(heard, Ok(Some(_))) {
                return Ok(());
            }
        }
    }

    /// Whether the kernel's process still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Why the kernel died (empty while it lives).
    pub fn death(&self) -> String {
        self.death.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs `code` (not silent: it is counted and may produce results) and streams its events.
    pub async fn execute(self: &Arc<Self>, code: String) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let kernel = self.clone();
        tokio::spawn(async move {
            let shell = kernel.shell.lock().await;
            kernel.run(shell, code, false, tx).await;
        });
        rx
    }

    /// Runs `code` silently (no count, no results) and waits for it; its error output, if any.
    pub async fn execute_silently(self: &Arc<Self>, code: String) -> Result<(), KernelError> {
        let (tx, mut rx) = mpsc::channel(EVENT_BUFFER);
        let kernel = self.clone();
        let run = tokio::spawn(async move {
            let shell = kernel.shell.lock().await;
            kernel.run(shell, code, true, tx).await;
        });
        let mut outcome = Ok(());
        while let Some(event) = rx.recv().await {
            match event {
                Event::Died(why) => outcome = Err(KernelError::Dead(why)),
                Event::Message(JupyterMessageContent::ErrorOutput(e)) => {
                    tracing::warn!(kernel = %self.name, error = %e.evalue, "a setup execution failed");
                }
                Event::Message(_) => {}
            }
        }
        let _ = run.await;
        outcome
    }

    async fn run(
        &self,
        mut shell: tokio::sync::MutexGuard<'_, zmq::ClientShellConnection>,
        code: String,
        silent: bool,
        tx: mpsc::Sender<Event>,
    ) {
        if !self.is_alive() {
            let _ = tx.send(Event::Died(self.death())).await;
            return;
        }
        let request: JupyterMessage = ExecuteRequest {
            code,
            silent,
            store_history: !silent,
            user_expressions: None,
            allow_stdin: false,
            stop_on_error: true,
        }
        .into();
        let msg_id = request.header.msg_id.clone();
        let (route_tx, mut route_rx) = mpsc::channel(EVENT_BUFFER);
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(msg_id.clone(), route_tx);
        let _unroute = Unroute(self.routes.clone(), msg_id.clone());
        // Registered before the request goes out, so no death between the two is missed.
        let died = self.died.notified();
        tokio::pin!(died);
        died.as_mut().enable();
        if let Err(e) = shell.send(request).await {
            let _ = tx
                .send(Event::Died(format!("cannot reach the kernel: {e}")))
                .await;
            return;
        }
        let mut listening = true;
        loop {
            let content = if listening {
                tokio::select! {
                    m = route_rx.recv() => match m { Some(c) => c, None => return },
                    _ = &mut died => {
                        let _ = tx.send(Event::Died(self.death())).await;
                        return;
                    }
                    _ = tx.closed() => {
                        // The reader went away: stop the code, then drain its messages to idle.
                        listening = false;
                        self.interrupt().await;
                        continue;
                    }
                }
            } else {
                // Bound the drain: a kernel that ignores the interrupt is not waited on forever.
                tokio::select! {
                    m = tokio::time::timeout(DRAIN_TIMEOUT, route_rx.recv()) => match m {
                        Ok(Some(c)) => c,
                        _ => {
                            tracing::warn!(kernel = %self.name, "an interrupted execution did not end; killing the kernel");
                            self.kill();
                            return;
                        }
                    },
                    _ = &mut died => return,
                }
            };
            let idle = matches!(&content, JupyterMessageContent::Status(s) if s.execution_state == ExecutionState::Idle);
            if listening && tx.send(Event::Message(content)).await.is_err() {
                listening = false;
                self.interrupt().await;
            }
            if idle {
                break;
            }
        }
        // The shell's execute_reply; read so it does not queue up ahead of the next request's.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, shell.read()).await;
    }

    /// Interrupts what the kernel runs (SIGINT to its process group, or an `interrupt_request` on
    /// the control channel when its kernelspec asks for messages).
    pub async fn interrupt(&self) {
        if self.interrupt_by_message {
            let mut control = self.control.lock().await;
            let _ = control.send(InterruptRequest {}.into()).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), control.read()).await;
        } else if self.pid > 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
    }

    /// Asks the kernel to shut down, then kills what is left of its process group.
    pub async fn shutdown(&self) {
        if self.is_alive() {
            let mut control = self.control.lock().await;
            let _ = control
                .send(ShutdownRequest { restart: false }.into())
                .await;
            let _ = tokio::time::timeout(Duration::from_millis(500), control.read()).await;
        }
        self.kill();
    }

    fn kill(&self) {
        if self.pid > 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.connection_file);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Removes an execution's route when it ends, however it ends.
struct Unroute(Routes, String);

impl Drop for Unroute {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

/// Delivers every iopub message to the execution it is a child of.
async fn route_iopub(mut iopub: zmq::ClientIoPubConnection, routes: Routes) {
    loop {
        let message = match iopub.read().await {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "unreadable iopub message");
                continue;
            }
        };
        let Some(parent) = message.parent_header.as_ref().map(|h| h.msg_id.clone()) else {
            continue;
        };
        let route = routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&parent)
            .cloned();
        if let Some(route) = route {
            // Backpressure: a slow reader holds this channel (and the kernel's socket) back.
            let _ = route.send(message.content).await;
        }
    }
}

/// The client's iopub, shell and control connections to the kernel of `info`.
async fn connect(
    info: &ConnectionInfo,
    session: &str,
) -> Result<
    (
        zmq::ClientIoPubConnection,
        zmq::ClientShellConnection,
        zmq::ClientControlConnection,
    ),
    KernelError,
> {
    let channel = |channel| move |source| KernelError::Channel { channel, source };
    let iopub = zmq::create_client_iopub_connection(info, "", session)
        .await
        .map_err(channel("iopub"))?;
    let identity = zmq::peer_identity_for_session(session).map_err(channel("shell"))?;
    let shell = zmq::create_client_shell_connection_with_identity(info, session, identity)
        .await
        .map_err(channel("shell"))?;
    let control = zmq::create_client_control_connection(info, session)
        .await
        .map_err(channel("control"))?;
    Ok((iopub, shell, control))
}

fn not_started(name: &str, why: impl Into<String>) -> KernelError {
    KernelError::NotStarted {
        name: name.to_string(),
        why: why.into(),
    }
}

/// Writes `body` to `path` readable by its owner only (it holds the kernel's signing key).
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(body)
}
