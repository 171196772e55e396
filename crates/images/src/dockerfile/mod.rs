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
//! bodies) and words; `subst` substitutes variables in one word; this file interprets each
//! instruction and keeps the stage's context.

use crate::config::RunConfig;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

mod lex;
mod subst;

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

impl Parser<'_> {
    fn instruction(&mut self, index: usize, logical: &Logical) -> Result<()> {
        let keyword = logical.keyword.to_ascii_uppercase();
        let line = logical.line;
        match keyword.as_str() {
            "FROM" => return self.from(index, logical),
            "ARG" if self.current.is_none() => return self.meta_arg(logical),
            "ONBUILD" => {
                return Err(DockerfileError::Unsupported {
                    line,
                    what: "ONBUILD".into(),
                    why: "a template is never a base for another Dockerfile build",
                })
            }
            "RUN" | "COPY" | "ADD" | "ENV" | "ARG" | "WORKDIR" | "USER" | "LABEL" | "EXPOSE"
            | "ENTRYPOINT" | "CMD" | "SHELL" | "MAINTAINER" | "VOLUME" | "HEALTHCHECK"
            | "STOPSIGNAL" => {}
            _ => {
                return Err(DockerfileError::UnknownInstruction {
                    line,
                    word: short(&logical.keyword),
                })
            }
        }
        let Some(mut current) = self.current.take() else {
            return Err(DockerfileError::NoFrom {
                line,
                instruction: keyword,
            });
        };
        let result = self.step(&keyword, logical, &mut current);
        self.current = Some(current);
        result
    }

    fn step(&mut self, keyword: &str, logical: &Logical, current: &mut Current) -> Result<()> {
        let line = logical.line;
        let rest = logical.rest.as_str();
        let ctx = &current.ctx;
        let instruction = match keyword {
            "RUN" => Instruction::Run {
                command: run_command(logical)?,
            },
            "CMD" => Instruction::Cmd(command(rest).ok_or_else(|| missing(line, "CMD"))?),
            "ENTRYPOINT" => {
                Instruction::Entrypoint(command(rest).ok_or_else(|| missing(line, "ENTRYPOINT"))?)
            }
            "SHELL" => match command(rest) {
                Some(Command::Exec(shell)) if !shell.is_empty() => Instruction::Shell(shell),
                _ => {
                    return Err(DockerfileError::BadArgument {
                        line,
                        instruction: "SHELL".into(),
                        message: "expects a JSON array of strings, e.g. [\"/bin/bash\", \"-c\"]"
                            .into(),
                    })
                }
            },
            "COPY" | "ADD" => self.copy(keyword, logical, ctx)?,
            "ENV" => Instruction::Env(self.pairs("ENV", line, rest, ctx)?),
            "LABEL" => Instruction::Label(self.pairs("LABEL", line, rest, ctx)?),
            "ARG" => self.stage_arg(logical, ctx)?,
            "WORKDIR" => {
                let dir = self.word(line, rest, ctx)?;
                if dir.is_empty() {
                    return Err(missing(line, "WORKDIR"));
                }
                Instruction::Workdir(resolve_path(&ctx.workdir, &dir))
            }
            "USER" => {
                let user = self.word(line, rest, ctx)?;
                if user.is_empty() {
                    return Err(missing(line, "USER"));
                }
                Instruction::User(user)
            }
            "EXPOSE" => {
                let words = self.words(line, rest, ctx)?;
                if words.is_empty() {
                    return Err(missing(line, "EXPOSE"));
                }
                let ports = words
                    .iter()
                    .map(|w| expose_port(w).ok_or_else(|| bad(line, "EXPOSE", w, "a port")))
                    .collect::<Result<Vec<_>>>()?;
                Instruction::Expose(ports)
            }
            _ => {
                // MAINTAINER, VOLUME, HEALTHCHECK, STOPSIGNAL.
                self.warnings.push(format!(
                    "line {line}: {keyword} is ignored: a template has no use for it"
                ));
                return Ok(());
            }
        };
        // The key covers the context the step runs in, before its own changes.
        let cache_key = cache_key(&instruction, current);
        current.ctx.apply(&instruction);
        if changes_context(&instruction) {
            current.ctx_digest = chain(&current.ctx_digest, &encode(&instruction));
        }
        if current.ctx.bytes > MAX_STATE_BYTES {
            return Err(DockerfileError::TooLong {
                line,
                limit: MAX_STATE_BYTES,
            });
        }
        let text = if rest.is_empty() {
            keyword.to_string()
        } else {
            format!("{keyword} {rest}")
        };
        current.stage.steps.push(Step {
            line,
            text,
            instruction,
            cache_key,
        });
        Ok(())
    }

    fn from(&mut self, index: usize, logical: &Logical) -> Result<()> {
        let line = logical.line;
        if let Some(current) = self.current.take() {
            self.stages.push(current.stage);
        }
        let mut words = self.words(line, &logical.rest, &self.meta)?.into_iter();
        let mut image = None;
        for word in words.by_ref() {
            if let Some(flag) = word.strip_prefix("--") {
                if flag.starts_with("platform=") {
                    self.warnings
                        .push(format!("line {line}: FROM --platform is ignored"));
                    continue;
                }
                return Err(bad(line, "FROM", &word, "a flag (only --platform)"));
            }
            image = Some(word);
            break;
        }
        let Some(image) = image.filter(|i| !i.is_empty()) else {
            return Err(missing(line, "FROM"));
        };
        let rest: Vec<String> = words.collect();
        let name = match rest.as_slice() {
            [] => None,
            [as_, name] if as_.eq_ignore_ascii_case("AS") => {
                let name = name.to_ascii_lowercase();
                let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if !valid {
                    return Err(bad(line, "FROM", &name, "a stage name"));
                }
                Some(name)
            }
            _ => {
                return Err(DockerfileError::BadArgument {
                    line,
                    instruction: "FROM".into(),
                    message: "expects IMAGE [AS NAME]".into(),
                })
            }
        };
        if self.stage_names.contains(&image.to_ascii_lowercase()) {
            return Err(DockerfileError::Unsupported {
                line,
                what: format!("FROM {image} (an earlier stage)"),
                why: "only the last stage is built; start it from an image",
            });
        }
        if let Some(name) = &name {
            self.stage_names.insert(name.clone());
        }
        let base = if Some(index) == self.last_from {
            self.base.clone()
        } else {
            RunConfig::default()
        };
        self.current = Some(Current {
            stage: Stage {
                from: BaseImage { image, line },
                name,
                steps: Vec::new(),
            },
            ctx_digest: chain("", &encode(&StepContext::new(&base))),
            ctx: StepContext::new(&base),
        });
        Ok(())
    }

    fn meta_arg(&mut self, logical: &Logical) -> Result<()> {
        let (name, default) = self.arg_decl(logical, &self.meta)?;
        self.declared.insert(name.clone());
        let value = self.build_args.get(&name).cloned().or(default);
        if let Some(old) = self.meta.remove(&name) {
            self.meta_bytes -= name.len() + old.len();
        }
        if let Some(value) = value {
            self.meta_bytes += name.len() + value.len();
            self.meta.insert(name, value);
        }
        if self.meta_bytes > MAX_STATE_BYTES {
            return Err(DockerfileError::TooLong {
                line: logical.line,
                limit: MAX_STATE_BYTES,
            });
        }
        Ok(())
    }

    fn stage_arg(&mut self, logical: &Logical, ctx: &StepContext) -> Result<Instruction> {
        let (name, default) = self.arg_decl(logical, ctx)?;
        self.declared.insert(name.clone());
        let value = self
            .build_args
            .get(&name)
            .cloned()
            .or_else(|| default.clone())
            .or_else(|| self.meta.get(&name).cloned());
        Ok(Instruction::Arg {
            name,
            default,
            value,
        })
    }

    /// `ARG NAME[=default]`, the default substituted with `vars`.
    fn arg_decl(&self, logical: &Logical, vars: &dyn Vars) -> Result<(String, Option<String>)> {
        let line = logical.line;
        let words = split_raw(&logical.rest, self.escape)
            .ok_or(DockerfileError::UnterminatedQuote { line })?;
        let [word] = words.as_slice() else {
            if words.is_empty() {
                return Err(missing(line, "ARG"));
            }
            return Err(DockerfileError::BadArgument {
                line,
                instruction: "ARG".into(),
                message: "declares one argument per instruction".into(),
            });
        };
        let (name, default) = match word.split_once('=') {
            Some((name, default)) => (name, Some(self.word(line, default, vars)?)),
            None => (word.as_str(), None),
        };
        if !is_name(name) {
            return Err(bad(line, "ARG", name, "a variable name"));
        }
        Ok((name.to_string(), default))
    }

    fn copy(&mut self, keyword: &str, logical: &Logical, ctx: &StepContext) -> Result<Instruction> {
        let line = logical.line;
        let raw = split_raw(&logical.rest, self.escape)
            .ok_or(DockerfileError::UnterminatedQuote { line })?;
        let mut chown = None;
        let mut chmod = None;
        let mut flags = 0;
        for word in raw.iter().take_while(|w| w.starts_with("--")) {
            flags += 1;
            let (flag, value) = word.split_once('=').unwrap_or((word.as_str(), ""));
            match flag {
                "--chown" | "--chmod" => {
                    let value = self.word(line, value, ctx)?;
                    if value.is_empty() {
                        return Err(bad(line, keyword, word, "FLAG=VALUE"));
                    }
                    if flag == "--chown" {
                        chown = Some(value);
                    } else {
                        chmod = Some(value);
                    }
                }
                "--link" => self
                    .warnings
                    .push(format!("line {line}: {keyword} --link is ignored")),
                "--from" => {
                    return Err(DockerfileError::Unsupported {
                        line,
                        what: format!("{keyword} --from"),
                        why: "only single-stage builds are supported; copy from the build context",
                    })
                }
                _ => {
                    return Err(bad(
                        line,
                        keyword,
                        flag,
                        "a flag (--chown, --chmod, --link)",
                    ))
                }
            }
        }
        // The arguments after the flags, as written: a JSON array, or words.
        let after_flags = skip_words(&logical.rest, flags, self.escape);
        let words = match serde_json::from_str::<Vec<String>>(after_flags) {
            Ok(words) if after_flags.starts_with('[') => words
                .iter()
                .map(|w| self.expand(line, w, ctx, false))
                .collect::<Result<Vec<_>>>()?,
            _ => raw[flags..]
                .iter()
                .map(|w| {
                    if w.starts_with("<<") {
                        return Err(DockerfileError::Unsupported {
                            line,
                            what: format!("a heredoc in {keyword}"),
                            why: "heredocs are supported in RUN only; write the file in a RUN step",
                        });
                    }
                    self.expand(line, w, ctx, true)
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let Some((dest, sources)) = words.split_last().filter(|(_, s)| !s.is_empty()) else {
            return Err(DockerfileError::MissingArguments {
                line,
                instruction: keyword.into(),
                expected: "at least one source and a destination",
            });
        };
        let sources = sources
            .iter()
            .map(|source| {
                if source.is_empty() {
                    return Err(DockerfileError::BadArgument {
                        line,
                        instruction: keyword.into(),
                        message: "a source is empty after substitution".into(),
                    });
                }
                if keyword == "ADD" && is_url(source) {
                    return Err(DockerfileError::AddUrl {
                        line,
                        url: source.clone(),
                    });
                }
                context_path(source).ok_or_else(|| DockerfileError::OutsideContext {
                    line,
                    path: source.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if dest.is_empty() {
            return Err(missing(line, keyword));
        }
        let mut resolved = resolve_path(&ctx.workdir, dest);
        let is_dir = dest.ends_with('/') || dest == "." || dest.ends_with("/.");
        if is_dir && !resolved.ends_with('/') {
            resolved.push('/');
        }
        Ok(if keyword == "ADD" {
            Instruction::Add {
                sources,
                dest: resolved,
                chown,
                chmod,
                extract: true,
            }
        } else {
            Instruction::Copy {
                sources,
                dest: resolved,
                chown,
                chmod,
            }
        })
    }

    /// ENV or LABEL pairs: `K=V K2="v 2"`, or the legacy `K value with spaces`.
    fn pairs(
        &mut self,
        instruction: &str,
        line: usize,
        rest: &str,
        vars: &dyn Vars,
    ) -> Result<Vec<(String, String)>> {
        let words =
            split_raw(rest, self.escape).ok_or(DockerfileError::UnterminatedQuote { line })?;
        let Some(first) = words.first() else {
            return Err(DockerfileError::MissingArguments {
                line,
                instruction: instruction.into(),
                expected: "KEY=VALUE pairs",
            });
        };
        let mut pairs = Vec::new();
        if !first.contains('=') {
            let value = skip_words(rest, 1, self.escape);
            if value.is_empty() {
                return Err(DockerfileError::MissingArguments {
                    line,
                    instruction: instruction.into(),
                    expected: "a value after the key",
                });
            }
            let key = self.expand(line, first, vars, true)?;
            pairs.push((key, self.word(line, value, vars)?));
        } else {
            for word in &words {
                let Some((key, value)) = word.split_once('=') else {
                    return Err(bad(line, instruction, word, "KEY=VALUE"));
                };
                let key = self.expand(line, key, vars, true)?;
                pairs.push((key, self.expand(line, value, vars, true)?));
            }
        }
        for (key, _) in &pairs {
            if key.is_empty() || (instruction == "ENV" && key.contains(char::is_whitespace)) {
                return Err(bad(line, instruction, key, "a name"));
            }
        }
        Ok(pairs)
    }

    /// `text` as one word, quotes removed and variables substituted.
    fn word(&self, line: usize, text: &str, vars: &dyn Vars) -> Result<String> {
        self.expand(line, text, vars, true)
    }

    /// `text` split into words at unquoted blanks, each substituted.
    fn words(&self, line: usize, text: &str, vars: &dyn Vars) -> Result<Vec<String>> {
        split_raw(text, self.escape)
            .ok_or(DockerfileError::UnterminatedQuote { line })?
            .iter()
            .map(|w| self.expand(line, w, vars, true))
            .collect()
    }

    fn expand(&self, line: usize, text: &str, vars: &dyn Vars, quotes: bool) -> Result<String> {
        let chars: Vec<char> = text.chars().collect();
        let mut expander = Expander {
            chars: &chars,
            at: 0,
            escape: self.escape,
            vars,
            line,
            substituted: &self.substituted,
        };
        expander.run(quotes, None, 0)
    }

    fn finish(mut self) -> Result<Dockerfile> {
        if let Some(current) = self.current.take() {
            self.stages.push(current.stage);
        }
        if self.stages.is_empty() {
            // Only ARGs: there is nothing to build.
            return Err(DockerfileError::MissingFrom);
        }
        for name in self.build_args.keys() {
            if !self.declared.contains(name) {
                self.warnings.push(format!(
                    "build arg {name:?} is not declared by any ARG and was ignored"
                ));
            }
        }
        Ok(Dockerfile {
            stages: self.stages,
            warnings: self.warnings,
        })
    }
}

/// RUN's command: exec form, a heredoc script, or shell form.
fn run_command(logical: &Logical) -> Result<Command> {
    let line = logical.line;
    let rest = logical.rest.as_str();
    if rest.starts_with("--") {
        return Err(DockerfileError::Unsupported {
            line,
            what: "RUN flags (--mount, --network, --security)".into(),
            why: "each step runs in a fresh sandbox with the build's network",
        });
    }
    if !logical.heredocs.is_empty() {
        let markers = heredoc_markers(rest);
        if let Some(first) = markers.first().filter(|m| m.start == 0) {
            if markers.len() > 1 || !rest[first.end..].trim().is_empty() {
                return Err(DockerfileError::Unsupported {
                    line,
                    what: "a RUN heredoc followed by more text".into(),
                    why: "write `RUN <<EOF` alone, or put the command first (`RUN sh <<EOF`)",
                });
            }
            let body = &logical.heredocs[0];
            let script = if first.strip_tabs {
                body.split('\n')
                    .map(|l| l.trim_start_matches('\t'))
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                body.clone()
            };
            return Ok(Command::Shell(script));
        }
        let mut script = rest.to_string();
        for (marker, body) in markers.iter().zip(&logical.heredocs) {
            script.push('\n');
            if !body.is_empty() {
                script.push_str(body);
                script.push('\n');
            }
            script.push_str(&marker.word);
        }
        return Ok(Command::Shell(script));
    }
    match command(rest) {
        Some(Command::Exec(argv)) if argv.is_empty() => Err(missing(line, "RUN")),
        Some(command) => Ok(command),
        None => Err(missing(line, "RUN")),
    }
}

/// Exec form when `rest` is a JSON array of strings, else shell form; `None` when empty.
fn command(rest: &str) -> Option<Command> {
    if rest.is_empty() {
        return None;
    }
    if rest.starts_with('[') {
        if let Ok(argv) = serde_json::from_str::<Vec<String>>(rest) {
            return Some(Command::Exec(argv));
        }
    }
    Some(Command::Shell(rest.to_string()))
}

fn is_name(name: &str) -> bool {
    name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
        && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn is_url(source: &str) -> bool {
    source.starts_with("http://")
        || source.starts_with("https://")
        || source.starts_with("git@")
        || source.contains("://")
}

/// `source` as a clean path relative to the context root (`.` for the root); `None` if a `..`
/// climbs above it.
fn context_path(source: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in source.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Some(".".into());
    }
    Some(parts.join("/"))
}

/// `path` resolved against the absolute `base` and normalised (`..` stops at `/`).
fn resolve_path(base: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{base}/{path}")
    };
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `8080` → `8080/tcp`, `53/UDP` → `53/udp`; ranges (`8000-8010`) allowed.
fn expose_port(word: &str) -> Option<String> {
    let (port, proto) = word.split_once('/').unwrap_or((word, "tcp"));
    let proto = proto.to_ascii_lowercase();
    if !matches!(proto.as_str(), "tcp" | "udp" | "sctp") {
        return None;
    }
    let valid = |p: &str| p.parse::<u16>().is_ok_and(|n| n > 0);
    let ok = match port.split_once('-') {
        Some((low, high)) => valid(low) && valid(high),
        None => valid(port),
    };
    ok.then(|| format!("{port}/{proto}"))
}

fn changes_context(instruction: &Instruction) -> bool {
    matches!(
        instruction,
        Instruction::Env(_)
            | Instruction::Arg { .. }
            | Instruction::Workdir(_)
            | Instruction::User(_)
            | Instruction::Shell(_)
    )
}

/// The key [`Step::cache_key`] documents, over the context the step runs in.
fn cache_key(instruction: &Instruction, current: &Current) -> String {
    let ctx = &current.ctx;
    let mut hasher = Sha256::new();
    hasher.update(b"sandboxd-dockerfile-step-v1\0");
    hasher.update(encode(instruction).as_bytes());
    hasher.update(b"\0");
    hasher.update(encode(&(&ctx.workdir, &ctx.user, &ctx.shell)).as_bytes());
    if matches!(instruction, Instruction::Run { .. }) {
        hasher.update(b"\0");
        hasher.update(current.ctx_digest.as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// The hex digest of `previous` followed by `change`.
fn chain(previous: &str, change: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update(b"\0");
    hasher.update(change.as_bytes());
    hex::encode(hasher.finalize())
}

/// A value's canonical text for cache keys. Serialising these types cannot fail; Debug is the
/// (equally unambiguous) fallback.
fn encode<T: Serialize + std::fmt::Debug>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("{value:?}"))
}

fn missing(line: usize, instruction: &str) -> DockerfileError {
    DockerfileError::MissingArguments {
        line,
        instruction: instruction.into(),
        expected: "arguments",
    }
}

fn bad(line: usize, instruction: &str, word: &str, expected: &str) -> DockerfileError {
    DockerfileError::BadArgument {
        line,
        instruction: instruction.into(),
        message: format!("{:?} is not {expected}", short(word)),
    }
}

/// At most 64 characters of `word`, so an error about hostile input stays small.
fn short(word: &str) -> String {
    match word.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", &word[..at]),
        None => word.to_string(),
    }
}

#[cfg(test)]
mod tests;
