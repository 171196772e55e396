//! The host side of the boot handshake (the agent side is `sandboxd_agent::boot`).
//!
//! Guarantee: when [`NamespaceRuntime::boot`] returns a pid, that init runs in its cgroup, behind its
//! veth pair, in a user namespace whose ids map to its own `id_base..+65536` (see [`super::ids`]),
//! seeing the shared layers through idmapped mounts when that is not the storage range, confined,
//! and about to serve the agent on its socket, its DNS forwarder serving when its lists name domains;
//! no user instruction has run yet. When it fails, everything this call made (process, cgroup, veth
//! pair and its egress rules, forwarder, socket) is gone again.
//!
//! With a callback directory configured, the plan also binds it read-only at
//! [`sandboxd_envd::callback::SANDBOX_DIR`] and names the daemon's socket inside it, so the agent can
//! call home (see the namespace module docs). A daemon built with the `failpoints` feature can make the
//! agent die right after its `Ready` (failpoint `agent.exit-before-ready`), before its first call home.

use super::process::{clone_boot, reap, CgroupJoin, ChildFds, PidFd};
use super::rootfs::AGENT_PATH;
use super::state::SandboxPaths;
use super::{limits, NamespaceRuntime};
use crate::{ImageRoot, RuntimeError, SandboxSpec};
use sandboxd_envd::boot::{BindMount, BootConfig, BootFault, BootMessage, RootfsPlan, VolumeMount};
use sandboxd_envd::callback;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long a boot may take before the runtime gives up on it.
const BOOT_TIMEOUT: Duration = Duration::from_secs(20);

type Lines = tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>;

impl NamespaceRuntime {
    /// Boots the sandbox described by `spec`, rooted at host id `id_base`; returns the host pid of its
    /// init.
    pub(super) async fn boot(
        &self,
        paths: &SandboxPaths,
        spec: &SandboxSpec,
        id_base: u32,
    ) -> Result<i32, RuntimeError> {
        let idmap = self.ids.namespace_for(id_base)?;
        if idmap.is_some() {
            super::mkdir_owned(&paths.idmapped(), 0o700, None)?;
        }
        let socket = paths.socket();
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).map_err(RuntimeError::io("listen", &socket))?;
        let log_path = paths.log();
        let log: OwnedFd = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(RuntimeError::io("open", &log_path))?
            .into();
        let (ours, theirs) = UnixStream::pair().map_err(RuntimeError::Spawn)?;
        let theirs: OwnedFd = theirs.into();
        let cgroup = self.cgroups.create(&spec.id, &limits(spec))?;
        let netns = self.netns_spares.as_ref().and_then(|s| s.take());
        let pid = match CgroupJoin::prepare(&cgroup).and_then(|join| {
            clone_boot(
                &self.config.agent_binary,
                ChildFds {
                    log: &log,
                    sync: &theirs,
                    listener: listener.as_raw_fd(),
                    idmap: idmap.as_ref().map(|ns| ns.as_raw_fd()),
                    netns: netns.as_ref().map(|ns| ns.as_raw_fd()),
                },
                &join,
            )
        }) {
            Ok(pid) => pid,
            Err(e) => {
                let _ = cgroup.remove();
                self.replenish_spares();
                return Err(RuntimeError::Spawn(e));
            }
        };
        drop(theirs);
        drop(listener);
        // Set once this call created the veth pair: only then is it ours to delete on failure (the
        // slot's interface may belong to a live sandbox if the caller handed out a leased slot).
        let attached = AtomicBool::new(false);
        let outcome = tokio::time::timeout(BOOT_TIMEOUT, async {
            let config = self.boot_config(paths, spec, id_base, idmap.is_some())?;
            // The init enters a spare namespace only after `clone` returns: its own path may
            // still name the daemon's for a moment, the spare's descriptor never does.
            let netns = match &netns {
                Some(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                None => PathBuf::from(format!("/proc/{pid}/ns/net")),
            };
            self.handshake(pid, &netns, ours, config, spec, &attached)
                .await
        })
        .await
        .unwrap_or_else(|_| {
            Err(RuntimeError::Boot {
                stage: "timeout".into(),
                message: format!("no ready signal within {BOOT_TIMEOUT:?}"),
            })
        });
        // Done with the kernel's cgroup and network locks: spares are made behind.
        drop(netns);
        self.replenish_spares();
        if let Err(e) = outcome {
            if let Ok(fd) = PidFd::open(pid) {
                let _ = fd.signal(libc::SIGKILL);
                fd.exited(Duration::from_secs(5)).await;
            }
            reap(pid);
            let _ = cgroup.kill_all();
            let _ = cgroup.remove();
            if attached.load(Ordering::SeqCst) {
                self.unwire(spec).await;
            }
            let _ = std::fs::remove_file(&socket);
            return Err(with_log(e, &log_path));
        }
        Ok(pid)
    }

    /// Makes the spares boots took since the last call, behind the caller (see
    /// [`crate::spares`]): call it once a boot is done with the kernel's locks.
    pub(crate) fn replenish_spares(&self) {
        self.cgroups.replenish_spares();
        if let Some(netns) = &self.netns_spares {
            netns.replenish();
        }
    }

    /// Runs the boot handshake with init `pid` over `sync`, wiring the network of the namespace
    /// `netns` names (the init's) meanwhile.
    async fn handshake(
        &self,
        pid: i32,
        netns: &Path,
        sync: UnixStream,
        config: BootConfig,
        spec: &SandboxSpec,
        attached: &AtomicBool,
    ) -> Result<(), RuntimeError> {
        let id_base = config.id_map_base;
        sync.set_nonblocking(true).map_err(RuntimeError::Spawn)?;
        let sync = tokio::net::UnixStream::from_std(sync).map_err(RuntimeError::Spawn)?;
        let (read, mut write) = sync.into_split();
        let mut lines = BufReader::new(read).lines();
        let config = BootMessage::Config(Box::new(config));
        write
            .write_all(&config.to_line())
            .await
            .map_err(RuntimeError::Spawn)?;
        // The network is wired while the agent builds its root; the egress rules are in place before
        // the init is told to go.
        let (net, userns) = tokio::join!(
            async {
                let addrs = self
                    .net
                    .attach_at(spec.net_slot, netns, spec.may_send_out())
                    .await?;
                attached.store(true, Ordering::SeqCst);
                if spec.needs_egress_rules() {
                    super::egress::allow(&addrs, spec).await?;
                }
                if spec.has_names() {
                    self.start_forwarder(spec).await?;
                }
                Ok::<_, RuntimeError>(addrs)
            },
            expect(&mut lines, "user namespace", |m| {
                matches!(m, BootMessage::UserNamespaceReady)
            })
        );
        if let Err(e) = net.and(userns) {
            let _ = write
                .write_all(
                    &BootMessage::Failed {
                        stage: "host".into(),
                        message: e.to_string(),
                    }
                    .to_line(),
                )
                .await;
            return Err(e);
        }
        write_id_maps(pid, id_base)?;
        write
            .write_all(&BootMessage::Go.to_line())
            .await
            .map_err(RuntimeError::Spawn)?;
        expect(&mut lines, "ready", |m| matches!(m, BootMessage::Ready)).await
    }

    fn boot_config(
        &self,
        paths: &SandboxPaths,
        spec: &SandboxSpec,
        id_base: u32,
        idmapped: bool,
    ) -> Result<BootConfig, RuntimeError> {
        let root = self.root_plan(spec)?;
        Ok(BootConfig {
            sandbox_id: spec.id.clone(),
            hostname: spec.id.clone(),
            rootfs: RootfsPlan {
                lower: root.lower,
                below: root.below,
                upper: paths.upper(),
                work: paths.work(),
                target: paths.rootfs(),
                idmapped_at: idmapped.then(|| paths.idmapped()),
            },
            binds: root.binds,
            id_map_base: id_base,
            token: spec.agent_token.clone(),
            default_user: "user".into(),
            envs: root.envs,
            workdir: root.workdir,
            callback_socket: root.callback_socket,
            volumes: root.volumes,
            fault: injected_fault(),
        })
    }

    /// Undoes a boot's network: the DNS forwarder, the egress rules and the veth pair of `spec`'s
    /// slot (best effort: a boot that failed says why already).
    pub(crate) async fn unwire(&self, spec: &SandboxSpec) {
        self.forwarders.stop(&spec.id);
        if spec.needs_egress_rules() {
            if let Ok(addrs) = self.net.addrs(spec.net_slot) {
                super::egress::revoke(addrs.sandbox).await;
            }
        }
        let _ = self.net.detach(spec.net_slot).await;
    }

    /// What the root of `spec`'s sandbox is made of, whichever tier stacks it: its layers, the
    /// host's read-only binds (the agent binary and the callback directory among them), and the
    /// environment and working directory its commands start with.
    pub(crate) fn root_plan(&self, spec: &SandboxSpec) -> Result<RootPlan, RuntimeError> {
        // `base` lends the host's system directories; an image brings its own.
        let (lower, below, mut binds) = match &spec.image {
            None => (
                self.template.lower.clone(),
                Vec::new(),
                self.template.binds.clone(),
            ),
            // Stacked on `base`: its lower (mount points, accounts) at the bottom, its binds.
            Some(image) if image.on_base => match image.layers.split_last() {
                Some((top, rest)) => (
                    top.clone(),
                    rest.iter()
                        .rev()
                        .cloned()
                        .chain([self.template.lower.clone()])
                        .collect(),
                    self.template.binds.clone(),
                ),
                None => (
                    self.template.lower.clone(),
                    Vec::new(),
                    self.template.binds.clone(),
                ),
            },
            Some(image) => (
                super::image_root::ensure_top(
                    &self.config.state_dir.join("image-tops"),
                    image,
                    self.config.id_map_base,
                )?,
                image.layers.iter().rev().cloned().collect(),
                Vec::new(),
            ),
        };
        binds.push(BindMount {
            source: self.config.agent_binary.clone(),
            target: AGENT_PATH.into(),
            read_only: true,
        });
        let (callback_bind, callback_socket) = callback_plan(self.config.callback_dir.as_deref());
        binds.extend(callback_bind);
        let volumes = spec
            .volumes
            .iter()
            .map(|v| {
                let root = self.volumes.root(&v.volume_id);
                if !root.is_dir() {
                    return Err(RuntimeError::Host(format!(
                        "volume {} is missing from this host ({})",
                        v.volume_id,
                        root.display()
                    )));
                }
                Ok(VolumeMount {
                    root,
                    subpath: v.subpath.clone(),
                    target: v.target.clone(),
                    read_only: v.read_only,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RootPlan {
            lower,
            below,
            binds,
            volumes,
            envs: match &spec.image {
                None | Some(ImageRoot { on_base: true, .. }) => super::rootfs::BASE_ENV
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .chain(spec.envs.clone())
                    .collect(),
                Some(_) => spec.envs.clone(),
            },
            workdir: spec.image.as_ref().and_then(|i| i.workdir.clone()),
            callback_socket,
        })
    }
}

/// What a sandbox's root is made of ([`NamespaceRuntime::root_plan`]).
pub(crate) struct RootPlan {
    /// The highest read-only layer.
    pub lower: PathBuf,
    /// The read-only layers under `lower`, highest first.
    pub below: Vec<PathBuf>,
    /// Host paths bound into the root, in order.
    pub binds: Vec<BindMount>,
    /// Volumes mounted after the binds, in order.
    pub volumes: Vec<VolumeMount>,
    /// The environment commands start with.
    pub envs: std::collections::HashMap<String, String>,
    /// Where commands start when the caller names no directory.
    pub workdir: Option<String>,
    /// The daemon's call-home socket as the sandbox sees it, if the daemon listens.
    pub callback_socket: Option<PathBuf>,
}

/// The bind of the host's callback directory and the socket path the agent is told, or neither when
/// the daemon does not listen for call-home events.
fn callback_plan(dir: Option<&Path>) -> (Option<BindMount>, Option<PathBuf>) {
    match dir {
        Some(dir) => (
            Some(BindMount {
                source: dir.to_path_buf(),
                target: callback::SANDBOX_DIR.into(),
                read_only: true,
            }),
            Some(Path::new(callback::SANDBOX_DIR).join(callback::SOCKET_NAME)),
        ),
        None => (None, None),
    }
}

/// The fault a test asked for through failpoint `agent.exit-before-ready`; always `None` in a build
/// without the `failpoints` feature.
fn injected_fault() -> Option<BootFault> {
    fail::fail_point!("agent.exit-before-ready", |_| Some(
        BootFault::ExitBeforeReady
    ));
    None
}

async fn expect(
    lines: &mut Lines,
    wanted: &str,
    is: impl Fn(&BootMessage) -> bool,
) -> Result<(), RuntimeError> {
    let line = lines
        .next_line()
        .await
        .map_err(RuntimeError::Spawn)?
        .ok_or_else(|| RuntimeError::Boot {
            stage: wanted.to_string(),
            message: "the init exited before answering".into(),
        })?;
    match BootMessage::from_line(line.as_bytes()) {
        Ok(BootMessage::Failed { stage, message }) => Err(RuntimeError::Boot { stage, message }),
        Ok(m) if is(&m) => Ok(()),
        Ok(m) => Err(RuntimeError::Boot {
            stage: wanted.to_string(),
            message: format!("unexpected message {m:?}"),
        }),
        Err(e) => Err(RuntimeError::Boot {
            stage: wanted.to_string(),
            message: format!("undecodable message: {e}"),
        }),
    }
}

/// Maps ids 0..65536 of the sandbox's user namespace to `base..base+65536` on the host (`RANGE_SIZE`).
fn write_id_maps(pid: i32, base: u32) -> Result<(), RuntimeError> {
    let map = format!("0 {base} 65536\n");
    for file in ["uid_map", "gid_map"] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, &map).map_err(RuntimeError::io("write", &path))?;
    }
    Ok(())
}

/// Adds the last lines of the boot log to a boot failure, where the init's own words are.
pub(crate) fn with_log(e: RuntimeError, log: &std::path::Path) -> RuntimeError {
    match e {
        RuntimeError::Boot { stage, message } => {
            let tail = std::fs::read_to_string(log)
                .map(|s| {
                    let lines: Vec<&str> = s.lines().collect();
                    lines[lines.len().saturating_sub(5)..].join(" | ")
                })
                .unwrap_or_default();
            let message = if tail.is_empty() {
                message
            } else {
                format!("{message} (log: {tail})")
            };
            RuntimeError::Boot { stage, message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_dir_is_bound_read_only_and_its_socket_named_inside_the_sandbox() {
        let (bind, socket) = callback_plan(Some(Path::new("/var/lib/sandboxd/callback")));
        assert_eq!(
            bind,
            Some(BindMount {
                source: "/var/lib/sandboxd/callback".into(),
                target: "/.sandboxd/callback".into(),
                read_only: true,
            })
        );
        assert_eq!(
            socket.as_deref(),
            Some(Path::new("/.sandboxd/callback/daemon.sock"))
        );
        // Not under /run: the agent mounts a tmpfs there after the binds.
        assert!(!Path::new(callback::SANDBOX_DIR).starts_with("/run"));
    }

    #[test]
    fn without_a_callback_dir_the_agent_is_told_nothing() {
        assert_eq!(callback_plan(None), (None, None));
    }

    #[cfg(not(feature = "failpoints"))]
    #[test]
    fn no_fault_is_injected_without_failpoints() {
        assert_eq!(injected_fault(), None);
    }

    #[cfg(feature = "failpoints")]
    #[test]
    fn the_exit_before_ready_failpoint_injects_its_fault() {
        assert_eq!(injected_fault(), None);
        fail::cfg("agent.exit-before-ready", "return").unwrap();
        assert_eq!(injected_fault(), Some(BootFault::ExitBeforeReady));
        fail::remove("agent.exit-before-ready");
        assert_eq!(injected_fault(), None);
    }
}
