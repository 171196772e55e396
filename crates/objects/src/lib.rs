//! `sandboxd-objects`: the object store build contexts are uploaded to. Daytona's SDKs upload the
//! local files of an `Image` (`add_local_file`, `add_local_dir`) as `context.tar` objects to an S3
//! store before they ask for the build; this crate is that store, served on the daemon's TLS
//! listener (the SDKs reach it over https only).
//!
//! The S3 subset ([`s3`]): `HEAD`/`GET`/`PUT`/`DELETE` of an object, multipart uploads (create,
//! part, complete, abort) and `ListObjectsV2`, path-style, in one bucket ([`BUCKET`]).
//!
//! Guarantees:
//! - **Only the holder of issued credentials gets in.** [`Credentials`] are issued for a while
//!   ([`CREDENTIALS_TTL`]) and derived from the store's key, so they outlive a restart of the
//!   daemon and need no record. Every request carries an AWS Signature V4 ([`sigv4`]) under them,
//!   with their session token among the signed headers; a request signed otherwise, too old or
//!   whose body does not hash to its signed payload hash is refused, and nothing is written.
//! - **An object is whole or absent.** A body is written to a temporary file and renamed into
//!   place once complete and verified ([`blobs`]); a reader sees the old object or the new one,
//!   never a part. A multipart upload shows nothing until it completes.
//! - **Keys touch nothing outside the store.** An object's file is named by the SHA-256 of its
//!   key, so no key, however hostile, names a path.
//! - **Bounded.** An object holds at most [`MAX_OBJECT_BYTES`] (the largest build context), and so
//!   do an unfinished upload's parts together (a part uploaded again replaces its number); an
//!   upload abandoned for [`STALE_UPLOAD`] is removed.

pub mod blobs;
pub mod credentials;
pub mod error;
pub mod s3;
pub mod sigv4;
mod xml;

pub use blobs::{Blobs, ObjectMeta};
pub use credentials::{Credentials, CredentialsTtl, CREDENTIALS_TTL};
pub use error::ObjectError;

use std::path::Path;
use std::sync::Arc;

/// The one bucket the store serves.
pub const BUCKET: &str = "sandboxd-build-contexts";
/// The region credentials are issued for (any region a client signs for is accepted).
pub const REGION: &str = "sandboxd";
/// The largest object: the largest build context the daemon builds from.
pub const MAX_OBJECT_BYTES: u64 = 256 << 20;
/// How long an unfinished multipart upload is kept.
pub const STALE_UPLOAD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The store: its files and its key.
#[derive(Clone)]
pub struct ObjectStore {
    blobs: Arc<Blobs>,
    key: Arc<credentials::Key>,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore").finish_non_exhaustive()
    }
}

impl ObjectStore {
    /// Opens (or makes) the store in `root`; unfinished uploads older than [`STALE_UPLOAD`] go.
    pub fn open(root: &Path) -> Result<ObjectStore, ObjectError> {
        let blobs = Blobs::open(root)?;
        let key = credentials::Key::load_or_create(&root.join("key"))?;
        Ok(ObjectStore {
            blobs: Arc::new(blobs),
            key: Arc::new(key),
        })
    }

    /// Fresh credentials, valid for [`CREDENTIALS_TTL`] from `now` (Unix seconds).
    pub fn issue(&self, now: u64) -> Credentials {
        self.key.issue(now, CREDENTIALS_TTL)
    }

    /// The objects.
    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    pub(crate) fn key(&self) -> &credentials::Key {
        &self.key
    }
}
