//! A template JSON translated onto the Dockerfile builder and its build started, polled and
//! reported as E2B asks (see the module contract in [`super`]).

use super::*;

/// Where a template build starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum E2bFrom {
    /// `fromImage`: an image reference.
    Image(String),
    /// `fromTemplate`: a template (or `base`).
    Template(String),
}

/// One step of E2B's template JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct E2bStep {
    /// `COPY`, `ENV`, `RUN`, `WORKDIR` or `USER`.
    pub kind: String,
    pub args: Vec<String>,
    /// COPY: the hash its files were uploaded under.
    pub files_hash: Option<String>,
    /// Skip the cache from this step on.
    pub force: bool,
}

/// E2B's template JSON (`POST /v2/templates/{id}/builds/{buildID}`), parsed.
#[derive(Debug, Clone)]
pub struct E2bBuild {
    pub from: E2bFrom,
    /// `fromImageRegistry` credentials, for this build's pulls only.
    pub credentials: Option<sandboxd_images::Credentials>,
    /// Skip the cache for the whole build.
    pub force: bool,
    pub steps: Vec<E2bStep>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
}

/// A translated template: the Dockerfile and, per COPY, (context directory, files hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    pub dockerfile: String,
    pub copies: Vec<(String, String)>,
}

pub(super) fn bad(message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest(message.into())
}

/// `value` as a Dockerfile double-quoted word that substitutes nothing; a line break cannot be
/// written in one instruction, so it is refused.
pub(super) fn quoted(what: &str, value: &str) -> Result<String, ServiceError> {
    if value.contains(['\n', '\r']) {
        return Err(bad(format!("{what} must not contain a line break")));
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// A JSON-array (exec form) argument list; `$` escaped, since COPY substitutes even there.
pub(super) fn json_words(words: &[String], escape_dollar: bool) -> String {
    let words: Vec<String> = words
        .iter()
        .map(|w| {
            if escape_dollar {
                w.replace('$', "\\$")
            } else {
                w.clone()
            }
        })
        .collect();
    serde_json::to_string(&words).unwrap_or_else(|_| "[]".into())
}

pub(super) fn plain_word(what: &str, value: &str) -> Result<String, ServiceError> {
    if value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(bad(format!(
            "{what} {value:?} must be one word without quotes or backslashes"
        )));
    }
    Ok(value.replace('$', "\\$"))
}

pub(super) fn env_key_ok(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Translates `build` into a Dockerfile whose COPY steps read `step-<n>/` of the context;
/// `nonce` makes forced steps miss the cache. Refuses (400) what cannot be written.
pub fn dockerfile_of(build: &E2bBuild, nonce: &str) -> Result<Translated, ServiceError> {
    let mut lines = vec!["# e2b base".to_string()];
    match &build.from {
        E2bFrom::Image(image) if E2B_BASE_IMAGES.contains(&image.as_str()) => {
            lines.push("FROM base".into())
        }
        E2bFrom::Image(image) | E2bFrom::Template(image) => {
            lines.push(format!("FROM {}", plain_word("the base image", image)?))
        }
    }
    // E2B's steps run as `user` unless a step says otherwise.
    let mut user = "user".to_string();
    lines.push("USER user".into());
    let mut copies = Vec::new();
    for (i, step) in build.steps.iter().enumerate() {
        let n = i + 1;
        let forced = step.force || (build.force && i == 0);
        lines.push(format!("# e2b step {n} {}", step.kind));
        if forced {
            lines.push(format!("ARG E2B_FORCE_{n}={nonce}"));
        }
        let arg = |k: usize| step.args.get(k).map(String::as_str).unwrap_or("");
        match step.kind.as_str() {
            "COPY" => {
                let (src, dest) = (arg(0), arg(1));
                if src.is_empty() || dest.is_empty() {
                    return Err(bad(format!(
                        "step {n}: COPY needs a source and a destination"
                    )));
                }
                let hash = step
                    .files_hash
                    .clone()
                    .filter(|h| valid_hash(h))
                    .ok_or_else(|| bad(format!("step {n}: COPY needs its filesHash")))?;
                let dir = if forced {
                    format!("step-{n}-{nonce}")
                } else {
                    format!("step-{n}")
                };
                let mut flags = String::new();
                if !arg(2).is_empty() {
                    flags.push_str(&format!("--chown={} ", plain_word("COPY's user", arg(2))?));
                } else if crate::builds::context::owner(Some(&user)).is_ok() {
                    // E2B copies as the current user (`user` unless set_user said otherwise), so
                    // what a template copies into `/app/` or `/home/user/` is that user's to write.
                    flags.push_str(&format!("--chown={user} "));
                }
                if !arg(3).is_empty() {
                    flags.push_str(&format!("--chmod={} ", plain_word("COPY's mode", arg(3))?));
                }
                let source = format!("{dir}/{}", src.trim_start_matches("./"));
                let words = [source, dest.to_string()];
                if words.iter().any(|w| w.contains(['\n', '\r'])) {
                    return Err(bad(format!(
                        "step {n}: COPY paths must not contain a line break"
                    )));
                }
                lines.push(format!("COPY {flags}{}", json_words(&words, true)));
                copies.push((dir, hash));
            }
            "ENV" => {
                if step.args.is_empty() || step.args.len() % 2 != 0 {
                    return Err(bad(format!("step {n}: ENV needs key, value pairs")));
                }
                let mut pairs = Vec::new();
                for kv in step.args.chunks(2) {
                    if !env_key_ok(&kv[0]) {
                        return Err(bad(format!(
                            "step {n}: {:?} is not an environment variable name",
                            kv[0]
                        )));
                    }
                    pairs.push(format!("{}={}", kv[0], quoted("an ENV value", &kv[1])?));
                }
                lines.push(format!("ENV {}", pairs.join(" ")));
            }
            "RUN" => {
                let cmd = arg(0);
                if cmd.is_empty() {
                    return Err(bad(format!("step {n}: RUN needs a command")));
                }
                let as_user = arg(1);
                if !as_user.is_empty() && as_user != user {
                    lines.push(format!("USER {}", plain_word("RUN's user", as_user)?));
                }
                let argv = ["/bin/sh".to_string(), "-c".into(), cmd.to_string()];
                lines.push(format!("RUN {}", json_words(&argv, false)));
                if !as_user.is_empty() && as_user != user {
                    lines.push(format!("USER {user}"));
                }
            }
            "WORKDIR" => {
                if arg(0).is_empty() {
                    return Err(bad(format!("step {n}: WORKDIR needs a path")));
                }
                lines.push(format!("WORKDIR {}", quoted("a WORKDIR", arg(0))?));
            }
            "USER" => {
                user = plain_word("USER", arg(0))?;
                lines.push(format!("USER {user}"));
            }
            other => {
                return Err(bad(format!(
                    "step {n}: step type {other:?} is not supported (COPY, ENV, RUN, WORKDIR, USER)"
                )))
            }
        }
    }
    lines.push("# e2b finalize".into());
    if let Some(cmd) = build.start_cmd.as_deref().filter(|c| !c.is_empty()) {
        let argv = [
            "/bin/bash".to_string(),
            "-l".into(),
            "-c".into(),
            cmd.to_string(),
        ];
        lines.push(format!("CMD {}", json_words(&argv, false)));
    }
    let mut dockerfile = lines.join("\n");
    dockerfile.push('\n');
    Ok(Translated { dockerfile, copies })
}

/// The E2B step a build failure belongs to: `"base"`, a 1-based step number, or `"finalize"`.
/// `error` is the template's recorded error, `dockerfile` the translated text it was built from.
pub fn failed_step(dockerfile: &str, error: &str, had_steps: bool) -> String {
    let line = error.find("(line ").and_then(|at| {
        let rest = &error[at + 6..];
        rest[..rest.find(')')?].parse::<usize>().ok()
    });
    if let Some(line) = line {
        let mut step = "base".to_string();
        for text in dockerfile.lines().take(line) {
            if let Some(rest) = text.strip_prefix("# e2b step ") {
                step = rest.split(' ').next().unwrap_or("base").to_string();
            } else if text == "# e2b finalize" {
                step = "finalize".into();
            }
        }
        return step;
    }
    if had_steps {
        "finalize".into()
    } else {
        "base".into()
    }
}

/// Where a build stands, as E2B's status endpoint reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E2bBuildState {
    /// Accepted (`POST /v3/templates`) but not started.
    Waiting,
    Building,
    Ready,
    Error,
}

/// A build's status page.
#[derive(Debug, Clone)]
pub struct E2bBuildStatus {
    pub state: E2bBuildState,
    /// Log lines from the asked offset on.
    pub lines: Vec<LogLine>,
    /// Why it failed: (message naming the step, step).
    pub reason: Option<(String, String)>,
}

impl Service {
    /// The build id of template `name` (a UUID-shaped HMAC of the name).
    pub fn e2b_build_id(&self, name: &str) -> Result<String, FileError> {
        let h = hex::encode(&self.e2b_mac(&format!("e2b-build-v1:{name}"))?[..16]);
        Ok(format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        ))
    }

    /// Starts the build of template `name` from E2B's template JSON: translated, its uploaded
    /// files assembled into the context, handed to [`Service::create_template`].
    pub async fn e2b_build(
        &self,
        name: &str,
        build_id: &str,
        build: E2bBuild,
    ) -> Result<TemplateRecord, ServiceError> {
        self.e2b_check_build(name, build_id)?;
        let nonce = crate::sandboxes::random_id("", 12);
        let translated = dockerfile_of(&build, &nonce)?;
        let dir = self.e2b_files_dir().map_err(|e| bad(e.to_string()))?;
        let copies = translated.copies.clone();
        let context = tokio::task::spawn_blocking(move || assemble_context(&dir, &copies))
            .await
            .map_err(|e| bad(format!("assembling the build context: {e}")))??;
        let record = self
            .create_template(
                name,
                TemplateSource::Dockerfile(BuildSpec {
                    dockerfile: translated.dockerfile,
                    context,
                    build_args: Default::default(),
                }),
                build.credentials,
                crate::templates::StartCommands {
                    start: build.start_cmd.filter(|c| !c.trim().is_empty()),
                    ready: build.ready_cmd.filter(|c| !c.trim().is_empty()),
                },
                None,
            )
            .await?;
        Ok(record)
    }

    /// A 404 unless `build_id` is template `name`'s.
    pub(super) fn e2b_check_build(&self, name: &str, build_id: &str) -> Result<(), ServiceError> {
        let expected = self.e2b_build_id(name).map_err(|e| bad(e.to_string()))?;
        if !bool::from(expected.as_bytes().ct_eq(build_id.as_bytes())) {
            return Err(ServiceError::NotFound(format!(
                "build {build_id} of template {name:?} not found"
            )));
        }
        Ok(())
    }

    /// Build `build_id` of template `name`: its state, up to `limit` log lines from `offset`, and
    /// why it failed. A template not recorded yet whose build id is right is `waiting`.
    pub async fn e2b_build_status(
        &self,
        name: &str,
        build_id: &str,
        offset: u64,
        limit: usize,
    ) -> Result<E2bBuildStatus, ServiceError> {
        self.e2b_check_build(name, build_id)?;
        let template = match self.get_template(name).await {
            Ok(t) => t,
            Err(ServiceError::NotFound(_)) => {
                return Ok(E2bBuildStatus {
                    state: E2bBuildState::Waiting,
                    lines: Vec::new(),
                    reason: None,
                })
            }
            Err(e) => return Err(e),
        };
        let lines = self.template_log(name, offset, limit).await?;
        let (state, reason) = match template.state {
            TemplateState::Building => (E2bBuildState::Building, None),
            TemplateState::Ready => (E2bBuildState::Ready, None),
            TemplateState::Failed => {
                let error = template
                    .error
                    .clone()
                    .unwrap_or_else(|| "the build failed".into());
                let dockerfile = template.source["dockerfile"].as_str().unwrap_or_default();
                let all = self.template_log(name, 0, 100_000).await?;
                let had_steps = all.iter().any(|l| l.line.starts_with("Step "));
                let step = failed_step(dockerfile, &error, had_steps);
                let detail = error
                    .find(") failed: ")
                    .map(|at| &error[at + 10..])
                    .unwrap_or(&error);
                let message = match step.as_str() {
                    "base" => format!("the base image failed: {detail}"),
                    "finalize" => format!("finalizing the template failed: {detail}"),
                    n => format!("step {n} failed: {detail}"),
                };
                (E2bBuildState::Error, Some((message, step)))
            }
        };
        Ok(E2bBuildStatus {
            state,
            lines,
            reason,
        })
    }
}

use crate::builds::context::clean;

/// The build context: each (directory, hash) upload's members re-rooted under that directory
/// (files, directories and symlinks; other kinds are left out), at most [`MAX_CONTEXT_BYTES`].
pub(super) fn assemble_context(
    dir: &Path,
    copies: &[(String, String)],
) -> Result<Vec<u8>, ServiceError> {
    let mut out = tar::Builder::new(Vec::new());
    let mut total = 0usize;
    let too_big = || {
        bad(format!(
            "the uploaded files are larger than {MAX_CONTEXT_BYTES} bytes together"
        ))
    };
    for (prefix, hash) in copies {
        let path = dir.join(hash);
        if !path.is_file() {
            return Err(bad(format!(
                "the files of {prefix} (hash {hash}) were not uploaded"
            )));
        }
        let unreadable = |e: &dyn std::fmt::Display| {
            bad(format!("the uploaded files of {prefix} are not a tar: {e}"))
        };
        let mut archive = open_archive(&path).map_err(|e| unreadable(&e))?;
        let entries = archive.entries().map_err(|e| unreadable(&e))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| unreadable(&e))?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let member = clean(&raw).ok_or_else(|| {
                bad(format!(
                    "uploaded member {raw:?} climbs out of its directory"
                ))
            })?;
            if member.is_empty() {
                continue;
            }
            let name = format!("{prefix}/{member}");
            let kind = entry.header().entry_type();
            let mode = entry.header().mode().unwrap_or(0o644);
            let mut header = tar::Header::new_gnu();
            header.set_mode(mode);
            header.set_mtime(0);
            let appended = match kind {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mut data = Vec::new();
                    let room = MAX_CONTEXT_BYTES.saturating_sub(total);
                    (&mut entry)
                        .take(room as u64 + 1)
                        .read_to_end(&mut data)
                        .map_err(|e| unreadable(&e))?;
                    total += data.len() + 512;
                    if total > MAX_CONTEXT_BYTES {
                        return Err(too_big());
                    }
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(data.len() as u64);
                    out.append_data(&mut header, &name, &data[..])
                }
                tar::EntryType::Directory => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    out.append_data(&mut header, &name, std::io::empty())
                }
                tar::EntryType::Symlink => {
                    let target = entry
                        .link_name_bytes()
                        .map(|l| String::from_utf8_lossy(&l).into_owned())
                        .unwrap_or_default();
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    out.append_link(&mut header, &name, &target)
                }
                _ => continue,
            };
            appended.map_err(|e| bad(format!("assembling the build context: {e}")))?;
        }
    }
    out.into_inner()
        .map_err(|e| bad(format!("assembling the build context: {e}")))
}
