//! AWS Signature Version 4, as S3 checks it: the request is rebuilt in its canonical form, signed
//! again with the secret of the access key it names, and the two signatures compared in constant
//! time. Only header signatures (`Authorization: AWS4-HMAC-SHA256 …`) are taken; presigned URLs
//! and chunk-signed bodies are refused.
//!
//! Contract of [`verify`]: `Ok` means the method, path, query, every signed header and the
//! declared payload hash are what the holder of the secret signed, within [`MAX_SKEW`] of `now`,
//! and the session token is among the signed headers. The body itself is checked against the
//! returned [`Payload`] by the caller, as it streams.

use crate::ObjectError;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::{Digest, Sha256};

/// How far a request's time may be from the store's clock.
pub const MAX_SKEW: u64 = 15 * 60;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// What the request says of its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The body's SHA-256, lowercase hex.
    Sha256(String),
    /// Not signed (`UNSIGNED-PAYLOAD`): TLS protects it.
    Unsigned,
}

/// A verified request's signer.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The access key that signed it.
    pub access_key: String,
    /// What the body must be.
    pub payload: Payload,
}

/// The parts of an `Authorization` header.
struct Authorization<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn mismatch(why: impl Into<String>) -> ObjectError {
    ObjectError::SignatureDoesNotMatch(why.into())
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, ObjectError> {
    let rest = value
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| {
            ObjectError::AccessDenied(format!("only {ALGORITHM} signatures are accepted"))
        })?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part
            .trim()
            .split_once('=')
            .ok_or_else(|| mismatch("a malformed Authorization header"))?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(mismatch(
            "the Authorization header lacks Credential, SignedHeaders or Signature",
        ));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, "aws4_request"] = scope[..] else {
        return Err(mismatch("a malformed credential scope"));
    };
    Ok(Authorization {
        access_key,
        date,
        region,
        service,
        signed_headers: signed.split(';').collect(),
        signature,
    })
}

/// `s` with every byte but the unreserved ones (`A-Za-z0-9-_.~`) as `%XX`.
fn uri_encode(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', "%20"))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (uri_encode(&decode(k)), uri_encode(&decode(v)))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn header_value(headers: &HeaderMap, name: &str, authority: Option<&str>) -> Option<String> {
    let values: Vec<String> = headers
        .get_all(name)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    if values.is_empty() {
        // HTTP/2 carries the host as `:authority`.
        return (name == "host")
            .then(|| authority.map(str::to_string))
            .flatten();
    }
    Some(values.join(","))
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Unix seconds of an ISO 8601 basic time (`20130524T000000Z`).
fn parse_amz_date(s: &str) -> Option<u64> {
    if s.len() != 16 || &s[8..9] != "T" || !s.ends_with('Z') {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..15]
    );
    let t = humantime::parse_rfc3339(&rfc3339).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// A request to verify.
pub struct Request<'a> {
    pub method: &'a str,
    /// The path as sent (still percent-encoded).
    pub path: &'a str,
    /// The query as sent.
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    /// The URI's authority, for HTTP/2.
    pub authority: Option<&'a str>,
}

/// The signature of `req` under `secret`, with the time and scope its `Authorization` names.
fn signature(req: &Request<'_>, auth: &Authorization<'_>, amz_date: &str, secret: &str) -> String {
    let mut canonical_headers = String::new();
    for name in &auth.signed_headers {
        let value = header_value(req.headers, name, req.authority).unwrap_or_default();
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let payload = header_value(req.headers, "x-amz-content-sha256", None).unwrap_or_default();
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method,
        if req.path.is_empty() { "/" } else { req.path },
        canonical_query(req.query),
        canonical_headers,
        auth.signed_headers.join(";"),
        payload
    );
    let scope = format!(
        "{}/{}/{}/aws4_request",
        auth.date, auth.region, auth.service
    );
    let to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), auth.date);
    let k_region = hmac(&k_date, auth.region);
    let k_service = hmac(&k_region, auth.service);
    let k_signing = hmac(&k_service, "aws4_request");
    hex::encode(hmac(&k_signing, &to_sign))
}

/// Verifies `req` at `now` (Unix seconds); `secret_of(access_key, session_token)` answers the
/// secret of credentials the store issued.
pub fn verify(
    req: &Request<'_>,
    now: u64,
    secret_of: impl FnOnce(&str, &str) -> Result<String, ObjectError>,
) -> Result<Signed, ObjectError> {
    let header = header_value(req.headers, "authorization", None)
        .ok_or_else(|| ObjectError::AccessDenied("the request is not signed".into()))?;
    let auth = parse_authorization(&header)?;
    for needed in [
        "host",
        "x-amz-date",
        "x-amz-content-sha256",
        "x-amz-security-token",
    ] {
        if !auth.signed_headers.contains(&needed) {
            return Err(mismatch(format!("{needed} must be a signed header")));
        }
    }
    let amz_date = header_value(req.headers, "x-amz-date", None).unwrap_or_default();
    let at = parse_amz_date(&amz_date).ok_or_else(|| mismatch("x-amz-date is malformed"))?;
    if !amz_date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err(mismatch("the credential scope's date is not the request's"));
    }
    if at.abs_diff(now) > MAX_SKEW {
        return Err(ObjectError::RequestTimeTooSkewed);
    }
    let token = header_value(req.headers, "x-amz-security-token", None).unwrap_or_default();
    let secret = secret_of(auth.access_key, &token)?;
    let expected = signature(req, &auth, &amz_date, &secret);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        expected.as_bytes(),
        auth.signature.as_bytes(),
    )) {
        return Err(mismatch("the signature is not this request's"));
    }
    let declared = header_value(req.headers, "x-amz-content-sha256", None).unwrap_or_default();
    let payload = match declared.as_str() {
        "UNSIGNED-PAYLOAD" => Payload::Unsigned,
        h if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Payload::Sha256(h.to_ascii_lowercase())
        }
        other => {
            return Err(ObjectError::NotImplemented(format!(
                "payload {other:?} (aws-chunked bodies among them) is not accepted: sign the \
                 body's SHA-256, or UNSIGNED-PAYLOAD"
            )))
        }
    };
    Ok(Signed {
        access_key: auth.access_key.to_string(),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    /// AWS's documented example ("GET Object", examplebucket, 2013-05-24), with the session token
    /// the store requires added to it and the request signed again.
    fn example(signature: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", "examplebucket.s3.amazonaws.com".parse().unwrap());
        h.insert("range", "bytes=0-9".parse().unwrap());
        h.insert("x-amz-content-sha256", EMPTY.parse().unwrap());
        h.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
        let signed = "host;range;x-amz-content-sha256;x-amz-date";
        let sig = signature.unwrap_or("0000");
        h.insert(
            "authorization",
            format!(
                "{ALGORITHM} Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
                 SignedHeaders={signed},Signature={sig}"
            )
            .parse()
            .unwrap(),
        );
        h
    }

    fn request(headers: &HeaderMap) -> Request<'_> {
        Request {
            method: "GET",
            path: "/test.txt",
            query: "",
            headers,
            authority: None,
        }
    }

    #[test]
    fn the_documented_example_signs_to_its_documented_signature() {
        let headers = example(None);
        let req = request(&headers);
        let auth_value = header_value(&headers, "authorization", None).unwrap();
        let auth = parse_authorization(&auth_value).unwrap();
        assert_eq!(
            signature(&req, &auth, "20130524T000000Z", SECRET),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The example with the token signed: verifies at its time, and fails for any change.
    #[test]
    fn a_signed_request_verifies_and_any_change_to_it_does_not() {
        let at = parse_amz_date("20130524T000000Z").unwrap();
        let sign = |h: &mut HeaderMap| {
            h.insert("x-amz-security-token", "tok".parse().unwrap());
            let signed = "host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token";
            let value = |sig: &str| {
                format!(
                    "{ALGORITHM} Credential=AK/20130524/us-east-1/s3/aws4_request, \
                     SignedHeaders={signed}, Signature={sig}"
                )
            };
            h.insert("authorization", value("x").parse().unwrap());
            let auth_value = header_value(h, "authorization", None).unwrap();
            let auth = parse_authorization(&auth_value).unwrap();
            let sig = signature(&request(h), &auth, "20130524T000000Z", SECRET);
            h.insert("authorization", value(&sig).parse().unwrap());
        };
        let secret = |ak: &str, token: &str| {
            assert_eq!((ak, token), ("AK", "tok"));
            Ok(SECRET.to_string())
        };
        let mut headers = example(None);
        sign(&mut headers);
        let ok = verify(&request(&headers), at, secret).unwrap();
        assert_eq!(ok.payload, Payload::Sha256(EMPTY.into()));

        let mut changed = headers.clone();
        changed.insert("range", "bytes=0-99".parse().unwrap());
        assert!(matches!(
            verify(&request(&changed), at, secret),
            Err(ObjectError::SignatureDoesNotMatch(_))
        ));
        let other_path = Request {
            path: "/other.txt",
            ..request(&headers)
        };
        assert!(verify(&other_path, at, secret).is_err());
        let other_query = Request {
            query: "uploads",
            ..request(&headers)
        };
        assert!(verify(&other_query, at, secret).is_err());
        assert!(matches!(
            verify(&request(&headers), at + MAX_SKEW + 1, secret),
            Err(ObjectError::RequestTimeTooSkewed)
        ));
        // Without the token among the signed headers, the example is refused outright.
        let unsigned_token = example(None);
        assert!(verify(&request(&unsigned_token), at, secret).is_err());
    }

    #[test]
    fn the_canonical_query_is_sorted_and_encoded_once() {
        assert_eq!(canonical_query(""), "");
        assert_eq!(canonical_query("uploads"), "uploads=");
        assert_eq!(
            canonical_query("uploadId=a%2Fb&partNumber=2"),
            "partNumber=2&uploadId=a%2Fb"
        );
        assert_eq!(
            canonical_query("list-type=2&prefix=org%2Fh%2F&max-keys=1"),
            "list-type=2&max-keys=1&prefix=org%2Fh%2F"
        );
    }
}
