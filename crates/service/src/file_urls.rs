//! Signed file URLs (Daytona's `download_url` and `upload_url`): a URL names one sandbox, one
//! operation (`GET` a download, `POST` an upload), one path and an expiry, and carries
//! `v1_` + unpadded base64url of HMAC-SHA256(key, `v1:files:{METHOD}:{path}:{expires}`) under the
//! sandbox's file-URL key.
//!
//! Guarantees:
//! - Whoever holds such a URL may do that one operation on that one path, without a token, until
//!   `expires` (Unix seconds; 0: never), and nothing else: another method, path or sandbox, a later
//!   time or a changed byte is [`ServiceError::Unauthorized`]. The comparison is constant-time.
//! - The key is made at its first use and kept in the store (URLs outlive daemon restarts); a
//!   rotation replaces it, which ends every URL signed with the old one; it goes with its sandbox.

use crate::{Service, ServiceError};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What prefixes a signature of this scheme.
const PREFIX: &str = "v1_";

fn mac(key: &str, method: &str, path: &str, expires: i64) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("v1:files:{method}:{path}:{expires}").as_bytes());
    mac
}

/// The signature of `method path` until `expires` under `key`.
pub fn sign(key: &str, method: &str, path: &str, expires: i64) -> String {
    let digest = mac(key, method, path, expires).finalize().into_bytes();
    format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

impl Service {
    /// Sandbox `key`'s file-URL key (made at its first use); with `rotate`, a new one.
    pub async fn file_url_key(&self, key: &str, rotate: bool) -> Result<String, ServiceError> {
        let id = self.get(key).await?.id;
        let fresh = crate::sandboxes::random_id("", 43);
        Ok(self
            .writer()
            .write(move |tx| tx.file_key(&id, &fresh, rotate))
            .await?)
    }

    /// Whether `signature` lets `method` on `path` of sandbox `key` at `now` (Unix seconds).
    pub async fn check_file_url(
        &self,
        key: &str,
        method: &str,
        path: &str,
        expires: i64,
        signature: &str,
        now: i64,
    ) -> Result<(), ServiceError> {
        let refused = |why: &str| Err(ServiceError::Unauthorized(format!("this file URL {why}")));
        if expires != 0 && expires < now {
            return refused("has expired");
        }
        let id = self.get(key).await?.id;
        let Some(secret) = self.reader().read(move |tx| tx.file_key(&id)).await? else {
            return refused("was not signed by this sandbox");
        };
        let decoded = signature.strip_prefix(PREFIX).and_then(|s| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .ok()
        });
        match decoded {
            Some(bytes)
                if mac(&secret, method, path, expires)
                    .verify_slice(&bytes)
                    .is_ok() =>
            {
                Ok(())
            }
            _ => refused("is not signed for this request"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;

    /// A signature opens exactly its method, path and sandbox until its time; a rotation ends it.
    #[tokio::test]
    async fn a_signed_url_opens_its_one_request_until_its_time_or_a_rotation() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let svc = &t.svc;
        let a = svc.create(api::CreateSandbox::default()).await.unwrap().id;
        let b = svc.create(api::CreateSandbox::default()).await.unwrap().id;
        let key = svc.file_url_key(&a, false).await.unwrap();
        assert_eq!(svc.file_url_key(&a, false).await.unwrap(), key, "kept");
        let sig = sign(&key, "GET", "/home/user/f", 1_000);
        let check = |sb: &str, method: &str, path: &str, expires: i64, sig: &str, now: i64| {
            let (sb, method, path, sig) = (
                sb.to_string(),
                method.to_string(),
                path.to_string(),
                sig.to_string(),
            );
            async move {
                svc.check_file_url(&sb, &method, &path, expires, &sig, now)
                    .await
            }
        };
        check(&a, "GET", "/home/user/f", 1_000, &sig, 999)
            .await
            .unwrap();
        for (sb, method, path, expires, now) in [
            (&a, "POST", "/home/user/f", 1_000, 999),
            (&a, "GET", "/home/user/g", 1_000, 999),
            (&a, "GET", "/home/user/f", 2_000, 999),
            (&a, "GET", "/home/user/f", 1_000, 1_001),
            (&b, "GET", "/home/user/f", 1_000, 999),
        ] {
            let refused = check(sb, method, path, expires, &sig, now).await;
            assert!(
                matches!(refused, Err(ServiceError::Unauthorized(_))),
                "{method} {path} {expires} {now}: {refused:?}"
            );
        }
        let flipped = if sig.as_bytes()[10] == b'A' { "B" } else { "A" };
        let tampered = format!("{}{flipped}{}", &sig[..10], &sig[11..]);
        assert!(check(&a, "GET", "/home/user/f", 1_000, &tampered, 999)
            .await
            .is_err());
        assert!(check(&a, "GET", "/home/user/f", 1_000, "nope", 999)
            .await
            .is_err());
        let never = sign(&key, "GET", "/home/user/f", 0);
        check(&a, "GET", "/home/user/f", 0, &never, i64::MAX)
            .await
            .unwrap();

        let rotated = svc.file_url_key(&a, true).await.unwrap();
        assert_ne!(rotated, key);
        assert!(
            check(&a, "GET", "/home/user/f", 0, &never, 1)
                .await
                .is_err(),
            "rotated away"
        );
    }
}
