//! Credentials for the store, issued without a record: the access key names its expiry, and the
//! secret and the session token are HMAC-SHA256 of the access key under the store's key (kept in
//! one file, made at the store's first open). Whoever holds the key can tell issued credentials
//! from others; nobody else can make them.

use crate::ObjectError;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How long issued credentials are valid.
pub const CREDENTIALS_TTL: CredentialsTtl = CredentialsTtl(3600);

/// A validity, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct CredentialsTtl(pub u64);

/// What the access key begins with.
const PREFIX: &str = "SBX";

/// Credentials for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Names the credentials (and their expiry).
    pub access_key: String,
    /// Signs requests.
    pub secret: String,
    /// Accompanies every request (`x-amz-security-token`).
    pub session_token: String,
    /// Unix seconds after which they are refused.
    pub expires: u64,
}

/// The store's key.
pub(crate) struct Key(Vec<u8>);

impl Key {
    /// The key in `path`, made (32 random bytes, mode 0600) when there is none.
    pub(crate) fn load_or_create(path: &Path) -> Result<Key, ObjectError> {
        match std::fs::read(path) {
            Ok(bytes) if bytes.len() >= 32 => return Ok(Key(bytes)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ObjectError::io(format!("reading {}", path.display()))(e)),
        }
        let mut bytes = vec![0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let tmp = path.with_extension("tmp");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, path));
        written.map_err(ObjectError::io(format!("writing {}", path.display())))?;
        Ok(Key(bytes))
    }

    fn derive(&self, what: &str, access_key: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(format!("{what}:{access_key}").as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Credentials valid for `ttl` from `now`.
    pub(crate) fn issue(&self, now: u64, ttl: CredentialsTtl) -> Credentials {
        let expires = now + ttl.0;
        let mut nonce = [0u8; 8];
        rand::rng().fill_bytes(&mut nonce);
        let access_key = format!("{PREFIX}{expires:010X}{}", hex::encode_upper(nonce));
        Credentials {
            secret: self.derive("secret", &access_key),
            session_token: self.derive("token", &access_key),
            access_key,
            expires,
        }
    }

    /// The secret of `access_key` when this key issued it and it has not expired at `now`, checked
    /// against `session_token`.
    pub(crate) fn secret_of(
        &self,
        access_key: &str,
        session_token: &str,
        now: u64,
    ) -> Result<String, ObjectError> {
        let denied = |why: &str| Err(ObjectError::AccessDenied(why.to_string()));
        let expires = access_key
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.get(..10))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        let Some(expires) = expires else {
            return denied("unknown access key");
        };
        let expected = self.derive("token", access_key);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            expected.as_bytes(),
            session_token.as_bytes(),
        )) {
            return denied("the session token does not belong to the access key");
        }
        if expires < now {
            return denied("the credentials have expired; ask for new ones (push-access)");
        }
        Ok(self.derive("secret", access_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_credentials_are_known_until_they_expire_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let key = Key::load_or_create(&dir.path().join("key")).unwrap();
        let c = key.issue(1000, CredentialsTtl(60));
        assert_eq!(c.expires, 1060);
        assert_eq!(
            key.secret_of(&c.access_key, &c.session_token, 1060)
                .unwrap(),
            c.secret
        );
        assert!(key
            .secret_of(&c.access_key, &c.session_token, 1061)
            .is_err());
        assert!(key.secret_of(&c.access_key, "forged", 1000).is_err());
        assert!(key
            .secret_of("AKIAEXAMPLE", &c.session_token, 1000)
            .is_err());
        // Another access key with the same expiry is not made valid by this token.
        let other = key.issue(1000, CredentialsTtl(60));
        assert!(key
            .secret_of(&other.access_key, &c.session_token, 1000)
            .is_err());
        // The key outlives a reopen; another store's key knows none of these.
        let again = Key::load_or_create(&dir.path().join("key")).unwrap();
        assert_eq!(
            again
                .secret_of(&c.access_key, &c.session_token, 1000)
                .unwrap(),
            c.secret
        );
        let stranger = Key::load_or_create(&dir.path().join("other")).unwrap();
        assert!(stranger
            .secret_of(&c.access_key, &c.session_token, 1000)
            .is_err());
    }
}
