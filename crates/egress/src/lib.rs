//! The egress gateway's engine.
//!
//! A sandbox that uses secrets or has per-host rules sends its outbound HTTP and HTTPS through the
//! daemon's egress gateway. This crate is what the gateway decides and holds, apart from sockets:
//!
//! - [`policy`]: a sandbox's rules (headers a matching host's requests get) and the secrets it may
//!   use, and how a request's headers are rewritten for the host it goes to — rule headers set,
//!   placeholders of secrets replaced by their values only for hosts the secret or the rule allows;
//! - [`ca`]: the daemon's egress certificate authority (made once, kept in the data dir) and the
//!   leaf certificates it mints per host, cached, for the TLS it terminates;
//! - [`gateway`]: the connections themselves — which are terminated and rewritten, which pass
//!   through untouched, and where the upstream side is opened;
//! - [`metered`]: bodies counted as they pass, for the audit log's byte counts.
//!
//! Contract: nothing here writes a secret's value anywhere but into the header it rewrites; what a
//! rewrite applied is reported by name only ([`policy::Applied`]).

pub mod ca;
pub mod gateway;
pub mod metered;
pub mod policy;

pub use ca::{CaError, EgressCa};
pub use gateway::{AuditEntry, Connect, Gateway, Route, Routes};
pub use policy::{Applied, HeaderRule, Policy, RewriteError, RuleHost, SecretUse};
