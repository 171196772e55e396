//! Validation of client input, before anything is written or started.

use crate::ServiceError;
use std::collections::BTreeMap;

fn invalid(msg: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest(msg.into())
}

/// A sandbox name: 1–63 of `[a-z0-9-]`, not starting or ending with '-' (an RFC 1123 label).
pub fn name(name: &str) -> Result<(), ServiceError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "invalid name {name:?}: use 1 to 63 lowercase letters, digits or '-', not at either end"
        )))
    }
}

/// Environment variable names: `[A-Za-z_][A-Za-z0-9_]*`, values without NUL.
pub fn env(env: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    for (k, v) in env {
        let ok = k
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(invalid(format!("invalid environment variable name {k:?}")));
        }
        if v.contains('\0') {
            return Err(invalid(format!("environment variable {k} contains NUL")));
        }
    }
    Ok(())
}

/// Metadata: at most 64 pairs, keys of 1–128 characters without '=', values up to 1024 characters
/// (characters, as JSON Schema's `maxLength` counts them).
pub fn metadata(metadata: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    if metadata.len() > 64 {
        return Err(invalid("at most 64 metadata entries"));
    }
    for (k, v) in metadata {
        if k.is_empty() || k.chars().count() > 128 || k.contains('=') {
            return Err(invalid(format!("invalid metadata key {k:?}")));
        }
        if v.chars().count() > 1024 {
            return Err(invalid(format!(
                "metadata value of {k} is over 1024 characters"
            )));
        }
    }
    Ok(())
}

/// A path inside a sandbox: absolute, without `..` components or NUL.
pub fn sandbox_path(path: &str) -> Result<(), ServiceError> {
    if !path.starts_with('/') {
        return Err(invalid(format!("path {path:?} must be absolute")));
    }
    if path.contains('\0') || path.split('/').any(|c| c == "..") {
        return Err(invalid(format!("path {path:?} must not contain '..'")));
    }
    Ok(())
}

/// A user commands may run as.
pub fn user(user: &str) -> Result<(), ServiceError> {
    match user {
        "user" | "root" => Ok(()),
        other => Err(invalid(format!(
            "unknown user {other:?}: use \"user\" or \"root\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123_labels() {
        for ok in ["a", "web-1", &"a".repeat(63)] {
            assert!(name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64), "ü"] {
            assert!(name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn traversal_and_relative_paths_are_refused() {
        assert!(sandbox_path("/home/user/a.txt").is_ok());
        for bad in ["../etc/passwd", "/home/../etc", "a", "/a/..", "/a\0b"] {
            assert!(sandbox_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_names_are_shell_identifiers() {
        let ok = BTreeMap::from([("A_1".to_string(), "x".to_string())]);
        assert!(env(&ok).is_ok());
        for bad in ["1A", "A-B", "", "A B"] {
            assert!(env(&BTreeMap::from([(bad.to_string(), String::new())])).is_err());
        }
    }
}
