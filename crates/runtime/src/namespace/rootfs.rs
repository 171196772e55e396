//! The `base` template: a root filesystem that needs no download.
//!
//! Its lower layer is a small directory tree built once per data dir: mount points for the host's system
//! directories, a curated `/etc` (our own `passwd`, `group` and an unreadable `shadow`, plus the handful of
//! host files programs need to run), `/home/user` owned by the sandbox's user, and a writable `/tmp`.
//! The host's `/usr` (and `/bin`, `/lib*`, `/sbin` when they are real directories rather than merged-usr
//! links) plus a few `/etc` directories are bound read-only on top. Nothing else of the host is ever
//! visible: no homes, `/root`, `/srv`, `/opt`, `/work`, nor the daemon's data dir.
//!
//! Ownership inside the lower layer is expressed in host ids shifted by the id-map base, so that the
//! sandbox sees its root owning `/`, `/etc` and `/root`, and `user` (1000) owning `/home/user`.

use crate::RuntimeError;
use sandboxd_envd::boot::BindMount;
use std::os::unix::fs::{lchown, symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// Uid and gid of the sandbox's default user, inside the sandbox.
pub const USER_ID: u32 = 1000;
/// Where the agent binary appears inside every sandbox.
pub const AGENT_PATH: &str = "/.sandboxd/agent";
/// A link to [`AGENT_PATH`] beside it, named as the namespace tier's agent is named in
/// `/proc/1/comm`: the agent's PID 1 re-executes itself through `/.sandboxd/<its name>` when it
/// restarts small, so the kernel gives the new image that name from its first instruction.
const AGENT_NAME_LINK: &str = "/.sandboxd/sandboxd-agent";
/// Bumped whenever the layout below changes, so old templates are rebuilt.
const LAYOUT_VERSION: u32 = 3;

/// Environment every `base` sandbox starts with (a create's own wins). The host's Python refuses
/// `pip install` outside a virtualenv (PEP 668, "externally managed"); with the system read-only
/// anyway, pip then installs for the user (`~/.local`, whose `bin` leads the agent's `PATH`). npm's
/// global prefix is the user's `~/.local` too (`/etc/npmrc`), so `npm install -g` works unprivileged.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PIP_BREAK_SYSTEM_PACKAGES", "1"),
    ("NPM_CONFIG_GLOBALCONFIG", "/etc/npmrc"),
];

/// `/etc/npmrc` of `base`: npm expands `${HOME}` itself, for whichever user runs it.
const NPMRC: &str = "prefix=${HOME}/.local\n";

/// Host top-level directories offered read-only (as a bind, or as the same link when merged-usr).
const SYSTEM_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// Host files copied into the curated /etc.
const ETC_FILES: &[&str] = &[
    "bash.bashrc",
    "debian_version",
    "environment",
    "host.conf",
    "inputrc",
    "issue",
    "ld.so.cache",
    "ld.so.conf",
    "localtime",
    "login.defs",
    "mime.types",
    "nsswitch.conf",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "shells",
    "timezone",
];
/// Host /etc directories copied shallowly (regular files only).
const ETC_DIRS_COPIED: &[&str] = &["ld.so.conf.d", "profile.d", "skel"];
/// Host /etc directories bound read-only.
const ETC_DIRS_BOUND: &[&str] = &[
    "alternatives",
    "ca-certificates",
    "perl",
    "python3",
    "python3.11",
    "ssl",
    "terminfo",
];

/// A template's lower layer and what to bind on top of it.
#[derive(Debug, Clone)]
pub struct Template {
    /// The read-only lower directory.
    pub lower: PathBuf,
    /// Read-only binds from the host (the agent binary is added per sandbox).
    pub binds: Vec<BindMount>,
}

/// Builds (once) and returns the `base` template under `templates_dir`.
pub fn ensure_base(templates_dir: &Path, id_base: u32) -> Result<Template, RuntimeError> {
    let lower = templates_dir.join(format!("base-v{LAYOUT_VERSION}-{id_base}"));
    let binds = host_binds();
    build_once(&lower, |staging| build(staging, id_base, &binds))?;
    Ok(Template { lower, binds })
}

/// Makes the directory tree `target` with `build` unless a complete one is there: `build` fills a
/// fresh staging directory beside it, which is marked complete and renamed into place in one step,
/// so `target` is never seen half built. Callers racing each other each build their own copy; the
/// first rename wins and the others' copies (the same tree) are dropped.
pub(crate) fn build_once(
    target: &Path,
    build: impl FnOnce(&Path) -> Result<(), RuntimeError>,
) -> Result<(), RuntimeError> {
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if target.join(".complete").exists() {
        return Ok(());
    }
    let dir = target.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(RuntimeError::io("create", dir))?;
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("tree");
    let staging = dir.join(format!(".build-{name}-{}-{n}", std::process::id()));
    let built = build(&staging).and_then(|()| {
        std::fs::write(staging.join(".complete"), b"")
            .map_err(RuntimeError::io("write", staging.join(".complete")))
    });
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if std::fs::rename(&staging, target).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
        if !target.join(".complete").exists() {
            return Err(RuntimeError::Host(format!(
                "cannot install {}",
                target.display()
            )));
        }
    }
    Ok(())
}

fn host_binds() -> Vec<BindMount> {
    let mut binds = Vec::new();
    for dir in SYSTEM_DIRS {
        let host = Path::new("/").join(dir);
        if is_real_dir(&host) {
            binds.push(read_only(&host));
        }
    }
    for dir in ETC_DIRS_BOUND {
        let host = Path::new("/etc").join(dir);
        if is_real_dir(&host) {
            binds.push(read_only(&host));
        }
    }
    binds
}

fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

fn read_only(path: &Path) -> BindMount {
    BindMount {
        source: path.to_path_buf(),
        target: path.to_path_buf(),
        read_only: true,
    }
}

fn build(root: &Path, id_base: u32, binds: &[BindMount]) -> Result<(), RuntimeError> {
    let root_id = id_base;
    let user_id = id_base + USER_ID;
    let mk = |rel: &str, mode: u32, owner: u32| -> Result<(), RuntimeError> {
        let path = root.join(rel);
        std::fs::create_dir_all(&path).map_err(RuntimeError::io("create", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(RuntimeError::io("chmod", &path))?;
        lchown(&path, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", &path))
    };
    mk("", 0o755, root_id)?;
    for (dir, mode) in [
        ("etc", 0o755),
        ("root", 0o700),
        ("home", 0o755),
        ("tmp", 0o1777),
        ("var", 0o755),
        ("var/tmp", 0o1777),
        ("var/lib", 0o755),
        ("var/log", 0o755),
        ("var/cache", 0o755),
        ("mnt", 0o755),
        ("opt", 0o755),
        ("srv", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        (".sandboxd", 0o755),
    ] {
        mk(dir, mode, root_id)?;
    }
    mk("home/user", 0o750, user_id)?;
    for dir in SYSTEM_DIRS {
        let host = Path::new("/").join(dir);
        let inside = root.join(dir);
        if let Ok(target) = std::fs::read_link(&host) {
            symlink(&target, &inside).map_err(RuntimeError::io("link", &inside))?;
        } else if is_real_dir(&host) {
            mk(dir, 0o755, root_id)?;
        }
    }
    for bind in binds {
        let rel = bind.target.strip_prefix("/").unwrap_or(&bind.target);
        if let Some(rel) = rel.to_str() {
            mk(rel, 0o755, root_id)?;
        }
    }
    write_agent_mount_point(root, root_id)?;
    curate_etc(root, root_id)
}

/// Writes the empty file the agent is bound onto ([`AGENT_PATH`]) and the link to it that carries
/// the agent's name ([`AGENT_NAME_LINK`]) into the tree at `root`, a fresh staging tree of
/// [`build_once`].
pub(crate) fn write_agent_mount_point(root: &Path, owner: u32) -> Result<(), RuntimeError> {
    let agent = root.join(AGENT_PATH.trim_start_matches('/'));
    write_file(&agent, b"", 0o755, owner)?;
    let link = root.join(AGENT_NAME_LINK.trim_start_matches('/'));
    symlink("agent", &link).map_err(RuntimeError::io("link", &link))?;
    lchown(&link, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", &link))
}

fn write_file(path: &Path, data: &[u8], mode: u32, owner: u32) -> Result<(), RuntimeError> {
    std::fs::write(path, data).map_err(RuntimeError::io("write", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(RuntimeError::io("chmod", path))?;
    lchown(path, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", path))
}

fn curate_etc(root: &Path, owner: u32) -> Result<(), RuntimeError> {
    let etc = root.join("etc");
    let host = Path::new("/etc");
    for name in ETC_FILES {
        // Follow links (localtime, resolv.conf) so the copy stands alone.
        if let Ok(data) = std::fs::read(host.join(name)) {
            write_file(&etc.join(name), &data, 0o644, owner)?;
        }
    }
    for dir in ETC_DIRS_COPIED {
        let Ok(entries) = std::fs::read_dir(host.join(dir)) else {
            continue;
        };
        let target = etc.join(dir);
        std::fs::create_dir_all(&target).map_err(RuntimeError::io("create", &target))?;
        lchown(&target, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", &target))?;
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                if let Ok(data) = std::fs::read(entry.path()) {
                    write_file(&target.join(entry.file_name()), &data, 0o644, owner)?;
                }
            }
        }
    }
    if let Ok(target) = std::fs::read_link(host.join("os-release")) {
        let link = etc.join("os-release");
        symlink(target, &link).map_err(RuntimeError::io("link", &link))?;
    }
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/bash\n\
         user:x:{USER_ID}:{USER_ID}:user:/home/user:/bin/bash\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    );
    let group =
        format!("root:x:0:\ntty:x:5:\nusers:x:100:user\nuser:x:{USER_ID}:\nnogroup:x:65534:\n");
    write_file(&etc.join("passwd"), passwd.as_bytes(), 0o644, owner)?;
    write_file(&etc.join("group"), group.as_bytes(), 0o644, owner)?;
    // Owned by the host's root, which is unmapped inside: not even the sandbox's root can read it.
    write_file(
        &etc.join("shadow"),
        b"root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\n",
        0o000,
        0,
    )?;
    write_file(&etc.join("hostname"), b"sandbox\n", 0o644, owner)?;
    write_file(&etc.join("npmrc"), NPMRC.as_bytes(), 0o644, owner)?;
    write_file(
        &etc.join("hosts"),
        b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        0o644,
        owner,
    )
}

/// Where systemd-resolved lists the upstream servers its loopback resolver (`127.0.0.53`) forwards to.
const RESOLVED_UPSTREAMS: &str = "/run/systemd/resolve/resolv.conf";

/// The resolver configuration a sandbox made now gets: [`sandbox_resolv_conf`] of the host's files
/// as they are now.
pub fn current_resolv_conf() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    sandbox_resolv_conf(read("/etc/resolv.conf"), read(RESOLVED_UPSTREAMS))
}

/// The resolver configuration a sandbox gets, from the host's `/etc/resolv.conf` (`etc`) and
/// systemd-resolved's upstream list (`resolved`): the host's own, unless every nameserver in it is a
/// loopback address (a resolver on the host's loopback, such as systemd-resolved's, which a sandbox,
/// having its own loopback, cannot reach) and the upstream list names a server outside loopback.
fn sandbox_resolv_conf(etc: Option<String>, resolved: Option<String>) -> Option<String> {
    let reachable = |conf: &str| {
        conf.lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .filter_map(|a| a.trim().parse::<std::net::IpAddr>().ok())
            .any(|ip| !ip.is_loopback())
    };
    match (etc, resolved) {
        (Some(etc), _) if reachable(&etc) => Some(etc),
        (_, Some(upstreams)) if reachable(&upstreams) => Some(upstreams),
        (etc, _) => etc,
    }
}

/// Writes the per-sandbox files (hostname, hosts, and the resolver configuration: with a
/// `nameserver`, the sandbox's own DNS forwarder there as its only one ([`super::dns`]); else the
/// host's as it is now, a laptop's changing with its network, so the template's copy may be stale)
/// into the sandbox's writable layer.
pub fn personalise(
    upper: &Path,
    hostname: &str,
    id_base: u32,
    nameserver: Option<std::net::Ipv4Addr>,
) -> Result<(), RuntimeError> {
    write_names(upper, hostname, id_base)?;
    write_resolver(upper, id_base, nameserver)
}

/// Writes the sandbox's resolver configuration into its writable layer `upper` (in place, so a
/// mounted root sees it): its own DNS forwarder at `nameserver` as its only one, or else the host's
/// as it is now (nothing when the host has none).
pub fn write_resolver(
    upper: &Path,
    id_base: u32,
    nameserver: Option<std::net::Ipv4Addr>,
) -> Result<(), RuntimeError> {
    let etc = upper.join("etc");
    match nameserver
        .map(super::dns::resolv_conf)
        .or_else(current_resolv_conf)
    {
        Some(conf) => write_file(&etc.join("resolv.conf"), conf.as_bytes(), 0o644, id_base),
        None => Ok(()),
    }
}

/// Writes the files that name the sandbox, `/etc/hostname` and `/etc/hosts`, into its writable
/// layer `upper` (in place, so a mounted root sees them); returns the layer's `etc`.
pub fn write_names(upper: &Path, hostname: &str, id_base: u32) -> Result<PathBuf, RuntimeError> {
    let etc = upper.join("etc");
    std::fs::create_dir_all(&etc).map_err(RuntimeError::io("create", &etc))?;
    std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o755))
        .map_err(RuntimeError::io("chmod", &etc))?;
    lchown(&etc, Some(id_base), Some(id_base)).map_err(RuntimeError::io("chown", &etc))?;
    write_file(
        &etc.join("hostname"),
        format!("{hostname}\n").as_bytes(),
        0o644,
        id_base,
    )?;
    let hosts = format!(
        "127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    );
    write_file(&etc.join("hosts"), hosts.as_bytes(), 0o644, id_base)?;
    Ok(etc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_exposes_no_private_host_directory() {
        let dir = tempfile::tempdir().unwrap();
        let t = ensure_base(dir.path(), 100_000).unwrap();
        for bind in &t.binds {
            let p = bind.source.to_string_lossy();
            for private in ["/root", "/home", "/work", "/srv", "/opt", "/tmp"] {
                assert!(!p.starts_with(private), "{p} is bound into sandboxes");
            }
            assert!(bind.read_only, "{p} is writable");
        }
        let passwd = std::fs::read_to_string(t.lower.join("etc/passwd")).unwrap();
        assert!(passwd.contains("user:x:1000:1000"));
        assert!(!t.lower.join("home/root").exists());
        // Built once: a second call reuses the same tree.
        let again = ensure_base(dir.path(), 100_000).unwrap();
        assert_eq!(again.lower, t.lower);
    }

    #[test]
    fn a_sandbox_gets_a_resolver_it_can_reach() {
        let conf = |servers: &[&str]| -> String {
            servers
                .iter()
                .map(|s| format!("nameserver {s}\n"))
                .collect()
        };
        let on_loopback = conf(&["127.0.0.53"]);
        let upstreams = conf(&["192.168.1.1", "1.1.1.1"]);
        // The host's own, when it names a server outside loopback (the upstream list is ignored).
        let plain = conf(&["10.255.255.53"]);
        assert_eq!(
            sandbox_resolv_conf(Some(plain.clone()), Some(upstreams.clone())),
            Some(plain)
        );
        let mixed = format!("search lan\n{}", conf(&["127.0.0.1", "9.9.9.9"]));
        assert_eq!(sandbox_resolv_conf(Some(mixed.clone()), None), Some(mixed));
        // Only a resolver on the host's loopback: systemd-resolved's upstreams instead.
        assert_eq!(
            sandbox_resolv_conf(Some(on_loopback.clone()), Some(upstreams.clone())),
            Some(upstreams)
        );
        assert_eq!(
            sandbox_resolv_conf(Some(conf(&["::1"])), Some(conf(&["2001:db8::1"]))),
            Some(conf(&["2001:db8::1"]))
        );
        // Nothing better to offer: what the host has, or nothing.
        assert_eq!(
            sandbox_resolv_conf(Some(on_loopback.clone()), Some(conf(&["127.0.0.1"]))),
            Some(on_loopback.clone())
        );
        assert_eq!(
            sandbox_resolv_conf(Some(on_loopback.clone()), None),
            Some(on_loopback)
        );
        let public = conf(&["8.8.8.8"]);
        assert_eq!(
            sandbox_resolv_conf(None, Some(public.clone())),
            Some(public)
        );
        assert_eq!(sandbox_resolv_conf(None, None), None);
    }

    /// The host's resolver configuration, as it is when the sandbox is made, lands in its writable
    /// layer (over the template's copy from when the template was built).
    #[test]
    fn personalise_writes_the_current_resolver_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let id = nix::unistd::getuid().as_raw();
        personalise(dir.path(), "sb", id, None).unwrap();
        let etc = dir.path().join("etc");
        assert_eq!(
            std::fs::read_to_string(etc.join("hostname")).unwrap(),
            "sb\n"
        );
        assert_eq!(
            std::fs::read_to_string(etc.join("resolv.conf")).ok(),
            current_resolv_conf()
        );
        // A sandbox with names in its lists: its forwarder only.
        personalise(dir.path(), "sb", id, Some([10, 201, 0, 5].into())).unwrap();
        assert_eq!(
            std::fs::read_to_string(etc.join("resolv.conf")).unwrap(),
            "nameserver 10.201.0.5\n"
        );
    }
}
