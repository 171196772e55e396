//! What a git request may name before anything runs: a repository path, a branch, remote or
//! revision name, a URL. A name git would read as an option (a leading `-`) never reaches it.

use super::GitError;
use crate::files::{absolute, checked};

/// The repository directory of a request, absolute (a relative one is in the user's home).
pub fn repo_path(path: &str) -> Result<String, GitError> {
    let path = absolute(path);
    checked(&path).map_err(|e| GitError::new(super::GitFailure::InvalidPath, e.to_string()))?;
    Ok(path)
}

/// A branch, remote or revision name: not empty, not an option, no whitespace or control
/// characters (git checks the rest).
pub fn ref_name(what: &str, name: &str) -> Result<(), GitError> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(GitError::invalid(format!("invalid {what} {name:?}")))
    }
}

/// A repository URL to clone or add: not empty, not an option.
pub fn repo_url(url: &str) -> Result<(), GitError> {
    if url.is_empty() || url.starts_with('-') {
        return Err(GitError::invalid("url must be a repository URL"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_be_options_are_refused() {
        ref_name("branch", "feature/x").unwrap();
        for bad in ["", "-D", "a b", "a\nb"] {
            assert!(ref_name("branch", bad).is_err(), "{bad:?}");
        }
        assert_eq!(repo_path("repo").unwrap(), "/home/user/repo");
        assert!(repo_path("/a/../b").is_err());
    }
}
