//! The S3 wire: a router to nest under a prefix of the TLS listener (the prefix and the bucket
//! form the path, path-style: `/{prefix}/{bucket}/{key…}`).
//!
//! | Request | Operation |
//! |---|---|
//! | `HEAD /{bucket}` | HeadBucket |
//! | `GET /{bucket}?list-type=2` | ListObjectsV2 (`prefix`, `max-keys`, `continuation-token`, `start-after`) |
//! | `POST /{bucket}?delete` | DeleteObjects |
//! | `HEAD`/`GET`/`DELETE /{bucket}/{key}` | HeadObject, GetObject (whole), DeleteObject |
//! | `PUT /{bucket}/{key}` | PutObject |
//! | `POST /{bucket}/{key}?uploads` | CreateMultipartUpload |
//! | `PUT /{bucket}/{key}?partNumber=&uploadId=` | UploadPart |
//! | `POST /{bucket}/{key}?uploadId=` | CompleteMultipartUpload |
//! | `DELETE /{bucket}/{key}?uploadId=` | AbortMultipartUpload |
//!
//! Every request is verified ([`crate::sigv4`]) before anything is read or written; errors are
//! S3's `<Error>` documents with S3's codes ([`ObjectError::code`]).

use crate::blobs::{check_key, Received};
use crate::sigv4::{self, Payload};
use crate::{xml, ObjectError, ObjectStore, BUCKET};
use axum::body::Body;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use base64::Engine;
use futures::StreamExt;
use std::collections::HashMap;

/// The largest `CompleteMultipartUpload` or `DeleteObjects` body.
const SMALL_BODY_LIMIT: usize = 4 << 20;
/// The most keys a listing answers.
const MAX_KEYS: usize = 1000;

/// The store's router.
pub fn router(store: ObjectStore) -> Router {
    Router::new()
        .route("/{bucket}", any(handle))
        .route("/{bucket}/", any(handle))
        .route("/{bucket}/{*key}", any(handle))
        .with_state(store)
}

/// A request's parts the handlers look at.
struct Call {
    method: Method,
    uri: http::Uri,
    headers: HeaderMap,
    query: HashMap<String, String>,
}

impl Call {
    fn new(method: Method, uri: http::Uri, headers: HeaderMap) -> Call {
        let query = form_pairs(uri.query().unwrap_or(""));
        Call {
            method,
            uri,
            headers,
            query,
        }
    }

    fn has(&self, name: &str) -> bool {
        self.query.contains_key(name)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// Verifies the signature, then that bucket `name` is the store's: what the body must hash to.
    fn admit(&self, store: &ObjectStore, name: &str) -> Result<Payload, ObjectError> {
        let payload = self.authenticate(store)?;
        if name != BUCKET {
            return Err(ObjectError::NoSuchBucket(name.to_string()));
        }
        Ok(payload)
    }

    /// Verifies the signature: what the body must hash to.
    fn authenticate(&self, store: &ObjectStore) -> Result<Payload, ObjectError> {
        let req = sigv4::Request {
            method: self.method.as_str(),
            path: self.uri.path(),
            query: self.uri.query().unwrap_or(""),
            headers: &self.headers,
            authority: self.uri.authority().map(|a| a.as_str()),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let signed = sigv4::verify(&req, now, |access_key, token| {
            store.key().secret_of(access_key, token, now)
        })?;
        Ok(signed.payload)
    }
}

fn form_pairs(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

fn error_response(e: &ObjectError, resource: &str, method: &Method) -> Response {
    if e.status().is_server_error() {
        tracing::warn!(error = %sandboxd_errors::chain(e), resource, "object store request failed");
    }
    if method == Method::HEAD {
        return e.status().into_response();
    }
    let body = xml::document(&xml::Error {
        code: e.code(),
        message: sandboxd_errors::chain(e),
        resource,
    });
    (e.status(), [("content-type", "application/xml")], body).into_response()
}

fn xml_response(body: String) -> Response {
    ([("content-type", "application/xml")], body).into_response()
}

fn quoted(etag: &str) -> String {
    format!("\"{etag}\"")
}

fn etag_header(etag: &str) -> [(&'static str, HeaderValue); 1] {
    let value = HeaderValue::from_str(&quoted(etag)).expect("etags are hex");
    [("etag", value)]
}

/// Every request: the bucket's (`/{bucket}`) or an object's (`/{bucket}/{key…}`).
async fn handle(
    State(store): State<ObjectStore>,
    Path(params): Path<HashMap<String, String>>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let call = Call::new(method.clone(), uri.clone(), headers);
    let name = params.get("bucket").map(String::as_str).unwrap_or_default();
    let answered = match params.get("key") {
        Some(key) => object_call(&store, name, key, &call, body).await,
        None => bucket_call(&store, name, &call, body).await,
    };
    answered.unwrap_or_else(|e| error_response(&e, uri.path(), &method))
}

async fn bucket_call(
    store: &ObjectStore,
    name: &str,
    call: &Call,
    body: Body,
) -> Result<Response, ObjectError> {
    let payload = call.admit(store, name)?;
    match call.method {
        Method::HEAD => Ok(StatusCode::OK.into_response()),
        Method::GET if call.get("list-type") == Some("2") => list(store, call).await,
        Method::POST if call.has("delete") => {
            let text = small_body(body, &payload).await?;
            let delete: xml::Delete = quick_xml::de::from_str(&text).map_err(|e| {
                ObjectError::InvalidRequest(format!("the body is not a Delete document: {e}"))
            })?;
            let mut deleted = Vec::new();
            for object in delete.objects {
                check_key(&object.key)?;
                store.blobs().delete(&object.key).await?;
                deleted.push(xml::Deleted { key: object.key });
            }
            Ok(xml_response(xml::document(&xml::DeleteResult { deleted })))
        }
        _ => Err(ObjectError::NotImplemented(format!(
            "{} of the bucket is not served: ListObjectsV2 (list-type=2), DeleteObjects and \
             HeadBucket are",
            call.method
        ))),
    }
}

async fn list(store: &ObjectStore, call: &Call) -> Result<Response, ObjectError> {
    let prefix = call.get("prefix").unwrap_or("");
    let max_keys = match call.get("max-keys") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ObjectError::InvalidRequest("max-keys must be a whole number".into()))?,
        None => MAX_KEYS,
    }
    .min(MAX_KEYS);
    let token = call
        .get("continuation-token")
        .map(|t| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| ObjectError::InvalidRequest("invalid continuation-token".into()))
        })
        .transpose()?;
    let after = token.as_deref().or(call.get("start-after"));
    let (objects, more) = store.blobs().list(prefix, after, max_keys).await?;
    let next = more
        .then(|| objects.last())
        .flatten()
        .map(|m| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&m.key));
    let contents: Vec<_> = objects
        .into_iter()
        .map(|m| xml::Contents {
            last_modified: humantime::format_rfc3339_millis(m.modified()).to_string(),
            etag: quoted(&m.etag),
            size: m.size,
            storage_class: "STANDARD",
            key: m.key,
        })
        .collect();
    Ok(xml_response(xml::document(&xml::Listed {
        name: BUCKET,
        prefix,
        key_count: contents.len(),
        max_keys,
        is_truncated: more,
        next_continuation_token: next,
        contents,
    })))
}

async fn object_call(
    store: &ObjectStore,
    name: &str,
    key: &str,
    call: &Call,
    body: Body,
) -> Result<Response, ObjectError> {
    let payload = call.admit(store, name)?;
    check_key(key)?;
    let blobs = store.blobs();
    let upload_id = call.get("uploadId");
    match (&call.method, upload_id) {
        (&Method::HEAD, None) => {
            let meta = blobs.head(key).await?;
            Ok(object_headers(&meta, StatusCode::OK, Body::empty()))
        }
        (&Method::GET, None) => {
            let (meta, file) = blobs.open_object(key).await?;
            let stream = tokio_util::io::ReaderStream::new(file);
            Ok(object_headers(
                &meta,
                StatusCode::OK,
                Body::from_stream(stream),
            ))
        }
        (&Method::PUT, None) => {
            if call.headers.contains_key("x-amz-copy-source") {
                return Err(ObjectError::NotImplemented(
                    "CopyObject is not served".into(),
                ));
            }
            let body = receive(store, body, &payload).await?;
            let meta = blobs.put(key, body).await?;
            Ok((StatusCode::OK, etag_header(&meta.etag)).into_response())
        }
        (&Method::PUT, Some(id)) => {
            let number = call
                .get("partNumber")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| {
                    ObjectError::InvalidRequest("partNumber must be 1 to 10000".into())
                })?;
            let body = receive(store, body, &payload).await?;
            let etag = blobs.put_part(id, key, number, body).await?;
            Ok((StatusCode::OK, etag_header(&etag)).into_response())
        }
        (&Method::POST, None) if call.has("uploads") => {
            let id = blobs.create_upload(key).await?;
            Ok(xml_response(xml::document(&xml::Initiated {
                bucket: BUCKET,
                key,
                upload_id: &id,
            })))
        }
        (&Method::POST, Some(id)) => {
            let text = small_body(body, &payload).await?;
            let complete: xml::Complete = quick_xml::de::from_str(&text).map_err(|e| {
                ObjectError::InvalidRequest(format!(
                    "the completion is not a CompleteMultipartUpload document: {e}"
                ))
            })?;
            let parts = complete
                .parts
                .into_iter()
                .map(|p| (p.number, p.etag.trim_matches('"').to_string()))
                .collect();
            let meta = blobs.complete(id, key, parts).await?;
            Ok(xml_response(xml::document(&xml::Completed {
                bucket: BUCKET,
                key,
                etag: quoted(&meta.etag),
            })))
        }
        (&Method::DELETE, Some(id)) => {
            blobs.abort(id, key).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (&Method::DELETE, None) => {
            blobs.delete(key).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (method, _) => Err(ObjectError::NotImplemented(format!(
            "{method} of an object with this query is not served"
        ))),
    }
}

fn object_headers(meta: &crate::ObjectMeta, status: StatusCode, body: Body) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    let value = |s: String| HeaderValue::from_str(&s).expect("header values are ASCII");
    h.insert("content-length", value(meta.size.to_string()));
    h.insert(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert("etag", value(quoted(&meta.etag)));
    h.insert(
        "last-modified",
        value(httpdate::fmt_http_date(meta.modified())),
    );
    response
}

/// A small XML body (a completion, a batch delete), checked against `payload`.
async fn small_body(body: Body, payload: &Payload) -> Result<String, ObjectError> {
    let bytes = axum::body::to_bytes(body, SMALL_BODY_LIMIT)
        .await
        .map_err(|e| ObjectError::InvalidRequest(format!("reading the body: {e}")))?;
    check_payload(payload, &bytes)?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ObjectError::InvalidRequest("the body is not UTF-8".into()))
}

/// Whether `bytes` is what the signature says the body is.
fn check_payload(payload: &Payload, bytes: &[u8]) -> Result<(), ObjectError> {
    use sha2::Digest;
    match payload {
        Payload::Sha256(expected) if *expected != hex::encode(sha2::Sha256::digest(bytes)) => {
            Err(ObjectError::BadDigest)
        }
        _ => Ok(()),
    }
}

/// Receives `body` into the store's `tmp/`, checked against `payload`.
async fn receive(
    store: &ObjectStore,
    body: Body,
    payload: &Payload,
) -> Result<Received, ObjectError> {
    let mut incoming = store.blobs().incoming().await?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ObjectError::InvalidRequest(format!("reading the body: {e}")))?;
        incoming.write(&chunk).await?;
    }
    let received = incoming.finish().await?;
    if let Payload::Sha256(expected) = payload {
        if *expected != received.sha256 {
            return Err(ObjectError::BadDigest);
        }
    }
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn send(
        store: &ObjectStore,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, String) {
        let mut req = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let answer = router(store.clone())
            .oneshot(req.body(Body::from("payload")).unwrap())
            .await
            .unwrap();
        let status = answer.status();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Requests without issued credentials are refused, whatever they name, and write nothing.
    #[tokio::test]
    async fn requests_not_signed_with_issued_credentials_are_refused_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let key = format!("/{BUCKET}/org/h/context.tar");
        let (status, body) = send(&store, "PUT", &key, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
        let forged = "AWS4-HMAC-SHA256 Credential=SBX00FFFFFFFF0000000000000000/20300101/r/s3/aws4_request, \
                      SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=00";
        let now = std::time::SystemTime::now();
        let date = humantime::format_rfc3339_seconds(now)
            .to_string()
            .replace(['-', ':'], "");
        let headers = [
            ("authorization", forged),
            ("host", "localhost"),
            ("x-amz-date", date.as_str()),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ("x-amz-security-token", "made-up"),
        ];
        for (method, uri) in [
            ("PUT", key.as_str()),
            ("POST", &format!("{key}?uploads")),
            ("GET", &format!("/{BUCKET}?list-type=2")),
            ("PUT", "/other-bucket/k"),
        ] {
            let (status, body) = send(&store, method, uri, &headers).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}: {body}");
        }
        let (listed, _) = store.blobs().list("", None, 10).await.unwrap();
        assert!(listed.is_empty());
        assert_eq!(
            std::fs::read_dir(dir.path().join("uploads"))
                .unwrap()
                .count(),
            0
        );
    }
}
