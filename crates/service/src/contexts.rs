//! Build contexts uploaded to the object store ([`sandboxd_objects`]): Daytona's SDKs upload an
//! `Image`'s local files as `context.tar` objects, then name them in the build.
//!
//! Contract: [`Service::uploaded_context`] answers the named objects as one context, the tars one
//! after another (the builder reads them as one, later members over earlier ones), or a clear
//! refusal: no store (the daemon has no TLS listener), or an object that was never uploaded. The
//! store is this node's own: in a cluster, the node that issued the credentials keeps the uploads.

use crate::{Service, ServiceError};
use sandboxd_objects::{ObjectError, ObjectStore};

/// The object store and where it is served.
#[derive(Debug, Clone)]
pub struct ObjectStorage {
    /// The store.
    pub store: ObjectStore,
    /// The port of the TLS listener it is served on.
    pub tls_port: u16,
    /// The path it is served under on that listener (`/object-storage`).
    pub path: String,
}

impl Service {
    /// The object store, or why there is none.
    pub fn object_storage(&self) -> Result<&ObjectStorage, ServiceError> {
        self.config().objects.as_ref().ok_or_else(|| {
            ServiceError::InvalidRequest(
                "builds with local files upload them to the daemon's object store, which is \
                 served on its TLS listener only: start sandboxd with --tls-listen (and a \
                 certificate for its host name in <data-dir>/certs)"
                    .into(),
            )
        })
    }

    /// The build context made of objects `keys`, in order.
    pub async fn uploaded_context(&self, keys: &[String]) -> Result<Vec<u8>, ServiceError> {
        let store = &self.object_storage()?.store;
        let mut context = Vec::new();
        for key in keys {
            match store.blobs().read(key).await {
                Ok(bytes) => context.extend_from_slice(&bytes),
                Err(ObjectError::NoSuchKey(_)) => {
                    return Err(ServiceError::InvalidRequest(format!(
                        "build context {key:?} was not uploaded to this daemon's object store"
                    )))
                }
                Err(e) => return Err(ServiceError::Objects(e)),
            }
        }
        Ok(context)
    }
}
