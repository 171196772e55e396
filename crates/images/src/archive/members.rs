//! The tar's index and the safety of reading it: member names normalised (never above the
//! archive's top), the last of a name winning, links resolved inside the index at most
//! [`LINK_HOPS`] deep, the member count and JSON sizes bounded, and members read through readers
//! that never pass their member's end.

use super::*;

/// Where a regular member's data is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Data {
    pub(super) offset: u64,
    pub(super) size: u64,
}

#[derive(Debug, Clone)]
pub(super) enum Member {
    Regular(Data),
    /// A symbolic or hard link, by the normalised name of what it points to.
    Link(String),
}

/// The archive file and the index of its members, by normalised name.
pub(super) struct Archive {
    pub(super) file: File,
    pub(super) path: PathBuf,
    pub(super) members: HashMap<String, Member>,
}

/// What hashing a docker layer found.
pub(super) struct HashedLayer {
    pub(super) compression: Compression,
    /// Of the bytes as stored.
    pub(super) digest: String,
    /// Of the uncompressed tar.
    pub(super) diff_id: String,
}

impl Archive {
    /// Opens `path` and indexes its members (headers only).
    pub(super) fn open(path: &Path) -> Result<Archive, ImageError> {
        let file = File::open(path).map_err(ImageError::io("open", path))?;
        let len = file
            .metadata()
            .map_err(ImageError::io("inspect", path))?
            .len();
        let mut tracked = Tracked {
            file: &file,
            failed: false,
        };
        let mut members = HashMap::new();
        let indexed = index_members(&mut tracked, len, &mut members);
        match indexed {
            Ok(()) => {}
            // The tar crate reports its parse errors and the file's read errors alike.
            Err(Indexing::Tar(e)) if tracked.failed => {
                return Err(ImageError::io("read", path)(e));
            }
            Err(Indexing::Tar(e)) => return Err(ArchiveError::Tar(e).into()),
            Err(Indexing::Archive(e)) => return Err(e.into()),
        }
        Ok(Archive {
            file,
            path: path.to_path_buf(),
            members,
        })
    }

    /// Whether a regular member (or a link to one) is named `name`.
    pub(super) fn has(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// The data of member `name`, following links inside the archive.
    pub(super) fn find(&self, name: &str) -> Result<Data, ArchiveError> {
        let mut current = normalise(name);
        for _ in 0..=LINK_HOPS {
            match self.members.get(&current) {
                Some(Member::Regular(data)) => return Ok(*data),
                Some(Member::Link(target)) => current = target.clone(),
                None => {
                    return Err(ArchiveError::Missing {
                        member: name.to_string(),
                    })
                }
            }
        }
        Err(ArchiveError::Invalid {
            member: name.to_string(),
            reason: format!("it is a link more than {LINK_HOPS} links away from any data"),
        })
    }

    pub(super) fn reader(&self, data: Data) -> MemberReader<'_> {
        MemberReader {
            file: &self.file,
            pos: data.offset,
            end: data.offset + data.size,
            failed: false,
        }
    }

    /// Reads a JSON member, refusing one above [`JSON_LIMIT`] before reading it.
    pub(super) fn read_json(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        let data = self.find(name)?;
        if data.size > JSON_LIMIT {
            return Err(too_large(name).into());
        }
        let mut out = Vec::with_capacity(data.size as usize);
        self.reader(data)
            .read_to_end(&mut out)
            .map_err(ImageError::io("read", &self.path))?;
        Ok(out)
    }

    /// Reads the JSON blob `name` that `descriptor` describes, verified against its size and digest.
    pub(super) fn read_verified(
        &self,
        name: &str,
        descriptor: &Descriptor,
    ) -> Result<Vec<u8>, ImageError> {
        check_size(name, descriptor, self.find(name)?)?;
        let bytes = self.read_json(name)?;
        let actual = sha256(&bytes);
        if actual != descriptor.digest {
            return Err(ArchiveError::DigestMismatch {
                member: name.to_string(),
                digest: descriptor.digest.clone(),
                actual,
            }
            .into());
        }
        Ok(bytes)
    }

    /// The sha256 digest of a member's bytes.
    pub(super) fn hash(&self, data: Data) -> Result<String, ImageError> {
        let mut hashed = Hashing::new(self.reader(data));
        std::io::copy(&mut hashed, &mut std::io::sink())
            .map_err(ImageError::io("read", &self.path))?;
        Ok(hashed.digest())
    }

    /// Hashes a docker layer member as stored and uncompressed (gzip and zstd known by their magic
    /// bytes).
    pub(super) fn hash_layer(&self, name: &str, data: Data) -> Result<HashedLayer, ImageError> {
        let mut magic = [0u8; 4];
        let n = magic
            .len()
            .min(usize::try_from(data.size).unwrap_or(usize::MAX));
        self.file
            .read_exact_at(&mut magic[..n], data.offset)
            .map_err(ImageError::io("read", &self.path))?;
        let compression = match magic[..n] {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd] => Compression::Zstd,
            _ => Compression::None,
        };
        let mut stored = Hashing::new(self.reader(data));
        let decoded = (|| -> std::io::Result<Option<String>> {
            let decoder: Box<dyn Read + '_> = match compression {
                Compression::None => return Ok(None),
                Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut stored)),
                Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(&mut stored)?),
            };
            let mut tar = Hashing::new(decoder);
            std::io::copy(&mut tar, &mut std::io::sink())?;
            Ok(Some(tar.digest()))
        })();
        let decoded = match decoded {
            Ok(d) => d,
            Err(e) if stored.inner.failed => return Err(ImageError::io("read", &self.path)(e)),
            Err(e) => {
                return Err(ArchiveError::Invalid {
                    member: name.to_string(),
                    reason: format!("its compressed data does not decompress: {e}"),
                }
                .into())
            }
        };
        // What follows the compressed stream counts for the digest too.
        std::io::copy(&mut stored, &mut std::io::sink())
            .map_err(ImageError::io("read", &self.path))?;
        let digest = stored.digest();
        Ok(HashedLayer {
            compression,
            diff_id: decoded.unwrap_or_else(|| digest.clone()),
            digest,
        })
    }
}

pub(super) enum Indexing {
    Tar(std::io::Error),
    Archive(ArchiveError),
}

/// Records every member's name and kind in one pass over the headers (data is seeked over).
pub(super) fn index_members(
    reader: &mut Tracked<'_>,
    len: u64,
    members: &mut HashMap<String, Member>,
) -> Result<(), Indexing> {
    let mut tar = tar::Archive::new(reader);
    let mut count = 0usize;
    for entry in tar.entries_with_seek().map_err(Indexing::Tar)? {
        let entry = entry.map_err(Indexing::Tar)?;
        count += 1;
        if count > MEMBER_LIMIT {
            return Err(Indexing::Archive(ArchiveError::TooManyMembers(
                MEMBER_LIMIT,
            )));
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = normalise(&raw);
        let link_target = || {
            entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
        };
        let member = match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let data = Data {
                    offset: entry.raw_file_position(),
                    size: entry.size(),
                };
                if data
                    .offset
                    .checked_add(data.size)
                    .is_none_or(|end| end > len)
                {
                    return Err(Indexing::Archive(ArchiveError::Invalid {
                        member: raw,
                        reason: "the archive ends inside it".into(),
                    }));
                }
                Some(Member::Regular(data))
            }
            // A symbolic link's target is relative to its own directory (or to the archive's top).
            tar::EntryType::Symlink => link_target().map(|t| {
                let dir = match name.rsplit_once('/') {
                    Some((dir, _)) if !t.starts_with('/') => dir,
                    _ => "",
                };
                Member::Link(normalise(&format!("{dir}/{t}")))
            }),
            // A hard link's target is another member's name.
            tar::EntryType::Link => link_target().map(|t| Member::Link(normalise(&t))),
            _ => None,
        };
        // The last member of a name wins, whatever its kind (a later directory hides a file).
        match member {
            Some(m) => members.insert(name, m),
            None => members.remove(&name),
        };
    }
    Ok(())
}

/// A member name as a lookup key: no leading `/` or `./`, no empty or `.` components, `..` taking
/// one component off (never above the top).
pub(super) fn normalise(name: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

pub(super) fn parse_json<'a, T: Deserialize<'a>>(
    member: &str,
    what: &'static str,
    bytes: &'a [u8],
) -> Result<T, ArchiveError> {
    serde_json::from_slice(bytes).map_err(|source| ArchiveError::Json {
        member: member.to_string(),
        what,
        source,
    })
}

pub(super) fn too_large(member: &str) -> ArchiveError {
    ArchiveError::Invalid {
        member: member.to_string(),
        reason: format!("it is larger than the {JSON_LIMIT} bytes a JSON member may have"),
    }
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The archive file for the tar crate, remembering whether reading the file itself failed.
pub(super) struct Tracked<'a> {
    pub(super) file: &'a File,
    pub(super) failed: bool,
}

impl Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf).inspect_err(|_| self.failed = true)
    }
}

impl Seek for Tracked<'_> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos).inspect_err(|_| self.failed = true)
    }
}

/// One member's data, read with `pread` (no shared file position), remembering whether reading the
/// file failed.
pub(super) struct MemberReader<'a> {
    pub(super) file: &'a File,
    pub(super) pos: u64,
    pub(super) end: u64,
    pub(super) failed: bool,
}

impl Read for MemberReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        match self.file.read_at(&mut buf[..want], self.pos) {
            Ok(0) => {
                self.failed = true;
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the archive file ended early (was it changed while read?)",
                ))
            }
            Ok(n) => {
                self.pos += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    self.failed = true;
                }
                Err(e)
            }
        }
    }
}
