//! Serde helpers for protobuf's canonical JSON mapping.
//!
//! Output is canonical (bytes as padded standard base64, int64 as decimal strings); input is lenient the
//! way protobuf JSON parsers are (base64 with or without padding, standard or URL-safe alphabet; integers
//! as numbers or strings).

use serde::{Deserialize, Deserializer, Serializer};

/// `bytes` fields: base64 strings.
pub mod b64 {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    use bytes::Bytes;

    pub fn serialize<S: Serializer>(v: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s)
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
    }

    /// Decodes standard or URL-safe base64, padded or not.
    pub fn decode(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
        let trimmed = s.trim_end_matches('=');
        let normalized: String = trimmed
            .chars()
            .map(|c| match c {
                '+' => '-',
                '/' => '_',
                c => c,
            })
            .collect();
        URL_SAFE_NO_PAD.decode(normalized)
    }
}

/// `int64` / `uint64` fields: decimal strings out, strings or numbers in.
pub mod i64_str {
    use super::*;

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            N(i64),
            S(String),
        }
        match Either::deserialize(d)? {
            Either::N(n) => Ok(n),
            Either::S(s) => s.trim().parse().map_err(serde::de::Error::custom),
        }
    }
}

/// 32-bit integer fields: numbers out, numbers or strings in.
pub mod num {
    use super::*;
    use std::str::FromStr;

    pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr + TryFrom<i64>,
    {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            N(i64),
            S(String),
        }
        match Either::deserialize(d)? {
            Either::N(n) => {
                T::try_from(n).map_err(|_| serde::de::Error::custom("integer out of range"))
            }
            Either::S(s) => s
                .trim()
                .parse()
                .map_err(|_| serde::de::Error::custom("invalid integer")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct T {
        #[serde(with = "b64")]
        b: Bytes,
        #[serde(with = "i64_str")]
        n: i64,
        #[serde(deserialize_with = "num::deserialize")]
        u: u32,
    }

    #[test]
    fn canonical_out_lenient_in() {
        let t = T {
            b: Bytes::from_static(b"\xfb\xff"),
            n: -5,
            u: 7,
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"b":"+/8=","n":"-5","u":7}"#
        );
        let lenient: T = serde_json::from_str(r#"{"b":"-_8","n":-5,"u":"7"}"#).unwrap();
        assert_eq!(lenient, t);
        assert!(serde_json::from_str::<T>(r#"{"b":"!!","n":1,"u":1}"#).is_err());
        assert!(serde_json::from_str::<T>(r#"{"b":"","n":1,"u":-1}"#).is_err());
    }
}
