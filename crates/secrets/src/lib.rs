//! Secrets that never enter a sandbox.
//!
//! A secret is a name, a value and the hosts the value may be sent to. A sandbox only ever holds a
//! placeholder (`${sandboxd.secrets.<name>}`, or E2B's `${e2b.secrets.<name>}`); the value is put in
//! at the egress, on requests to the secret's hosts. This crate is the part every surface shares:
//!
//! - [`key`]: the daemon's secrets key (32 random bytes in a file of mode 0600), loaded or made once;
//! - [`seal`]: a value sealed with that key (ChaCha20-Poly1305, a fresh nonce per seal, the secret's
//!   id as associated data so a sealed value cannot be moved to another secret) and opened again;
//! - [`rules`]: what a secret's name and hosts may be, which hosts a host pattern allows, and the
//!   placeholders a string names.
//!
//! Contract: a value exists in clear only in a [`SecretValue`], which wipes its memory when dropped
//! and whose `Debug` never shows it; nothing here logs, formats or stores a value in clear.

pub mod key;
pub mod rules;
pub mod seal;

pub use key::{KeyError, SecretKey};
pub use rules::{
    check_hosts, check_name, check_value, placeholder, placeholders_in, replace_placeholders,
    HostPattern, RuleError, MAX_VALUE_CHARS,
};
pub use seal::{open, seal, SealError, SecretValue};
