//! What the E2B facade's template and snapshot endpoints need beyond the existing flows: a store
//! for the files `Template.build` uploads, the translation of E2B's template JSON onto the
//! Dockerfile builder ([`crate::builds`]), and the views E2B asks for (build status, snapshots).
//! Nothing here builds: a translated template goes to [`Service::create_template`] as a
//! [`TemplateSource::Dockerfile`], a snapshot to [`Service::snapshot`].
//!
//! Guarantees:
//! - **Uploaded files are content-addressed by the SDK's hash**, under
//!   `<data-dir>/images/e2b-files/<hash>`; a file is present only once its whole upload arrived
//!   (written to a temporary name, checked to be a tar or tar.gz, then renamed). An upload needs a URL
//!   this daemon signed ([`Service::e2b_upload_path`]: HMAC-SHA256 of the hash and an expiry with a
//!   per-daemon secret kept in `<data-dir>/images/e2b-upload-secret`, mode 0600); a wrong or expired
//!   signature stores nothing. Uploads are capped at [`MAX_UPLOAD_BYTES`].
//! - **A template JSON becomes one Dockerfile and one context** ([`dockerfile_of`]): each COPY's
//!   uploaded tar is extracted under `step-<n>/` of the context and copied from there; ENV, WORKDIR,
//!   USER and RUN become those instructions (RUN `[cmd, user]` is bracketed by `USER user` and a
//!   `USER` back); steps run as `user` unless told otherwise, as E2B's do. Every step's lines follow a
//!   `# e2b step <n>` comment, so a failing Dockerfile line maps back to the E2B step the SDK names.
//!   `force` (skip the cache) enters as an `ARG` with a fresh value before the step (and a fresh
//!   context directory for a COPY), so that step and the ones after miss the build cache.
//!   `startCmd` and `readyCmd` become the template's start commands (run in every sandbox made
//!   from it, see [`crate::templates::StartCommands`]); `startCmd` is recorded as the image's `Cmd`
//!   too.
//! - `fromImage: e2bdev/base` (the SDK's `from_base_image()` and default) builds on the built-in
//!   `base`, which is what E2B's `base` template is here.
//! - **A build id is a function of the template's name** (an HMAC with the daemon's secret), so the
//!   facade keeps no state between `POST /v3/templates` and the build's start, and a daemon restart
//!   loses nothing. A rebuild after a failure reuses the id.
//!
//! Inside: [`uploads`] (the signed upload URLs and the file store), [`builds`] (the translation
//! and the build's start and status), [`snapshots`] (E2B's snapshots).
//!
//! Proven by the unit tests below (translation parsed back by the Dockerfile parser, signatures,
//! context assembly) and `crates/sandboxd/tests/e2b_templates.rs` (the real SDK end to end).

use crate::builds::context::MAX_CONTEXT_BYTES;
use crate::builds::BuildSpec;
use crate::templates::TemplateSource;
use crate::{Service, ServiceError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use hmac::{Hmac, Mac};
use sandboxd_store::{LogLine, TemplateRecord, TemplateState};
use sha2::Sha256;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Largest upload accepted, bytes (as sent: compressed when gzip).
pub const MAX_UPLOAD_BYTES: u64 = 256 << 20;
/// How long an upload URL stays valid, seconds.
pub const UPLOAD_URL_TTL_SECS: i64 = 3600;
/// The image the SDK's `from_base_image()` names: built on the built-in `base` here.
const E2B_BASE_IMAGES: [&str; 4] = [
    "e2bdev/base",
    "e2bdev/base:latest",
    "docker.io/e2bdev/base",
    "docker.io/e2bdev/base:latest",
];
const FILES_DIR: &str = "e2b-files";
const SECRET_FILE: &str = "e2b-upload-secret";

/// Why an upload or a file lookup was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The hash is not a SHA-256 in lowercase hex.
    #[error("files hash {0:?} must be 64 lowercase hex digits")]
    BadHash(String),
    /// The URL's signature is not this daemon's for this hash and expiry.
    #[error("the upload URL's signature is invalid")]
    BadSignature,
    /// The URL's expiry has passed.
    #[error("the upload URL has expired; ask for a new one")]
    Expired,
    /// The body is larger than [`MAX_UPLOAD_BYTES`].
    #[error("the upload is larger than {MAX_UPLOAD_BYTES} bytes")]
    TooLarge,
    /// The body is neither a tar nor a gzip-compressed tar.
    #[error("the upload is not a tar or tar.gz archive: {0}")]
    NotATar(String),
    /// The body stopped arriving.
    #[error("the upload was cut short: {0}")]
    Incomplete(String),
    /// The daemon has no image store, so nowhere to keep files.
    #[error("no image store is configured")]
    NoStore,
    /// Reading or writing the file store.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FileError {
    let what = what.into();
    move |source| FileError::Io { what, source }
}

/// Whether `hash` is what the SDK sends: a SHA-256 as 64 lowercase hex digits.
pub fn valid_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn now_secs() -> i64 {
    sandboxd_store::unix_millis_now() / 1000
}

mod builds;
mod snapshots;
mod uploads;

pub use builds::*;
use uploads::*;

#[cfg(test)]
mod tests;
