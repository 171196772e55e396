//! What the E2B facade's template and snapshot endpoints need beyond the existing flows: a store
//! for the files `Template.build` uploads, the translation of E2B's template JSON onto the
//! Dockerfile builder ([`crate::builds`]), and the views E2B asks for (build status, snapshots).
//! Nothing here builds: a translated template goes to [`Service::create_template`] as a
//! [`TemplateSource::Dockerfile`], a snapshot to [`Service::snapshot`].
//!
//! Guarantees:
//! - **Uploaded files are content-addressed by the SDK's hash**, under
//!   `<data-dir>/images/e2b-files/<hash>`; a file is present only once its whole upload arrived
//!   (written to a temporary name, checked to be a tar or tar.gz, then renamed). An upload needs a URL
//!   this daemon signed ([`Service::e2b_upload_path`]: HMAC-SHA256 of the hash and an expiry with a
//!   per-daemon secret kept in `<data-dir>/images/e2b-upload-secret`, mode 0600); a wrong or expired
//!   signature stores nothing. Uploads are capped at [`MAX_UPLOAD_BYTES`].
//! - **A template JSON becomes one Dockerfile and one context** ([`dockerfile_of`]): each COPY's
//!   uploaded tar is extracted under `step-<n>/` of the context and copied from there; ENV, WORKDIR,
//!   USER and RUN become those instructions (RUN `[cmd, user]` is bracketed by `USER user` and a
//!   `USER` back); steps run as `user` unless told otherwise, as E2B's do. Every step's lines follow a
//!   `# e2b step <n>` comment, so a failing Dockerfile line maps back to the E2B step the SDK names.
//!   `force` (skip the cache) enters as an `ARG` with a fresh value before the step (and a fresh
//!   context directory for a COPY), so that step and the ones after miss the build cache.
//!   `startCmd` and `readyCmd` become the template's start commands (run in every sandbox made
//!   from it, see [`crate::templates::StartCommands`]); `startCmd` is recorded as the image's `Cmd`
//!   too.
//! - `fromImage: e2bdev/base` (the SDK's `from_base_image()` and default) builds on the built-in
//!   `base`, which is what E2B's `base` template is here.
//! - **A build id is a function of the template's name** (an HMAC with the daemon's secret), so the
//!   facade keeps no state between `POST /v3/templates` and the build's start, and a daemon restart
//!   loses nothing. A rebuild after a failure reuses the id.
//!
//! Proven by the unit tests below (translation parsed back by the Dockerfile parser, signatures,
//! context assembly) and `crates/sandboxd/tests/e2b_templates.rs` (the real SDK end to end).

use crate::builds::context::MAX_CONTEXT_BYTES;
use crate::builds::BuildSpec;
use crate::templates::TemplateSource;
use crate::{Service, ServiceError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use hmac::{Hmac, Mac};
use sandboxd_store::{LogLine, TemplateRecord, TemplateState};
use sha2::Sha256;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Largest upload accepted, bytes (as sent: compressed when gzip).
pub const MAX_UPLOAD_BYTES: u64 = 256 << 20;
/// How long an upload URL stays valid, seconds.
pub const UPLOAD_URL_TTL_SECS: i64 = 3600;
/// The image the SDK's `from_base_image()` names: built on the built-in `base` here.
const E2B_BASE_IMAGES: [&str; 4] = [
    "e2bdev/base",
    "e2bdev/base:latest",
    "docker.io/e2bdev/base",
    "docker.io/e2bdev/base:latest",
];
const FILES_DIR: &str = "e2b-files";
const SECRET_FILE: &str = "e2b-upload-secret";

/// Why an upload or a file lookup was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The hash is not a SHA-256 in lowercase hex.
    #[error("files hash {0:?} must be 64 lowercase hex digits")]
    BadHash(String),
    /// The URL's signature is not this daemon's for this hash and expiry.
    #[error("the upload URL's signature is invalid")]
    BadSignature,
    /// The URL's expiry has passed.
    #[error("the upload URL has expired; ask for a new one")]
    Expired,
    /// The body is larger than [`MAX_UPLOAD_BYTES`].
    #[error("the upload is larger than {MAX_UPLOAD_BYTES} bytes")]
    TooLarge,
    /// The body is neither a tar nor a gzip-compressed tar.
    #[error("the upload is not a tar or tar.gz archive: {0}")]
    NotATar(String),
    /// The body stopped arriving.
    #[error("the upload was cut short: {0}")]
    Incomplete(String),
    /// The daemon has no image store, so nowhere to keep files.
    #[error("no image store is configured")]
    NoStore,
    /// Reading or writing the file store.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FileError {
    let what = what.into();
    move |source| FileError::Io { what, source }
}

/// Whether `hash` is what the SDK sends: a SHA-256 as 64 lowercase hex digits.
pub fn valid_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn now_secs() -> i64 {
    sandboxd_store::unix_millis_now() / 1000
}

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

fn bad(message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest(message.into())
}

/// `value` as a Dockerfile double-quoted word that substitutes nothing; a line break cannot be
/// written in one instruction, so it is refused.
fn quoted(what: &str, value: &str) -> Result<String, ServiceError> {
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
fn json_words(words: &[String], escape_dollar: bool) -> String {
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

fn plain_word(what: &str, value: &str) -> Result<String, ServiceError> {
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

fn env_key_ok(key: &str) -> bool {
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

/// The name a snapshot gets when the request names none.
fn snapshot_name(sandbox: &str, n: usize) -> String {
    format!("snapshot-{sandbox}-{n}")
}

impl Service {
    fn e2b_root(&self) -> Result<PathBuf, FileError> {
        self.config()
            .images
            .as_ref()
            .map(|s| s.layers.root().to_path_buf())
            .ok_or(FileError::NoStore)
    }

    fn e2b_files_dir(&self) -> Result<PathBuf, FileError> {
        let dir = self.e2b_root()?.join(FILES_DIR);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(dir)
    }

    /// The per-daemon secret upload URLs and build ids are signed with (made on first use).
    fn e2b_secret(&self) -> Result<Vec<u8>, FileError> {
        let path = self.e2b_root()?.join(SECRET_FILE);
        if let Ok(secret) = std::fs::read(&path) {
            if secret.len() >= 32 {
                return Ok(secret);
            }
        }
        let secret: [u8; 32] = rand::random();
        use std::os::unix::fs::OpenOptionsExt;
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match created {
            Ok(mut file) => {
                file.write_all(&secret)
                    .map_err(io(format!("writing {}", path.display())))?;
                Ok(secret.to_vec())
            }
            // Another request made it first.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::read(&path).map_err(io(format!("reading {}", path.display())))
            }
            Err(e) => Err(io(format!("creating {}", path.display()))(e)),
        }
    }

    fn e2b_mac(&self, message: &str) -> Result<Vec<u8>, FileError> {
        let secret = self.e2b_secret()?;
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&secret).map_err(|_| FileError::BadSignature)?;
        mac.update(message.as_bytes());
        Ok(mac.finalize().into_bytes().to_vec())
    }

    fn e2b_upload_signature(&self, hash: &str, expires: i64) -> Result<String, FileError> {
        let mac = self.e2b_mac(&format!("e2b-files-v1:{hash}:{expires}"))?;
        Ok(format!("v1_{}", URL_SAFE_NO_PAD.encode(mac)))
    }

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

    /// Whether a file of `hash` was uploaded.
    pub fn e2b_file_present(&self, hash: &str) -> Result<bool, FileError> {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        Ok(self.e2b_files_dir()?.join(hash).is_file())
    }

    /// The path and query of the URL the SDK uploads `hash`'s files to (valid for
    /// [`UPLOAD_URL_TTL_SECS`]).
    pub fn e2b_upload_path(&self, hash: &str) -> Result<String, FileError> {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        let expires = now_secs() + UPLOAD_URL_TTL_SECS;
        let signature = self.e2b_upload_signature(hash, expires)?;
        Ok(format!(
            "/e2b/files/{hash}?expires={expires}&signature={signature}"
        ))
    }

    /// Stores an upload of `hash`'s files if `signature` is this daemon's for it and `expires`
    /// has not passed; the file is present only once all of `body` arrived and it is a tar(.gz).
    pub async fn e2b_store_file<S, E>(
        &self,
        hash: &str,
        expires: i64,
        signature: &str,
        body: S,
    ) -> Result<(), FileError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        let expected = self.e2b_upload_signature(hash, expires)?;
        if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
            return Err(FileError::BadSignature);
        }
        if expires < now_secs() {
            return Err(FileError::Expired);
        }
        let dir = self.e2b_files_dir()?;
        let tmp = dir.join(format!(".{hash}.{}", crate::sandboxes::random_id("", 8)));
        let written = async {
            let mut file = tokio::fs::File::create(&tmp)
                .await
                .map_err(io(format!("creating {}", tmp.display())))?;
            let mut size = 0u64;
            let mut body = std::pin::pin!(body);
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| FileError::Incomplete(e.to_string()))?;
                size += chunk.len() as u64;
                if size > MAX_UPLOAD_BYTES {
                    return Err(FileError::TooLarge);
                }
                tokio::io::AsyncWriteExt::write_all(&mut file, &chunk)
                    .await
                    .map_err(io(format!("writing {}", tmp.display())))?;
            }
            tokio::io::AsyncWriteExt::flush(&mut file)
                .await
                .map_err(io(format!("writing {}", tmp.display())))?;
            let check = tmp.clone();
            tokio::task::spawn_blocking(move || check_archive(&check))
                .await
                .map_err(|e| FileError::NotATar(e.to_string()))??;
            tokio::fs::rename(&tmp, dir.join(hash))
                .await
                .map_err(io(format!("storing {}", tmp.display())))
        }
        .await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        written
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
            )
            .await?;
        Ok(record)
    }

    /// A 404 unless `build_id` is template `name`'s.
    fn e2b_check_build(&self, name: &str, build_id: &str) -> Result<(), ServiceError> {
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

    /// Snapshots sandbox `sandbox` as template `name`, or as `snapshot-<id>-<n>` (the first free
    /// `n`) when it names none.
    pub async fn e2b_snapshot(
        &self,
        sandbox: &str,
        name: Option<&str>,
    ) -> Result<TemplateRecord, ServiceError> {
        if let Some(name) = name {
            return self.snapshot(sandbox, name).await;
        }
        let id = self.get(sandbox).await?.id;
        let taken = self
            .list_templates()
            .await?
            .iter()
            .filter(|t| t.source["snapshotOf"] == id.as_str())
            .count();
        let mut n = taken + 1;
        loop {
            match self.snapshot(&id, &snapshot_name(&id, n)).await {
                Err(ServiceError::Conflict(m))
                    if m.contains("already exists") && n < taken + 64 =>
                {
                    n += 1
                }
                other => return other,
            }
        }
    }

    /// Ready snapshots (templates with `source.snapshotOf`), oldest first, of `sandbox` and named
    /// `name` when given; one page of `limit` after `cursor` (`<createdAt>:<name>`), and the
    /// cursor of the next page.
    pub async fn e2b_snapshots(
        &self,
        sandbox: Option<&str>,
        name: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<TemplateRecord>, Option<String>), ServiceError> {
        let after = match cursor {
            Some(c) => {
                let (at, n) = c
                    .split_once(':')
                    .and_then(|(at, n)| Some((at.parse::<i64>().ok()?, n.to_string())))
                    .ok_or_else(|| bad("invalid nextToken"))?;
                Some((at, n))
            }
            None => None,
        };
        let mut all: Vec<TemplateRecord> = self
            .list_templates()
            .await?
            .into_iter()
            .filter(|t| t.state == TemplateState::Ready)
            .filter(|t| t.source["snapshotOf"].is_string())
            .filter(|t| sandbox.is_none_or(|s| t.source["snapshotOf"] == s))
            .filter(|t| name.is_none_or(|n| t.name == n))
            .filter(|t| {
                after
                    .as_ref()
                    .is_none_or(|(at, n)| (t.created_at, &t.name) > (*at, n))
            })
            .collect();
        all.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        let next = (all.len() > limit)
            .then(|| {
                all.get(limit - 1)
                    .map(|t| format!("{}:{}", t.created_at, t.name))
            })
            .flatten();
        all.truncate(limit);
        Ok((all, next))
    }
}

/// Checks that the file at `path` is a tar, plain or gzip-compressed (every header readable).
fn check_archive(path: &Path) -> Result<(), FileError> {
    let mut archive = open_archive(path)?;
    let entries = archive
        .entries()
        .map_err(|e| FileError::NotATar(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| FileError::NotATar(e.to_string()))?;
        std::io::copy(&mut entry, &mut std::io::sink())
            .map_err(|e| FileError::NotATar(e.to_string()))?;
    }
    Ok(())
}

fn open_archive(path: &Path) -> Result<tar::Archive<Box<dyn Read>>, FileError> {
    let mut file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut magic = [0u8; 2];
    let n = file
        .read(&mut magic)
        .map_err(io(format!("reading {}", path.display())))?;
    let file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let reader: Box<dyn Read> = if n == 2 && magic == [0x1f, 0x8b] {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(tar::Archive::new(reader))
}

use crate::builds::context::clean;

/// The build context: each (directory, hash) upload's members re-rooted under that directory
/// (files, directories and symlinks; other kinds are left out), at most [`MAX_CONTEXT_BYTES`].
fn assemble_context(dir: &Path, copies: &[(String, String)]) -> Result<Vec<u8>, ServiceError> {
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

#[cfg(test)]
#[path = "e2b_templates_tests.rs"]
mod tests;
