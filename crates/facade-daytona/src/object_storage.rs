//! Daytona's object storage, where the SDKs upload an `Image`'s local files (`add_local_file`,
//! `add_local_dir`) before they ask for its build: `GET /api/object-storage/push-access` issues
//! credentials for the daemon's object store ([`sandboxd_objects`], served on the TLS listener),
//! and a build's `contextHashes` name the `{organization}/{hash}/context.tar` objects uploaded.
//!
//! The storage URL is `https://{the host the caller reached the API by}:{TLS port}/object-storage`:
//! the SDKs reach the store over https only, so the TLS listener needs a certificate for that name
//! (`<data-dir>/certs/<host>.crt`). Without a TLS listener both the push access and a build naming
//! uploaded files are refused with a 400 that says so.

use super::error::DaytonaError;
use super::models::{BuildInfo, ORGANIZATION};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::Json;
use sandboxd_service::builds::BuildSpec;
use sandboxd_service::Service;
use serde::Serialize;

/// `StorageAccessDto`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageAccess {
    pub access_key: String,
    pub secret: String,
    pub session_token: String,
    pub storage_url: String,
    pub organization_id: &'static str,
    pub bucket: &'static str,
    pub region: &'static str,
}

/// The host part of a `Host` header (`name:port`, `[v6]:port`).
fn host_name(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(v6) => &host[..v6.find(']')? + 2],
        None => host.split(':').next()?,
    };
    (!name.is_empty()).then_some(name)
}

/// `GET /api/object-storage/push-access`.
pub async fn push_access(
    State(service): State<Service>,
    headers: HeaderMap,
) -> Result<Json<StorageAccess>, DaytonaError> {
    let storage = service.object_storage()?;
    let host = host_name(&headers)
        .ok_or_else(|| DaytonaError::bad_request("the request names no Host"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let credentials = storage.store.issue(now);
    Ok(Json(StorageAccess {
        access_key: credentials.access_key,
        secret: credentials.secret,
        session_token: credentials.session_token,
        storage_url: format!("https://{host}:{}{}", storage.tls_port, storage.path),
        organization_id: ORGANIZATION,
        bucket: sandboxd_objects::BUCKET,
        region: sandboxd_objects::REGION,
    }))
}

/// The build a `buildInfo` asks for: its Dockerfile, and the uploaded contexts it names.
pub async fn build_spec(service: &Service, build: &BuildInfo) -> Result<BuildSpec, DaytonaError> {
    let hashes = build.context_hashes.as_deref().unwrap_or_default();
    let mut keys = Vec::with_capacity(hashes.len());
    for hash in hashes {
        if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(DaytonaError::bad_request(format!(
                "context hash {hash:?} is not an MD5 in hex"
            )));
        }
        keys.push(format!("{ORGANIZATION}/{hash}/context.tar"));
    }
    let context = if keys.is_empty() {
        Vec::new()
    } else {
        service.uploaded_context(&keys).await?
    };
    Ok(BuildSpec {
        dockerfile: build.dockerfile_content.clone().unwrap_or_default(),
        context,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_the_host_header_without_its_port() {
        let with = |h: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, h.parse().unwrap());
            host_name(&headers).map(str::to_string)
        };
        assert_eq!(
            with("sbx.example.test:8080").as_deref(),
            Some("sbx.example.test")
        );
        assert_eq!(with("localhost").as_deref(), Some("localhost"));
        assert_eq!(with("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(with(":80"), None);
        assert_eq!(host_name(&HeaderMap::new()), None);
    }
}
