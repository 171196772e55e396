//! The instructions of a stage: each one interpreted into a [`Step`] (its words substituted as
//! the instruction takes them, `COPY`/`ADD` sources and destinations resolved, `RUN`'s forms), with
//! the cache key that covers it.

use super::*;

impl Parser<'_> {
    pub(super) fn step(
        &mut self,
        keyword: &str,
        logical: &Logical,
        current: &mut Current,
    ) -> Result<()> {
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

    pub(super) fn copy(
        &mut self,
        keyword: &str,
        logical: &Logical,
        ctx: &StepContext,
    ) -> Result<Instruction> {
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
    pub(super) fn pairs(
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
    pub(super) fn word(&self, line: usize, text: &str, vars: &dyn Vars) -> Result<String> {
        self.expand(line, text, vars, true)
    }

    /// `text` split into words at unquoted blanks, each substituted.
    pub(super) fn words(&self, line: usize, text: &str, vars: &dyn Vars) -> Result<Vec<String>> {
        split_raw(text, self.escape)
            .ok_or(DockerfileError::UnterminatedQuote { line })?
            .iter()
            .map(|w| self.expand(line, w, vars, true))
            .collect()
    }

    pub(super) fn expand(
        &self,
        line: usize,
        text: &str,
        vars: &dyn Vars,
        quotes: bool,
    ) -> Result<String> {
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
}

/// RUN's command: exec form, a heredoc script, or shell form.
pub(super) fn run_command(logical: &Logical) -> Result<Command> {
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
pub(super) fn command(rest: &str) -> Option<Command> {
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

pub(super) fn is_name(name: &str) -> bool {
    name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
        && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
}

pub(super) fn is_url(source: &str) -> bool {
    source.starts_with("http://")
        || source.starts_with("https://")
        || source.starts_with("git@")
        || source.contains("://")
}

/// `source` as a clean path relative to the context root (`.` for the root); `None` if a `..`
/// climbs above it.
pub(super) fn context_path(source: &str) -> Option<String> {
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
pub(super) fn resolve_path(base: &str, path: &str) -> String {
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
pub(super) fn expose_port(word: &str) -> Option<String> {
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

pub(super) fn changes_context(instruction: &Instruction) -> bool {
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
pub(super) fn cache_key(instruction: &Instruction, current: &Current) -> String {
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
pub(super) fn chain(previous: &str, change: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update(b"\0");
    hasher.update(change.as_bytes());
    hex::encode(hasher.finalize())
}

/// A value's canonical text for cache keys. Serialising these types cannot fail; Debug is the
/// (equally unambiguous) fallback.
pub(super) fn encode<T: Serialize + std::fmt::Debug>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("{value:?}"))
}

pub(super) fn missing(line: usize, instruction: &str) -> DockerfileError {
    DockerfileError::MissingArguments {
        line,
        instruction: instruction.into(),
        expected: "arguments",
    }
}

pub(super) fn bad(line: usize, instruction: &str, word: &str, expected: &str) -> DockerfileError {
    DockerfileError::BadArgument {
        line,
        instruction: instruction.into(),
        message: format!("{:?} is not {expected}", short(word)),
    }
}

/// At most 64 characters of `word`, so an error about hostile input stays small.
pub(super) fn short(word: &str) -> String {
    match word.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", &word[..at]),
        None => word.to_string(),
    }
}
