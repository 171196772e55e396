//! Errors of the service layer: each says what went wrong with the request in the caller's terms; the
//! HTTP surfaces map them to status codes in one place each.

use sandboxd_runtime::RuntimeError;
use sandboxd_store::StoreError;

/// What a flow can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The request is malformed or out of range.
    #[error("{0}")]
    InvalidRequest(String),
    /// No such sandbox (or port, or file).
    #[error("{0}")]
    NotFound(String),
    /// The name is taken by another sandbox.
    #[error("a sandbox named {0:?} already exists")]
    NameConflict(String),
    /// The hostname is bound to another sandbox.
    #[error("hostname {0:?} is bound to another sandbox")]
    HostnameConflict(String),
    /// The sandbox is not in a state that allows this.
    #[error("{0}")]
    Conflict(String),
    /// Nothing listens on the port asked to be exposed.
    #[error("nothing listens on port {0} in the sandbox")]
    PortNotListening(u16),
    /// The same Idempotency-Key is being processed right now.
    #[error("a request with this Idempotency-Key is still in progress")]
    InFlight {
        /// Seconds after which a retry is worth it.
        retry_after_secs: u64,
    },
    /// The caller's API key is past one of its limits ([`crate::per_key`]).
    #[error("{message}")]
    LimitExceeded {
        /// What limit, and what to do.
        message: String,
        /// Seconds after which a retry is worth it.
        retry_after_secs: u64,
    },
    /// The Idempotency-Key was used before for a different request.
    #[error("this Idempotency-Key was used for a different request")]
    KeyReused,
    /// Cluster mode: the replicated log could not decide (no quorum, no leader, or this node holds
    /// no lease); nothing was created. Worth retrying.
    #[error("the cluster cannot take writes now: {0}")]
    ClusterUnavailable(String),
    /// A pool (network slots, host ports) is exhausted.
    #[error("{0}")]
    Exhausted(String),
    /// The runtime could not do its part.
    #[error("runtime")]
    Runtime(#[source] RuntimeError),
    /// The store could not do its part.
    #[error("store")]
    Store(#[source] StoreError),
    /// A list cursor this daemon did not issue (not the `nextCursor` of a listing).
    #[error("invalid list cursor {0:?}: pass the nextCursor of an earlier page")]
    InvalidCursor(String),
    /// The caller's credentials are not good for this.
    #[error("{0}")]
    Unauthorized(String),
    /// The sandbox was made but never became ready; it is `failed` with `reason`.
    #[error("sandbox {id} failed to start: {reason}")]
    StartFailed {
        /// The failed sandbox (its row stays, for diagnosis).
        id: String,
        /// Why.
        reason: String,
    },
    /// The sandbox's agent failed or refused.
    #[error("sandbox agent")]
    Agent(#[source] sandboxd_envd::Error),
    /// The sandbox's code interpreter failed.
    #[error("the sandbox's code interpreter failed: {0}")]
    Interpreter(String),
    /// A language server in the sandbox failed, exited or did not answer in time.
    #[error("the sandbox's language server failed: {0}")]
    LanguageServer(String),
    /// An image could not be had.
    #[error("image")]
    Image(#[from] sandboxd_images::ImageError),
    /// The build-context store could not do its part.
    #[error("build context store")]
    Objects(#[source] sandboxd_objects::ObjectError),
    /// A secret's value could not be sealed (the system's random source failed) ([`crate::secrets`]).
    #[error("secret store")]
    Seal(#[from] sandboxd_secrets::SealError),
    /// Git in the sandbox refused or failed, or the request could not be given to it
    /// ([`crate::git`]).
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    /// A volume file operation refused or failed ([`crate::volumes`]).
    #[error(transparent)]
    Volume(#[from] sandboxd_volumes::VolumeError),
}

impl From<sandboxd_images::RegistryError> for ServiceError {
    fn from(e: sandboxd_images::RegistryError) -> Self {
        ServiceError::Image(e.into())
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NameConflict { name } => ServiceError::NameConflict(name),
            StoreError::HostnameConflict { hostname, .. } => {
                ServiceError::HostnameConflict(hostname)
            }
            StoreError::NotFound { kind, key } => {
                ServiceError::NotFound(format!("{kind} {key} not found"))
            }
            e @ StoreError::PortConflict { .. } => ServiceError::Conflict(e.to_string()),
            e @ StoreError::VolumeExists { .. } => ServiceError::Conflict(e.to_string()),
            StoreError::PoolExhausted { pool } => {
                ServiceError::Exhausted(format!("no free {pool} left"))
            }
            other => ServiceError::Store(other),
        }
    }
}

impl From<RuntimeError> for ServiceError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::UnknownTemplate(t) => {
                ServiceError::NotFound(format!("template {t:?} not found"))
            }
            RuntimeError::Unsupported(what) => ServiceError::InvalidRequest(what),
            // Its row is there but the sandbox went (a delete racing this request): it is gone for
            // the caller too, never the daemon's failure.
            RuntimeError::NotFound(id) => ServiceError::NotFound(format!("sandbox {id} not found")),
            // The host is full, not broken: a 503 that says which limit, never a 500.
            other => match other.host_limit() {
                Some(limit) => ServiceError::Exhausted(format!(
                    "{}: the host ran out of {limit}; `sandboxd doctor` says how to raise it",
                    chain(&other)
                )),
                None => ServiceError::Runtime(other),
            },
        }
    }
}

pub use sandboxd_errors::chain;

#[cfg(test)]
mod tests {
    use super::*;

    /// A sandbox the runtime no longer has is not found (a 404), not a runtime failure (a 500).
    #[test]
    fn vanished_sandboxes_are_not_found() {
        let e = ServiceError::from(RuntimeError::NotFound("bld1".into()));
        assert!(
            matches!(&e, ServiceError::NotFound(m) if m == "sandbox bld1 not found"),
            "{e:?}"
        );
    }

    /// A create that ran into a host limit (here, the daemon's open files) is the host being full
    /// (a 503 naming the limit), not a runtime failure (a 500).
    #[test]
    fn host_limits_are_exhaustion_not_failure() {
        // EMFILE on Linux.
        let emfile = std::io::Error::from_raw_os_error(24);
        let e = ServiceError::from(RuntimeError::Spawn(emfile));
        assert!(
            matches!(&e, ServiceError::Exhausted(m)
                if m.starts_with("spawning the sandbox init: ") && m.contains("LimitNOFILE")),
            "{e:?}"
        );
    }

    /// Exposing a port again with the other protocol is a conflict with the exposure there (a 409).
    #[test]
    fn a_port_exposed_with_another_protocol_is_a_conflict() {
        let e = ServiceError::from(StoreError::PortConflict {
            sandbox_id: "sb1".into(),
            port: 1,
            existing: sandboxd_store::Protocol::Tcp,
        });
        assert!(
            matches!(&e, ServiceError::Conflict(m) if m.contains("already exposed as tcp")),
            "{e:?}"
        );
    }
}
