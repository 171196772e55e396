//! What a create needs before anything is recorded: its root (a template's, an image's, pulled if
//! need be), volumes, tier, gateway and environment ([`Service::prepare`]), and the runtime's spec
//! made of them ([`Service::spec`]). Shared by creates ([`super`]) and by the warm pools
//! ([`crate::warm_pool`]), which boot sandboxes the same way ahead of any create.

use super::{CreatePlan, DEFAULT_TEMPLATE};
use crate::{Service, ServiceError};
use sandboxd_runtime::{Isolation, ResourceLimits, SandboxSpec};
use std::collections::BTreeMap;

/// What a create's root is made of ([`Service::resolve_root`]).
pub(crate) struct Root {
    /// The template's name (for an image, its reference).
    template: String,
    /// The image, unless it is `base`.
    image: Option<sandboxd_store::ImageRecord>,
    /// What its sandboxes start once up.
    commands: crate::templates::StartCommands,
    /// The tier the template names, if any.
    isolation: Option<String>,
}

/// What [`Service::prepare`] resolved for a create.
pub(crate) struct Prepared {
    /// The template's name (for an image, its reference).
    pub(crate) template: String,
    /// The image, unless it is `base`.
    pub(crate) image: Option<sandboxd_store::ImageRecord>,
    /// What its sandboxes start once up.
    pub(crate) commands: crate::templates::StartCommands,
    /// The tier it runs in.
    pub(crate) isolation: Isolation,
    /// Its volume mounts, as rows and as the runtime's binds.
    pub(crate) mounts: Vec<sandboxd_store::VolumeMountRecord>,
    pub(crate) volume_binds: Vec<sandboxd_runtime::VolumeBind>,
    /// The egress gateway's port, when its traffic goes through it.
    pub(crate) gateway: Option<u16>,
    /// The image's root, unless it is `base`.
    pub(crate) image_root: Option<sandboxd_runtime::ImageRoot>,
    /// Its environment: the image's under the create's own.
    pub(crate) envs: BTreeMap<String, String>,
}

impl Service {
    /// What a create needs before anything is recorded: its root (pulled if need be), volumes,
    /// tier, gateway and environment. Shared by creates and by the warm pools
    /// ([`crate::warm_pool`]), which boot sandboxes the same way ahead of any create.
    pub(crate) async fn prepare(
        &self,
        id: &str,
        plan: &CreatePlan,
    ) -> Result<Prepared, ServiceError> {
        // Placeholders of secrets are checked before anything is pulled or made.
        let secrets = self
            .check_secret_uses(&plan.env, &plan.network.rules)
            .await?;
        let limits = self.config().key_limits;
        if limits.apply_to(&plan.owner) {
            // Early, so a key past its limits pulls, builds or takes from a warm pool nothing; the
            // insert checks again.
            let owner = plan.owner.clone();
            limits.admit(self.reader().read(move |tx| tx.key_usage(&owner)).await?)?;
        }
        // An image is pulled (or found) before anything is recorded: a pull may take minutes, and a
        // `creating` row would look stuck to the reconciler meanwhile.
        let Root {
            template,
            image,
            commands,
            isolation,
        } = self.resolve_root(plan).await?;
        // Volumes are resolved (and subpaths made) before anything is recorded: an unknown one is
        // the caller's 404 with nothing made.
        let (mounts, volume_binds) = self.resolve_mounts(id, &plan.volumes).await?;
        // The create's own tier, else its template's, else the daemon's default.
        let isolation = match plan.isolation {
            Some(tier) => tier,
            None => self.check_isolation(isolation.as_deref())?,
        };
        // Secrets and rules go through the egress gateway (`crate::egress`), if this daemon has
        // one.
        let gateway = self.gateway_for(&secrets, &plan.network.rules)?;
        let image_root = match &image {
            Some(image) => {
                let config = Service::run_config(image);
                Some(sandboxd_runtime::ImageRoot {
                    digest: image.digest.clone(),
                    layers: self.layer_dirs(image)?,
                    workdir: config.working_dir,
                    on_base: config.on_base,
                })
            }
            None => None,
        };
        // The image's environment, under the create's own.
        let mut envs = image
            .as_ref()
            .map(|i| Service::run_config(i).env_pairs())
            .unwrap_or_default();
        envs.extend(plan.env.clone());
        if let (Some(_), Some(settings)) = (gateway, &self.config().egress_gateway) {
            for (key, value) in crate::egress::trust_env(settings) {
                envs.entry(key).or_insert(value);
            }
        }
        Ok(Prepared {
            template,
            image,
            commands,
            isolation,
            mounts,
            volume_binds,
            gateway,
            image_root,
            envs,
        })
    }

    /// The runtime's spec of sandbox `id` of `plan` on store slot `slot`.
    pub(crate) fn spec(
        &self,
        id: &str,
        plan: &CreatePlan,
        prepared: &Prepared,
        slot: u32,
        token: &str,
    ) -> SandboxSpec {
        SandboxSpec {
            id: id.to_string(),
            template: prepared.template.clone(),
            limits: ResourceLimits {
                memory_mb: plan.memory_mb,
                cpu_millis: plan.cpu_millis,
                pids_max: ResourceLimits::default().pids_max,
                disk_mb: plan.disk_mb,
            },
            net_slot: self.config().net_slot_base + slot,
            // The host ids follow the slot: the pool gives each live sandbox of this daemon its own
            // slot, and `free_slot` one no other daemon's sandbox holds, so no two live sandboxes on
            // the host share an id (`sandboxd_runtime::namespace::ids`).
            id_range: Some(self.config().net_slot_base + slot),
            egress: plan.network.egress,
            egress_allow: plan.network.allow.clone(),
            egress_deny: plan.network.deny.clone(),
            egress_allow_names: plan.network.allow_names.clone(),
            egress_deny_names: plan.network.deny_names.clone(),
            envs: prepared.envs.clone().into_iter().collect(),
            agent_token: token.to_string(),
            image: prepared.image_root.clone(),
            isolation: prepared.isolation,
            volumes: prepared.volume_binds.clone(),
            egress_gateway: prepared.gateway,
            egress_gateway_ports: match prepared.gateway {
                Some(_) => sandboxd_egress::Policy::ports(&plan.network.rules),
                None => Vec::new(),
            },
        }
    }

    /// What a create's root is made of: the template name the sandbox shows, and its image (`None`
    /// for `base`) — the image the build gave, the template's, or the reference's, pulled if need be.
    pub(crate) async fn resolve_root(&self, plan: &CreatePlan) -> Result<Root, ServiceError> {
        let root = |template: &str, image| Root {
            template: template.to_string(),
            image,
            commands: Default::default(),
            isolation: None,
        };
        if let Some(image) = &plan.resolved {
            return Ok(root(&plan.template, Some(image.clone())));
        }
        if let Some(reference) = &plan.image {
            let image = self
                .ensure_image(reference, plan.registry_auth.clone())
                .await?;
            return Ok(root(&image.reference.clone(), Some(image)));
        }
        if plan.template == DEFAULT_TEMPLATE {
            return Ok(root(&plan.template, None));
        }
        let (image, commands, isolation) = self.template_root(&plan.template).await?;
        Ok(Root {
            commands,
            isolation,
            ..root(&plan.template, Some(image))
        })
    }
}
