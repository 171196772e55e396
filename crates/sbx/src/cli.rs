//! The command line, as clap derive types, and the parsers of its values.
//!
//! Contract: everything the user can type is validated here or in the command that uses it and turned
//! into an error message, never a panic. `--api-url`, `--token` and `--json` are global (accepted before
//! or after the subcommand); the token's value is never shown in `--help`.

use clap::{Args, Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    an error (printed on stderr as `error: <message> (<code>)`, or as ApiError JSON with --json)
  2    bad command-line usage
  exec: the command's own exit code (out-of-range codes become 255); 255 when sbx itself fails
        (daemon error, broken stream, transport), so a failure of sbx is told apart from the command's";

/// sbx: the command-line client of sandboxd.
#[derive(Debug, Parser)]
#[command(name = "sbx", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Address of the daemon's API [default: the saved login's, else http://127.0.0.1:21212].
    #[arg(long, global = true, env = "SB_API_URL")]
    pub api_url: Option<String>,
    /// API key [default: the saved login's, for the daemon it was saved for].
    #[arg(long, global = true, env = "SB_PAT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where `sbx login` saves the daemon's address and key (mode 0600) [default:
    /// $XDG_CONFIG_HOME/sbx/config.json, else ~/.config/sbx/config.json].
    #[arg(long, global = true, env = "SBX_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Print JSON (API bodies) instead of text; errors become ApiError JSON on stderr.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a sandbox; prints its id.
    Create(CreateArgs),
    /// List sandboxes as a table.
    #[command(alias = "list")]
    Ls(LsArgs),
    /// Show one sandbox.
    Get {
        /// Id or name.
        id: String,
    },
    /// Pause a running sandbox, keeping its processes and memory (the default: frozen in the
    /// host's RAM on the namespace tier, checkpointed to disk on the gVisor tier, which survives a
    /// restart) or, with --filesystem, only its files (a stop); prints its id.
    Pause {
        /// Id or name.
        id: String,
        /// Keep processes and memory (the default).
        #[arg(long, conflicts_with = "filesystem")]
        memory: bool,
        /// Keep only the files: the sandbox is stopped, and `sbx resume` or `sbx start` boots it
        /// again on them.
        #[arg(long)]
        filesystem: bool,
    },
    /// Fork a running gVisor sandbox: N new sandboxes going on from its processes, memory and
    /// files (the source keeps running); prints each fork's id, or its error, one per line. Exits 1
    /// when any fork failed.
    Fork {
        /// Id or name.
        id: String,
        /// How many forks, 1 to 20.
        #[arg(short = 'n', long, default_value_t = 1)]
        count: u32,
        /// Lifetime of each fork in seconds [default: the source's timeout].
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
    },
    /// Stop a sandbox: its processes end, its filesystem is kept; prints its id.
    Stop {
        /// Id or name.
        id: String,
    },
    /// Start a stopped sandbox again on its filesystem; prints its id.
    Start {
        /// Id or name.
        id: String,
    },
    /// Resume a paused sandbox (start one paused to its files); prints its id.
    Resume {
        /// Id or name.
        id: String,
    },
    /// Run a command in a sandbox, streaming its output; exits with its exit code. With `-t` (`-it`)
    /// it runs on a terminal, as `sbx shell` does.
    Exec(ExecArgs),
    /// Open a terminal in a sandbox: a login shell, or CMD, on a PTY. The local terminal is put in
    /// raw mode (Ctrl-C goes to the sandbox) and window size changes follow; from a pipe, the input
    /// is typed into the terminal and ends with Ctrl-D. Exits with the remote exit code.
    Shell(ShellArgs),
    /// Run code from stdin in a sandbox's code interpreter (template code-interpreter-v1), keeping
    /// state between calls; prints its output and results, exits 1 when the code raised.
    Code(CodeArgs),
    /// Copy a file between the local machine and a sandbox (one side is ID:/abs/path; `-` is stdio).
    Cp {
        /// Source: a local path, `-` (stdin), or ID:/abs/path.
        src: String,
        /// Destination: a local path or directory, `-` (stdout), or ID:/abs/path (a trailing `/` keeps
        /// the source's file name).
        dst: String,
    },
    /// Expose a port of a sandbox; prints its public URL.
    Expose {
        /// Sandbox id.
        id: String,
        /// Port inside the sandbox.
        #[arg(value_parser = clap::value_parser!(u16).range(1..))]
        port: u16,
        /// Protocol.
        #[arg(long, default_value = "http")]
        protocol: String,
    },
    /// Delete sandboxes; prints each deleted id. The others are still deleted when one fails.
    Rm {
        /// Sandbox ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Images on the daemon's node: list, pull, remove, prune.
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Templates (named images): list, build, logs, remove.
    #[command(subcommand)]
    Templates(TemplatesCommand),
    /// Volumes (named storage that outlives sandboxes): list, create, remove, copy files in and out.
    #[command(subcommand)]
    Volumes(VolumesCommand),
    /// Secrets (values a sandbox holds only a placeholder of): list, create, update, remove.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Warm pools (sandboxes of a template booted ahead of creates): list, set a size (admin keys).
    #[command(subcommand, name = "warm-pools", alias = "pools")]
    WarmPools(WarmPoolsCommand),
    /// Check an API key (--token / SB_PAT_TOKEN, else the first line of stdin) against the daemon
    /// and save it with the daemon's address for later commands (see --config).
    Login,
    /// Remove the saved login.
    Logout,
    /// API keys (admin keys only): create, list, delete.
    #[command(subcommand, name = "api-keys")]
    ApiKeys(ApiKeysCommand),
    /// Cluster mode (admin keys only): the members, the leader, their health and capacity.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Turn a sandbox's filesystem into a template; prints its name.
    Snapshot {
        /// Sandbox id or name.
        id: String,
        /// The template's name.
        name: String,
    },
    /// Git in a sandbox: clone, status, add, commit, branches, branch, checkout, push, pull. A
    /// repository's PATH is absolute or relative to the sandbox user's home (/home/user).
    Git(GitArgs),
}

/// `sbx git ID …`.
#[derive(Debug, Args)]
pub struct GitArgs {
    /// Sandbox id or name.
    pub id: String,
    /// What to do.
    #[command(subcommand)]
    pub command: GitCommand,
}

/// `sbx git ID …`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum GitCommand {
    /// Clone a repository into the sandbox; prints the clone's path.
    Clone {
        /// The repository's URL.
        url: String,
        /// Where to clone [default: the URL's last segment without .git, in the user's home].
        path: Option<String>,
        /// The branch to check out [default: the remote's HEAD].
        #[arg(long)]
        branch: Option<String>,
        /// A shallow clone of this many commits [default: the whole history].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        depth: Option<u32>,
        /// Credentials for the remote.
        #[command(flatten)]
        auth: GitAuth,
    },
    /// Show a repository's branch, upstream and changed files.
    Status {
        /// The repository [default: `.`, the user's home].
        #[arg(default_value = ".")]
        path: String,
    },
    /// Stage files (deletions included).
    Add {
        /// The repository.
        path: String,
        /// Paths in the repository (`.` for all).
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Commit what is staged (author and committer both); prints the commit's hash.
    Commit {
        /// The repository.
        path: String,
        /// The commit message.
        #[arg(short, long)]
        message: String,
        /// Author name.
        #[arg(long)]
        author: String,
        /// Author email.
        #[arg(long)]
        email: String,
        /// Commit even when nothing is staged.
        #[arg(long)]
        allow_empty: bool,
    },
    /// List the local branches (`*` marks the checked-out one).
    Branches {
        /// The repository.
        path: String,
    },
    /// Create a branch at HEAD and check it out (with --delete: delete it).
    Branch {
        /// The repository.
        path: String,
        /// The branch.
        name: String,
        /// Delete the branch, merged or not, instead of creating it.
        #[arg(short, long)]
        delete: bool,
    },
    /// Check out a branch, or any revision (detached).
    Checkout {
        /// The repository.
        path: String,
        /// A branch or revision.
        branch: String,
    },
    /// Push a branch to a remote.
    Push {
        /// The repository.
        path: String,
        /// The remote [default: origin].
        #[arg(long)]
        remote: Option<String>,
        /// The branch [default: the checked-out one].
        #[arg(long)]
        branch: Option<String>,
        /// Make the pushed branch the local one's upstream.
        #[arg(long)]
        set_upstream: bool,
        /// Credentials for the remote.
        #[command(flatten)]
        auth: GitAuth,
    },
    /// Pull, fast-forward only (a diverged branch is an error).
    Pull {
        /// The repository.
        path: String,
        /// The remote [default: the branch's upstream's, else origin].
        #[arg(long)]
        remote: Option<String>,
        /// The remote branch [default: the upstream's].
        #[arg(long)]
        branch: Option<String>,
        /// Credentials for the remote.
        #[command(flatten)]
        auth: GitAuth,
    },
}

/// Credentials for a remote, used for that one command and never stored. The password is never a
/// flag's value (which `ps` would show): it comes from --password-stdin, else SBX_GIT_PASSWORD.
#[derive(Debug, Args)]
pub struct GitAuth {
    /// User name for the remote [default with only a password: x-access-token].
    #[arg(long)]
    pub username: Option<String>,
    /// Read the password or token from the first line of stdin [default: SBX_GIT_PASSWORD, when
    /// set].
    #[arg(long)]
    pub password_stdin: bool,
}

/// `sbx cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Show the members as the daemon sees them (`*`: the one answering), the leader, each one's
    /// health (`healthy`, `stale`, `unreachable`, `lost`, `joining`) and free capacity.
    Status,
}

/// `sbx api-keys …`.
#[derive(Debug, Subcommand)]
pub enum ApiKeysCommand {
    /// Create a key; prints its secret, which cannot be shown again.
    Create {
        /// What the key is for.
        name: String,
        /// `user` (everything but managing keys and webhooks) or `admin`.
        #[arg(long, default_value = "user", value_parser = ["user", "admin"])]
        scope: String,
    },
    /// List the keys (never their secrets).
    #[command(alias = "ls")]
    List,
    /// Revoke keys by id: each is refused from the next request on.
    #[command(alias = "rm")]
    Delete {
        /// Key ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// `sbx warm-pools …`.
#[derive(Debug, Subcommand)]
pub enum WarmPoolsCommand {
    /// Every template's pool: its size, sandboxes ready and booting, hits and misses.
    #[command(alias = "list")]
    Ls,
    /// Keep SIZE sandboxes of TEMPLATE booted and idle (0 empties the pool); prints the pool.
    Set {
        /// The template (`base` included).
        template: String,
        /// How many to keep (at most 1000).
        size: u32,
    },
}

/// `sbx secrets …`. A value is never an argument (arguments are in every process list): it is
/// read from `--value-file`, or from stdin, without one final newline.
#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// List the secrets (never their values).
    #[command(alias = "list")]
    Ls,
    /// Create a secret from the value on stdin (or in --value-file); prints its placeholder.
    Create {
        /// Unique name: letters, digits, '_', '.' or '-'.
        name: String,
        /// Read the value from this file instead of stdin.
        #[arg(long, value_name = "FILE")]
        value_file: Option<std::path::PathBuf>,
        /// A host the value may be sent to: a name, `*.` and a name, or an IP address
        /// (repeatable) [default: none; the value goes only where a network rule puts it].
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        /// What it is for.
        #[arg(long)]
        description: Option<String>,
        /// Label (repeatable).
        #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
        label: Vec<(String, String)>,
    },
    /// Show one secret (never its value).
    Get {
        /// Secret name or id.
        name: String,
    },
    /// Change a secret: a new value (a new version), its hosts or its description.
    Update {
        /// Secret name or id.
        name: String,
        /// Read a new value from stdin.
        #[arg(long, conflicts_with = "value_file")]
        value_stdin: bool,
        /// Read a new value from this file.
        #[arg(long, value_name = "FILE")]
        value_file: Option<std::path::PathBuf>,
        /// Its hosts from now on (repeatable; replaces the old ones).
        #[arg(long = "host", value_name = "HOST", conflicts_with = "clear_hosts")]
        hosts: Vec<String>,
        /// Remove every host.
        #[arg(long)]
        clear_hosts: bool,
        /// A new description.
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete secrets.
    #[command(alias = "delete")]
    Rm {
        /// Secret names or ids.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// `sbx volumes …`.
#[derive(Debug, Subcommand)]
pub enum VolumesCommand {
    /// List the volumes.
    #[command(alias = "list")]
    Ls,
    /// Create a volume; prints its name.
    Create {
        /// Unique name: letters, digits, '-', '_' or '.'.
        name: String,
        /// Size limit in MiB [default: none; needs a disk quota backend on the daemon's host].
        #[arg(long, value_name = "MB")]
        size: Option<u64>,
        /// Label (repeatable).
        #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
        label: Vec<(String, String)>,
    },
    /// Show one volume: its size, usage and the sandboxes that mount it.
    Get {
        /// Volume name or id.
        name: String,
    },
    /// Delete volumes and their files (refused while a sandbox mounts one).
    #[command(alias = "delete")]
    Rm {
        /// Volume names or ids.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Copy a file into or out of a volume without a sandbox: `sbx volumes cp ./f NAME:/dir/f` or
    /// `sbx volumes cp NAME:/dir/f ./f` (`-` is stdout).
    Cp {
        /// Source: a local path or NAME:/path.
        src: String,
        /// Destination: a local path or NAME:/path.
        dst: String,
    },
    /// List a directory of a volume.
    Files {
        /// NAME or NAME:/path [default path: /].
        target: String,
        /// How many levels down to list.
        #[arg(long, default_value_t = 1)]
        depth: u32,
    },
}

/// `sbx templates …`.
#[derive(Debug, Subcommand)]
pub enum TemplatesCommand {
    /// List the templates.
    #[command(alias = "list")]
    Ls,
    /// Create a template from an image (--image) or a Dockerfile (--file, with --context) — or,
    /// with neither, build a built-in template (`code-interpreter-v1`) — and follow its build log;
    /// exits 0 when it is ready, 1 when the build failed.
    Build {
        /// The template's name (`name` or `name:tag`).
        name: String,
        /// An image reference to make the template of.
        #[arg(long, conflicts_with = "file")]
        image: Option<String>,
        /// The Dockerfile to build.
        #[arg(long, short = 'f')]
        file: Option<std::path::PathBuf>,
        /// The directory COPY and ADD read from (sent as a tar).
        #[arg(long, requires = "file")]
        context: Option<std::path::PathBuf>,
        /// A build argument (repeatable).
        #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
        build_arg: Vec<(String, String)>,
        /// A shell command every sandbox made from the template starts in the background.
        #[arg(long)]
        start_cmd: Option<String>,
        /// A shell command a create from the template waits on until it exits 0.
        #[arg(long)]
        ready_cmd: Option<String>,
        /// The isolation tier its sandboxes run in when their create names none: namespace or
        /// gvisor [default: the daemon's --default-isolation at each create].
        #[arg(long, value_name = "TIER")]
        isolation: Option<String>,
    },
    /// Print a template's build log.
    Logs {
        /// The template's name.
        name: String,
    },
    /// Delete templates (not while a sandbox made from one exists).
    Rm {
        /// Names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// `sbx images …`.
#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// List the images on the node.
    #[command(alias = "list")]
    Ls,
    /// Pull an image onto the node (nothing is fetched for a tag it has); prints its digest.
    Pull {
        /// Reference, resolved as Docker does (python:3.12-slim is docker.io/library/python:3.12-slim).
        reference: String,
        /// Registry user name; the password comes from --password-stdin or SB_REGISTRY_PASSWORD.
        #[arg(long)]
        username: Option<String>,
        /// Read the registry password from the first line of stdin.
        #[arg(long, requires = "username")]
        password_stdin: bool,
    },
    /// Remove images (by reference or digest); their layers stay until `prune`. Fails for an image
    /// a sandbox uses.
    Rm {
        /// References or digests.
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Delete every layer no image uses; prints what was freed.
    Prune,
}

/// `sbx create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Unique name.
    #[arg(long)]
    pub name: Option<String>,
    /// Template [daemon default: base].
    #[arg(long, conflicts_with = "image")]
    pub template: Option<String>,
    /// An OCI image to make the root of (e.g. python:3.12-slim), pulled first if the daemon lacks it.
    #[arg(long)]
    pub image: Option<String>,
    /// Isolation tier: namespace (the host's kernel behind namespaces; milliseconds) or gvisor
    /// (gVisor's user-space kernel in between; pause keeps memory, fork copies it) [daemon default:
    /// --default-isolation, namespace].
    #[arg(long, value_parser = ["namespace", "gvisor"])]
    pub isolation: Option<String>,
    /// CPUs, may be fractional [daemon default: 1].
    #[arg(long, value_parser = parse_cpu)]
    pub cpu: Option<f64>,
    /// Memory limit in MiB [daemon default: 512].
    #[arg(long, value_name = "MB")]
    pub memory: Option<u64>,
    /// Limit of everything the sandbox writes to its filesystem, MiB [daemon default:
    /// --default-disk-mb].
    #[arg(long, value_name = "MB")]
    pub disk: Option<u64>,
    /// Seconds until the daemon destroys it, 0 = never [daemon default: 300].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Pause the sandbox at its timeout instead of destroying it.
    #[arg(long)]
    pub pause_on_timeout: bool,
    /// With --pause-on-timeout: the next command, file or port request resumes it.
    #[arg(long, requires = "pause_on_timeout")]
    pub auto_resume: bool,
    /// Environment of every command (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
    pub env: Vec<(String, String)>,
    /// Label (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
    pub metadata: Vec<(String, String)>,
    /// Allow outbound network access.
    #[arg(long)]
    pub egress: bool,
    /// A destination the sandbox may always reach: IPv4 address, CIDR block, domain name or
    /// `*.example.com` (every name below example.com) (repeatable; a name admits the addresses the
    /// sandbox resolves for it).
    #[arg(long, value_name = "CIDR|NAME")]
    pub allow_out: Vec<String>,
    /// A destination the sandbox may not reach unless allowed: IPv4 address, CIDR block, domain
    /// name or `*.example.com` (repeatable; `0.0.0.0/0` denies all that is not allowed).
    #[arg(long, value_name = "CIDR|NAME")]
    pub deny_out: Vec<String>,
    /// A volume to mount: NAME:/path, or NAME:/path:ro for read-only (repeatable).
    #[arg(long = "volume", short = 'v', value_name = "NAME:/PATH[:ro]", value_parser = parse_volume)]
    pub volumes: Vec<VolumeArg>,
    /// Idempotency key: repeating a create with the same key returns the first sandbox.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

/// A `--volume NAME:/path[:ro]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeArg {
    pub name: String,
    pub path: String,
    pub read_only: bool,
}

/// Parses `NAME:/path` or `NAME:/path:ro` (or `:rw`).
pub fn parse_volume(s: &str) -> Result<VolumeArg, String> {
    let (name, rest) = s
        .split_once(':')
        .filter(|(n, r)| !n.is_empty() && r.starts_with('/'))
        .ok_or_else(|| format!("expected NAME:/path[:ro], got {s:?}"))?;
    let (path, read_only) = match rest.rsplit_once(':') {
        Some((path, "ro")) => (path, true),
        Some((path, "rw")) => (path, false),
        _ => (rest, false),
    };
    Ok(VolumeArg {
        name: name.to_string(),
        path: path.to_string(),
        read_only,
    })
}

/// `sbx ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sandboxes with this label (repeatable; all must match).
    #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
    pub metadata: Vec<(String, String)>,
    /// Only sandboxes in this state (e.g. running).
    #[arg(long)]
    pub state: Option<String>,
    /// Follow cursors and list every page (default: the first page only).
    #[arg(long)]
    pub all: bool,
}

/// `sbx exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Run as this user (`user` or `root`).
    #[arg(long)]
    pub user: Option<String>,
    /// Working directory.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Extra environment (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
    pub env: Vec<(String, String)>,
    /// Kill the command after this many milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout: Option<u64>,
    /// Run on a terminal (a PTY), like `sbx shell ID CMD`.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Keep stdin attached (only with `-t`, where it always is).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Sandbox id.
    pub id: String,
    /// The command and its arguments (put them after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub cmd: Vec<String>,
}

/// `sbx shell`.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// Run as this user (`user` or `root`).
    #[arg(long)]
    pub user: Option<String>,
    /// Working directory.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Sandbox id or name.
    pub id: String,
    /// The command and its arguments; default a login shell.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub cmd: Vec<String>,
}

/// `sbx code`.
#[derive(Debug, Args)]
pub struct CodeArgs {
    /// `python` (default) or `bash`: runs in that language's default context.
    #[arg(long, conflicts_with = "context")]
    pub language: Option<String>,
    /// A context made through the interpreter's API (its own kernel).
    #[arg(long, value_name = "ID")]
    pub context: Option<String>,
    /// Environment for this execution only (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_key_val)]
    pub env: Vec<(String, String)>,
    /// Sandbox id.
    pub id: String,
}

/// Parses `KEY=VALUE` (the value may be empty and may contain `=`; the key may not be empty).
pub fn parse_key_val(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn parse_cpu(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(cpu) if cpu.is_finite() && cpu > 0.0 => Ok(cpu),
        _ => Err(format!("expected a positive number of CPUs, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn volume_flags_name_a_volume_a_path_and_a_mode() {
        let v = super::parse_volume("cache:/home/user/.cache:ro").unwrap();
        assert_eq!(
            (v.name.as_str(), v.path.as_str(), v.read_only),
            ("cache", "/home/user/.cache", true)
        );
        let v = super::parse_volume("data:/data").unwrap();
        assert_eq!((v.path.as_str(), v.read_only), ("/data", false));
        for bad in ["data", ":/data", "data:rel", "data:"] {
            assert!(super::parse_volume(bad).is_err(), "{bad}");
        }
    }

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn key_val_splits_at_the_first_equals_sign() {
        assert_eq!(parse_key_val("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(parse_key_val("a="), Ok(("a".into(), String::new())));
    }

    #[test]
    fn key_val_without_key_or_equals_is_refused() {
        for bad in ["", "a", "=v", "="] {
            assert!(parse_key_val(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpu_must_be_positive_and_finite() {
        assert_eq!(parse_cpu("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "x"] {
            assert!(parse_cpu(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_takes_everything_after_the_id_as_the_command() {
        let cli = Cli::try_parse_from([
            "sbx", "exec", "--cwd", "/w", "sb-1", "--", "ls", "--cwd", "-la",
        ])
        .expect("valid command line");
        let Command::Exec(args) = cli.command else {
            panic!("expected exec");
        };
        assert_eq!(args.cwd.as_deref(), Some("/w"));
        assert_eq!(args.cmd, ["ls", "--cwd", "-la"]);
        let cli = Cli::try_parse_from(["sbx", "exec", "sb-1", "sh", "-c", "exit 3"])
            .expect("valid command line");
        let Command::Exec(args) = cli.command else {
            panic!("expected exec");
        };
        assert_eq!(args.cmd, ["sh", "-c", "exit 3"]);
        let cli = Cli::try_parse_from(["sbx", "exec", "-it", "sb-1", "--", "top", "-b"])
            .expect("valid command line");
        let Command::Exec(args) = cli.command else {
            panic!("expected exec");
        };
        assert!(args.tty && args.interactive);
        assert_eq!(args.cmd, ["top", "-b"]);
        let cli = Cli::try_parse_from(["sbx", "shell", "sb-1"]).expect("valid command line");
        let Command::Shell(args) = cli.command else {
            panic!("expected shell");
        };
        assert!(args.cmd.is_empty());
    }

    #[test]
    fn global_flags_are_accepted_after_the_subcommand() {
        let cli = Cli::try_parse_from(["sbx", "get", "x", "--json", "--token", "t"])
            .expect("valid command line");
        assert!(cli.json);
        assert_eq!(cli.token.as_deref(), Some("t"));
    }
}
