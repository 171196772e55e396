//! A disk quota on every sandbox's writable layer.
//!
//! Contract: once [`DiskQuota::open`] has chosen a backend other than [`DiskBackend::Off`], every
//! layer [`DiskQuota::create`] makes lives in its own accounting unit under
//! `<state_dir>/layers/<id>/`, and with a limit the kernel refuses writes beyond it (`EDQUOT`,
//! "Disk quota exceeded"; XFS reports a project over its limit as `ENOSPC`, "No space left on
//! device", as a filesystem of that size would) for every process of the sandbox, whatever uid it
//! runs as:
//!
//! - [`DiskBackend::ProjectQuota`] (XFS mounted with `prjquota`): `layers/<id>` is a plain
//!   directory carrying its own project id with `PROJINHERIT`, so everything created below it
//!   (the overlay's `upper` and `work`, and every copy-up) is charged to that id; the limit is set
//!   with `quotactl_fd(Q_SETQUOTA, PRJQUOTA)`. See [`project`] for how ids are allocated without
//!   collisions, and why ext4's project quotas are not used (they do not bind the overlay's writes).
//! - [`DiskBackend::Btrfs`]: `layers/<id>` is a btrfs subvolume whose level-0 qgroup carries the
//!   limit. `layers/` is either a directory on a btrfs the state directory already lives on, or the
//!   mount point of a sparse pool file `<state_dir>/disk.btrfs` loop-mounted there. See [`btrfs`].
//!
//! The backend is chosen once, at runtime start ([`DiskMode::Auto`]: project quotas if the
//! filesystem under `layers/` takes a project id and a limit on a probe directory, else btrfs,
//! else off with a warning). Choosing is idempotent: a pool mounted by an earlier start is reused,
//! never mounted twice, and a pool is never mounted over a non-empty `layers/` directory.
//!
//! What it assumes: it runs as root; nothing but this module creates entries in `layers/`; sandbox
//! ids are validated by the caller (they name exactly one entry of `layers/`). The overlay's
//! `upper` and `work` must share one filesystem, which is why both live in the one layer.
//!
//! It does not know about sandboxes' other files: `state::SandboxPaths` remains the one place that
//! says where a sandbox's upper and work are (symbolic links into the layer made here, or plain
//! directories for a sandbox made without a quota, e.g. by an older daemon).

pub mod btrfs;
pub mod project;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Default size of the sparse btrfs pool file: 64 GiB. Sparse: it takes host space only as sandboxes
/// write (and gives it back as they delete, the pool being mounted with btrfs's default
/// `discard=async`), so it can be larger than the host's free space; when the host runs out, writes
/// in sandboxes fail with "No space left on device" before their own limit.
pub const DEFAULT_POOL_FILE_MB: u64 = 64 * 1024;

/// Which quota backend the operator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskMode {
    /// Project quotas if the filesystem supports them, else btrfs, else no limit (with a warning).
    #[default]
    Auto,
    /// Project quotas or fail to start.
    Project,
    /// Btrfs qgroups (on the state directory's btrfs, or on a pool file) or fail to start.
    Btrfs,
    /// No disk limit: `disk_mb` other than 0 is refused at create.
    Off,
}

impl FromStr for DiskMode {
    type Err = QuotaError;

    fn from_str(text: &str) -> Result<Self, QuotaError> {
        match text {
            "auto" => Ok(Self::Auto),
            "project" => Ok(Self::Project),
            "btrfs" => Ok(Self::Btrfs),
            "off" => Ok(Self::Off),
            _ => Err(QuotaError::InvalidMode(text.to_string())),
        }
    }
}

impl fmt::Display for DiskMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Project => "project",
            Self::Btrfs => "btrfs",
            Self::Off => "off",
        })
    }
}

/// How the runtime limits sandboxes' writable layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskConfig {
    /// Which backend to use.
    pub mode: DiskMode,
    /// Size of the sparse btrfs pool file `<state_dir>/disk.btrfs` when one has to be made, in MiB;
    /// [`DEFAULT_POOL_FILE_MB`] by default. An existing pool keeps its size.
    pub pool_file_mb: u64,
}

impl Default for DiskConfig {
    fn default() -> Self {
        Self {
            mode: DiskMode::Auto,
            pool_file_mb: DEFAULT_POOL_FILE_MB,
        }
    }
}

/// The backend in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskBackend {
    /// XFS project quotas.
    ProjectQuota,
    /// Btrfs subvolumes with qgroup limits.
    Btrfs,
    /// No limit.
    Off,
}

/// Disk usage of one sandbox's writable layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Bytes the layer holds. Btrfs counts what the last transaction commit saw (at most the
    /// filesystem's commit interval old, 30 s by default); project quotas are exact.
    pub used_bytes: u64,
    /// The limit in bytes; `None` without one.
    pub limit_bytes: Option<u64>,
}

/// A failed quota operation; each variant names its own step, the cause is chained.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// The disk mode is not one of auto, project, btrfs, off.
    #[error("unknown disk mode {0:?} (auto, project, btrfs or off)")]
    InvalidMode(String),
    /// The backend the operator asked for cannot work on this host.
    #[error("disk backend {mode} is not available for {path}")]
    Unavailable {
        /// The mode asked for.
        mode: DiskMode,
        /// The layers directory.
        path: PathBuf,
        /// Why not.
        #[source]
        source: Box<QuotaError>,
    },
    /// A filesystem call on a path failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A host tool could not be run or exited with an error.
    #[error("{command} failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it wrote to stderr (or its exit status).
        stderr: String,
        /// The cause when it could not be started.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A kernel interface answered something this module cannot read.
    #[error("unexpected contents of {path}: {detail}")]
    Parse {
        /// Where it was read.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The filesystem is not the one the backend needs.
    #[error("{path} is not on {wanted}")]
    WrongFilesystem {
        /// The path checked.
        path: PathBuf,
        /// The filesystem needed.
        wanted: &'static str,
    },
    /// The pool would be mounted over entries it would hide.
    #[error("{0} is not empty; refusing to mount the btrfs pool over it")]
    NotEmpty(PathBuf),
    /// Every project id of the range is in use.
    #[error("no free project id left in {0}")]
    ProjectIdsExhausted(PathBuf),
}

impl QuotaError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| QuotaError::Io { what, path, source }
    }
}

/// A backend that can be tried when choosing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Candidate {
    Project,
    Btrfs,
}

/// The candidates a mode tries, in order, and whether failing them all is an error (an explicit
/// mode) rather than [`DiskBackend::Off`] with a warning.
fn candidates(mode: DiskMode) -> (&'static [Candidate], bool) {
    match mode {
        DiskMode::Auto => (&[Candidate::Project, Candidate::Btrfs], false),
        DiskMode::Project => (&[Candidate::Project], true),
        DiskMode::Btrfs => (&[Candidate::Btrfs], true),
        DiskMode::Off => (&[], false),
    }
}

/// What was chosen: a backend, or off with the reasons each candidate gave.
enum Choice<P, B> {
    Project(P),
    Btrfs(B),
    Off(Vec<String>),
}

/// Tries the candidates of `mode` in order with `project` and `btrfs`; the first that works wins.
/// `reasons` gets why each candidate before it was passed over.
fn choose<P, B>(
    mode: DiskMode,
    layers: &Path,
    project: impl FnOnce() -> Result<P, QuotaError>,
    btrfs: impl FnOnce() -> Result<B, QuotaError>,
    reasons: &mut Vec<String>,
) -> Result<Choice<P, B>, QuotaError> {
    let (order, required) = candidates(mode);
    let (mut project, mut btrfs) = (Some(project), Some(btrfs));
    for candidate in order {
        let tried = match candidate {
            Candidate::Project => project.take().map(|f| f().map(Choice::Project)),
            Candidate::Btrfs => btrfs.take().map(|f| f().map(Choice::Btrfs)),
        };
        match tried {
            Some(Ok(choice)) => return Ok(choice),
            Some(Err(e)) if required => {
                return Err(QuotaError::Unavailable {
                    mode,
                    path: layers.to_path_buf(),
                    source: Box::new(e),
                })
            }
            Some(Err(e)) => reasons.push(format!("{candidate:?}: {}", chain(&e))),
            None => {}
        }
    }
    if mode == DiskMode::Off {
        reasons.push("disk mode is off".into());
    }
    Ok(Choice::Off(reasons.clone()))
}

/// An error with its causes, for a log line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

enum Backend {
    Project(project::Projects),
    Btrfs(btrfs::Pool),
    Off,
}

/// The quota layer of one runtime.
pub struct DiskQuota {
    layers: PathBuf,
    backend: Backend,
    /// Why the candidates tried before the chosen backend were passed over.
    passed_over: Vec<String>,
}

impl DiskQuota {
    /// Chooses and prepares the backend for the runtime whose state directory is `state_dir`
    /// (see the module docs); logs a warning when it ends up without one in [`DiskMode::Auto`].
    pub fn open(state_dir: &Path, config: &DiskConfig) -> Result<Self, QuotaError> {
        let layers = state_dir.join("layers");
        if config.mode != DiskMode::Off {
            mkdir(&layers)?;
        }
        let mut passed_over = Vec::new();
        let choice = choose(
            config.mode,
            &layers,
            || project::Projects::open(&layers),
            || btrfs::Pool::open(&layers, &state_dir.join("disk.btrfs"), config.pool_file_mb),
            &mut passed_over,
        )?;
        let backend = match choice {
            Choice::Project(p) => Backend::Project(p),
            Choice::Btrfs(b) => Backend::Btrfs(b),
            Choice::Off(reasons) => {
                tracing::warn!(
                    layers = %layers.display(),
                    reasons = %reasons.join("; "),
                    "no disk quota backend: sandboxes' writable layers have no size limit"
                );
                Backend::Off
            }
        };
        Ok(Self {
            layers,
            backend,
            passed_over,
        })
    }

    /// Why the backends tried before the one in use were passed over (`candidate: reason`).
    pub fn passed_over(&self) -> &[String] {
        &self.passed_over
    }

    /// The backend in use.
    pub fn backend(&self) -> DiskBackend {
        match self.backend {
            Backend::Project(_) => DiskBackend::ProjectQuota,
            Backend::Btrfs(_) => DiskBackend::Btrfs,
            Backend::Off => DiskBackend::Off,
        }
    }

    /// Where the layer of sandbox `id` lives (or would).
    pub fn layer(&self, id: &str) -> PathBuf {
        self.layers.join(id)
    }

    /// Makes the layer of sandbox `id` with a limit of `limit_bytes` (none when `None`) and returns
    /// its directory; `None` with no backend (a limit is then refused). On failure nothing of it is
    /// left.
    pub fn create(
        &self,
        id: &str,
        limit_bytes: Option<u64>,
    ) -> Result<Option<PathBuf>, QuotaError> {
        let layer = self.layer(id);
        match &self.backend {
            Backend::Project(p) => p.create(&layer, limit_bytes).map(|()| Some(layer)),
            Backend::Btrfs(b) => b.create(&layer, limit_bytes).map(|()| Some(layer)),
            Backend::Off => Ok(None),
        }
    }

    /// Removes the layer of sandbox `id` with everything in it, and its limit. Idempotent: an
    /// unknown id (or a sandbox made without a layer) succeeds.
    pub fn remove(&self, id: &str) -> Result<(), QuotaError> {
        let layer = self.layer(id);
        match &self.backend {
            Backend::Project(p) => p.remove(&layer),
            Backend::Btrfs(b) => b.remove(&layer),
            Backend::Off => Ok(()),
        }
    }

    /// Sets the limit of sandbox `id`'s layer to `limit_bytes` (a resize); false with no backend.
    pub fn relimit(&self, id: &str, limit_bytes: u64) -> Result<bool, QuotaError> {
        let layer = self.layer(id);
        match &self.backend {
            Backend::Project(p) => p.relimit(&layer, limit_bytes).map(|()| true),
            Backend::Btrfs(b) => b.relimit(&layer, limit_bytes).map(|()| true),
            Backend::Off => Ok(false),
        }
    }

    /// The usage of sandbox `id`'s layer; `None` when it has none (no backend, or made without).
    pub fn usage(&self, id: &str) -> Result<Option<DiskUsage>, QuotaError> {
        let layer = self.layer(id);
        match &self.backend {
            Backend::Project(p) => p.usage(&layer),
            Backend::Btrfs(b) => b.usage(&layer),
            Backend::Off => Ok(None),
        }
    }
}

/// Chooses a backend exactly as a runtime on `scratch` (an empty directory) would, then undoes
/// what that made (a pool is detached; `scratch` itself is the caller's to remove): which backend
/// this host gives a data dir on `scratch`'s filesystem, and why the ones before it were passed
/// over. An explicit mode that cannot be had is the error the runtime would fail to start with.
pub fn probe(
    scratch: &Path,
    config: &DiskConfig,
) -> Result<(DiskBackend, Vec<String>), QuotaError> {
    let quota = DiskQuota::open(scratch, config)?;
    let found = (quota.backend(), quota.passed_over().to_vec());
    drop(quota);
    release_pool(scratch)?;
    Ok(found)
}

/// Lazily detaches the btrfs pool a runtime on `state_dir` loop-mounted on its `layers/`, for tools
/// that throw a state directory away (tests, benchmarks): the runtime itself never unmounts it,
/// since sandboxes outlive the process that made them. Returns whether something was unmounted; a
/// `layers/` that is no mount point (no pool, or the state directory's own btrfs) is left alone.
/// Sandboxes still running on the pool keep it alive until they are gone.
pub fn release_pool(state_dir: &Path) -> Result<bool, QuotaError> {
    let layers = state_dir.join("layers");
    match nix::mount::umount2(&layers, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(QuotaError::io("unmount", layers)(e.into())),
    }
}

fn mkdir(path: &Path) -> Result<(), QuotaError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(QuotaError::io("create", path))
}

/// Runs a host tool; its stderr becomes the error.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), QuotaError> {
    let command = std::iter::once(program.to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| QuotaError::Command {
            command: command.clone(),
            stderr: String::new(),
            source: Some(e),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(QuotaError::Command {
        command,
        stderr: if stderr.is_empty() {
            out.status.to_string()
        } else {
            stderr
        },
        source: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no() -> QuotaError {
        QuotaError::WrongFilesystem {
            path: "/x".into(),
            wanted: "nothing",
        }
    }

    fn pick(
        mode: DiskMode,
        project: bool,
        btrfs: bool,
    ) -> Result<Choice<&'static str, &'static str>, QuotaError> {
        choose(
            mode,
            Path::new("/x"),
            || if project { Ok("p") } else { Err(no()) },
            || if btrfs { Ok("b") } else { Err(no()) },
            &mut Vec::new(),
        )
    }

    fn name(c: Choice<&'static str, &'static str>) -> String {
        match c {
            Choice::Project(p) | Choice::Btrfs(p) => p.to_string(),
            Choice::Off(reasons) => format!("off({})", reasons.len()),
        }
    }

    #[test]
    fn auto_prefers_project_quotas_then_btrfs_then_off() {
        assert_eq!(name(pick(DiskMode::Auto, true, true).unwrap()), "p");
        assert_eq!(name(pick(DiskMode::Auto, false, true).unwrap()), "b");
        let mut why = Vec::new();
        let b = choose(
            DiskMode::Auto,
            Path::new("/x"),
            || Err::<(), _>(no()),
            || Ok(()),
            &mut why,
        );
        assert!(matches!(b, Ok(Choice::Btrfs(()))));
        assert_eq!(
            why.len(),
            1,
            "the passed-over project quotas say why: {why:?}"
        );
        assert!(why[0].starts_with("Project: "), "{why:?}");
        // Off with one reason per candidate, for the warning.
        assert_eq!(name(pick(DiskMode::Auto, false, false).unwrap()), "off(2)");
    }

    #[test]
    fn an_explicit_mode_fails_rather_than_falling_back() {
        assert_eq!(name(pick(DiskMode::Btrfs, true, true).unwrap()), "b");
        assert_eq!(name(pick(DiskMode::Project, true, false).unwrap()), "p");
        for mode in [DiskMode::Project, DiskMode::Btrfs] {
            let err = pick(mode, false, false).err().expect("an error");
            assert!(matches!(err, QuotaError::Unavailable { mode: m, .. } if m == mode));
        }
    }

    #[test]
    fn off_tries_nothing() {
        let out = choose::<(), ()>(
            DiskMode::Off,
            Path::new("/x"),
            || panic!("probed project quotas"),
            || panic!("probed btrfs"),
            &mut Vec::new(),
        );
        assert_eq!(name_unit(out.unwrap()), "off(1)");
    }

    fn name_unit(c: Choice<(), ()>) -> String {
        match c {
            Choice::Project(()) => "p".into(),
            Choice::Btrfs(()) => "b".into(),
            Choice::Off(reasons) => format!("off({})", reasons.len()),
        }
    }

    #[test]
    fn modes_round_trip_through_their_names() {
        for mode in [
            DiskMode::Auto,
            DiskMode::Project,
            DiskMode::Btrfs,
            DiskMode::Off,
        ] {
            assert_eq!(mode.to_string().parse::<DiskMode>().unwrap(), mode);
        }
        assert!("xfs".parse::<DiskMode>().is_err());
        assert_eq!(DiskConfig::default().mode, DiskMode::Auto);
    }

    #[test]
    fn a_failing_tool_reports_its_stderr() {
        let err = run("sh", &["-c".as_ref(), "echo boom >&2; exit 3".as_ref()]).unwrap_err();
        assert_eq!(err.to_string(), "sh -c echo boom >&2; exit 3 failed: boom");
        let err = run("/nonexistent/tool", &[]).unwrap_err();
        assert!(std::error::Error::source(&err).is_some());
    }
}
