//! Warm pools: sandboxes of a template booted ahead of any create (`/v1/warm-pools`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `PUT /v1/warm-pools/{template}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetWarmPool {
    /// How many sandboxes of the template to keep booted and idle (at most 1000, and at most the
    /// daemon's network slots); 0 empties the pool.
    #[schema(maximum = 1000)]
    pub size: u32,
}

/// One template's warm pool.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WarmPool {
    /// The template its sandboxes are made from.
    pub template: String,
    /// How many it keeps.
    pub size: u32,
    /// Booted and idle, waiting for a create.
    pub ready: u32,
    /// Booting.
    pub warming: u32,
    /// Creates that took a sandbox from it since the daemon started.
    pub hits: u64,
    /// Creates it could have served but had none ready for (they were made cold).
    pub misses: u64,
    /// How long the last sandbox it made took to boot, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refill_ms: Option<u64>,
}

/// `GET /v1/warm-pools`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolList {
    /// Every template with a pool, by template.
    pub warm_pools: Vec<WarmPool>,
}
