//! The stages of a Dockerfile: which instruction goes where (`FROM` opens a stage, `ARG` before the
//! first `FROM` declares what `FROM` may use, `ARG` in a stage declares what its steps may), and the
//! finished plan with its warnings.

use super::instructions::{bad, chain, encode, is_name, missing, short};
use super::*;

impl Parser<'_> {
    pub(super) fn instruction(&mut self, index: usize, logical: &Logical) -> Result<()> {
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

    pub(super) fn from(&mut self, index: usize, logical: &Logical) -> Result<()> {
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

    pub(super) fn meta_arg(&mut self, logical: &Logical) -> Result<()> {
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

    pub(super) fn stage_arg(
        &mut self,
        logical: &Logical,
        ctx: &StepContext,
    ) -> Result<Instruction> {
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
    pub(super) fn arg_decl(
        &self,
        logical: &Logical,
        vars: &dyn Vars,
    ) -> Result<(String, Option<String>)> {
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

    pub(super) fn finish(mut self) -> Result<Dockerfile> {
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
