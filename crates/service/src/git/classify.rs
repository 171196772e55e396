//! What a failed git command said, as a [`GitError`]: its kind read from git's words (git runs with
//! `LC_ALL=C`, so they are English), its message git's `fatal:`/`error:` lines. The first match
//! wins, in the order of [`classify`]; anything git refused that matches nothing is
//! [`GitFailure::Refused`].

use super::{GitError, GitFailure};

/// What a failed git said, as an error.
pub fn classify(said: &str, exit_code: i32) -> GitError {
    let lower = said.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let kind = if has(&[
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "invalid username or password",
        "returned error: 401",
    ]) {
        GitFailure::AuthFailed
    } else if has(&["returned error: 403"]) {
        GitFailure::Forbidden
    } else if has(&["remote rejected"]) {
        GitFailure::RemoteRejected
    } else if has(&["[rejected]", "non-fast-forward", "failed to push some refs"]) {
        GitFailure::PushRejected
    } else if has(&[
        "repository not found",
        "does not appear to be a git repository",
        "not a git repository",
        "cannot change to",
        "returned error: 404",
        "no such repository",
    ]) || (lower.contains("repository '") && lower.contains("' not found"))
    {
        GitFailure::RepoNotFound
    } else if has(&["already exists and is not an empty directory"]) {
        GitFailure::Conflict
    } else if lower.contains("a branch named") && lower.contains("already exists") {
        GitFailure::BranchExists
    } else if has(&[
        "known to git",
        "invalid reference",
        "couldn't find remote ref",
        "unknown revision",
        "remote branch",
    ]) || (lower.contains("branch '") && lower.contains("not found"))
    {
        GitFailure::BranchNotFound
    } else if has(&["did not match any files"]) {
        GitFailure::FileNotFound
    } else if has(&["would be overwritten", "commit your changes or stash them"]) {
        GitFailure::DirtyWorktree
    } else if has(&[
        "not possible to fast-forward",
        "diverging",
        "merge conflict",
        "conflict (",
    ]) {
        GitFailure::MergeConflict
    } else if has(&["nothing to commit", "no changes added to commit"]) {
        GitFailure::Conflict
    } else if has(&[
        "could not resolve host",
        "connection refused",
        "unable to access",
        "failed to connect",
        "connection timed out",
        "unable to connect",
        "early eof",
        "could not read from remote repository",
    ]) {
        GitFailure::TransportFailed
    } else {
        GitFailure::Refused
    };
    GitError::new(kind, summary(said, exit_code))
}

/// git's complaint: its `fatal:`/`error:` lines when it has some, else all it said (capped).
fn summary(said: &str, exit_code: i32) -> String {
    let lines: Vec<&str> = said
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("fatal:") || l.starts_with("error:") || l.starts_with("! ["))
        .collect();
    let text = if lines.is_empty() {
        said.trim().to_string()
    } else {
        lines.join("\n")
    };
    let mut text: String = text.chars().take(4096).collect();
    if text.is_empty() {
        text = format!("git exited with status {exit_code}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use GitFailure as F;

    /// git's words, as each git version and server says them, read into the kind of failure.
    #[test]
    fn failures_are_read_into_their_kind() {
        let kind = |said: &str| classify(said, 128).kind;
        let cases = [
            (
                "fatal: could not read Username for 'http://h': terminal prompts disabled",
                F::AuthFailed,
            ),
            ("fatal: Authentication failed for 'http://h/r'", F::AuthFailed),
            (
                "fatal: unable to access 'http://h/r/': The requested URL returned error: 403",
                F::Forbidden,
            ),
            (" ! [remote rejected] main -> main (hook declined)", F::RemoteRejected),
            (
                " ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs",
                F::PushRejected,
            ),
            ("fatal: repository 'http://h/nope.git/' not found", F::RepoNotFound),
            (
                "fatal: not a git repository (or any of the parent directories): .git",
                F::RepoNotFound,
            ),
            (
                "fatal: destination path 'r' already exists and is not an empty directory.",
                F::Conflict,
            ),
            ("fatal: a branch named 'x' already exists", F::BranchExists),
            (
                "error: pathspec 'nope' did not match any file(s) known to git",
                F::BranchNotFound,
            ),
            ("fatal: pathspec 'x' did not match any files", F::FileNotFound),
            (
                "error: Your local changes to the following files would be overwritten by checkout",
                F::DirtyWorktree,
            ),
            ("fatal: Not possible to fast-forward, aborting.", F::MergeConflict),
            ("nothing to commit, working tree clean", F::Conflict),
            (
                "fatal: unable to connect to 10.0.0.1:\n10.0.0.1[0: 10.0.0.1]: errno=Connection refused",
                F::TransportFailed,
            ),
            ("hint: x\nfatal: bad thing\n", F::Refused),
        ];
        for (said, expected) in cases {
            assert_eq!(kind(said), expected, "{said:?}");
        }
    }

    /// The message is git's complaint, not its hints; git that said nothing still says something.
    #[test]
    fn messages_are_gits_complaint() {
        assert_eq!(
            classify("hint: x\nfatal: bad thing\n", 128).message,
            "fatal: bad thing"
        );
        assert_eq!(classify("", 3).message, "git exited with status 3");
    }
}
