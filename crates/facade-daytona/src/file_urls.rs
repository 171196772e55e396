//! Daytona's signed file URLs onto the service's ([`sandboxd_service::file_urls`]): the SDK fetches
//! a sandbox's key (`GET /api/sandbox/{idOrName}/signing-key` → a JSON string), signs
//! `{toolbox}/{id}/files/download?path=&expires=&signature=` (GET) or `…/files/upload-v2?…` (POST)
//! itself, and anyone holding the URL makes that request without a token. `POST
//! …/signing-key/rotate` answers a new key, ending every URL signed with the old one.

use super::error::DaytonaError;
use axum::extract::{Path, Request, State};
use axum::http::Method;
use axum::Json;
use sandboxd_service::{Service, ServiceError};

/// `GET /api/sandbox/{idOrName}/signing-key`.
pub async fn signing_key(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<Json<String>, DaytonaError> {
    Ok(Json(service.file_url_key(&key, false).await?))
}

/// `POST /api/sandbox/{idOrName}/signing-key/rotate`.
pub async fn rotate_signing_key(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<Json<String>, DaytonaError> {
    Ok(Json(service.file_url_key(&key, true).await?))
}

/// A request that carries a file-URL signature instead of a token.
#[derive(Debug, PartialEq)]
pub struct SignedRequest {
    sandbox: String,
    method: &'static str,
    path: String,
    expires: i64,
    signature: String,
}

impl SignedRequest {
    /// `req`'s signature, when it is a download or upload-v2 request that carries one.
    pub fn of(req: &Request) -> Option<SignedRequest> {
        let rest = req.uri().path().strip_prefix("/api/toolbox/")?;
        let (sandbox, operation) = rest.split_once('/')?;
        let method = match (req.method(), operation) {
            (&Method::GET, "files/download") => "GET",
            (&Method::POST, "files/upload-v2") => "POST",
            _ => return None,
        };
        let pairs: Vec<(String, String)> = form_urlencoded::parse(req.uri().query()?.as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        Some(SignedRequest {
            sandbox: sandbox.to_string(),
            method,
            path: get("path").unwrap_or_default(),
            // Absent or not a number: refused by `check`.
            expires: get("expires").and_then(|v| v.parse().ok()).unwrap_or(-1),
            signature: get("signature")?,
        })
    }

    /// Whether its signature lets it through now.
    pub async fn check(&self, service: &Service) -> Result<(), ServiceError> {
        if self.expires < 0 {
            return Err(ServiceError::Unauthorized(
                "this file URL has no valid expires".into(),
            ));
        }
        let now = sandboxd_store::unix_millis_now() / 1000;
        service
            .check_file_url(
                &self.sandbox,
                self.method,
                &self.path,
                self.expires,
                &self.signature,
                now,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: Method, uri: &str) -> Request {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn only_signed_downloads_and_uploads_are_signed_requests() {
        let signed = SignedRequest::of(&request(
            Method::GET,
            "/api/toolbox/sb1/files/download?path=%2Fhome%2Fuser%2Fa+b&expires=7&signature=v1_x",
        ))
        .unwrap();
        assert_eq!(
            signed,
            SignedRequest {
                sandbox: "sb1".into(),
                method: "GET",
                path: "/home/user/a b".into(),
                expires: 7,
                signature: "v1_x".into(),
            }
        );
        let upload = "/api/toolbox/sb1/files/upload-v2?path=p&expires=0&signature=s";
        assert_eq!(
            SignedRequest::of(&request(Method::POST, upload))
                .unwrap()
                .method,
            "POST"
        );
        for (method, uri) in [
            (
                Method::POST,
                "/api/toolbox/sb1/files/download?path=p&expires=0&signature=s",
            ),
            (
                Method::GET,
                "/api/toolbox/sb1/files/download?path=p&expires=0",
            ),
            (
                Method::DELETE,
                "/api/toolbox/sb1/files?path=p&expires=0&signature=s",
            ),
            (Method::GET, "/api/sandbox/sb1?signature=s"),
        ] {
            assert_eq!(
                SignedRequest::of(&request(method.clone(), uri)),
                None,
                "{method} {uri}"
            );
        }
        let bad = SignedRequest::of(&request(
            Method::GET,
            "/api/toolbox/s/files/download?signature=s",
        ));
        assert_eq!(bad.unwrap().expires, -1, "no expires: refused by check");
    }
}
