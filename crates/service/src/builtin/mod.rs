//! Templates that ship with sandboxd: built from their Dockerfile by the ordinary builder
//! ([`crate::builds`]) the first time a create needs one, or when `POST /v1/templates` names one
//! with no source (`sbx templates build NAME`).
//!
//! Guarantees:
//! - **Built once however many ask.** The template's record is the claim: the first create that
//!   finds no record begins the build, a racing one finds it `building`, and every create that
//!   needs it waits for the same build's end (polling the store, so it holds across requests and
//!   restarts). A failed build is reported to the creates that waited; the next need builds again.
//! - Their progress is visible as any build's: the template's state and log.

use crate::templates::{StartCommands, TemplateSource};
use crate::{builds::BuildSpec, Service, ServiceError};
use sandboxd_store::{TemplateRecord, TemplateState};
use std::time::Duration;

/// The E2B Code Interpreter SDKs' default template.
pub const CODE_INTERPRETER: &str = "code-interpreter-v1";
/// How long a create waits for a built-in template's build.
const BUILD_WAIT: Duration = Duration::from_secs(20 * 60);

/// A built-in template's recipe.
pub struct Builtin {
    pub name: &'static str,
    pub dockerfile: &'static str,
    pub start_cmd: &'static str,
    pub ready_cmd: &'static str,
}

/// Every built-in template.
pub const BUILTINS: [Builtin; 1] = [Builtin {
    name: CODE_INTERPRETER,
    dockerfile: include_str!("code-interpreter.Dockerfile"),
    start_cmd: "/.sandboxd/agent interpreter",
    ready_cmd: "/.sandboxd/agent interpreter --probe",
}];

/// The built-in template `name`, if there is one.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

impl Service {
    /// Starts the build of built-in template `name` (a conflict when it exists, not found when no
    /// built-in has that name).
    pub async fn create_builtin_template(
        &self,
        name: &str,
    ) -> Result<TemplateRecord, ServiceError> {
        let builtin = find(name).ok_or_else(|| {
            let names: Vec<_> = BUILTINS.iter().map(|b| b.name).collect();
            ServiceError::InvalidRequest(format!(
                "{name:?} is not a built-in template (built in: {}): give an image or a dockerfile",
                names.join(", ")
            ))
        })?;
        let source = TemplateSource::Dockerfile(BuildSpec {
            dockerfile: builtin.dockerfile.to_string(),
            ..BuildSpec::default()
        });
        let commands = StartCommands {
            start: Some(builtin.start_cmd.to_string()),
            ready: Some(builtin.ready_cmd.to_string()),
        };
        self.create_template(name, source, None, commands, None)
            .await
    }

    /// Template `name` once it is ready: built-in templates are built on this first need (or the
    /// build another caller began is waited for); others are as the store has them.
    ///
    /// Boxed: a build creates sandboxes, whose creates come back here.
    pub(crate) fn template_when_built<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<TemplateRecord, ServiceError>> {
        Box::pin(self.template_when_built_inner(name))
    }

    async fn template_when_built_inner(&self, name: &str) -> Result<TemplateRecord, ServiceError> {
        let Some(builtin) = find(name) else {
            return self.get_template(name).await;
        };
        let begin = || async {
            tracing::info!(template = %builtin.name, "building a built-in template on first need");
            match self.create_builtin_template(name).await {
                Ok(_) | Err(ServiceError::Conflict(_)) => Ok(()),
                Err(e) => Err(e),
            }
        };
        match self.get_template(name).await {
            Err(ServiceError::NotFound(_)) => begin().await?,
            // A failed build is retried by the next need.
            Ok(t) if t.state == TemplateState::Failed => {
                match self.delete_template(name).await {
                    // Gone already, or a racing need began building it again.
                    Ok(()) | Err(ServiceError::NotFound(_) | ServiceError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
                begin().await?
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        self.await_template(name, BUILD_WAIT).await
    }
}
