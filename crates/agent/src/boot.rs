//! `sandboxd-agent boot`: the child side of the boot handshake (see `sandboxd_envd::boot`).
//!
//! Runs as PID 1 of fresh mount, pid, net, uts and ipc namespaces, still as the host's root, with the
//! handshake socket on fd 3 and the agent's listening socket on fd 4. In order it:
//! 1. makes every mount private, mounts the overlay root (of idmapped views of its lower layers when
//!    the plan says so, see `RootfsPlan::idmapped_at`), the read-only binds, the volumes (idmapped
//!    the same way), /proc, /sys, /dev, /run;
//! 2. pivots into the new root and detaches the old one (nothing of the host is reachable by path after);
//! 3. sets the hostname, then unshares a user namespace: the namespaces above stay owned by the host's
//!    user namespace, so even the sandbox's root can never mount, or reconfigure its network;
//! 4. after the runtime wrote the id maps, becomes uid 0 of that namespace, sets no_new_privs, drops
//!    capabilities, installs the seccomp filter, and becomes the sandbox's init serving the agent.
//!
//! Any failure is reported to the runtime as `Failed` with the stage, and the process exits.
//!
//! After `Ready`, the server calls home to the daemon's socket the runtime named
//! (`BootConfig::callback_socket`, see [`crate::callhome`]). A runtime built with failpoints may ask for
//! `BootFault::ExitBeforeReady`: then the agent exits 1 right after `Ready`, before calling home or
//! serving.

use crate::{confine, init, server};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{pivot_root, sethostname, Gid, Uid};
use sandboxd_envd::boot::{
    BindMount, BootConfig, BootFault, BootMessage, VolumeMount, AGENT_LISTEN_FD, BOOT_SYNC_FD,
    IDMAP_USERNS_FD,
};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::fs::symlink;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// A failed boot step.
#[derive(Debug, thiserror::Error)]
#[error("{stage}: {message}")]
pub struct BootError {
    stage: &'static str,
    message: String,
}

fn fail<E: std::fmt::Display>(stage: &'static str) -> impl FnOnce(E) -> BootError {
    move |e| BootError {
        stage,
        message: e.to_string(),
    }
}

/// Boots the sandbox and never returns: becomes its init, or exits 1 after reporting the failure.
pub fn run() -> ! {
    // SAFETY: the runtime hands us these two descriptors; nothing else in this process owns them.
    let sync = unsafe { UnixStream::from_raw_fd(BOOT_SYNC_FD) };
    let mut reader = match sync.try_clone() {
        Ok(s) => BufReader::new(s),
        Err(_) => std::process::exit(1),
    };
    let mut writer = sync;
    match boot(&mut reader, &mut writer) {
        Ok(config) => {
            drop(reader);
            drop(writer);
            if config.fault == Some(BootFault::ExitBeforeReady) {
                tracing::warn!(
                    sandbox_id = %config.sandbox_id,
                    "injected fault exit-before-ready: exiting after the handshake, before calling home"
                );
                std::process::exit(1);
            }
            // SAFETY: see above.
            let listener = unsafe { UnixListener::from_raw_fd(AGENT_LISTEN_FD) };
            let _ = set_cloexec(AGENT_LISTEN_FD);
            let agent = server::AgentConfig::for_sandbox(
                config.sandbox_id,
                config.token,
                config.default_user,
                config.envs,
                config.workdir,
                config.callback_socket,
            );
            init::run_as_init(move || server::run_blocking(listener, agent))
        }
        Err(e) => {
            eprintln!("sandboxd-agent boot: {e}");
            let _ = writer.write_all(
                &BootMessage::Failed {
                    stage: e.stage.to_string(),
                    message: e.message,
                }
                .to_line(),
            );
            std::process::exit(1)
        }
    }
}

fn boot(reader: &mut impl BufRead, writer: &mut impl Write) -> Result<BootConfig, BootError> {
    let config = match receive(reader)? {
        BootMessage::Config(config) => *config,
        other => return Err(unexpected("config", &other)),
    };
    build_root(&config)?;
    sethostname(&config.hostname).map_err(fail("sethostname"))?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(fail("unshare user namespace"))?;
    send(writer, &BootMessage::UserNamespaceReady)?;
    match receive(reader)? {
        BootMessage::Go => {}
        other => return Err(unexpected("go", &other)),
    }
    become_root()?;
    confine::set_no_new_privs().map_err(fail("no_new_privs"))?;
    confine::drop_capabilities().map_err(fail("capabilities"))?;
    confine::install_seccomp().map_err(fail("seccomp"))?;
    // Not dumpable: sandbox processes of the same uid cannot read the agent's memory (its token).
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    send(writer, &BootMessage::Ready)?;
    Ok(config)
}

fn receive(reader: &mut impl BufRead) -> Result<BootMessage, BootError> {
    let mut line = Vec::new();
    let n = reader
        .read_until(b'\n', &mut line)
        .map_err(fail("handshake read"))?;
    if n == 0 {
        return Err(BootError {
            stage: "handshake read",
            message: "the runtime closed the handshake".into(),
        });
    }
    BootMessage::from_line(&line).map_err(fail("handshake decode"))
}

fn send(writer: &mut impl Write, msg: &BootMessage) -> Result<(), BootError> {
    writer
        .write_all(&msg.to_line())
        .map_err(fail("handshake write"))
}

fn unexpected(wanted: &str, got: &BootMessage) -> BootError {
    match got {
        BootMessage::Failed { stage, message } => BootError {
            stage: "runtime",
            message: format!("the runtime gave up at {stage}: {message}"),
        },
        other => BootError {
            stage: "handshake",
            message: format!("expected {wanted}, got {other:?}"),
        },
    }
}

/// Mounts the whole tree under `rootfs.target` and pivots into it.
fn build_root(config: &BootConfig) -> Result<(), BootError> {
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(fail("make mounts private"))?;
    let plan = &config.rootfs;
    let root = &plan.target;
    let layers: Vec<PathBuf> = std::iter::once(&plan.lower)
        .chain(&plan.below)
        .cloned()
        .collect();
    // SAFETY: the runtime hands us this descriptor (only when the layers are idmapped) and nothing
    // else in this process owns it; it is closed when this function returns, so no process of the
    // sandbox ever holds it.
    let userns = plan
        .idmapped_at
        .as_ref()
        .map(|_| unsafe { std::os::fd::OwnedFd::from_raw_fd(IDMAP_USERNS_FD) });
    let layers = match (&plan.idmapped_at, &userns) {
        (Some(at), Some(userns)) => idmapped_layers(&layers, at, userns.as_fd())?,
        _ => layers,
    };
    let lowers: Vec<String> = layers.iter().map(|p| p.display().to_string()).collect();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowers.join(":"),
        plan.upper.display(),
        plan.work.display()
    );
    mount(
        Some("overlay"),
        root,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(fail("mount overlay"))?;
    for bind in &config.binds {
        bind_into(root, bind)?;
    }
    for volume in &config.volumes {
        mount_volume(root, volume, userns.as_ref().map(|ns| ns.as_fd()))?;
    }
    drop(userns);
    mount_kernel_filesystems(root, config.id_map_base)?;
    std::env::set_current_dir(root).map_err(fail("chdir new root"))?;
    pivot_root(".", ".").map_err(fail("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(fail("detach old root"))?;
    std::env::set_current_dir("/").map_err(fail("chdir /"))?;
    Ok(())
}

/// The lower layers seen through `userns`: each an idmapped clone attached at `at/<n>`, on a private
/// tmpfs mounted over `at` (none of it is visible on the host, and all of it goes with the old root;
/// the overlay keeps its own references to the layers).
fn idmapped_layers(
    layers: &[PathBuf],
    at: &Path,
    userns: BorrowedFd<'_>,
) -> Result<Vec<PathBuf>, BootError> {
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=700,size=16k"),
    )
    .map_err(fail("mount the idmapped layers' directory"))?;
    layers
        .iter()
        .enumerate()
        .map(|(n, layer)| {
            let target = at.join(n.to_string());
            std::fs::create_dir(&target).map_err(fail("create an idmapped layer's mount point"))?;
            let tree = sandboxd_idmap::idmapped_clone(layer, userns).map_err(|e| BootError {
                stage: "idmap layer",
                message: format!("{}: {e}", layer.display()),
            })?;
            sandboxd_idmap::attach(tree, &target).map_err(fail("attach an idmapped layer"))?;
            Ok(target)
        })
        .collect()
}

fn inside(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// Refuses a mount target under `root` that is, or passes through, a symbolic link: the root is not
/// pivoted into yet, so a link (an image's `/proc -> /`, say) would resolve on the host and put the
/// mount there. Missing components are fine (they are created as directories).
fn no_links_on_the_way(root: &Path, target: &Path) -> Result<(), BootError> {
    let rel = target.strip_prefix(root).unwrap_or(target);
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(BootError {
                    stage: "mount point",
                    message: format!(
                        "{} is a symbolic link; mount points must be real directories",
                        Path::new("/")
                            .join(at.strip_prefix(root).unwrap_or(&at))
                            .display()
                    ),
                })
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn bind_into(root: &Path, bind: &BindMount) -> Result<(), BootError> {
    let none: Option<&str> = None;
    let target = inside(root, &bind.target);
    no_links_on_the_way(root, &target)?;
    let source_meta = std::fs::metadata(&bind.source).map_err(fail("stat bind source"))?;
    if std::fs::symlink_metadata(&target).is_err() {
        if source_meta.is_dir() {
            std::fs::create_dir_all(&target).map_err(fail("create bind target"))?;
        } else {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(fail("create bind target"))?;
            }
            std::fs::File::create(&target).map_err(fail("create bind target"))?;
        }
    }
    mount(
        Some(&bind.source),
        &target,
        none,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none,
    )
    .map_err(fail("bind mount"))?;
    if bind.read_only {
        mount(
            none,
            &target,
            none,
            MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV,
            none,
        )
        .map_err(fail("remount bind read-only"))?;
    }
    Ok(())
}

/// Mounts a volume at its target: its directory opened beneath the volume's root without following
/// any link (a link a sandbox planted in a shared volume never redirects the mount), then bound —
/// through `userns` when the layers are idmapped, so its owners read as this sandbox's ids — always
/// `nosuid,nodev`, read-only when asked.
fn mount_volume(
    root: &Path,
    volume: &VolumeMount,
    userns: Option<BorrowedFd<'_>>,
) -> Result<(), BootError> {
    use sandboxd_volumes::beneath;
    let none: Option<&str> = None;
    let target = inside(root, &volume.target);
    no_links_on_the_way(root, &target)?;
    let subpath =
        sandboxd_volumes::RelPath::parse(&volume.subpath).map_err(fail("volume subpath"))?;
    let dir = beneath::open_root(&volume.root)
        .and_then(|r| beneath::open_dir(&r, &subpath, true))
        .map_err(|e| BootError {
            stage: "open volume",
            message: format!("{}{}: {e}", volume.root.display(), subpath.display()),
        })?;
    std::fs::create_dir_all(&target).map_err(fail("create volume mount point"))?;
    let source = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    match userns {
        Some(userns) => {
            let tree =
                sandboxd_idmap::idmapped_clone(&source, userns).map_err(fail("idmap volume"))?;
            sandboxd_idmap::attach(tree, &target).map_err(fail("attach volume"))?;
        }
        None => mount(Some(&source), &target, none, MsFlags::MS_BIND, none)
            .map_err(fail("bind volume"))?,
    }
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if volume.read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(none, &target, none, flags, none).map_err(fail("remount volume"))?;
    Ok(())
}

fn mount_kernel_filesystems(root: &Path, id_base: u32) -> Result<(), BootError> {
    let none: Option<&str> = None;
    let hardened = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let dir = |p: &str| -> Result<PathBuf, BootError> {
        let path = root.join(p);
        no_links_on_the_way(root, &path)?;
        std::fs::create_dir_all(&path).map_err(fail("create mount point"))?;
        Ok(path)
    };
    mount(Some("proc"), &dir("proc")?, Some("proc"), hardened, none)
        .map_err(fail("mount /proc"))?;
    mount(
        Some("sysfs"),
        &dir("sys")?,
        Some("sysfs"),
        hardened | MsFlags::MS_RDONLY,
        none,
    )
    .map_err(fail("mount /sys"))?;
    let dev = dir("dev")?;
    dev_and_run(&dev, &dir("run")?, id_base)?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = dev.join(node);
        std::fs::File::create(&target).map_err(fail("create device node"))?;
        mount(
            Some(&Path::new("/dev").join(node)),
            &target,
            none,
            MsFlags::MS_BIND,
            none,
        )
        .map_err(fail("bind device node"))?;
    }
    let pts = dir("dev/pts")?;
    let tty_gid = id_base + 5;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(format!("newinstance,ptmxmode=0666,mode=0620,gid={tty_gid}").as_str()),
    )
    .map_err(fail("mount /dev/pts"))?;
    owned_dir(&dir("dev/shm")?, id_base, 0o1777)?;
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(to, dev.join(link)).map_err(fail("create /dev link"))?;
    }
    Ok(())
}

/// Room for the files of `/dev` (`/dev/shm` among them) and `/run`, together.
const DEV_AND_RUN_SIZE: &str = "size=128m";

/// Mounts one tmpfs at `dev` and `run` (directories of the new root): two directories of it, each
/// attached at its place, its root nowhere. One superblock per sandbox where there were three (the
/// kernel keeps per-cgroup state for every superblock's shrinker, which grows as cgroups ×
/// superblocks). The tmpfs is mounted at `run` first, its two directories cloned from there
/// (detached), and the staging mount detached before the clones are attached. `/dev` is `nosuid`
/// and `noexec`, `/run` `nosuid` and `nodev`, as separate mounts had them; both are owned by the
/// sandbox's root (host id `id_base`).
fn dev_and_run(dev: &Path, run: &Path, id_base: u32) -> Result<(), BootError> {
    let none: Option<&str> = None;
    mount(
        Some("tmpfs"),
        run,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some(format!("mode=700,{DEV_AND_RUN_SIZE}").as_str()),
    )
    .map_err(fail("mount the tmpfs of /dev and /run"))?;
    let trees = ["dev", "run"]
        .into_iter()
        .map(|name| {
            let sub = run.join(name);
            std::fs::create_dir(&sub).map_err(fail("create a directory of /dev and /run"))?;
            owned_dir(&sub, id_base, 0o755)?;
            sandboxd_idmap::detached_clone_of(&sub).map_err(fail("clone /dev or /run"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    umount2(run, MntFlags::MNT_DETACH).map_err(fail("detach the tmpfs of /dev and /run"))?;
    let flags = [
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    ];
    for ((tree, target), flags) in trees.into_iter().zip([dev, run]).zip(flags) {
        sandboxd_idmap::attach(tree, target).map_err(fail("attach /dev or /run"))?;
        mount(
            none,
            target,
            none,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
            none,
        )
        .map_err(fail("remount /dev or /run"))?;
    }
    Ok(())
}

/// Gives directory `path` to the sandbox's root (host id `id_base`), with permissions `mode`.
fn owned_dir(path: &Path, id_base: u32, mode: u32) -> Result<(), BootError> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(id_base), Some(id_base))
        .map_err(fail("give a directory to the sandbox's root"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(fail("set a directory's permissions"))
}

/// Becomes uid/gid 0 of the new user namespace (host ids `id_map_base`).
fn become_root() -> Result<(), BootError> {
    nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
        .map_err(fail("setresgid"))?;
    nix::unistd::setgroups(&[]).map_err(fail("setgroups"))?;
    nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
        .map_err(fail("setresuid"))?;
    Ok(())
}

fn set_cloexec(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, integer arguments only.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
