//! A Dockerfile, parsed into the typed build plan the template builder runs step by step.
//!
//! Contract: [`parse`] either returns a plan or an error naming the 1-based line and what is wrong
//! with it (only the whole-file errors — empty, too large, no FROM — have no line); it never panics, whatever the bytes (the fuzz test below proves it on garbage). Input
//! over [`MAX_BYTES`] or with more than [`MAX_INSTRUCTIONS`] instructions is refused before any
//! work proportional to it, and no value substitution can make a value longer than
//! [`MAX_VALUE_BYTES`] or a stage's ARG and ENV values together larger than [`MAX_STATE_BYTES`],
//! so the plan's size is bounded by the input's.
//!
//! What is resolved here, as Docker's reference documents it:
//! - Lexing: `#` comments, blank lines, continuation with the escape character at the end of a
//!   line (comment and blank lines inside a continuation are skipped), the `# escape=` directive
//!   (`\` or `` ` ``), instructions in any case.
//! - Variables: `$V`, `${V}`, `${V:-word}`, `${V-word}`, `${V:+word}`, `${V+word}` and the escaped
//!   `\$` are substituted in FROM (ARGs declared before the first FROM only), ENV, ARG defaults,
//!   ADD, COPY (and their flags), WORKDIR, USER, LABEL and EXPOSE; never in RUN, CMD or ENTRYPOINT,
//!   whose shell does it. Values come from ENV set earlier in the stage (which wins over an ARG of
//!   the same name), the base image's env ([`parse_with_base`]) and ARGs declared in the stage
//!   (a build arg overrides the default; an undeclared name is never taken from the build args).
//!   An unset variable expands to nothing. Inside one `ENV a=1 b=$a`, `$a` is the value from
//!   before the instruction, as in Docker. Other modifiers (`${V?}`, `${V#…}`) are refused.
//! - Quoting: in substituted instructions, `'…'` is literal, `"…"` substitutes, the escape
//!   character escapes the next character; quotes are removed from the resulting words.
//! - Exec form: an argument that is a JSON array of strings is exec form; anything else, even if
//!   it starts with `[`, is shell form.
//! - WORKDIR is resolved to a normalised absolute path against the previous one (starting at the
//!   base image's `WorkingDir`, else `/`); COPY and ADD destinations are resolved the same way
//!   (a trailing `/`, or `.`, is kept as the sign of a directory).
//! - COPY/ADD sources are paths inside the build context: an absolute source is taken relative to
//!   the context root (Docker's behaviour), `.` and `..` are resolved, and a `..` that would climb
//!   above the root is refused. Globs (`*`, `?`, `[…]`) are kept as written for the builder to
//!   expand against the context.
//!
//! Choices where Docker offers more than a sandbox build does:
//! - Only the last stage is built. `COPY --from`, and FROM naming an earlier stage, are refused.
//! - Heredocs are supported in RUN only. `RUN <<EOF` (or `<<-EOF`, `<<"EOF"`) alone on its line
//!   is the script made of the body's lines; a heredoc after a command (`RUN cat <<EOF >/f`) is
//!   handed to the shell whole, body and terminator included, since the shell reads heredocs
//!   itself. A `<<NAME` in RUN's text is always taken as a heredoc (so `$((1<<X))` is one too).
//!   Heredocs in COPY/ADD are refused.
//! - ONBUILD is refused; MAINTAINER, VOLUME, HEALTHCHECK and STOPSIGNAL are ignored with a
//!   warning (a template has no volumes, health checks or stop signal); `--platform` on FROM and
//!   `--link` on COPY/ADD are ignored with a warning; RUN flags (`--mount`, `--network`, …),
//!   ADD from a URL and ADD `--checksum`/`--keep-git-dir` are refused.
//! - Build args that no ARG declares are reported in [`Dockerfile::warnings`].
//!
//! Each [`Step`] carries a cache key ([`Step::cache_key`]); what it covers is documented there.
//! The builder replays the environment a step runs in with [`StepContext::apply`], the same
//! function the parser uses, so the two cannot disagree.
//!
//! Inside: `lex` splits the text into instructions (directives, comments, continuations, heredoc
//! bodies) and words; `subst` substitutes variables in one word; `stages` puts each instruction in
//! its stage and finishes the plan; `instructions` interprets each instruction of a stage; this file
//! holds the plan's types and keeps the stage's context.

use crate::config::RunConfig;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

mod instructions;
mod lex;
mod stages;
mod subst;

use instructions::resolve_path;
use lex::{escape_directive, heredoc_markers, skip_words, split_instructions, split_raw, Logical};
use subst::{Expander, Vars};

/// Largest Dockerfile accepted, in bytes.
pub const MAX_BYTES: usize = 1 << 20;
/// Most instructions a Dockerfile may hold.
pub const MAX_INSTRUCTIONS: usize = 10_000;
/// Longest value a substitution may produce, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// Most bytes of ARG and ENV names and values one stage may hold.
pub const MAX_STATE_BYTES: usize = 64 << 10;
/// Most bytes of variable values all substitutions of one Dockerfile may insert.
pub const MAX_SUBSTITUTED_BYTES: usize = 4 << 20;
/// Deepest nesting of `${V:-${W:-…}}` accepted.
const MAX_NESTING: usize = 16;

/// A parsed Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dockerfile {
    /// The stages in order; never empty. Only the last is built ([`Dockerfile::target`]).
    pub stages: Vec<Stage>,
    /// What was ignored (instructions, flags, build args no ARG declares), one sentence each.
    pub warnings: Vec<String>,
}

/// One `FROM` and the steps after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    /// The image the stage starts from.
    pub from: BaseImage,
    /// The stage's name (`FROM … AS name`), lowercased as Docker compares it.
    pub name: Option<String>,
    /// The instructions after FROM, in order.
    pub steps: Vec<Step>,
}

/// A stage's `FROM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaseImage {
    /// The image reference, after ARG substitution (`scratch` is passed through).
    pub image: String,
    /// The 1-based line of the FROM.
    pub line: usize,
}

/// One instruction of a stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The 1-based line the instruction starts on.
    pub line: usize,
    /// The instruction as written, on one line: keyword uppercased, continuations joined,
    /// variables not substituted (a heredoc's body is not included), for logs.
    pub text: String,
    /// What the step does, values substituted.
    pub instruction: Instruction,
    cache_key: String,
}

/// A command for RUN, CMD or ENTRYPOINT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Command {
    /// Shell form: run with the stage's SHELL (`/bin/sh -c` unless changed).
    Shell(String),
    /// Exec form (a JSON array): run as is.
    Exec(Vec<String>),
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Instruction {
    /// Run a command in the sandbox; the shell expands its variables.
    Run {
        /// The command.
        command: Command,
    },
    /// Copy files from the build context.
    Copy {
        /// Clean paths relative to the context root, globs as written.
        sources: Vec<String>,
        /// The absolute destination; a trailing `/` means a directory.
        dest: String,
        /// `--chown`, substituted.
        chown: Option<String>,
        /// `--chmod`, substituted.
        chmod: Option<String>,
    },
    /// Copy files from the build context, extracting local tar archives.
    Add {
        /// Clean paths relative to the context root, globs as written.
        sources: Vec<String>,
        /// The absolute destination; a trailing `/` means a directory.
        dest: String,
        /// `--chown`, substituted.
        chown: Option<String>,
        /// `--chmod`, substituted.
        chmod: Option<String>,
        /// Always true: a local tar source is extracted; the builder decides what is a tar.
        extract: bool,
    },
    /// Set environment variables for later steps and the image.
    Env(Vec<(String, String)>),
    /// Declare a build argument.
    Arg {
        /// The argument's name.
        name: String,
        /// The default as written after `=`, substituted.
        default: Option<String>,
        /// The value later steps see: the build arg, else the default, else (for a name declared
        /// before the first FROM) that value; `None` leaves the name unset.
        value: Option<String>,
    },
    /// The absolute, normalised working directory for later steps.
    Workdir(String),
    /// The user later steps run as.
    User(String),
    /// Image labels.
    Label(Vec<(String, String)>),
    /// Ports, each `port/proto` (a bare port is `/tcp`).
    Expose(Vec<String>),
    /// The image's entrypoint.
    Entrypoint(Command),
    /// The image's command.
    Cmd(Command),
    /// The shell later shell-form RUN, CMD and ENTRYPOINT run with.
    Shell(Vec<String>),
}

/// The environment a step runs in: what earlier steps of its stage set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepContext {
    /// The absolute working directory.
    pub workdir: String,
    /// The user, once the base image or a USER set one.
    pub user: Option<String>,
    /// The shell for shell-form commands.
    pub shell: Vec<String>,
    /// ENV values (the base image's, then the stage's).
    pub env: BTreeMap<String, String>,
    /// ARG values declared in the stage (visible to RUN as environment, not kept in the image).
    pub args: BTreeMap<String, String>,
    #[serde(skip)]
    bytes: usize,
}

/// Why a Dockerfile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerfileError {
    /// The Dockerfile holds no instruction.
    #[error("the Dockerfile is empty: it has no instructions")]
    Empty,
    /// The Dockerfile is larger than [`MAX_BYTES`].
    #[error("the Dockerfile is {bytes} bytes; at most {MAX_BYTES} are accepted")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// The Dockerfile has instructions but no FROM.
    #[error("the Dockerfile has no FROM")]
    MissingFrom,
    /// The Dockerfile holds more than [`MAX_INSTRUCTIONS`] instructions.
    #[error("line {line}: more than {MAX_INSTRUCTIONS} instructions")]
    TooManyInstructions {
        /// The line of the first instruction over the limit.
        line: usize,
    },
    /// The escape directive names a character other than `\` or `` ` ``.
    #[error("line {line}: the escape directive must be \\ or `, not {value:?}")]
    Escape {
        /// The line.
        line: usize,
        /// The value given.
        value: String,
    },
    /// A line starts with a word that is no instruction.
    #[error("line {line}: unknown instruction {word:?}")]
    UnknownInstruction {
        /// The line.
        line: usize,
        /// The word.
        word: String,
    },
    /// An instruction or form this builder refuses.
    #[error("line {line}: {what} is not supported: {why}")]
    Unsupported {
        /// The line.
        line: usize,
        /// The instruction or flag.
        what: String,
        /// Why, and what to do instead.
        why: &'static str,
    },
    /// An instruction other than ARG before the first FROM.
    #[error("line {line}: {instruction} comes before the first FROM (only ARG may)")]
    NoFrom {
        /// The line.
        line: usize,
        /// The instruction.
        instruction: String,
    },
    /// An instruction without the arguments it needs.
    #[error("line {line}: {instruction} needs {expected}")]
    MissingArguments {
        /// The line.
        line: usize,
        /// The instruction.
        instruction: String,
        /// What it needs.
        expected: &'static str,
    },
    /// An argument of the wrong shape (a bad flag, port, name or stage).
    #[error("line {line}: {instruction}: {message}")]
    BadArgument {
        /// The line.
        line: usize,
        /// The instruction.
        instruction: String,
        /// What is wrong.
        message: String,
    },
    /// A quote opened and never closed.
    #[error("line {line}: unterminated quote")]
    UnterminatedQuote {
        /// The line.
        line: usize,
    },
    /// A `${` never closed.
    #[error("line {line}: unterminated ${{")]
    UnterminatedBrace {
        /// The line.
        line: usize,
    },
    /// A `${…}` this parser does not substitute.
    #[error(
        "line {line}: bad substitution {text:?} (supported: $V, ${{V}}, ${{V:-word}}, ${{V:+word}}, ${{V-word}}, ${{V+word}})"
    )]
    BadSubstitution {
        /// The line.
        line: usize,
        /// The text from `${`.
        text: String,
    },
    /// A substitution made a value, a stage's ARG and ENV values, or all substitutions together
    /// too large.
    #[error("line {line}: values grow beyond {limit} bytes")]
    TooLong {
        /// The line.
        line: usize,
        /// The limit crossed.
        limit: usize,
    },
    /// A heredoc whose terminator never comes.
    #[error("line {line}: heredoc {word:?} is never terminated")]
    UnterminatedHeredoc {
        /// The line of the instruction.
        line: usize,
        /// The terminator expected.
        word: String,
    },
    /// ADD of a URL.
    #[error("line {line}: ADD from a URL is not supported; download in a RUN step ({url:?})")]
    AddUrl {
        /// The line.
        line: usize,
        /// The URL.
        url: String,
    },
    /// A COPY or ADD source outside the build context.
    #[error("line {line}: source {path:?} climbs above the build context")]
    OutsideContext {
        /// The line.
        line: usize,
        /// The source as written (after substitution).
        path: String,
    },
}

type Result<T> = std::result::Result<T, DockerfileError>;

impl Dockerfile {
    /// The stage that is built: the last one (always `Some` for a parsed Dockerfile).
    pub fn target(&self) -> Option<&Stage> {
        self.stages.last()
    }
}

impl Step {
    /// The step's cache key: `sha256:` and the hex digest of a versioned encoding of
    /// - the instruction with every value substituted (for COPY/ADD the cleaned sources, the
    ///   resolved destination, `--chown`/`--chmod`; for RUN the whole command, heredoc bodies
    ///   included);
    /// - the working directory, user and shell in effect (a RUN, CMD or ENTRYPOINT depends on them);
    /// - for RUN only, every ENV and ARG value the step can see, since they are its environment —
    ///   so two builds with different build args never share a RUN. They enter as a digest of the
    ///   stage's starting context (the base image's env, working directory and user) chained over
    ///   every ENV, ARG, WORKDIR, USER and SHELL step before, with its substituted values: equal
    ///   for equal Dockerfiles, build args and base configs; a reordered but equivalent Dockerfile
    ///   may miss the cache, never hit it wrongly. Other steps see ARG values
    ///   only through substitution, which the first item already covers (Docker's rule: an ARG
    ///   change misses the cache at its first use, not at its declaration).
    ///
    /// It does not cover the parent layer or the contents of context files: the builder chains
    /// the key with the parent's and hashes the files a COPY/ADD reads.
    pub fn cache_key(&self) -> &str {
        &self.cache_key
    }
}

impl StepContext {
    /// The context at the start of a stage built on an image with `base`'s config.
    pub fn new(base: &RunConfig) -> StepContext {
        let mut ctx = StepContext {
            workdir: "/".into(),
            user: base.user.clone().filter(|u| !u.is_empty()),
            shell: vec!["/bin/sh".into(), "-c".into()],
            env: BTreeMap::new(),
            args: BTreeMap::new(),
            bytes: 0,
        };
        if let Some(dir) = base.working_dir.as_deref().filter(|d| !d.is_empty()) {
            ctx.workdir = resolve_path("/", dir);
        }
        for entry in &base.env {
            let (key, value) = entry.split_once('=').unwrap_or((entry.as_str(), ""));
            ctx.set_env(key, value);
        }
        ctx
    }

    /// Applies what `instruction` changes for the steps after it (ENV, ARG, WORKDIR, USER, SHELL;
    /// others change nothing).
    pub fn apply(&mut self, instruction: &Instruction) {
        match instruction {
            Instruction::Env(pairs) => {
                for (key, value) in pairs {
                    self.set_env(key, value);
                }
            }
            Instruction::Arg { name, value, .. } => {
                if let Some(old) = self.args.remove(name) {
                    self.bytes = self.bytes.saturating_sub(name.len() + old.len());
                }
                if let Some(value) = value {
                    self.bytes += name.len() + value.len();
                    self.args.insert(name.clone(), value.clone());
                }
            }
            Instruction::Workdir(dir) => self.workdir = dir.clone(),
            Instruction::User(user) => self.user = Some(user.clone()),
            Instruction::Shell(shell) => self.shell = shell.clone(),
            _ => {}
        }
    }

    fn set_env(&mut self, key: &str, value: &str) {
        if let Some(old) = self.env.insert(key.to_string(), value.to_string()) {
            self.bytes = self.bytes.saturating_sub(key.len() + old.len());
        }
        self.bytes += key.len() + value.len();
    }

    /// A variable's value as substitution sees it: ENV wins over ARG.
    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .or_else(|| self.args.get(name))
            .map(String::as_str)
    }
}

/// Parses `text` with `build_args` (`--build-arg NAME=value`), knowing nothing of the base image.
pub fn parse(text: &str, build_args: &BTreeMap<String, String>) -> Result<Dockerfile> {
    parse_with_base(text, build_args, &RunConfig::default())
}

/// Parses `text` as [`parse`] does, the built (last) stage starting from `base`, its base image's
/// config: its env is visible to substitution (`ENV PATH=/opt/bin:$PATH`), its working directory
/// and user are where the stage starts. The builder parses once to learn the last stage's image,
/// fetches that image's config, and parses again with it.
pub fn parse_with_base(
    text: &str,
    build_args: &BTreeMap<String, String>,
    base: &RunConfig,
) -> Result<Dockerfile> {
    if text.len() > MAX_BYTES {
        return Err(DockerfileError::TooLarge { bytes: text.len() });
    }
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let escape = escape_directive(&lines)?;
    let logical = split_instructions(&lines, escape)?;
    if logical.is_empty() {
        return Err(DockerfileError::Empty);
    }
    let last_from = logical
        .iter()
        .rposition(|l| l.keyword.eq_ignore_ascii_case("FROM"));
    let mut parser = Parser {
        build_args,
        escape,
        base,
        last_from,
        warnings: Vec::new(),
        meta: BTreeMap::new(),
        meta_bytes: 0,
        stage_names: BTreeSet::new(),
        declared: BTreeSet::new(),
        stages: Vec::new(),
        current: None,
        substituted: std::cell::Cell::new(0),
    };
    for (index, instruction) in logical.iter().enumerate() {
        parser.instruction(index, instruction)?;
    }
    parser.finish()
}

/// The state of the stage being parsed.
struct Current {
    stage: Stage,
    ctx: StepContext,
    /// A digest that determines `ctx`: of the stage's starting context, chained over every step
    /// that changed it since (so it costs one step's size per step, not the context's).
    ctx_digest: String,
}

struct Parser<'a> {
    build_args: &'a BTreeMap<String, String>,
    escape: char,
    base: &'a RunConfig,
    last_from: Option<usize>,
    warnings: Vec<String>,
    /// ARGs declared before the first FROM, with their values.
    meta: BTreeMap<String, String>,
    /// Bytes of `meta`'s names and values.
    meta_bytes: usize,
    /// The names of the stages so far (`AS name`).
    stage_names: BTreeSet<String>,
    /// Every name an ARG declares, for the unused build arg warning.
    declared: BTreeSet<String>,
    stages: Vec<Stage>,
    current: Option<Current>,
    /// Bytes of variable values substituted so far.
    substituted: std::cell::Cell<usize>,
}

#[cfg(test)]
mod tests;
