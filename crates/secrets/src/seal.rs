//! A secret's value sealed at rest, and opened again.
//!
//! Contract: [`seal`] gives `1 ‖ nonce (12 bytes) ‖ ChaCha20-Poly1305 ciphertext and tag` with a
//! nonce fresh from the system's random source; the secret's id is the associated data, so a
//! sealed value copied onto another secret's row does not open. [`open`] refuses anything altered,
//! sealed under another key or for another id, and says nothing about the value in its error.

use crate::key::SecretKey;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use zeroize::Zeroizing;

/// The format byte sealed values start with.
const FORMAT: u8 = 1;

/// A secret's value in clear: wiped from memory when dropped, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    /// Wraps `value`.
    pub fn new(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    /// The value itself, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// A sealed value that cannot be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// the system's random source failed
    #[error("the system's random source failed")]
    Random,
    /// the sealed value does not open with this daemon's secrets key (altered, or sealed under another key)
    #[error("the sealed value does not open with this daemon's secrets key (altered, or sealed under another key)")]
    Open,
}

fn cipher(key: &SecretKey) -> LessSafeKey {
    // The key is always 32 bytes, which is what ChaCha20-Poly1305 takes.
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key.bytes()).expect("a 32-byte key"))
}

/// `value` sealed under `key` for the secret `id`.
pub fn seal(key: &SecretKey, id: &str, value: &SecretValue) -> Result<Vec<u8>, SealError> {
    use ring::rand::SecureRandom;
    let mut nonce = [0u8; NONCE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| SealError::Random)?;
    let mut data = value.expose().as_bytes().to_vec();
    cipher(key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(id.as_bytes()),
            &mut data,
        )
        .map_err(|_| SealError::Open)?;
    let mut out = Vec::with_capacity(1 + NONCE_LEN + data.len());
    out.push(FORMAT);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&data);
    Ok(out)
}

/// The value `sealed` holds, sealed under `key` for the secret `id`.
pub fn open(key: &SecretKey, id: &str, sealed: &[u8]) -> Result<SecretValue, SealError> {
    let rest = match sealed.split_first() {
        Some((&FORMAT, rest)) if rest.len() >= NONCE_LEN => rest,
        _ => return Err(SealError::Open),
    };
    let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Open)?;
    let mut data = Zeroizing::new(ciphertext.to_vec());
    let plain = cipher(key)
        .open_in_place(nonce, Aad::from(id.as_bytes()), &mut data)
        .map_err(|_| SealError::Open)?;
    let text = std::str::from_utf8(plain).map_err(|_| SealError::Open)?;
    Ok(SecretValue::new(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> SecretValue {
        SecretValue::new(s.to_string())
    }

    #[test]
    fn a_sealed_value_opens_for_its_id_and_holds_no_clear_text() {
        let key = SecretKey::random().unwrap();
        let sealed = seal(&key, "sec1", &value("sk-live-abcdef")).unwrap();
        let needle = b"sk-live-abcdef";
        assert!(!sealed.windows(needle.len()).any(|w| w == needle));
        assert_eq!(
            open(&key, "sec1", &sealed).unwrap().expose(),
            "sk-live-abcdef"
        );
        // A fresh nonce each time: the same value never seals to the same bytes.
        assert_ne!(
            sealed,
            seal(&key, "sec1", &value("sk-live-abcdef")).unwrap()
        );
    }

    #[test]
    fn another_id_another_key_or_one_flipped_bit_does_not_open() {
        let key = SecretKey::random().unwrap();
        let sealed = seal(&key, "sec1", &value("v")).unwrap();
        assert!(matches!(open(&key, "sec2", &sealed), Err(SealError::Open)));
        let other = SecretKey::random().unwrap();
        assert!(matches!(
            open(&other, "sec1", &sealed),
            Err(SealError::Open)
        ));
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(
                open(&key, "sec1", &bad).is_err(),
                "byte {i} flipped still opened"
            );
        }
        assert!(open(&key, "sec1", &[]).is_err());
        assert!(open(&key, "sec1", &sealed[..5]).is_err());
    }

    #[test]
    fn debug_shows_no_value() {
        assert_eq!(format!("{:?}", value("hunter2")), "SecretValue(..)");
    }
}
