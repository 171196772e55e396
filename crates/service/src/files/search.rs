//! Searching and rewriting files of a running sandbox, as Daytona's toolbox does it, through the
//! agent (so they work in any root filesystem, with or without `grep`):
//! - [`Service::find_in_files`]: every line of every regular file under a path that contains a
//!   text (plain substring, not a regular expression); files whose first 512 bytes hold a NUL are
//!   binary and skipped; lines end at `\n` (a `\r` before it is dropped); a file with a line longer
//!   than [`MAX_LINE`] is searched up to that line.
//! - [`Service::search_files`]: the paths of the entries (not directories) under a path whose path
//!   relative to it matches a glob: `*` and `?` within one component, `**` across components,
//!   `{a,b}` alternatives, `[…]` classes (`*.txt` is the top level only; `**/*.txt` everywhere).
//! - [`Service::replace_in_files`]: every occurrence of a text replaced in each file named, with an
//!   outcome per file; a file that does not change is not rewritten.
//!
//! Walks follow no symlinked directories and skip what the sandbox's user cannot read.

use super::{checked, is_dir, path_error, FileError};
use crate::Service;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use sandboxd_envd::filesystem::{EntryInfo, FileType};
use sandboxd_envd::EnvdClient;

/// Levels a search descends at most.
const WALK_DEPTH: u32 = 64;
/// Longest line [`Service::find_in_files`] reads.
pub const MAX_LINE: usize = 1 << 20;
/// How many bytes decide whether a file is binary.
const SNIFF: usize = 512;
/// Files read at once by a search.
const PARALLEL_READS: usize = 4;

/// A line that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextMatch {
    pub file: String,
    /// 1-based.
    pub line: u64,
    pub content: String,
}

/// What replacing did to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub file: String,
    /// Why the file could not be rewritten; `None` when it was (or needed not be).
    pub error: Option<String>,
}

/// Finds the lines containing a text in a stream of chunks (see the module docs).
#[derive(Debug)]
pub struct LineScanner {
    pattern: Vec<u8>,
    buf: Vec<u8>,
    line: u64,
    sniffed: bool,
    stopped: bool,
    matches: Vec<(u64, String)>,
}

impl LineScanner {
    pub fn new(pattern: &str) -> Self {
        Self {
            pattern: pattern.as_bytes().to_vec(),
            buf: Vec::new(),
            line: 0,
            sniffed: false,
            stopped: false,
            matches: Vec::new(),
        }
    }

    /// Feeds the next chunk; `false` once nothing more needs reading.
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        if self.stopped {
            return false;
        }
        self.buf.extend_from_slice(chunk);
        if !self.sniffed {
            if self.buf.len() < SNIFF {
                return true;
            }
            self.sniff();
        }
        self.scan_complete_lines();
        !self.stopped
    }

    /// The matches, once the stream ended: `(line number, line)`.
    pub fn finish(mut self) -> Vec<(u64, String)> {
        if !self.sniffed {
            self.sniff();
        }
        self.scan_complete_lines();
        if !self.stopped && !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.check_line(&rest);
        }
        self.matches
    }

    fn sniff(&mut self) {
        self.sniffed = true;
        let head = &self.buf[..self.buf.len().min(SNIFF)];
        if head.contains(&0) {
            self.stopped = true;
            self.buf.clear();
        }
    }

    fn scan_complete_lines(&mut self) {
        if self.stopped {
            return;
        }
        let mut start = 0;
        while let Some(end) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let line = self.buf[start..start + end].to_vec();
            self.check_line(&line);
            start += end + 1;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE {
            self.stopped = true;
            self.buf.clear();
        }
    }

    fn check_line(&mut self, line: &[u8]) {
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if contains(line, &self.pattern) {
            self.matches
                .push((self.line, String::from_utf8_lossy(line).into_owned()));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// `data` with every occurrence of `pattern` (not empty) replaced by `with`; `None` when there is
/// none.
pub fn replace_all(data: &[u8], pattern: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut found = false;
    while let Some(at) = rest.windows(pattern.len()).position(|w| w == pattern) {
        found = true;
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + pattern.len()..];
    }
    out.extend_from_slice(rest);
    found.then_some(out)
}

/// A glob matched against paths relative to the searched directory.
pub fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, FileError> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| FileError::Invalid(format!("invalid glob pattern {pattern:?}: {e}")))
}

/// `path` relative to `root` (a directory), when it is under it.
pub fn relative_to<'a>(root: &str, path: &'a str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    path.strip_prefix(root)?.strip_prefix('/')
}

/// What is at `root` and, if it is a directory, everything under it.
async fn walk(client: &EnvdClient, root: &str) -> Result<Vec<EntryInfo>, FileError> {
    let mut top = client.stat(root).await.map_err(path_error)?;
    if !is_dir(&top) {
        top.path = root.to_string();
        return Ok(vec![top]);
    }
    client.list_dir(root, WALK_DEPTH).await.map_err(path_error)
}

impl Service {
    /// The lines of the files under `path` containing `pattern`, by file then line.
    pub async fn find_in_files(
        &self,
        key: &str,
        path: &str,
        pattern: &str,
    ) -> Result<Vec<TextMatch>, FileError> {
        checked(path)?;
        if pattern.is_empty() {
            return Err(FileError::Invalid("pattern is required".into()));
        }
        let (_, client) = self.agent(key, None).await?;
        let files: Vec<String> = walk(&client, path)
            .await?
            .into_iter()
            .filter(|e| e.file_type == FileType::File && !e.is_symlink)
            .map(|e| e.path)
            .collect();
        let per_file = futures::stream::iter(files)
            .map(|file| {
                let client = client.clone();
                async move {
                    let found = scan_file(&client, &file, pattern).await;
                    (file, found)
                }
            })
            .buffered(PARALLEL_READS)
            .collect::<Vec<_>>()
            .await;
        let mut matches = Vec::new();
        for (file, found) in per_file {
            for (line, content) in found {
                matches.push(TextMatch {
                    file: file.clone(),
                    line,
                    content,
                });
            }
        }
        Ok(matches)
    }

    /// The paths under directory `path` whose relative path matches glob `pattern`.
    pub async fn search_files(
        &self,
        key: &str,
        path: &str,
        pattern: &str,
    ) -> Result<Vec<String>, FileError> {
        checked(path)?;
        if pattern.is_empty() {
            return Err(FileError::Invalid("pattern is required".into()));
        }
        let glob = compile_glob(pattern)?;
        let (_, client) = self.agent(key, None).await?;
        Ok(walk(&client, path)
            .await?
            .into_iter()
            .filter(|e| !is_dir(e))
            .filter(|e| relative_to(path, &e.path).is_some_and(|rel| glob.is_match(rel)))
            .map(|e| e.path)
            .collect())
    }

    /// Replaces `pattern` by `new_value` in each of `files`.
    pub async fn replace_in_files(
        &self,
        key: &str,
        files: &[String],
        pattern: &str,
        new_value: &str,
    ) -> Result<Vec<Replaced>, FileError> {
        if pattern.is_empty() {
            return Err(FileError::Invalid("pattern is required".into()));
        }
        for file in files {
            checked(file)?;
        }
        let (_, client) = self.agent(key, None).await?;
        let mut outcomes = Vec::with_capacity(files.len());
        for file in files {
            let error = replace_in(&client, file, pattern, new_value)
                .await
                .err()
                .map(|e| e.to_string());
            outcomes.push(Replaced {
                file: file.clone(),
                error,
            });
        }
        Ok(outcomes)
    }
}

/// The matching lines of one file; a file that cannot be read has none.
async fn scan_file(client: &EnvdClient, file: &str, pattern: &str) -> Vec<(u64, String)> {
    let Ok(mut chunks) = client.read_file_stream(file, Some("user")).await else {
        return Vec::new();
    };
    let mut scanner = LineScanner::new(pattern);
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return Vec::new();
        };
        if !scanner.push(&chunk) {
            break;
        }
    }
    scanner.finish()
}

async fn replace_in(
    client: &EnvdClient,
    file: &str,
    pattern: &str,
    new_value: &str,
) -> Result<(), FileError> {
    let data = client
        .read_file(file, Some("user"))
        .await
        .map_err(path_error)?;
    let Some(changed) = replace_all(&data, pattern.as_bytes(), new_value.as_bytes()) else {
        return Ok(());
    };
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(changed)) });
    client
        .write_file_stream(file, Some("user"), body.into_stream())
        .await
        .map_err(path_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(pattern: &str, chunks: &[&[u8]]) -> Vec<(u64, String)> {
        let mut s = LineScanner::new(pattern);
        for c in chunks {
            if !s.push(c) {
                break;
            }
        }
        s.finish()
    }

    #[test]
    fn lines_are_found_across_chunks() {
        let found = scan(
            "needle",
            &[b"a needle\nno\r\nne", b"edle again\r\nlast needle"],
        );
        assert_eq!(
            found,
            vec![
                (1, "a needle".to_string()),
                (3, "needle again".to_string()),
                (4, "last needle".to_string())
            ]
        );
        assert!(scan("x", &[b""]).is_empty());
    }

    #[test]
    fn binary_files_are_skipped() {
        let mut data = b"needle\n".to_vec();
        data.push(0);
        assert!(scan("needle", &[&data[..3], &data[3..]]).is_empty());
        // A NUL past the first 512 bytes does not make a file binary.
        let mut late = vec![b'a'; 600];
        late.extend_from_slice(b"\nneedle\n\0");
        assert_eq!(scan("needle", &[&late]), vec![(2, "needle".to_string())]);
    }

    #[test]
    fn an_overlong_line_ends_the_search_of_its_file() {
        let long = vec![b'a'; MAX_LINE + 10];
        assert_eq!(
            scan("needle", &[b"needle\n", &long, b"\nneedle\n"]),
            vec![(1, "needle".to_string())]
        );
    }

    #[test]
    fn replacing_is_literal_and_total() {
        assert_eq!(
            replace_all(b"a.b.c", b".", b"::").as_deref(),
            Some(&b"a::b::c"[..])
        );
        assert_eq!(
            replace_all(b"aaa", b"aa", b"b").as_deref(),
            Some(&b"ba"[..])
        );
        assert_eq!(replace_all(b"abc", b"x", b"y"), None);
    }

    #[test]
    fn globs_match_relative_paths_like_doublestar() {
        let m = |p: &str, path: &str| compile_glob(p).unwrap().is_match(path);
        assert!(m("*.txt", "a.txt"));
        assert!(!m("*.txt", "sub/a.txt"));
        assert!(m("**/*.txt", "a.txt"));
        assert!(m("**/*.txt", "sub/deep/a.txt"));
        assert!(m("src/**/*.go", "src/x/main.go"));
        assert!(!m("src/**/*.go", "main.go"));
        assert!(m("**/*.{go,tsx}", "c/b.tsx"));
        assert!(m("file?.txt", "file1.txt"));
        assert!(compile_glob("a[").is_err());
        assert_eq!(relative_to("/r/", "/r/a/b"), Some("a/b"));
        assert_eq!(relative_to("/r", "/rx/a"), None);
    }
}
