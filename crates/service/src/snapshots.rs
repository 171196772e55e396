//! Snapshots: a sandbox's filesystem (its image, or `base`, plus everything it wrote) as a new
//! template.
//!
//! Guarantee: the sandbox is paused for the copy (its processes frozen, so the layer is not written
//! while it is read) and resumed after, whatever happened; the template is `ready` when the call
//! answers, and sandboxes made from it see the files the sandbox had. The runtime's per-sandbox
//! files (`/etc/hostname`, `/etc/hosts`, `/etc/resolv.conf`) are not part of it. A name that is taken
//! is a conflict, and nothing is recorded then. The snapshot keeps the start and ready commands of
//! the sandbox's template (a snapshot of a code-interpreter sandbox runs the interpreter too).
//!
//! A fork ([`Service::fork`]) is a snapshot and a create from it.

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_images::RunConfig;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState, TemplateRecord};

impl Service {
    /// Turns sandbox `key`'s filesystem into template `name`.
    pub async fn snapshot(&self, key: &str, name: &str) -> Result<TemplateRecord, ServiceError> {
        crate::templates::validate_name(name)?;
        if name == crate::sandboxes::DEFAULT_TEMPLATE {
            return Err(ServiceError::Conflict(
                "template \"base\" is built in".into(),
            ));
        }
        let sandbox = self.get(key).await?;
        if sandbox.state != SandboxState::Running && sandbox.state != SandboxState::Paused {
            return Err(ServiceError::Conflict(format!(
                "sandbox {} is {}, not running",
                sandbox.id, sandbox.state
            )));
        }
        let base = match &sandbox.image {
            Some(digest) => Some(self.get_image(digest).await?),
            None => None,
        };
        // What sandboxes of the source template start (the code interpreter, say), theirs start too.
        let commands = match self.get_template(&sandbox.template).await {
            Ok(t) => (t.start_cmd, t.ready_cmd),
            Err(_) => (None, None),
        };
        // Its sandboxes run where the source ran (a snapshot of a gVisor sandbox makes gVisor ones).
        let tier = sandbox.isolation.parse().ok();
        self.begin_template(name, serde_json::json!({ "snapshotOf": sandbox.id }), tier)
            .await?;
        if commands != (None, None) {
            let n = name.to_string();
            let set = self
                .writer()
                .write(move |tx| {
                    tx.set_template_commands(&n, commands.0.as_deref(), commands.1.as_deref())
                })
                .await;
            if let Err(e) = set {
                let n = name.to_string();
                let _ = self.writer().write(move |tx| tx.delete_template(&n)).await;
                return Err(e.into());
            }
        }
        let was_running = sandbox.state == SandboxState::Running;
        if was_running {
            self.runtime().pause(&sandbox.id).await?;
        }
        let layer = self.pack_live_layer(&sandbox.id).await;
        if was_running {
            if let Err(e) = self.runtime().resume(&sandbox.id).await {
                tracing::warn!(sandbox_id = %sandbox.id, error = %crate::error::chain(&e), "could not resume after a snapshot");
            }
        }
        let built = match layer {
            Ok(layer) => {
                let mut layers = base.as_ref().map(|b| b.layers.clone()).unwrap_or_default();
                layers.push(layer.digest.clone());
                let config = base.as_ref().map(Service::run_config).unwrap_or(RunConfig {
                    on_base: true,
                    ..RunConfig::default()
                });
                let l = layer.clone();
                self.writer()
                    .write(move |tx| tx.record_layer(&l, unix_millis_now()))
                    .await?;
                self.image_from_layers(format!("snapshot of {}", sandbox.id), layers, config)
                    .await
            }
            Err(e) => Err(e),
        };
        self.finish_template_now(name, built).await
    }

    /// Forks sandbox `key`: a new sandbox for `owner` (named `name`, or unnamed) on a copy of its
    /// filesystem, with its resources, environment, metadata and network posture, and its
    /// deadline's length. The copy is a snapshot, template `fork-<random>`, listed with the
    /// templates (delete it once its forks are gone); a fork that cannot be created takes its
    /// copy with it.
    pub async fn fork(
        &self,
        key: &str,
        owner: &str,
        name: Option<String>,
    ) -> Result<Sandbox, ServiceError> {
        let source = self.get(key).await?;
        let template = crate::sandboxes::random_id("fork-", 12);
        self.snapshot(&source.id, &template).await?;
        let req = api::CreateSandbox {
            name,
            template: Some(template.clone()),
            cpu: Some(f64::from(source.cpu_millis) / 1000.0),
            memory_mb: Some(source.memory_mb.into()),
            disk_mb: (source.disk_mb > 0).then_some(source.disk_mb.into()),
            env: Some(source.env.clone()),
            metadata: Some(source.metadata.clone()),
            timeout_sec: Some((source.lifecycle.timeout_ms / 1000).max(0) as u64),
            network: serde_json::from_value(source.network.clone()).ok(),
            ..Default::default()
        };
        let forked = self.create_as(owner, req).await;
        if forked.is_err() {
            if let Err(e) = self.delete_template(&template).await {
                tracing::warn!(template = %template, error = %crate::error::chain(&e), "cannot remove the copy of a failed fork");
            }
        }
        forked
    }
}
