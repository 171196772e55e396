//! How a surface's sandbox routes look to the cluster's forwarding layer (`sandboxd-api`'s
//! `cluster` module), declared by the surface itself: the layer is mounted in front of every
//! surface and knows none of them by name.
//!
//! Contract: a surface that names a sandbox in its paths declares here where (its roots), which of
//! its paths create and list sandboxes and how their bodies look. The layer forwards a per-sandbox
//! call to the node that holds the sandbox, places a create, and merges a list from every member;
//! what the surface does not declare is served on the node that received it.

use axum::response::Response;
use sandboxd_service::ServiceError;
use std::time::Duration;

/// One surface's routes, as the forwarding layer needs them.
#[derive(Debug, Clone, Copy)]
pub struct SurfaceRoutes {
    /// Roots under which `{root}/{key}/…` names one sandbox (by id, or a name the log gives to one).
    pub sandbox_roots: &'static [&'static str],
    /// Segments right under a root that name no sandbox (Daytona's `/api/sandbox/paginated`).
    pub not_sandboxes: &'static [&'static str],
    /// `POST` paths that create a sandbox.
    pub creates: &'static [CreateRoute],
    /// `GET` paths that list sandboxes or volumes (each node lists its own; the layer merges them).
    pub lists: &'static [ListRoute],
    /// Roots under which `{root}/{key}/…` names one volume (by id or name), served by the node it
    /// lives on; tried in order (a more specific root first).
    pub volume_roots: &'static [&'static str],
}

/// A create path.
#[derive(Debug, Clone, Copy)]
pub struct CreateRoute {
    /// The path.
    pub path: &'static str,
    /// The body's field naming the template (placement puts a create where its template is).
    pub template_field: &'static str,
    /// Where the body names the volumes it mounts (placement puts a create where they are).
    pub volumes: VolumesField,
    /// Creates whose duplicates must all meet the first on one node are routed by fingerprint.
    pub fingerprint: Option<Fingerprint>,
}

/// Where a create body names its volumes: a list field, and in each item the field naming the
/// volume (by name or id).
#[derive(Debug, Clone, Copy)]
pub struct VolumesField {
    pub list: &'static str,
    pub volume: &'static str,
}

impl VolumesField {
    /// The volumes `body` (a parsed create) names.
    pub fn of(&self, body: &serde_json::Value) -> Vec<String> {
        body.get(self.list)
            .and_then(|l| l.as_array())
            .into_iter()
            .flatten()
            .filter_map(|m| m.get(self.volume)?.as_str().map(str::to_string))
            .collect()
    }
}

/// How a surface's creates are deduplicated across the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Fingerprint {
    /// The fingerprint of a create body (with the daemon's default timeout), or `None` for a body
    /// the create would refuse.
    pub of: fn(&[u8], Duration) -> Option<String>,
    /// A failure to route it, in the surface's error shape.
    pub refusal: fn(ServiceError) -> Response,
}

/// A list path.
#[derive(Debug, Clone, Copy)]
pub struct ListRoute {
    /// The path.
    pub path: &'static str,
    /// How its answer looks.
    pub shape: ListShape,
}

/// How a list's answer looks. Keyed lists are in the order of `(creation time, id)` and their cursor
/// is that pair (`sandboxd_store`'s keyset cursor), which any node understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListShape {
    /// `{<items>: [...], nextCursor}`.
    Envelope {
        /// The field holding the items.
        items: &'static str,
        /// The item's creation-time field (RFC 3339).
        created: &'static str,
        /// The item's id field.
        id: &'static str,
    },
    /// An array, the next page's cursor in the `x-next-token` header.
    Paged {
        /// The item's creation-time field (RFC 3339).
        created: &'static str,
        /// The item's id field.
        id: &'static str,
    },
    /// A whole list: an array, never paged.
    Whole,
    /// A whole list in a field of an object (`{<items>: [...]}`), never paged.
    WholeIn {
        /// The field holding the items.
        items: &'static str,
    },
}

impl SurfaceRoutes {
    /// The create route `path` is, if any.
    pub fn create(&self, path: &str) -> Option<&CreateRoute> {
        self.creates.iter().find(|c| c.path == path)
    }

    /// The list route `path` is, if any.
    pub fn list(&self, path: &str) -> Option<&ListRoute> {
        self.lists.iter().find(|l| l.path == path)
    }

    /// The volume key `path` names under one of the volume roots, if any.
    pub fn volume_key<'a>(&self, path: &'a str) -> Option<&'a str> {
        self.volume_roots.iter().find_map(|root| {
            let rest = path.strip_prefix(root)?.strip_prefix('/')?;
            rest.split('/').next().filter(|key| !key.is_empty())
        })
    }

    /// The sandbox key `path` names under one of the roots, if any.
    pub fn sandbox_key<'a>(&self, path: &'a str) -> Option<&'a str> {
        self.sandbox_roots.iter().find_map(|root| {
            let rest = path.strip_prefix(root)?.strip_prefix('/')?;
            let key = rest.split('/').next().unwrap_or_default();
            (!key.is_empty() && !self.not_sandboxes.contains(&key)).then_some(key)
        })
    }
}

/// The sandbox key `path` names under one of `surfaces`' roots (a trailing `/` ignored), if any.
pub fn sandbox_key_in<'p>(surfaces: &[&SurfaceRoutes], path: &'p str) -> Option<&'p str> {
    let path = path.trim_end_matches('/');
    surfaces.iter().find_map(|s| s.sandbox_key(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_the_segment_under_a_root_unless_it_names_no_sandbox() {
        let routes = SurfaceRoutes {
            sandbox_roots: &["/api/sandbox", "/api/toolbox"],
            not_sandboxes: &["paginated"],
            creates: &[],
            lists: &[],
            volume_roots: &["/api/volumes/by-name", "/api/volumes"],
        };
        assert_eq!(routes.volume_key("/api/volumes/v1"), Some("v1"));
        assert_eq!(routes.volume_key("/api/volumes/by-name/data"), Some("data"));
        assert_eq!(routes.volume_key("/api/volumes"), None);
        assert_eq!(routes.volume_key("/api/volumesx/v1"), None);
        assert_eq!(routes.sandbox_key("/api/sandbox/sb1/start"), Some("sb1"));
        assert_eq!(
            routes.sandbox_key("/api/toolbox/sb3/toolbox/files"),
            Some("sb3")
        );
        assert_eq!(routes.sandbox_key("/api/sandbox/paginated"), None);
        assert_eq!(routes.sandbox_key("/api/sandbox"), None);
        assert_eq!(routes.sandbox_key("/api/sandboxes/x"), None);
    }
}
