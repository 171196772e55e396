//! `git status --porcelain=v2 --branch -z` read into a [`GitStatus`]: `{currentBranch,
//! fileStatus: [{name, staging, worktree, extra}], ahead, behind, branchPublished, upstream,
//! detached}` — the shape Daytona's toolbox answers and the native API's [`api::GitStatus`].
//! States are go-git's names, which Daytona uses too (`Unmodified`, `Untracked`, `Modified` — a
//! type change too —, `Added`, `Deleted`, `Renamed`, `Copied`, `Updated but unmerged`); an
//! untracked file is `Untracked` in both areas; `extra` is a rename's or copy's original path; a
//! detached HEAD's branch is `HEAD`; ahead and behind are 0 without an upstream.

use sandboxd_api_types as api;
use serde::Serialize;

/// A file's state in one area.
fn state(code: char) -> &'static str {
    match code {
        'M' | 'T' => "Modified",
        'A' => "Added",
        'D' => "Deleted",
        'R' => "Renamed",
        'C' => "Copied",
        'U' => "Updated but unmerged",
        '?' => "Untracked",
        _ => "Unmodified",
    }
}

/// One file of a status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileStatus {
    pub name: String,
    pub staging: &'static str,
    pub worktree: &'static str,
    /// The original path of a rename or copy.
    pub extra: String,
}

/// A repository's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GitStatus {
    pub current_branch: String,
    pub file_status: Vec<FileStatus>,
    pub ahead: u64,
    pub behind: u64,
    pub branch_published: bool,
    pub upstream: String,
    pub detached: bool,
}

/// Reads `git status --porcelain=v2 --branch -z`.
pub fn parse_status(out: &str) -> GitStatus {
    let mut status = GitStatus::default();
    let mut records = out.split('\0').filter(|r| !r.is_empty());
    while let Some(record) = records.next() {
        let xy = |r: &str| {
            let mut c = r.chars();
            (c.next().unwrap_or('.'), c.next().unwrap_or('.'))
        };
        let (kind, rest) = record.split_at(record.find(' ').unwrap_or(record.len()));
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let (xy_code, name, extra) = match kind {
            "#" => {
                if let Some(head) = rest.strip_prefix("branch.head ") {
                    status.detached = head == "(detached)";
                    status.current_branch = if status.detached { "HEAD" } else { head }.to_string();
                } else if let Some(up) = rest.strip_prefix("branch.upstream ") {
                    status.upstream = up.to_string();
                    status.branch_published = true;
                } else if let Some(ab) = rest.strip_prefix("branch.ab ") {
                    for n in ab.split(' ') {
                        if let Some(a) = n.strip_prefix('+') {
                            status.ahead = a.parse().unwrap_or(0);
                        } else if let Some(b) = n.strip_prefix('-') {
                            status.behind = b.parse().unwrap_or(0);
                        }
                    }
                }
                continue;
            }
            "1" => match rest.splitn(8, ' ').collect::<Vec<_>>()[..] {
                [code, _, _, _, _, _, _, path] => (xy(code), path, ""),
                _ => continue,
            },
            "2" => match rest.splitn(9, ' ').collect::<Vec<_>>()[..] {
                [code, _, _, _, _, _, _, _, path] => {
                    (xy(code), path, records.next().unwrap_or_default())
                }
                _ => continue,
            },
            "u" => match rest.splitn(10, ' ').collect::<Vec<_>>()[..] {
                [code, _, _, _, _, _, _, _, _, path] => (xy(code), path, ""),
                _ => continue,
            },
            "?" => (('?', '?'), rest, ""),
            _ => continue,
        };
        status.file_status.push(FileStatus {
            name: name.to_string(),
            staging: state(xy_code.0),
            worktree: state(xy_code.1),
            extra: extra.to_string(),
        });
    }
    status
}

impl From<GitStatus> for api::GitStatus {
    fn from(s: GitStatus) -> Self {
        let file_status = s
            .file_status
            .into_iter()
            .map(|f| api::GitFileStatus {
                name: f.name,
                staging: f.staging.into(),
                worktree: f.worktree.into(),
                extra: f.extra,
            })
            .collect();
        api::GitStatus {
            current_branch: s.current_branch,
            file_status,
            ahead: s.ahead,
            behind: s.behind,
            branch_published: s.branch_published,
            upstream: s.upstream,
            detached: s.detached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_porcelain_v2_status_is_read() {
        let out = "# branch.oid 1234\0# branch.head main\0# branch.upstream origin/main\0\
                   # branch.ab +2 -1\0\
                   1 .M N... 100644 100644 100644 aaa bbb file with space.txt\0\
                   1 A. N... 000000 100644 100644 000 ccc new.txt\0\
                   2 R. N... 100644 100644 100644 ddd ddd R100 renamed.txt\0old.txt\0\
                   u UU N... 100644 100644 100644 100644 e f g both.txt\0\
                   ? untracked.txt\0";
        let s = parse_status(out);
        assert_eq!(s.current_branch, "main");
        assert_eq!((s.ahead, s.behind, s.branch_published), (2, 1, true));
        assert_eq!(s.upstream, "origin/main");
        let names: Vec<_> = s.file_status.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "file with space.txt",
                "new.txt",
                "renamed.txt",
                "both.txt",
                "untracked.txt"
            ]
        );
        let f = &s.file_status;
        assert_eq!((f[0].staging, f[0].worktree), ("Unmodified", "Modified"));
        assert_eq!((f[1].staging, f[1].worktree), ("Added", "Unmodified"));
        assert_eq!((f[2].staging, f[2].extra.as_str()), ("Renamed", "old.txt"));
        assert_eq!(f[3].staging, "Updated but unmerged");
        assert_eq!((f[4].staging, f[4].worktree), ("Untracked", "Untracked"));
    }

    #[test]
    fn a_detached_head_without_upstream_is_read() {
        let s = parse_status("# branch.oid 1234\0# branch.head (detached)\0");
        assert_eq!(s.current_branch, "HEAD");
        assert!(s.detached && !s.branch_published);
        assert!(s.file_status.is_empty());
    }
}
