//! Dockerfile builds: each step of the last stage runs in a sandbox of our own runtime (RUN) or is
//! written by the daemon (COPY, ADD, WORKDIR); the others change the image's config only.
//!
//! Guarantees:
//! - **Every step's output is a real layer.** A RUN step's sandbox is made from the image as the
//!   steps before it left it; when its command exits 0 the sandbox is stopped and its writable layer
//!   packed into an OCI layer tar (`sandboxd_images::pack`) and installed through the hardened
//!   unpacker like any pulled layer; then the sandbox is deleted. A COPY/ADD layer is a tar of the
//!   selected context files ([`context`]); a WORKDIR layer holds the directory, owned by the
//!   current USER as BuildKit makes it (root, `user` or a numeric id; root for other names).
//! - **Cached by (parent, instruction, inputs).** A step's key chains the previous layer (or the
//!   base image), the parser's step key (the instruction with its substituted values and, for RUN,
//!   the ENV/ARG it sees) and, for COPY/ADD, a digest of the context files it copies. A key the cache
//!   holds, whose layer is still on disk, is used instead of running the step again.
//! - **A failed step fails the build** with the step, its line and, for RUN, its exit code, and its
//!   output in the log; the build's sandboxes are deleted whatever happens.
//! - Build sandboxes are ordinary sandboxes (labelled `sandboxd.build=<template>`), so a crash
//!   mid-step leaves nothing the reconcilers do not already clean up.
//! - `FROM base` builds on the built-in `base`; `FROM` a template builds on its image; anything else
//!   is an image reference, pulled as a create would.

pub mod context;

use crate::{Service, ServiceError};
use context::Context;
use futures::StreamExt;
use sandboxd_api_types as api;
use sandboxd_images::dockerfile::{self, Command, Instruction, StepContext};
use sandboxd_images::{Credentials, RunConfig};
use sandboxd_store::{unix_millis_now, ImageRecord, LayerRecord};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Label on a build's sandboxes: the template they build.
pub const BUILD_LABEL: &str = "sandboxd.build";
/// Files the runtime writes into every sandbox's writable layer that are not the step's output.
const PER_SANDBOX_FILES: [&str; 3] = ["etc/hostname", "etc/hosts", "etc/resolv.conf"];
/// Longest a log line may be; longer output is cut.
const MAX_LOG_LINE: usize = 4096;

/// A Dockerfile build's inputs.
#[derive(Debug, Clone, Default)]
pub struct BuildSpec {
    /// The Dockerfile's text.
    pub dockerfile: String,
    /// A tar of the files COPY/ADD read (empty: none).
    pub context: Vec<u8>,
    /// `--build-arg`s.
    pub build_args: BTreeMap<String, String>,
}

impl BuildSpec {
    /// What the template's record keeps of it.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "dockerfile": self.dockerfile,
            "contextBytes": self.context.len(),
            "buildArgs": self.build_args.keys().collect::<Vec<_>>(),
        })
    }

    /// Refuses what cannot be built, before anything is recorded: a Dockerfile that does not parse
    /// (the error names the line), a context that is not a tar.
    pub fn check(&self) -> Result<(), ServiceError> {
        dockerfile::parse(&self.dockerfile, &self.build_args)
            .map_err(|e| ServiceError::InvalidRequest(format!("Dockerfile {e}")))?;
        Context::read(&self.context)?;
        Ok(())
    }
}

/// Where a build stands between steps.
struct State {
    layers: Vec<String>,
    config: RunConfig,
    /// What the next step's key chains onto.
    parent: String,
}

fn step_key(parent: &str, step_key: &str, inputs: &str) -> String {
    let mut h = Sha256::new();
    for part in ["sandboxd-build-v1", parent, step_key, inputs] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

fn command_argv(command: &Command, shell: &[String]) -> Vec<String> {
    match command {
        Command::Exec(argv) => argv.clone(),
        Command::Shell(script) => shell.iter().cloned().chain([script.clone()]).collect(),
    }
}

fn failed(step: &str, line: usize, why: impl std::fmt::Display) -> ServiceError {
    ServiceError::InvalidRequest(format!("step {step} (line {line}) failed: {why}"))
}

impl Service {
    /// Builds `spec` for template `name`; returns the built image (recorded `ready`).
    pub(crate) async fn build(
        &self,
        name: &str,
        spec: BuildSpec,
        credentials: Option<Credentials>,
    ) -> Result<ImageRecord, ServiceError> {
        let parsed = dockerfile::parse(&spec.dockerfile, &spec.build_args)
            .map_err(|e| ServiceError::InvalidRequest(format!("Dockerfile {e}")))?;
        let from = parsed
            .target()
            .map(|s| s.from.image.clone())
            .ok_or_else(|| ServiceError::InvalidRequest("the Dockerfile has no stage".into()))?;
        self.log_template(name, [format!("FROM {from}")]).await;
        let base = self.build_base(&from, credentials).await?;
        let base_config = base.as_ref().map(Service::run_config).unwrap_or(RunConfig {
            on_base: true,
            ..RunConfig::default()
        });
        // Parsed again with the base's config: its ENV is visible to substitution.
        let parsed = dockerfile::parse_with_base(&spec.dockerfile, &spec.build_args, &base_config)
            .map_err(|e| ServiceError::InvalidRequest(format!("Dockerfile {e}")))?;
        for warning in &parsed.warnings {
            self.log_template(name, [format!("warning: {warning}")])
                .await;
        }
        let stage = parsed
            .target()
            .ok_or_else(|| ServiceError::InvalidRequest("the Dockerfile has no stage".into()))?;
        let context = Context::read(&spec.context)?;
        let mut state = State {
            layers: base.as_ref().map(|b| b.layers.clone()).unwrap_or_default(),
            config: base_config.clone(),
            parent: base
                .as_ref()
                .map_or_else(|| "base".to_string(), |b| b.digest.clone()),
        };
        let mut ctx = StepContext::new(&base_config);
        let mut intermediates = Vec::new();
        let total = stage.steps.len();
        let outcome = async {
            for (i, step) in stage.steps.iter().enumerate() {
                let label = format!("{}/{total}", i + 1);
                self.log_template(name, [format!("Step {label} : {}", step.text)])
                    .await;
                match &step.instruction {
                    Instruction::Run { command } => {
                        let key = step_key(&state.parent, step.cache_key(), "");
                        if !self.use_cache(name, &key, &mut state).await? {
                            let image = self.intermediate(name, &state).await?;
                            intermediates.push(image.digest.clone());
                            let argv = command_argv(command, &ctx.shell);
                            let layer = self
                                .run_step(name, &image, &ctx, argv)
                                .await
                                .map_err(|e| failed(&label, step.line, crate::error::chain(&e)))?;
                            self.add_layer(&key, layer, &mut state).await?;
                        }
                    }
                    Instruction::Copy {
                        sources,
                        dest,
                        chown,
                        chmod,
                    }
                    | Instruction::Add {
                        sources,
                        dest,
                        chown,
                        chmod,
                        ..
                    } => {
                        let extract = matches!(step.instruction, Instruction::Add { .. });
                        let mut selected = context
                            .select(sources, dest)
                            .map_err(|e| failed(&label, step.line, e))?;
                        if extract {
                            selected = expand_archives(selected, dest)
                                .map_err(|e| failed(&label, step.line, e))?;
                        }
                        let key =
                            step_key(&state.parent, step.cache_key(), &Context::digest(&selected));
                        if !self.use_cache(name, &key, &mut state).await? {
                            let owner = context::owner(chown.as_deref())
                                .map_err(|e| failed(&label, step.line, e))?;
                            let tar = context::layer_tar(&selected, owner, chmod.as_deref(), &[])
                                .map_err(|e| failed(&label, step.line, e))?;
                            let layer = self.install_tar(tar).await?;
                            self.add_layer(&key, layer, &mut state).await?;
                        }
                    }
                    Instruction::Workdir(dir) => {
                        state.config.working_dir = Some(dir.clone());
                        // Made for the current USER, as BuildKit does (root when it names one the
                        // builder cannot resolve); a user's owner is part of the step's key.
                        let owner = context::owner(state.config.user.as_deref()).unwrap_or((0, 0));
                        let inputs = match owner {
                            (0, 0) => String::new(),
                            (uid, gid) => format!("{uid}:{gid}"),
                        };
                        let key = step_key(&state.parent, step.cache_key(), &inputs);
                        if !self.use_cache(name, &key, &mut state).await? {
                            let tar =
                                context::layer_tar(&[], owner, None, std::slice::from_ref(dir))?;
                            let layer = self.install_tar(tar).await?;
                            self.add_layer(&key, layer, &mut state).await?;
                        }
                    }
                    Instruction::User(user) => state.config.user = Some(user.clone()),
                    Instruction::Expose(ports) => {
                        state.config.exposed_ports.extend(ports.iter().cloned())
                    }
                    Instruction::Entrypoint(c) => {
                        state.config.entrypoint = command_argv(c, &ctx.shell)
                    }
                    Instruction::Cmd(c) => state.config.cmd = command_argv(c, &ctx.shell),
                    Instruction::Env(_)
                    | Instruction::Arg { .. }
                    | Instruction::Label(_)
                    | Instruction::Shell(_) => {}
                }
                ctx.apply(&step.instruction);
            }
            state.config.env = ctx.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            self.record_built(name, &state).await
        }
        .await;
        // The build sandboxes hold their images until their teardowns end.
        let held = intermediates.clone();
        if let Err(e) = self
            .await_teardowns("a build's intermediate images", move |s| {
                s.image.as_ref().is_some_and(|d| held.contains(d))
            })
            .await
        {
            tracing::warn!(error = %crate::error::chain(&e), "intermediate images are kept");
        }
        for digest in intermediates {
            let _ = self
                .writer()
                .write(move |tx| tx.delete_image(&digest))
                .await;
        }
        outcome
    }

    /// The image `FROM` names: `None` for `base`, a template's image, or a pulled reference.
    async fn build_base(
        &self,
        from: &str,
        credentials: Option<Credentials>,
    ) -> Result<Option<ImageRecord>, ServiceError> {
        if from == crate::sandboxes::DEFAULT_TEMPLATE {
            return Ok(None);
        }
        if crate::templates::validate_name(from).is_ok() {
            match self.template_image(from).await {
                Ok(image) => return Ok(Some(image)),
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(self.ensure_image(from, credentials).await?))
    }

    /// Takes the cached layer of `key` if the cache holds one that is still on disk.
    async fn use_cache(
        &self,
        name: &str,
        key: &str,
        state: &mut State,
    ) -> Result<bool, ServiceError> {
        let k = key.to_string();
        let cached = self.reader().read(move |tx| tx.cached_layer(&k)).await?;
        let Some(layer) = cached else {
            return Ok(false);
        };
        let on_disk = self
            .config()
            .images
            .as_ref()
            .is_some_and(|s| s.layers.contains(&layer));
        if !on_disk {
            return Ok(false);
        }
        self.log_template(name, [format!(" ---> using cache {layer}")])
            .await;
        state.layers.push(layer.clone());
        state.parent = layer;
        Ok(true)
    }

    /// Records a step's new layer, caches it under `key` and stacks it.
    async fn add_layer(
        &self,
        key: &str,
        layer: LayerRecord,
        state: &mut State,
    ) -> Result<(), ServiceError> {
        let (k, l) = (key.to_string(), layer.clone());
        self.writer()
            .write(move |tx| {
                let now = unix_millis_now();
                tx.record_layer(&l, now)?;
                tx.cache_layer(&k, &l.digest, now)
            })
            .await?;
        state.layers.push(layer.digest.clone());
        state.parent = layer.digest;
        Ok(())
    }

    /// Installs a layer tar the daemon wrote.
    async fn install_tar(&self, tar: Vec<u8>) -> Result<LayerRecord, ServiceError> {
        let layers = self.image_settings()?.layers.clone();
        let descriptor = sandboxd_images::LayerDescriptor {
            digest: format!("sha256:{}", hex::encode(Sha256::digest(&tar))),
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: tar.len() as u64,
        };
        let d = descriptor.clone();
        let unpacked = tokio::task::spawn_blocking(move || layers.install(&d, &tar[..]))
            .await
            .map_err(|e| ServiceError::Image(sandboxd_images::ImageError::Task(e.to_string())))??;
        Ok(crate::images::layer_record(&descriptor, unpacked))
    }

    /// The image of `state` as a `ready` row (what a step's sandbox is made from, or the result).
    async fn image_of(
        &self,
        reference: String,
        state: &State,
    ) -> Result<ImageRecord, ServiceError> {
        self.image_from_layers(reference, state.layers.clone(), state.config.clone())
            .await
    }

    /// `layers` (known to the store, lowest first) with `config` as a `ready` image, recorded once:
    /// its digest is a hash of both, so the same stack is the same image.
    pub(crate) async fn image_from_layers(
        &self,
        reference: String,
        layers: Vec<String>,
        config: RunConfig,
    ) -> Result<ImageRecord, ServiceError> {
        let config = serde_json::to_value(&config).unwrap_or_default();
        let mut h = Sha256::new();
        h.update(b"sandboxd-built-image-v1\0");
        h.update(config.to_string().as_bytes());
        for layer in &layers {
            h.update([0]);
            h.update(layer.as_bytes());
        }
        let digest = format!("sha256:{}", hex::encode(h.finalize()));
        let d = digest.clone();
        let layer_digests = layers;
        let image = self
            .writer()
            .write(move |tx| {
                let now = unix_millis_now();
                let known = tx.list_layer_records(&layer_digests)?;
                let row = tx.begin_image_pull(&d, &reference, 0, now)?;
                if row.state != sandboxd_store::ImageState::Ready {
                    tx.complete_image(&d, &config, &known, None, now)?;
                }
                tx.get_image(&d)
            })
            .await?;
        image.ok_or_else(|| ServiceError::NotFound(format!("image {digest} vanished")))
    }

    async fn intermediate(&self, name: &str, state: &State) -> Result<ImageRecord, ServiceError> {
        self.image_of(format!("build of {name}"), state).await
    }

    async fn record_built(&self, name: &str, state: &State) -> Result<ImageRecord, ServiceError> {
        self.image_of(format!("template {name}"), state).await
    }

    /// Runs one RUN step: a sandbox of `image` with egress, the command as the step's user in its
    /// working directory with the ENV and ARGs it sees, output to the log; on exit 0 the sandbox's
    /// writable layer becomes the step's layer. The sandbox is deleted whatever happens.
    async fn run_step(
        &self,
        name: &str,
        image: &ImageRecord,
        ctx: &StepContext,
        argv: Vec<String>,
    ) -> Result<LayerRecord, ServiceError> {
        let mut plan = self.plan_create(api::CreateSandbox {
            metadata: Some(BTreeMap::from([(
                BUILD_LABEL.to_string(),
                name.to_string(),
            )])),
            timeout_sec: Some(3600),
            memory_mb: Some(2048.min(self.config().max_memory_mb)),
            network: Some(api::NetworkPolicy {
                egress: true,
                ..Default::default()
            }),
            ..Default::default()
        })?;
        plan.template = name.to_string();
        plan.resolved = Some(image.clone());
        // A step's layer is the same on every tier; the fastest one builds it.
        plan.isolation = Some(sandboxd_runtime::Isolation::Namespace);
        let id = crate::sandboxes::random_id("bld", 12);
        self.create_with_id(id.clone(), plan).await?;
        let result = self.run_in(name, &id, ctx, argv).await;
        if let Err(e) = self.delete(&id).await {
            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "could not delete a build sandbox");
        }
        result
    }

    async fn run_in(
        &self,
        name: &str,
        id: &str,
        ctx: &StepContext,
        argv: Vec<String>,
    ) -> Result<LayerRecord, ServiceError> {
        let user = ctx.user.clone().unwrap_or_else(|| "root".into());
        let user = match user.as_str() {
            "0" => "root".to_string(),
            "1000" => "user".to_string(),
            _ => user,
        };
        let mkdir = self
            .exec(
                id,
                api::ExecRequest {
                    cmd: vec!["mkdir".into(), "-p".into(), ctx.workdir.clone()],
                    user: Some("root".into()),
                    ..Default::default()
                },
            )
            .await?;
        if mkdir.exit_code != 0 {
            return Err(ServiceError::InvalidRequest(format!(
                "cannot create the working directory {}: {}",
                ctx.workdir, mkdir.stderr
            )));
        }
        let env: BTreeMap<String, String> = ctx
            .args
            .iter()
            .chain(ctx.env.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let events = self
            .exec_stream(
                id,
                api::ExecRequest {
                    cmd: argv,
                    env: Some(env),
                    cwd: Some(ctx.workdir.clone()),
                    user: Some(user),
                    timeout_ms: None,
                },
            )
            .await?;
        let exit = self.log_output(name, events).await?;
        if exit != 0 {
            return Err(ServiceError::InvalidRequest(format!(
                "the command exited with code {exit}"
            )));
        }
        self.commit_writable_layer(id).await
    }

    /// Streams a command's output into the build log, line by line; returns its exit code.
    async fn log_output(
        &self,
        name: &str,
        events: impl futures::Stream<Item = api::ExecEvent> + Send,
    ) -> Result<i32, ServiceError> {
        use base64::Engine;
        let mut events = std::pin::pin!(events);
        let mut pending = Vec::new();
        let mut exit = None;
        while let Some(event) = events.next().await {
            match event {
                api::ExecEvent::Stdout { data } | api::ExecEvent::Stderr { data } => {
                    pending.extend(
                        base64::engine::general_purpose::STANDARD
                            .decode(data)
                            .unwrap_or_default(),
                    );
                    let mut lines = Vec::new();
                    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        lines.push(log_line(&line[..line.len() - 1]));
                    }
                    self.log_template(name, lines).await;
                }
                api::ExecEvent::Exit { exit_code } => exit = Some(exit_code),
                api::ExecEvent::Error { message } => {
                    return Err(ServiceError::InvalidRequest(format!(
                        "the command failed: {message}"
                    )))
                }
                api::ExecEvent::Start { .. } => {}
            }
        }
        if !pending.is_empty() {
            self.log_template(name, [log_line(&pending)]).await;
        }
        exit.ok_or_else(|| {
            ServiceError::InvalidRequest("the command ended without an exit status".into())
        })
    }

    /// Stops sandbox `id` and packs what it wrote into a layer (the runtime's per-sandbox files left
    /// out), installed in the layer store.
    pub(crate) async fn commit_writable_layer(
        &self,
        id: &str,
    ) -> Result<LayerRecord, ServiceError> {
        self.runtime().stop(id).await?;
        self.pack_live_layer(id).await
    }

    /// Packs what sandbox `id` wrote into a layer installed in the layer store (the runtime's
    /// per-sandbox files left out). The caller keeps the sandbox still (stopped or paused).
    pub(crate) async fn pack_live_layer(&self, id: &str) -> Result<LayerRecord, ServiceError> {
        let settings = self.image_settings()?.clone();
        let layer = self.runtime().writable_layer(id).await?;
        let upper = layer.path;
        let opts = sandboxd_images::pack::PackOptions {
            // The sandbox's own ids on disk; the layer store shifts them back to its own on unpack.
            id_shift: layer.id_base,
            exclude: PER_SANDBOX_FILES.iter().map(Into::into).collect(),
            gzip: false,
        };
        let staging = settings.layers.root().join("staging");
        let (descriptor, unpacked) = tokio::task::spawn_blocking(move || {
            sandboxd_images::pack::commit_dir(&upper, &opts, &settings.layers, &staging)
        })
        .await
        .map_err(|e| ServiceError::Image(sandboxd_images::ImageError::Task(e.to_string())))??;
        Ok(crate::images::layer_record(&descriptor, unpacked))
    }
}

/// ADD: a selected local tar is extracted where it would have been copied's directory.
fn expand_archives(
    selected: Vec<(String, context::Member)>,
    dest: &str,
) -> Result<Vec<(String, context::Member)>, ServiceError> {
    let mut out = Vec::new();
    for (path, member) in selected {
        if context::is_member_archive(&member) {
            out.extend(context::archive_members(
                context::member_data(&member),
                dest,
            )?);
        } else {
            out.push((path, member));
        }
    }
    Ok(out)
}

fn log_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches('\r');
    if text.len() > MAX_LOG_LINE {
        let mut cut = MAX_LOG_LINE;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &text[..cut])
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_keys_chain_their_parent_and_inputs() {
        let a = step_key("p", "k", "");
        assert_eq!(a, step_key("p", "k", ""));
        assert_ne!(a, step_key("q", "k", ""));
        assert_ne!(a, step_key("p", "k2", ""));
        assert_ne!(a, step_key("p", "k", "files"));
        // Parts cannot run into each other.
        assert_ne!(step_key("ab", "c", ""), step_key("a", "bc", ""));
    }

    #[test]
    fn shell_form_runs_in_the_shell_and_exec_form_as_given() {
        let shell = vec!["/bin/sh".to_string(), "-c".to_string()];
        assert_eq!(
            command_argv(&Command::Shell("echo hi".into()), &shell),
            ["/bin/sh", "-c", "echo hi"]
        );
        assert_eq!(
            command_argv(&Command::Exec(vec!["ls".into(), "-l".into()]), &shell),
            ["ls", "-l"]
        );
    }
}
