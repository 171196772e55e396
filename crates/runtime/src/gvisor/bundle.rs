//! The OCI bundle `runsc` runs a gVisor sandbox from.
//!
//! Contract: [`spec`] describes a sandbox whose PID 1 is our agent (`sandboxd-agent init`, as root of
//! the sandbox), whose root is the overlay the launcher mounts on its stage ([`Stage::root`], so writes
//! land in the sandbox's own writable layer, `--overlay2=none`), with the host's read-only binds of its
//! root plan (the agent and the call-home directory from the stage), a read-write bind of its own
//! `shared/` directory at [`super::SHARED_DIR`], its volumes (each from the stage, where the
//! launcher put the directory it mounts), its network
//! namespace the file [`SandboxPaths::netns`] (already wired by the runtime), and a user namespace
//! mapping its ids `0..65536` onto the storage range, so the shared layers' owners are its own and
//! the gofer serving its files runs unprivileged. Cgroups are the runtime's (`--ignore-cgroups`); the
//! resources written here only tell the user-space kernel how much memory it has.

use super::launch::Stage;
use crate::namespace::boot::RootPlan;
use crate::namespace::state::SandboxPaths;
use crate::{RuntimeError, SandboxSpec};
use oci_spec::runtime::{
    get_default_mounts, Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder,
    LinuxIdMappingBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType,
    LinuxPidsBuilder, LinuxResourcesBuilder, Mount, MountBuilder, ProcessBuilder, RootBuilder,
    Spec, SpecBuilder, UserBuilder,
};
use std::collections::HashSet;
use std::path::Path;

/// The ids a gVisor sandbox has: `0..RANGE` inside, `storage..storage + RANGE` on the host.
const RANGE: u32 = 65536;
/// CPU period the quota is expressed in, microseconds.
const CPU_PERIOD_US: u64 = 100_000;
/// `PATH` of the agent itself (commands get theirs from the agent).
const INIT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The capabilities the sandbox's root holds inside the user-space kernel: a container's usual set
/// (what `apt`, `chown` or a server on port 80 need), none of the administrative ones.
const CAPABILITIES: [Capability; 14] = [
    Capability::AuditWrite,
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fowner,
    Capability::Fsetid,
    Capability::Kill,
    Capability::Mknod,
    Capability::NetBindService,
    Capability::NetRaw,
    Capability::Setfcap,
    Capability::Setgid,
    Capability::Setpcap,
    Capability::Setuid,
    Capability::SysChroot,
];

fn bad(e: oci_spec::OciSpecError) -> RuntimeError {
    RuntimeError::Bundle(e)
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<Mount, RuntimeError> {
    let mode = if read_only { "ro" } else { "rw" };
    MountBuilder::default()
        .destination(target)
        .typ("bind")
        .source(source)
        .options(vec!["rbind".to_string(), mode.to_string()])
        .build()
        .map_err(bad)
}

/// The OCI runtime spec of `spec`'s sandbox, rooted as `root` plans, its files at `paths`, its
/// ids `storage..` on the host.
pub(crate) fn spec(
    spec: &SandboxSpec,
    root: &RootPlan,
    paths: &SandboxPaths,
    storage: u32,
) -> Result<Spec, RuntimeError> {
    let caps: HashSet<Capability> = CAPABILITIES.into_iter().collect();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .build()
        .map_err(bad)?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(
            UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .build()
                .map_err(bad)?,
        )
        .args(vec![
            crate::namespace::rootfs::AGENT_PATH.to_string(),
            "init".to_string(),
        ])
        .env(vec![INIT_PATH.to_string()])
        .cwd("/")
        .capabilities(capabilities)
        .no_new_privileges(false)
        .build()
        .map_err(bad)?;
    let mut mounts = get_default_mounts();
    mounts.push(
        MountBuilder::default()
            .destination("/run")
            .typ("tmpfs")
            .source("tmpfs")
            .options(vec![
                "nosuid".to_string(),
                "nodev".to_string(),
                "mode=755".to_string(),
            ])
            .build()
            .map_err(bad)?,
    );
    // /tmp stays on the writable layer, as in the namespace tier (runsc would otherwise put a tmpfs
    // of its own on an empty /tmp).
    mounts.push(bind(&Stage::root().join("tmp"), Path::new("/tmp"), false)?);
    for b in &root.binds {
        // The agent and the call-home directory are served from the stage (see `launch`).
        let source = match b.target.to_str() {
            Some(crate::namespace::rootfs::AGENT_PATH) => Stage::agent(),
            Some(sandboxd_envd::callback::SANDBOX_DIR) => Stage::callback(),
            _ => b.source.clone(),
        };
        mounts.push(bind(&source, &b.target, b.read_only)?);
    }
    for (n, v) in root.volumes.iter().enumerate() {
        // Served from the stage, like the agent: runsc's gofer opens a mount's source by path, and a
        // path inside a shared volume could be a link another sandbox planted by then, so the
        // launcher puts there the directory it opened without following any (see `launch`).
        mounts.push(bind(&Stage::volume(n), &v.target, v.read_only)?);
    }
    mounts.push(bind(&Stage::shared(), Path::new(super::SHARED_DIR), false)?);
    let map = |container: u32| {
        LinuxIdMappingBuilder::default()
            .container_id(container)
            .host_id(storage)
            .size(RANGE)
            .build()
            .map_err(bad)
    };
    let namespaces = [
        (LinuxNamespaceType::Pid, None),
        (LinuxNamespaceType::Ipc, None),
        (LinuxNamespaceType::Uts, None),
        (LinuxNamespaceType::Mount, None),
        (LinuxNamespaceType::User, None),
        (LinuxNamespaceType::Network, Some(paths.netns())),
    ]
    .into_iter()
    .map(|(typ, path)| {
        let mut ns = LinuxNamespaceBuilder::default().typ(typ);
        if let Some(path) = path {
            ns = ns.path(path);
        }
        ns.build().map_err(bad)
    })
    .collect::<Result<Vec<_>, _>>()?;
    let resources = LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(spec.limits.memory_mb.saturating_mul(1024 * 1024) as i64)
                .build()
                .map_err(bad)?,
        )
        .cpu(
            LinuxCpuBuilder::default()
                .quota(i64::from(spec.limits.cpu_millis) * CPU_PERIOD_US as i64 / 1000)
                .period(CPU_PERIOD_US)
                .build()
                .map_err(bad)?,
        )
        .pids(
            LinuxPidsBuilder::default()
                .limit(spec.limits.pids_max as i64)
                .build()
                .map_err(bad)?,
        )
        .build()
        .map_err(bad)?;
    let linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .uid_mappings(vec![map(0)?])
        .gid_mappings(vec![map(0)?])
        .resources(resources)
        .build()
        .map_err(bad)?;
    SpecBuilder::default()
        .version("1.0.2")
        .root(
            RootBuilder::default()
                .path(Stage::root())
                .readonly(false)
                .build()
                .map_err(bad)?,
        )
        .hostname(spec.id.clone())
        .process(process)
        .mounts(mounts)
        .linux(linux)
        .build()
        .map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_envd::boot::{BindMount, VolumeMount};

    fn plan() -> RootPlan {
        RootPlan {
            lower: "/layers/top".into(),
            below: vec!["/layers/a".into()],
            binds: vec![BindMount {
                source: "/usr".into(),
                target: "/usr".into(),
                read_only: true,
            }],
            volumes: vec![VolumeMount {
                root: "/state/layers/vol.v1/data".into(),
                subpath: String::new(),
                target: "/data".into(),
                read_only: false,
            }],
            envs: Default::default(),
            workdir: None,
            callback_socket: None,
        }
    }

    #[test]
    fn volumes_and_their_subpaths_are_bound_from_the_stage() {
        let paths = SandboxPaths::new(Path::new("/state/sandboxes"), "sb1");
        let spec_json = |plan: &RootPlan| {
            spec(&SandboxSpec::base("sb1", "t"), plan, &paths, 100_000)
                .map(|s| serde_json::to_value(&s).unwrap())
        };
        let json = spec_json(&plan()).unwrap();
        let data = json["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/data")
            .cloned()
            .unwrap();
        assert_eq!(data["source"], "/run/sandboxd-gvisor/volume-0");
        assert_eq!(data["options"], serde_json::json!(["rbind", "rw"]));
        // A subpath is the launcher's to open: the bundle names the stage either way.
        let mut sub = plan();
        sub.volumes[0].subpath = "a/b".into();
        assert_eq!(spec_json(&sub).unwrap()["mounts"], json["mounts"]);
    }

    #[test]
    fn the_sandbox_is_our_agent_in_its_own_namespaces_on_the_storage_range() {
        let paths = SandboxPaths::new(Path::new("/state/sandboxes"), "sb1");
        let spec = spec(&SandboxSpec::base("sb1", "t"), &plan(), &paths, 100_000).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json["process"]["args"],
            serde_json::json!(["/.sandboxd/agent", "init"])
        );
        assert_eq!(json["process"]["user"]["uid"], 0);
        assert_eq!(json["root"]["path"], "/run/sandboxd-gvisor/root");
        assert_eq!(json["hostname"], "sb1");
        let maps = &json["linux"]["uidMappings"];
        assert_eq!(
            maps,
            &serde_json::json!([{"containerID": 0, "hostID": 100000, "size": 65536}])
        );
        let net = json["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["type"] == "network")
            .unwrap();
        assert_eq!(net["path"], "/state/sandboxes/sb1/netns");
        let mounts = json["mounts"].as_array().unwrap();
        let at = |dest: &str| mounts.iter().find(|m| m["destination"] == dest).cloned();
        assert_eq!(
            at("/usr").unwrap()["options"],
            serde_json::json!(["rbind", "ro"])
        );
        assert_eq!(
            at(super::super::SHARED_DIR).unwrap()["source"],
            "/run/sandboxd-gvisor/shared"
        );
        assert_eq!(
            at("/tmp").unwrap()["source"],
            "/run/sandboxd-gvisor/root/tmp"
        );
        let caps = json["process"]["capabilities"]["bounding"]
            .as_array()
            .unwrap();
        assert!(!caps.contains(&serde_json::json!("CAP_SYS_ADMIN")));
        assert!(caps.contains(&serde_json::json!("CAP_SETUID")));
        assert_eq!(
            json["linux"]["resources"]["memory"]["limit"],
            512 * 1024 * 1024
        );
    }
}
