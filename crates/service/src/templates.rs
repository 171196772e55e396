//! Templates: named images sandboxes are made from — pulled from a reference or built from a
//! Dockerfile ([`crate::builds`]), or snapshotted from a sandbox.
//!
//! Guarantees:
//! - **One template per name.** The name is the store's primary key; a create of a name that is
//!   building or ready is a conflict, a failed one may be built again under its name.
//! - **A build is a retried operation with a visible state.** A template is `building` from its
//!   create until its image is ready (`ready`) or the build gave up (`failed`, with the reason in
//!   `error` and the log). The build runs on its own task, so a client that goes away does not stop
//!   it; a daemon that dies mid-build leaves it `building`, and the template reconciler
//!   ([`crate::reconcile::templates`]) marks it failed once no build of this process runs it.
//! - **In use, kept.** A template a sandbox was made from is not deleted (a conflict); the image a
//!   template names cannot be deleted either (a foreign key).
//! - `base` is built in: it cannot be created or deleted, and needs no record.

use crate::sandboxes::DEFAULT_TEMPLATE;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_runtime::Isolation;
use sandboxd_store::{
    unix_millis_now, ImageRecord, LogLine, StoreError, TemplateRecord, TemplateState,
};
use std::collections::HashSet;
use std::sync::Mutex;

/// Default of [`crate::ServiceConfig::ready_cmd_timeout`].
pub const READY_CMD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often a waiting caller looks at a build.
const BUILD_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// How often the ready command is tried.
const READY_CMD_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Templates whose build runs in this process (the reconciler leaves them alone).
#[derive(Default)]
pub(crate) struct Builds(Mutex<HashSet<String>>);

impl Builds {
    /// Whether this process builds template `name` now.
    pub(crate) fn is_running(&self, name: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    fn start(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
    }

    fn end(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

/// Template names: 1 to 128 of lowercase letters, digits, `.`, `_`, `-`, `/` and one `:tag`
/// (E2B's `name:tag`), starting with a letter or digit.
pub fn validate_name(name: &str) -> Result<(), ServiceError> {
    let (base, tag) = name.split_once(':').unwrap_or((name, ""));
    let part_ok = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
    };
    let ok = !base.is_empty()
        && name.len() <= 128
        && base.as_bytes()[0].is_ascii_alphanumeric()
        && part_ok(base)
        && part_ok(tag)
        && !tag.contains('/')
        && (name.find(':').is_none() || !tag.is_empty());
    if ok {
        Ok(())
    } else {
        Err(ServiceError::InvalidRequest(format!(
            "invalid template name {name:?}: use 1 to 128 lowercase letters, digits, '.', '_', '-', '/' \
             and an optional ':tag', starting with a letter or digit"
        )))
    }
}

/// What every sandbox made from a template runs once it is up (E2B's `startCmd`/`readyCmd`): the
/// start command in the background, then the ready command until it exits 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartCommands {
    /// Started in the background, as the default user.
    pub start: Option<String>,
    /// Polled until it exits 0; a create from the template answers only then.
    pub ready: Option<String>,
}

/// What a template is made from, as its record keeps it.
#[derive(Debug, Clone)]
pub enum TemplateSource {
    /// An image reference, pulled.
    Image {
        /// The reference.
        reference: String,
    },
    /// A Dockerfile and the tar of the files its COPY/ADD read.
    Dockerfile(crate::builds::BuildSpec),
}

impl Service {
    /// Creates template `name` from `source` and starts its build; answers at once with the
    /// `building` record (poll it, or follow its log). `credentials` are for the pulls of this build
    /// only. Its sandboxes run in tier `isolation` when their create names none (`None`: the
    /// daemon's default); a tier this host does not offer is refused.
    pub async fn create_template(
        &self,
        name: &str,
        source: TemplateSource,
        credentials: Option<sandboxd_images::Credentials>,
        commands: StartCommands,
        isolation: Option<&str>,
    ) -> Result<TemplateRecord, ServiceError> {
        validate_name(name)?;
        let isolation = isolation
            .map(|tier| self.check_isolation(Some(tier)))
            .transpose()?;
        for cmd in [&commands.start, &commands.ready].into_iter().flatten() {
            if cmd.trim().is_empty() || cmd.contains('\0') {
                return Err(ServiceError::InvalidRequest(
                    "startCmd and readyCmd must be non-empty commands without NUL bytes".into(),
                ));
            }
        }
        if name == DEFAULT_TEMPLATE {
            return Err(ServiceError::Conflict(
                "template \"base\" is built in".into(),
            ));
        }
        match &source {
            TemplateSource::Image { reference } => {
                reference
                    .parse::<sandboxd_images::ImageRef>()
                    .map_err(sandboxd_images::ImageError::from)?;
            }
            TemplateSource::Dockerfile(spec) => spec.check()?,
        }
        let summary = match &source {
            TemplateSource::Image { reference } => serde_json::json!({ "image": reference }),
            TemplateSource::Dockerfile(spec) => spec.summary(),
        };
        let mut record = self.begin_template(name, summary, isolation).await?;
        if commands != StartCommands::default() {
            let (n, c) = (name.to_string(), commands.clone());
            self.writer()
                .write(move |tx| {
                    tx.set_template_commands(&n, c.start.as_deref(), c.ready.as_deref())
                })
                .await?;
            record.start_cmd = commands.start;
            record.ready_cmd = commands.ready;
        }
        self.inner.builds.start(name);
        let svc = self.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            let built = match source {
                TemplateSource::Image { reference } => {
                    svc.log_template(&name, [format!("pulling {reference}")])
                        .await;
                    svc.ensure_image(&reference, credentials).await
                }
                TemplateSource::Dockerfile(spec) => svc.build(&name, spec, credentials).await,
            };
            svc.finish_template(&name, built).await;
            svc.inner.builds.end(&name);
        });
        Ok(record)
    }

    /// Records template `name` as `building` from `summary`, its sandboxes in tier `isolation`
    /// (`None`: the daemon's default); a conflict when the name is taken.
    pub(crate) async fn begin_template(
        &self,
        name: &str,
        summary: serde_json::Value,
        isolation: Option<Isolation>,
    ) -> Result<TemplateRecord, ServiceError> {
        let n = name.to_string();
        let tier = isolation.map(Isolation::as_str);
        self.writer()
            .write(move |tx| tx.begin_template(&n, &summary, tier, unix_millis_now()))
            .await
            .map_err(|e| match e {
                StoreError::TemplateExists { name } => {
                    ServiceError::Conflict(format!("template {name:?} already exists"))
                }
                other => other.into(),
            })
    }

    /// Starts `commands.start` in the background in sandbox `id` (as its default user, output to
    /// `/tmp/.sandboxd-start.log`), then runs `commands.ready` until it exits 0, for at most
    /// [`crate::ServiceConfig::ready_cmd_timeout`].
    pub(crate) async fn run_start_commands(
        &self,
        id: &str,
        commands: &StartCommands,
    ) -> Result<(), ServiceError> {
        let shell = |script: &str, env: Option<(&str, &str)>| api::ExecRequest {
            cmd: vec!["/bin/sh".into(), "-c".into(), script.to_string()],
            env: env
                .map(|(k, v)| std::collections::BTreeMap::from([(k.to_string(), v.to_string())])),
            timeout_ms: Some(10_000),
            ..Default::default()
        };
        if let Some(start) = &commands.start {
            // Detached, so it outlives this call; the command travels in the environment, unquoted.
            let started = self
                .exec(
                    id,
                    shell(
                        "nohup /bin/sh -c \"$SANDBOXD_START_CMD\" >/tmp/.sandboxd-start.log 2>&1 </dev/null &",
                        Some(("SANDBOXD_START_CMD", start)),
                    ),
                )
                .await?;
            if started.exit_code != 0 {
                return Err(ServiceError::InvalidRequest(format!(
                    "the start command could not be started: {}",
                    started.stderr
                )));
            }
        }
        let Some(ready) = &commands.ready else {
            return Ok(());
        };
        let timeout = self.config().ready_cmd_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let probe = self.exec(id, shell(ready, None)).await?;
            if probe.exit_code == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::InvalidRequest(format!(
                    "the ready command {ready:?} did not succeed within {timeout:?} (last exit code {})",
                    probe.exit_code
                )));
            }
            tokio::time::sleep(READY_CMD_POLL).await;
        }
    }

    /// Records how template `name`'s build ended.
    async fn finish_template(&self, name: &str, built: Result<ImageRecord, ServiceError>) {
        let n = name.to_string();
        let outcome = match &built {
            Ok(image) => {
                let digest = image.digest.clone();
                self.log_template(name, [format!("ready: image {digest}")])
                    .await;
                let ready = self
                    .writer()
                    .write(move |tx| tx.template_ready(&n, &digest, unix_millis_now()))
                    .await;
                if ready.is_ok() {
                    self.template_home(name, true).await;
                }
                ready
            }
            Err(e) => {
                let reason = crate::error::chain(e);
                self.log_template(name, [format!("failed: {reason}")]).await;
                self.writer()
                    .write(move |tx| tx.template_failed(&n, &reason, unix_millis_now()))
                    .await
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(template = %name, error = %crate::error::chain(&e), "could not record a build's end");
        }
    }

    /// Ends a build that ran in the caller's request (a snapshot): `ready` with the image, or — on
    /// failure — the template's record deleted again, so a failed call leaves nothing.
    pub(crate) async fn finish_template_now(
        &self,
        name: &str,
        built: Result<ImageRecord, ServiceError>,
    ) -> Result<TemplateRecord, ServiceError> {
        let n = name.to_string();
        match built {
            Ok(image) => {
                let digest = image.digest.clone();
                self.writer()
                    .write(move |tx| tx.template_ready(&n, &digest, unix_millis_now()))
                    .await?;
                self.template_home(name, true).await;
                self.get_template(name).await
            }
            Err(e) => {
                let _ = self.writer().write(move |tx| tx.delete_template(&n)).await;
                Err(e)
            }
        }
    }

    /// Appends `lines` to template `name`'s build log (best effort: a log line never fails a build).
    pub(crate) async fn log_template(&self, name: &str, lines: impl IntoIterator<Item = String>) {
        let lines: Vec<String> = lines.into_iter().collect();
        if lines.is_empty() {
            return;
        }
        let n = name.to_string();
        let written = self
            .writer()
            .write(move |tx| tx.append_template_log(&n, &lines, unix_millis_now()))
            .await;
        if let Err(e) = written {
            tracing::warn!(template = %name, error = %crate::error::chain(&e), "could not write a build log line");
        }
    }

    /// Template `name`.
    pub async fn get_template(&self, name: &str) -> Result<TemplateRecord, ServiceError> {
        let n = name.to_string();
        self.reader()
            .read_by_key(move |tx| tx.get_template(&n))
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("template {name:?} not found")))
    }

    /// Template `name` once its build has ended (`ready` or `failed`), looking every
    /// [`BUILD_POLL`]; a conflict when it still builds after `timeout`.
    pub async fn await_template(
        &self,
        name: &str,
        timeout: std::time::Duration,
    ) -> Result<TemplateRecord, ServiceError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let template = self.get_template(name).await?;
            if template.state != TemplateState::Building {
                return Ok(template);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Conflict(format!(
                    "template {name:?} is still being built after {timeout:?}"
                )));
            }
            tokio::time::sleep(BUILD_POLL).await;
        }
    }

    /// Template `name` built from `spec`, as it is now: the one there is (ready or building: a
    /// racing call's build is not repeated), or one this call begins; a failed one is built again.
    pub async fn ensure_dockerfile_template(
        &self,
        name: &str,
        spec: crate::builds::BuildSpec,
    ) -> Result<TemplateRecord, ServiceError> {
        match self.get_template(name).await {
            Ok(t) if t.state != TemplateState::Failed => return Ok(t),
            Ok(_) => match self.delete_template(name).await {
                // Gone already, or a racing call began building it again.
                Ok(()) | Err(ServiceError::NotFound(_) | ServiceError::Conflict(_)) => {}
                Err(e) => return Err(e),
            },
            Err(ServiceError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let source = TemplateSource::Dockerfile(spec);
        match self
            .create_template(name, source, None, StartCommands::default(), None)
            .await
        {
            Ok(t) => Ok(t),
            Err(ServiceError::Conflict(_)) => self.get_template(name).await,
            Err(e) => Err(e),
        }
    }

    /// Every template.
    pub async fn list_templates(&self) -> Result<Vec<TemplateRecord>, ServiceError> {
        Ok(self.reader().read(|tx| tx.list_templates()).await?)
    }

    /// Up to `limit` lines of template `name`'s build log from line `offset` on.
    pub async fn template_log(
        &self,
        name: &str,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<LogLine>, ServiceError> {
        self.get_template(name).await?;
        let n = name.to_string();
        Ok(self
            .reader()
            .read(move |tx| tx.template_log(&n, offset, limit))
            .await?)
    }

    /// Deletes template `name` (its image stays, for `images rm`/`prune`). A conflict while it
    /// builds or a sandbox made from it exists.
    pub async fn delete_template(&self, name: &str) -> Result<(), ServiceError> {
        let template = self.get_template(name).await?;
        if template.state == TemplateState::Building {
            return Err(ServiceError::Conflict(format!(
                "template {name:?} is being built"
            )));
        }
        let n = name.to_string();
        self.await_teardowns(&format!("template {name:?}"), move |s| s.template == n)
            .await?;
        let n = name.to_string();
        let users = self.reader().read(move |tx| tx.template_users(&n)).await?;
        if users > 0 {
            return Err(ServiceError::Conflict(format!(
                "template {name:?} is used by {users} sandbox(es)"
            )));
        }
        if self.has_warm_pool(name).await? {
            return Err(ServiceError::Conflict(format!(
                "template {name:?} has a warm pool: set its size to 0 and delete the template once \
                 its pooled sandboxes are gone"
            )));
        }
        let n = name.to_string();
        self.writer()
            .write(move |tx| tx.delete_template(&n))
            .await?;
        self.template_home(name, false).await;
        Ok(())
    }

    /// The ready image template `name` names (not for `base`).
    pub async fn template_image(&self, name: &str) -> Result<ImageRecord, ServiceError> {
        Ok(self.template_root(name).await?.0)
    }

    /// The ready image template `name` names and what its sandboxes start.
    pub(crate) async fn template_root(
        &self,
        name: &str,
    ) -> Result<(ImageRecord, StartCommands, Option<String>), ServiceError> {
        let template = self.template_when_built(name).await?;
        match (template.state, &template.image) {
            (TemplateState::Ready, Some(digest)) => Ok((
                self.get_image(digest).await?,
                StartCommands {
                    start: template.start_cmd.clone(),
                    ready: template.ready_cmd.clone(),
                },
                template.isolation.clone(),
            )),
            (TemplateState::Building, _) => Err(ServiceError::Conflict(format!(
                "template {name:?} is still being built"
            ))),
            _ => Err(ServiceError::Conflict(format!(
                "template {name:?} failed to build: {}",
                template.error.unwrap_or_default()
            ))),
        }
    }
}

/// The API's view of a stored template.
pub fn template_to_api(t: &TemplateRecord) -> api::Template {
    api::Template {
        name: t.name.clone(),
        state: t.state.as_str().to_string(),
        image: t.image.clone(),
        source: t.source.clone(),
        error: t.error.clone(),
        start_cmd: t.start_cmd.clone(),
        ready_cmd: t.ready_cmd.clone(),
        isolation: t.isolation.clone(),
        created_at: crate::timestamps::rfc3339(t.created_at),
        updated_at: crate::timestamps::rfc3339(t.updated_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_names_follow_the_rules() {
        for good in [
            "py",
            "code-interpreter-v1",
            "team/app:v2",
            "a.b_c",
            "x:latest",
            "9lives",
        ] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Py",
            "-x",
            "a:",
            ":t",
            "a:b:c",
            "a:t/x",
            "a b",
            &"a".repeat(129),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    /// A create that names no tier takes its template's (a snapshot of a gVisor sandbox makes gVisor
    /// sandboxes), one that names a tier keeps its own, and a template of a tier this host does not
    /// offer is the client's 400 with nothing recorded.
    #[tokio::test]
    async fn a_create_takes_its_templates_tier() {
        use crate::test_support::{InMemoryRuntimeForTests, TestService};
        // An image store, empty: the template's image has no layers.
        let store = tempfile::tempdir().unwrap();
        let images = crate::images::ImageSettings {
            registry: sandboxd_images::Registry::new(Default::default()),
            layers: sandboxd_images::LayerStore::open(store.path(), 0).unwrap(),
        };
        let t = TestService::new(
            crate::ServiceConfig {
                images: Some(images),
                ..Default::default()
            },
            InMemoryRuntimeForTests {
                gvisor: true,
                ..Default::default()
            },
        );
        let digest = format!("sha256:{}", "a".repeat(64));
        t.svc
            .writer()
            .write(move |tx| {
                tx.begin_image_pull(&digest, "r:a", 1, 1)?;
                tx.complete_image(&digest, &serde_json::json!({}), &[], None, 2)?;
                for (name, tier) in [("gv", Some("gvisor")), ("plain", None)] {
                    tx.begin_template(name, &serde_json::json!({"image": "r:a"}), tier, 3)?;
                    tx.template_ready(name, &digest, 4)?;
                }
                Ok(())
            })
            .await
            .unwrap();
        let create = |template: &str, isolation: Option<&str>| api::CreateSandbox {
            template: Some(template.into()),
            isolation: isolation.map(str::to_string),
            ..Default::default()
        };
        let made = t.svc.create(create("gv", None)).await.unwrap();
        assert_eq!(made.isolation, "gvisor");
        let own = t.svc.create(create("gv", Some("namespace"))).await.unwrap();
        assert_eq!(own.isolation, "namespace");
        let plain = t.svc.create(create("plain", None)).await.unwrap();
        assert_eq!(plain.isolation, "namespace", "the daemon's default");
        let shown = t.svc.get_template("gv").await.unwrap();
        assert_eq!(template_to_api(&shown).isolation.as_deref(), Some("gvisor"));

        t.rt.gvisor_gone
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let refused = t.svc.create(create("gv", None)).await;
        assert!(
            matches!(&refused, Err(ServiceError::InvalidRequest(why)) if why.contains("gvisor")),
            "{refused:?}"
        );
        let rows = t.svc.list(Default::default()).await.unwrap().0;
        assert_eq!(rows.len(), 3, "the refused create recorded nothing");
    }
}
