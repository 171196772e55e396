//! The values that cross the [`crate::Runtime`] boundary, and its error type.

use crate::namespace::dns::NamePattern;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::str::FromStr;

/// What the caller wants a sandbox to be.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxSpec {
    /// Unique id: lowercase letters, digits and '-', 1 to 63 characters.
    pub id: String,
    /// Template name; the namespace runtime knows `base`.
    pub template: String,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// The network slot leased to this sandbox by the caller; it fixes the sandbox's addresses.
    pub net_slot: u32,
    /// The host id range of this sandbox (the daemon gives its `net_slot`, which no other live
    /// sandbox on the host holds): its root is a host id no other sandbox has (see
    /// [`crate::namespace::ids`]). `None` in specs persisted before ranges existed, and for callers
    /// that want none: the runtime's shared range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_range: Option<u32>,
    /// Whether the sandbox may reach the outside world: the default for destinations in neither
    /// `egress_allow` nor `egress_deny`.
    pub egress: bool,
    /// Destinations the sandbox may reach whatever `egress` says; they win over `egress_deny` (E2B's
    /// `allowOut`). Empty in specs persisted before the lists existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_allow: Vec<Ipv4Net>,
    /// Destinations the sandbox may not reach unless they are also in `egress_allow` (E2B's
    /// `denyOut`). Empty in specs persisted before the lists existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_deny: Vec<Ipv4Net>,
    /// Domain names (and `*.` patterns) whose resolved IPv4 addresses the sandbox may reach like
    /// `egress_allow`'s, learnt from the answers of its DNS forwarder
    /// ([`crate::namespace::dns`]). Empty in specs persisted before the names existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_allow_names: Vec<NamePattern>,
    /// Domain names (and `*.` patterns) whose resolved IPv4 addresses are denied like
    /// `egress_deny`'s. Empty in specs persisted before the names existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_deny_names: Vec<NamePattern>,
    /// Environment every command in the sandbox starts with.
    pub envs: HashMap<String, String>,
    /// Access token the sandbox's agent demands on every call.
    pub agent_token: String,
    /// The OCI image the root is made of; `None`: the built-in `base` template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRoot>,
    /// The isolation tier the sandbox runs in; [`Isolation::Namespace`] in specs persisted before
    /// tiers existed.
    #[serde(default, skip_serializing_if = "Isolation::is_namespace")]
    pub isolation: Isolation,
    /// Volumes mounted in the sandbox ([`crate::volumes`]), in order; none in specs persisted before
    /// volumes existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeBind>,
    /// The port of the daemon's egress gateway that the sandbox's outbound TCP to ports 80 and 443
    /// is redirected to ([`crate::namespace::egress`]); `None` (and in specs persisted before the
    /// gateway existed): straight out, as any other traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_gateway: Option<u16>,
    /// The ports besides 80 and 443 whose outbound TCP goes to the egress gateway too (those the
    /// sandbox's rules name); only with [`Self::egress_gateway`]; none in specs persisted before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_gateway_ports: Vec<u16>,
}

/// A running sandbox's egress posture, which a change replaces whole ([`crate::Runtime::set_egress_lists`]):
/// the default and the lists of [`SandboxSpec`] by the same names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressLists {
    pub egress: bool,
    pub allow: Vec<Ipv4Net>,
    pub deny: Vec<Ipv4Net>,
    pub allow_names: Vec<NamePattern>,
    pub deny_names: Vec<NamePattern>,
}

impl SandboxSpec {
    /// `self` with `lists` in place of its egress default and lists.
    pub fn with_egress(&self, lists: EgressLists) -> SandboxSpec {
        SandboxSpec {
            egress: lists.egress,
            egress_allow: lists.allow,
            egress_deny: lists.deny,
            egress_allow_names: lists.allow_names,
            egress_deny_names: lists.deny_names,
            ..self.clone()
        }
    }
}

/// One volume in a sandbox: which, where, and how.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeBind {
    /// The volume's id ([`crate::volumes::VolumeStore::root`] says where it lies).
    pub volume_id: String,
    /// Where it appears inside the sandbox (absolute, checked by the caller).
    pub target: PathBuf,
    /// The directory of the volume to mount, relative to its root; empty: the root. It is opened
    /// without following any link at every boot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subpath: String,
    /// Mounted read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// The wall between a sandbox and the host: which implementation of [`crate::Runtime`] runs it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Linux namespaces, cgroups and seccomp around processes of the host's kernel
    /// ([`crate::namespace`]): milliseconds to start.
    #[default]
    Namespace,
    /// gVisor's user-space kernel (`runsc`) between the sandbox and the host's kernel
    /// ([`crate::gvisor`]): a second wall, hundreds of milliseconds to start.
    Gvisor,
}

impl Isolation {
    /// Every tier, in the order they are documented.
    pub const ALL: [Isolation; 2] = [Isolation::Namespace, Isolation::Gvisor];

    /// The tier's name on every surface.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Namespace => "namespace",
            Isolation::Gvisor => "gvisor",
        }
    }

    fn is_namespace(&self) -> bool {
        *self == Isolation::Namespace
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An isolation tier name that is not one of [`Isolation::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation {0:?}: use \"namespace\" or \"gvisor\"")]
pub struct UnknownIsolation(pub String);

impl FromStr for Isolation {
    type Err = UnknownIsolation;

    fn from_str(text: &str) -> Result<Self, UnknownIsolation> {
        Isolation::ALL
            .into_iter()
            .find(|tier| tier.as_str() == text)
            .ok_or_else(|| UnknownIsolation(text.to_string()))
    }
}

/// An OCI image as a sandbox's root: its unpacked layers, stacked read-only under the sandbox's
/// writable layer, with a small top layer the runtime prepares once per image (mount points, the
/// `user` account, see [`crate::namespace::image_root`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageRoot {
    /// The image's manifest digest, `sha256:<hex>` (its prepared top layer is cached under it).
    pub digest: String,
    /// The image's unpacked layer directories, lowest first.
    pub layers: Vec<PathBuf>,
    /// Where commands start when the caller names no directory (the image's `WorkingDir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The layers stack on the built-in `base` (a snapshot of a `base` sandbox, a build `FROM
    /// base`): the host's system directories are bound as for `base`, under no prepared top layer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_base: bool,
}

impl SandboxSpec {
    /// A sandbox of the `base` template with default limits on slot 0, without egress, lists or
    /// environment; callers set what they need with struct update syntax.
    pub fn base(id: impl Into<String>, agent_token: impl Into<String>) -> Self {
        SandboxSpec {
            id: id.into(),
            template: "base".into(),
            limits: ResourceLimits::default(),
            net_slot: 0,
            id_range: None,
            egress: false,
            egress_allow: Vec::new(),
            egress_deny: Vec::new(),
            egress_allow_names: Vec::new(),
            egress_deny_names: Vec::new(),
            envs: HashMap::new(),
            agent_token: agent_token.into(),
            image: None,
            isolation: Isolation::Namespace,
            volumes: Vec::new(),
            egress_gateway: None,
            egress_gateway_ports: Vec::new(),
        }
    }

    /// Whether anything at all may leave the sandbox: it needs a default route and NAT then.
    pub fn may_send_out(&self) -> bool {
        self.egress || !self.egress_allow.is_empty() || !self.egress_allow_names.is_empty()
    }

    /// Whether the sandbox's lists name domains: it then gets a DNS forwarder of its own as its
    /// only resolver ([`crate::namespace::dns`]).
    pub fn has_names(&self) -> bool {
        !self.egress_allow_names.is_empty() || !self.egress_deny_names.is_empty()
    }

    /// Whether the host must install any egress rule for the sandbox (see
    /// [`crate::namespace::egress`]); a sandbox without egress and without lists needs none.
    pub fn needs_egress_rules(&self) -> bool {
        self.egress
            || self.egress_gateway.is_some()
            || !self.egress_allow.is_empty()
            || !self.egress_deny.is_empty()
            || self.has_names()
    }
}

/// An IPv4 network: an address and a prefix length, with the address's host bits cleared.
///
/// Written and parsed as `a.b.c.d/n`; a bare address `a.b.c.d` parses as `a.b.c.d/32`, and host bits
/// are cleared on parsing (`10.1.2.3/8` is `10.0.0.0/8`). Its text form is what the runtime writes
/// into firewall rules, so nothing but digits, dots and one slash can ever get there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Ipv4Net {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Net {
    /// The network of `addr` with `prefix` bits (at most 32), host bits cleared.
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Option<Self> {
        (prefix <= 32).then(|| Self {
            addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)),
            prefix,
        })
    }

    fn mask(prefix: u8) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
    }

    /// The network's first address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether every address of `other` is in this network.
    pub fn contains(&self, other: &Ipv4Net) -> bool {
        self.prefix <= other.prefix
            && u32::from(other.addr) & Self::mask(self.prefix) == u32::from(self.addr)
    }

    /// The same addresses as `nets`, as few disjoint networks in ascending order: duplicates and
    /// networks inside another are dropped.
    pub fn normalize(mut nets: Vec<Ipv4Net>) -> Vec<Ipv4Net> {
        // Sorted by (address, prefix), a network comes after any network containing it, and the
        // kept ones are disjoint: only the last kept one can contain the next.
        nets.sort();
        let mut kept: Vec<Ipv4Net> = Vec::with_capacity(nets.len());
        for net in nets {
            if !kept.last().is_some_and(|last| last.contains(&net)) {
                kept.push(net);
            }
        }
        kept
    }
}

impl FromStr for Ipv4Net {
    type Err = RuntimeError;

    fn from_str(text: &str) -> Result<Self, RuntimeError> {
        let invalid = || RuntimeError::InvalidNet(text.to_string());
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => {
                let digits = prefix.bytes().all(|b| b.is_ascii_digit());
                if !digits
                    || prefix.is_empty()
                    || prefix.len() > 2
                    || (prefix.len() == 2 && prefix.starts_with('0'))
                {
                    return Err(invalid());
                }
                (addr, prefix.parse::<u8>().map_err(|_| invalid())?)
            }
            None => (text, 32),
        };
        let addr: Ipv4Addr = addr.parse().map_err(|_| invalid())?;
        Ipv4Net::new(addr, prefix).ok_or_else(invalid)
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl TryFrom<String> for Ipv4Net {
    type Error = RuntimeError;

    fn try_from(text: String) -> Result<Self, RuntimeError> {
        text.parse()
    }
}

impl From<Ipv4Net> for String {
    fn from(net: Ipv4Net) -> String {
        net.to_string()
    }
}

/// Resource limits of one sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Memory limit in MiB.
    pub memory_mb: u64,
    /// CPU limit in thousandths of a CPU (1000 = one CPU).
    pub cpu_millis: u32,
    /// Maximum number of processes and threads.
    pub pids_max: u64,
    /// Size limit of the writable layer (everything the sandbox writes to its root filesystem) in
    /// MiB; 0 means none. 0 in specs persisted before the limit existed.
    #[serde(default)]
    pub disk_mb: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            memory_mb: 512,
            cpu_millis: 1000,
            pids_max: 512,
            disk_mb: 0,
        }
    }
}

/// Lifecycle state as the runtime observes it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeState {
    /// Prepared, never started.
    Created,
    /// Its init is alive.
    Running,
    /// Was started, no longer runs (stopped, crashed, or killed).
    Stopped,
    /// No process runs, and its processes and memory are saved in a checkpoint the sandbox resumes
    /// from (paused with memory, gVisor tier): it outlives the daemon and the host.
    Suspended,
}

/// The addresses of a sandbox's veth pair.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetAddrs {
    /// The slot the addresses derive from.
    pub slot: u32,
    /// Host end of the pair.
    pub host: Ipv4Addr,
    /// Sandbox end (`eth0` inside).
    pub sandbox: Ipv4Addr,
    /// Prefix length of the point-to-point subnet.
    pub prefix: u8,
}

/// How to reach a sandbox's agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentEndpoint {
    /// Unix socket on the host, in a directory the sandbox cannot see.
    pub socket: PathBuf,
    /// The token the agent demands.
    pub token: String,
}

/// What the runtime knows about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxInfo {
    /// The spec it was created from.
    pub spec: SandboxSpec,
    /// Observed state.
    pub state: RuntimeState,
    /// Host pid of the sandbox's init while running.
    pub pid: Option<i32>,
    /// Network addresses.
    pub net: NetAddrs,
    /// Where its agent listens.
    pub agent: AgentEndpoint,
}

impl SandboxInfo {
    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }
}

/// Errors of the runtime layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The sandbox id is not acceptable.
    #[error("invalid sandbox id {0:?}: use 1 to 63 lowercase letters, digits or '-'")]
    InvalidId(String),
    /// No sandbox with this id exists in the runtime.
    #[error("sandbox {0} not found")]
    NotFound(String),
    /// A sandbox with this id already exists.
    #[error("sandbox {0} already exists")]
    AlreadyExists(String),
    /// The template is unknown to this runtime.
    #[error("unknown template {0:?}")]
    UnknownTemplate(String),
    /// The spec asks for something this runtime cannot provide.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An egress list entry is not an IPv4 network.
    #[error("{0:?} is not an IPv4 address or CIDR block (a.b.c.d or a.b.c.d/n)")]
    InvalidNet(String),
    /// An id range is past the host's 32-bit ids.
    #[error("id range {0} is past the host's 32-bit ids")]
    IdRangeOutOfRange(u32),
    /// Making the user namespace that shows the shared layers to a sandbox failed.
    #[error("making the user namespace that maps the shared layers to host ids from {base}")]
    IdMapNamespace {
        /// The sandbox's root's host id.
        base: u32,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The network slot is outside the configured subnet.
    #[error("network slot {0} is outside the sandbox subnet")]
    SlotOutOfRange(u32),
    /// The host is missing something the runtime needs.
    #[error("host is not ready: {0}")]
    Host(String),
    /// A filesystem operation on the runtime's own state failed.
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
    /// The disk quota of a writable layer.
    #[error("disk quota")]
    Quota(#[from] crate::quota::QuotaError),
    /// Setting up cgroup limits failed.
    #[error("cgroup")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    /// Configuring the sandbox's network failed.
    #[error("network: {0}")]
    Network(String),
    /// Writing the OCI bundle a gVisor sandbox runs from failed.
    #[error("writing the OCI bundle")]
    Bundle(#[source] oci_spec::OciSpecError),
    /// Starting the sandbox's process failed.
    #[error("spawning the sandbox init")]
    Spawn(#[source] std::io::Error),
    /// The agent reported a failure while booting the sandbox.
    #[error("boot failed at {stage}: {message}")]
    Boot {
        /// Boot step that failed.
        stage: String,
        /// What the agent said.
        message: String,
    },
}

impl RuntimeError {
    /// The host limit this failure ran into, when it ran into one rather than a fault: the
    /// process's or the system's open files (`EMFILE`, `ENFILE`), or, starting a sandbox, the
    /// host's processes (`EAGAIN` from `clone`).
    pub fn host_limit(&self) -> Option<&'static str> {
        let (source, spawning) = match self {
            RuntimeError::Spawn(source) => (source, true),
            RuntimeError::Io { source, .. } | RuntimeError::IdMapNamespace { source, .. } => {
                (source, false)
            }
            _ => return None,
        };
        match source.raw_os_error() {
            Some(libc::EMFILE) => Some("the daemon's open files (its LimitNOFILE)"),
            Some(libc::ENFILE) => Some("the host's open files (fs.file-max)"),
            Some(libc::EAGAIN) if spawning => Some("the host's processes (kernel.pid_max)"),
            _ => None,
        }
    }

    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| RuntimeError::Io { what, path, source }
    }
}

/// Checks a sandbox id: 1 to 63 characters of `[a-z0-9-]`, not starting with '-'.
pub fn validate_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidId(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn running_out_of_files_or_processes_names_the_host_limit() {
        let os = std::io::Error::from_raw_os_error;
        let spawn = |errno| RuntimeError::Spawn(os(errno));
        assert!(spawn(libc::EMFILE)
            .host_limit()
            .unwrap()
            .contains("LimitNOFILE"));
        assert!(spawn(libc::EAGAIN)
            .host_limit()
            .unwrap()
            .contains("pid_max"));
        let io = RuntimeError::io("open", "/x")(os(libc::ENFILE));
        assert!(io.host_limit().unwrap().contains("file-max"));
        let not_spawning = RuntimeError::io("open", "/x")(os(libc::EAGAIN));
        assert_eq!(not_spawning.host_limit(), None);
        assert_eq!(spawn(libc::EPERM).host_limit(), None);
    }

    #[test]
    fn networks_parse_to_their_canonical_form() {
        for (text, canonical) in [
            ("8.8.8.8", "8.8.8.8/32"),
            ("8.8.8.0/24", "8.8.8.0/24"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("1.2.3.4/32", "1.2.3.4/32"),
            ("255.255.255.255/31", "255.255.255.254/31"),
        ] {
            assert_eq!(net(text).to_string(), canonical, "{text}");
        }
        for bad in [
            "",
            "/",
            "8.8.8.8/",
            "8.8.8.8/33",
            "8.8.8.8/+1",
            "8.8.8.8/024",
            "8.8.8.8/08",
            "8.8.8.8/-1",
            "8.8.8/24",
            "8.8.8.256",
            "08.8.8.8",
            " 8.8.8.8",
            "8.8.8.8/24/1",
            "::1",
            "2001:db8::/32",
            "example.com",
            "*.example.com",
            "8.8.8.8 ; flush ruleset",
        ] {
            assert!(bad.parse::<Ipv4Net>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn networks_travel_as_their_text() {
        let json = serde_json::to_string(&net("10.1.2.3/8")).unwrap();
        assert_eq!(json, r#""10.0.0.0/8""#);
        assert_eq!(
            serde_json::from_str::<Ipv4Net>(&json).unwrap(),
            net("10.0.0.0/8")
        );
        assert!(serde_json::from_str::<Ipv4Net>(r#""nope""#).is_err());
    }

    #[test]
    fn normalizing_drops_duplicates_and_nested_networks() {
        let nets = [
            "10.1.0.0/16",
            "1.1.1.1",
            "10.0.0.0/8",
            "1.1.1.1",
            "1.1.1.0/24",
            "1.1.2.0/24",
        ]
        .map(net)
        .to_vec();
        let normal: Vec<String> = Ipv4Net::normalize(nets)
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(normal, ["1.1.1.0/24", "1.1.2.0/24", "10.0.0.0/8"]);
        assert_eq!(
            Ipv4Net::normalize(vec![net("0.0.0.0/0"), net("9.9.9.9")]),
            [net("0.0.0.0/0")]
        );
    }

    #[test]
    fn specs_persisted_before_the_lists_existed_still_load() {
        let old = r#"{"id":"sb","template":"base",
            "limits":{"memory_mb":512,"cpu_millis":1000,"pids_max":512},
            "net_slot":3,"egress":true,"envs":{},"agent_token":"t"}"#;
        let spec: SandboxSpec = serde_json::from_str(old).unwrap();
        assert!(spec.egress_allow.is_empty() && spec.egress_deny.is_empty());
        assert!(spec.egress_allow_names.is_empty() && !spec.has_names());
        assert_eq!(spec.limits.disk_mb, 0, "no disk limit unless asked");
        assert!(spec.may_send_out() && spec.needs_egress_rules());
        // And a spec without lists is written as before.
        let again = serde_json::to_value(&spec).unwrap();
        assert!(again.get("egress_allow").is_none() && again.get("egress_deny").is_none());
        assert!(again.get("egress_allow_names").is_none());
    }

    #[test]
    fn names_alone_need_rules_and_an_allowed_name_a_way_out() {
        let names = |list: &[&str]| list.iter().map(|n| n.parse().unwrap()).collect();
        let allow = SandboxSpec {
            egress_allow_names: names(&["api.example.com"]),
            ..SandboxSpec::base("sb", "t")
        };
        assert!(allow.has_names() && allow.needs_egress_rules() && allow.may_send_out());
        let deny = SandboxSpec {
            egress_deny_names: names(&["*.example.com"]),
            ..SandboxSpec::base("sb", "t")
        };
        assert!(deny.has_names() && deny.needs_egress_rules() && !deny.may_send_out());
        let json = serde_json::to_value(&deny).unwrap();
        assert_eq!(
            json["egress_deny_names"],
            serde_json::json!(["*.example.com"])
        );
        assert_eq!(serde_json::from_value::<SandboxSpec>(json).unwrap(), deny);
    }

    #[test]
    fn tiers_travel_by_name_and_old_specs_are_namespace_sandboxes() {
        for tier in Isolation::ALL {
            assert_eq!(tier.as_str().parse::<Isolation>(), Ok(tier));
            assert_eq!(
                serde_json::to_value(tier).unwrap(),
                serde_json::json!(tier.as_str())
            );
        }
        for bad in ["", "gVisor", "vm", "namespace "] {
            assert!(bad.parse::<Isolation>().is_err(), "{bad:?} accepted");
        }
        let old = serde_json::to_value(SandboxSpec::base("sb", "t")).unwrap();
        assert!(old.get("isolation").is_none(), "the default is not written");
        let spec: SandboxSpec = serde_json::from_value(old).unwrap();
        assert_eq!(spec.isolation, Isolation::Namespace);
        let gvisor = SandboxSpec {
            isolation: Isolation::Gvisor,
            ..SandboxSpec::base("sb", "t")
        };
        let json = serde_json::to_value(&gvisor).unwrap();
        assert_eq!(json["isolation"], "gvisor");
        assert_eq!(serde_json::from_value::<SandboxSpec>(json).unwrap(), gvisor);
    }

    #[test]
    fn ids_that_could_escape_a_path_are_refused() {
        for bad in ["", "../x", "a/b", "A", "-a", ".", &"a".repeat(64)] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "sb-1", &"a".repeat(63)] {
            assert!(validate_id(good).is_ok(), "{good:?} refused");
        }
    }
}
