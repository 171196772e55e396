//! The build context (a tar of the files COPY and ADD read) and the layers those steps make.
//!
//! Contract: the context (a tar, or several one after another) is read once into memory (bounded by [`MAX_CONTEXT_BYTES`]); its member
//! names are normalised and a member that would climb out of the context (`..`, absolute after
//! normalising) is refused, so a COPY can only ever name context files. A COPY/ADD layer is a tar
//! this module writes (parent directories of the destination, then the selected files re-rooted
//! under it, owners from `--chown`), installed through the layer store, i.e. through the same
//! hardened unpacker every pulled layer goes through.

use crate::ServiceError;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;

/// The largest build context accepted.
pub const MAX_CONTEXT_BYTES: usize = 256 << 20;

/// One member of the context.
#[derive(Debug, Clone)]
pub struct Member {
    kind: Kind,
    mode: u32,
    data: Vec<u8>,
    link: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
}

/// A build context: clean relative path → member.
#[derive(Debug, Clone, Default)]
pub struct Context {
    members: BTreeMap<String, Member>,
}

fn bad(message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest(message.into())
}

/// `a/./b//c/` → `a/b/c`; `None` when it climbs above the root.
pub(crate) fn clean(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

impl Context {
    /// Reads the context tar `bytes` (empty: no context); several tars one after another are one
    /// context, a later member replacing an earlier one of the same path.
    pub fn read(bytes: &[u8]) -> Result<Context, ServiceError> {
        if bytes.len() > MAX_CONTEXT_BYTES {
            return Err(bad(format!(
                "the build context is {} bytes; at most {MAX_CONTEXT_BYTES} are accepted",
                bytes.len()
            )));
        }
        let mut context = Context::default();
        if bytes.is_empty() {
            return Ok(context);
        }
        let mut archive = tar::Archive::new(bytes);
        // Several tars one after another read as one (`tar --ignore-zeros`).
        archive.set_ignore_zeros(true);
        let entries = archive
            .entries()
            .map_err(|e| bad(format!("the build context is not a tar: {e}")))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| bad(format!("the build context is not a tar: {e}")))?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let path = clean(&raw).ok_or_else(|| {
                bad(format!(
                    "build context member {raw:?} climbs out of the context"
                ))
            })?;
            if path.is_empty() {
                continue;
            }
            let header = entry.header();
            let mode = header.mode().unwrap_or(0o644) & 0o7777;
            let kind = match header.entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File,
                tar::EntryType::Directory => Kind::Dir,
                tar::EntryType::Symlink => Kind::Symlink,
                // Hardlinks, devices, FIFOs: not something a COPY should carry.
                _ => continue,
            };
            let link = entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default();
            let mut data = Vec::new();
            if kind == Kind::File {
                entry
                    .read_to_end(&mut data)
                    .map_err(|e| bad(format!("reading build context member {path:?}: {e}")))?;
            }
            context.members.insert(
                path,
                Member {
                    kind,
                    mode,
                    data,
                    link,
                },
            );
        }
        Ok(context)
    }

    /// The members a COPY/ADD of `sources` to `dest` writes: (absolute path in the image, member),
    /// in path order, following Docker's rules — a directory source copies its contents, several
    /// sources or a `/`-terminated destination mean a directory, else the destination is the file.
    pub fn select(
        &self,
        sources: &[String],
        dest: &str,
    ) -> Result<Vec<(String, Member)>, ServiceError> {
        let dest_is_dir = dest.ends_with('/') || sources.len() > 1;
        let dest = clean(dest).unwrap_or_default();
        let under = |base: &str, rel: &str| -> String {
            match (base.is_empty(), rel.is_empty()) {
                (_, true) => format!("/{base}"),
                (true, false) => format!("/{rel}"),
                (false, false) => format!("/{base}/{rel}"),
            }
        };
        let mut out: BTreeMap<String, Member> = BTreeMap::new();
        for source in sources {
            let matched: Vec<&String> = if source.contains(['*', '?', '[']) {
                let pattern = glob::Pattern::new(source)
                    .map_err(|e| bad(format!("invalid COPY pattern {source:?}: {e}")))?;
                // As Docker's filepath.Match: `*` and `?` never cross a `/`.
                let options = glob::MatchOptions {
                    require_literal_separator: true,
                    ..Default::default()
                };
                self.members
                    .keys()
                    .filter(|p| pattern.matches_with(p, options))
                    .collect()
            } else {
                let source = clean(source).unwrap_or_default();
                match self.members.get_key_value(&source) {
                    Some((k, _)) => vec![k],
                    None if source.is_empty() => vec![],
                    None => {
                        let prefix = format!("{source}/");
                        if !self.members.keys().any(|k| k.starts_with(&prefix)) {
                            return Err(bad(format!("{source:?} is not in the build context")));
                        }
                        vec![]
                    }
                }
            };
            let roots: Vec<String> = if matched.is_empty() {
                // A directory given only by its members (or the whole context, ".").
                vec![clean(source).unwrap_or_default()]
            } else {
                matched.into_iter().cloned().collect()
            };
            for root in roots {
                let member = self.members.get(&root);
                let is_dir = root.is_empty() || member.is_none_or(|m| m.kind == Kind::Dir);
                if is_dir {
                    let prefix = if root.is_empty() {
                        String::new()
                    } else {
                        format!("{root}/")
                    };
                    for (path, m) in self.members.range(prefix.clone()..) {
                        let Some(rel) = path.strip_prefix(&prefix) else {
                            break;
                        };
                        out.insert(under(&dest, rel), m.clone());
                    }
                } else if let Some(m) = member {
                    let target = if dest_is_dir {
                        let name = root.rsplit('/').next().unwrap_or(&root);
                        under(&dest, name)
                    } else {
                        format!("/{dest}")
                    };
                    out.insert(target, m.clone());
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// A digest of `selected` (paths, kinds, modes, contents, link targets): what a COPY layer's
    /// cache key must include.
    pub fn digest(selected: &[(String, Member)]) -> String {
        let mut h = Sha256::new();
        for (path, m) in selected {
            h.update(path.as_bytes());
            h.update([0, m.kind as u8]);
            h.update(m.mode.to_le_bytes());
            h.update((m.data.len() as u64).to_le_bytes());
            h.update(&m.data);
            h.update(m.link.as_bytes());
            h.update([0]);
        }
        hex::encode(h.finalize())
    }
}

/// Owner ids from `--chown user[:group]`: names `root` and `user`, or numbers.
pub fn owner(chown: Option<&str>) -> Result<(u64, u64), ServiceError> {
    let Some(chown) = chown else {
        return Ok((0, 0));
    };
    let id = |name: &str| -> Result<u64, ServiceError> {
        match name {
            "root" => Ok(0),
            "user" => Ok(1000),
            n => n.parse().map_err(|_| {
                bad(format!(
                    "--chown {chown:?}: only root, user or numeric ids are known to the builder"
                ))
            }),
        }
    };
    let (u, g) = chown.split_once(':').unwrap_or((chown, chown));
    Ok((id(u)?, id(g)?))
}

/// Whether `member` is a file holding a tar archive (an ADD extracts it).
pub fn is_member_archive(member: &Member) -> bool {
    member.kind == Kind::File && is_archive(&member.data)
}

/// A file member's bytes.
pub fn member_data(member: &Member) -> &[u8] {
    &member.data
}

/// Whether `data` is a tar archive (plain or gzip-compressed) an ADD extracts.
pub fn is_archive(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b]) || data.get(257..262) == Some(b"ustar")
}

/// The members of the archive `data` (plain or gzip), re-rooted under `dest`.
pub fn archive_members(data: &[u8], dest: &str) -> Result<Vec<(String, Member)>, ServiceError> {
    let mut plain = Vec::new();
    let bytes: &[u8] = if data.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(data)
            .take(MAX_CONTEXT_BYTES as u64)
            .read_to_end(&mut plain)
            .map_err(|e| bad(format!("ADD: the archive does not decompress: {e}")))?;
        &plain
    } else {
        data
    };
    let inner = Context::read(bytes)?;
    inner.select(
        &[".".to_string()],
        &format!("{}/", dest.trim_end_matches('/')),
    )
}

/// The tar of a layer holding `members` (absolute paths) and the directories leading to each,
/// owned by `owner`, with `chmod` overriding file modes.
pub fn layer_tar(
    members: &[(String, Member)],
    owner: (u64, u64),
    chmod: Option<&str>,
    extra_dirs: &[String],
) -> Result<Vec<u8>, ServiceError> {
    let chmod = match chmod {
        Some(c) => Some(
            u32::from_str_radix(c, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| bad(format!("--chmod {c:?} is not an octal mode")))?,
        ),
        None => None,
    };
    let mut dirs: std::collections::BTreeSet<String> = extra_dirs.iter().cloned().collect();
    for (path, _) in members {
        let mut at = String::new();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at = format!("{at}/{part}");
            dirs.insert(at.clone());
        }
    }
    let mut b = tar::Builder::new(Vec::new());
    let io = |e: std::io::Error| ServiceError::InvalidRequest(format!("writing a layer: {e}"));
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(owner.0);
        h.set_gid(owner.1);
        h.set_mtime(0);
        h.set_size(size);
        h
    };
    for dir in &dirs {
        if members.iter().any(|(p, _)| p == dir) {
            continue;
        }
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        b.append_data(&mut h, dir.trim_start_matches('/'), std::io::empty())
            .map_err(io)?;
    }
    for (path, m) in members {
        let name = path.trim_start_matches('/');
        match m.kind {
            Kind::Dir => {
                let mut h = header(tar::EntryType::Directory, chmod.unwrap_or(m.mode), 0);
                b.append_data(&mut h, name, std::io::empty()).map_err(io)?;
            }
            Kind::File => {
                let mut h = header(
                    tar::EntryType::Regular,
                    chmod.unwrap_or(m.mode),
                    m.data.len() as u64,
                );
                b.append_data(&mut h, name, &m.data[..]).map_err(io)?;
            }
            Kind::Symlink => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(&mut h, name, &m.link).map_err(io)?;
            }
        }
    }
    b.into_inner().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, data.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn context(files: &[(&str, &str)]) -> Context {
        Context::read(&tar_of(files)).unwrap()
    }

    #[test]
    fn tars_one_after_another_are_one_context_the_later_member_winning() {
        let mut bytes = tar_of(&[("a/one.txt", "1"), ("shared.txt", "first")]);
        bytes.extend(tar_of(&[("b/two.txt", "2"), ("shared.txt", "second")]));
        let c = Context::read(&bytes).unwrap();
        let all = c.select(&[".".into()], "/x/").unwrap();
        assert_eq!(
            paths(&all),
            ["/x/a/one.txt", "/x/b/two.txt", "/x/shared.txt"]
        );
        assert_eq!(all[2].1.data, b"second");
    }

    fn paths(selected: &[(String, Member)]) -> Vec<&str> {
        selected.iter().map(|(p, _)| p.as_str()).collect()
    }

    #[test]
    fn copy_follows_dockers_rules_for_files_dirs_and_globs() {
        let c = context(&[
            ("app.py", "print(1)"),
            ("src/a.py", "a"),
            ("src/lib/b.py", "b"),
            ("notes.txt", "n"),
        ]);
        assert_eq!(
            paths(&c.select(&["app.py".into()], "/srv/main.py").unwrap()),
            ["/srv/main.py"]
        );
        assert_eq!(
            paths(&c.select(&["app.py".into()], "/srv/").unwrap()),
            ["/srv/app.py"]
        );
        assert_eq!(
            paths(&c.select(&["src".into()], "/code").unwrap()),
            ["/code/a.py", "/code/lib/b.py"]
        );
        assert_eq!(
            paths(
                &c.select(&["*.py".into(), "notes.txt".into()], "/x")
                    .unwrap()
            ),
            ["/x/app.py", "/x/notes.txt"]
        );
        assert_eq!(c.select(&[".".into()], "/all/").unwrap().len(), 4);
        let missing = c.select(&["nope".into()], "/x").unwrap_err();
        assert!(
            missing.to_string().contains("not in the build context"),
            "{missing}"
        );
    }

    #[test]
    fn a_context_member_that_climbs_out_is_refused() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        {
            let name = b"../../etc/evil";
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name);
        }
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let err = Context::read(&b.into_inner().unwrap()).unwrap_err();
        assert!(err.to_string().contains("climbs out"), "{err}");
        assert!(Context::read(b"not a tar at all, not even close.............").is_err());
    }

    #[test]
    fn owners_and_archives_are_recognised() {
        assert_eq!(owner(None).unwrap(), (0, 0));
        assert_eq!(owner(Some("user")).unwrap(), (1000, 1000));
        assert_eq!(owner(Some("1000:100")).unwrap(), (1000, 100));
        assert!(owner(Some("www-data")).is_err());
        let tar = tar::Builder::new(Vec::new()).into_inner().unwrap();
        assert!(!is_archive(&tar), "an empty tar has no header");
        assert!(is_archive(&[0x1f, 0x8b, 8]));
    }
}
