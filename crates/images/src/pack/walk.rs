//! The walk of a packed directory: every entry read through file descriptors opened beneath the
//! root (`openat` one component at a time, never following a link), hard links found by inode,
//! extended attributes read and their ids shifted back.

use super::*;

impl<W: Write> Packer<'_, W> {
    /// The path on disk of member `name`, for messages.
    pub(super) fn path(&self, name: &[u8]) -> PathBuf {
        let name = name.strip_suffix(b"/").unwrap_or(name);
        if name.is_empty() || name == b"." {
            self.root.to_path_buf()
        } else {
            self.root.join(OsStr::from_bytes(name))
        }
    }

    pub(super) fn io(
        &self,
        what: &'static str,
        name: &[u8],
    ) -> impl FnOnce(io::Error) -> PackError {
        let path = self.path(name);
        move |source| PackError::Io { what, path, source }
    }

    pub(super) fn errno(&self, what: &'static str, name: &[u8]) -> impl FnOnce(Errno) -> PackError {
        let io = self.io(what, name);
        move |errno| io(errno.into())
    }

    /// Depth first from the root, with an explicit stack (a deep tree costs heap and one fd per
    /// level, never the thread's stack).
    pub(super) fn walk(&mut self, root: OwnedFd) -> Result<(), PackError> {
        let stat = fstat(&root).map_err(self.errno("inspect", b""))?;
        if file_type(&stat) != SFlag::S_IFDIR {
            return Err(PackError::NotADirectory {
                path: self.root.to_path_buf(),
            });
        }
        self.directory(root.as_fd(), b"./", &stat)?;
        let names = self.list(root.as_fd(), b"")?;
        let mut stack = vec![Frame {
            fd: root,
            prefix: Vec::new(),
            names,
        }];
        while let Some(frame) = stack.last_mut() {
            let Some(name) = frame.names.next() else {
                stack.pop();
                continue;
            };
            let mut member = frame.prefix.clone();
            member.extend_from_slice(&name);
            if self.exclude.contains(&member) {
                continue;
            }
            if let Some(child) = self.child(frame.fd.as_fd(), &name, member)? {
                stack.push(child);
            }
        }
        Ok(())
    }

    /// The names in directory `fd` (member name `prefix`), sorted by their bytes.
    pub(super) fn list(
        &self,
        fd: BorrowedFd<'_>,
        prefix: &[u8],
    ) -> Result<std::vec::IntoIter<Vec<u8>>, PackError> {
        let reopened = openat(
            fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(self.errno("list", prefix))?;
        let mut listing = Dir::from_fd(reopened).map_err(self.errno("list", prefix))?;
        let mut names = Vec::new();
        for child in listing.iter() {
            let child = child.map_err(self.errno("list", prefix))?;
            let child = child.file_name().to_bytes();
            if child != b"." && child != b".." {
                names.push(child.to_vec());
            }
        }
        names.sort();
        Ok(names.into_iter())
    }

    /// Packs `name` in directory `dir` as member `member`; a directory is returned to be walked.
    pub(super) fn child(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        mut member: Vec<u8>,
    ) -> Result<Option<Frame>, PackError> {
        if name.starts_with(b".wh.") {
            return Err(PackError::ReservedName {
                path: self.path(&member),
            });
        }
        let stat = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(self.errno("inspect", &member))?;
        match file_type(&stat) {
            SFlag::S_IFDIR => {
                let fd = openat(
                    dir,
                    name,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(self.errno("open the directory", &member))?;
                let stat = self.same_inode(fd.as_fd(), &stat, &member)?;
                member.push(b'/');
                self.directory(fd.as_fd(), &member, &stat)?;
                let names = self.list(fd.as_fd(), &member)?;
                Ok(Some(Frame {
                    fd,
                    prefix: member,
                    names,
                }))
            }
            SFlag::S_IFREG => {
                if self.hardlink(&stat, &member)? {
                    return Ok(None);
                }
                // O_NONBLOCK: were it swapped for a FIFO since, opening it must not hang.
                let fd = openat(
                    dir,
                    name,
                    OFlag::O_RDONLY
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_NONBLOCK
                        | OFlag::O_NOCTTY
                        | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(self.errno("open", &member))?;
                let stat = self.same_inode(fd.as_fd(), &stat, &member)?;
                let xattrs = self.xattrs(fd.as_fd(), &member)?;
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                let header = self.header(EntryType::Regular, &stat, size);
                let mut file = File::from(fd);
                self.member(header, &member, None, &xattrs.kept, Data::File(&mut file))?;
                Ok(None)
            }
            SFlag::S_IFLNK => {
                let target =
                    readlinkat(dir, name).map_err(self.errno("read the symlink", &member))?;
                let header = self.header(EntryType::Symlink, &stat, 0);
                self.member(header, &member, Some(target.as_bytes()), &[], Data::None)?;
                Ok(None)
            }
            SFlag::S_IFIFO => {
                if !self.hardlink(&stat, &member)? {
                    let header = self.header(EntryType::Fifo, &stat, 0);
                    self.member(header, &member, None, &[], Data::None)?;
                }
                Ok(None)
            }
            SFlag::S_IFCHR if stat.st_rdev == 0 => {
                // A whiteout. Overlayfs may share one whiteout inode between many names: each
                // is its own `.wh.` member, never a hardlink.
                let mut whiteout = member[..member.len() - name.len()].to_vec();
                whiteout.extend_from_slice(b".wh.");
                whiteout.extend_from_slice(name);
                let mut header = self.header(EntryType::Regular, &stat, 0);
                header.set_mode(0o600);
                self.member(header, &whiteout, None, &[], Data::None)?;
                Ok(None)
            }
            _ => {
                self.skipped += 1;
                tracing::debug!(path = %self.path(&member).display(), "device node or socket left out of the layer");
                Ok(None)
            }
        }
    }

    /// The directory `fd` as member `member` (with its trailing `/`), and its opaque marker.
    pub(super) fn directory(
        &mut self,
        fd: BorrowedFd<'_>,
        member: &[u8],
        stat: &FileStat,
    ) -> Result<(), PackError> {
        let xattrs = self.xattrs(fd, member)?;
        let header = self.header(EntryType::Directory, stat, 0);
        self.member(header, member, None, &xattrs.kept, Data::None)?;
        if xattrs.opaque {
            // As Docker writes it: an empty file with the directory's owner and permissions.
            let mut marker = if member == b"./" {
                Vec::new()
            } else {
                member.to_vec()
            };
            marker.extend_from_slice(b".wh..wh..opq");
            let mut header = self.header(EntryType::Regular, stat, 0);
            header.set_mode(stat.st_mode & 0o777);
            self.member(header, &marker, None, &[], Data::None)?;
        }
        Ok(())
    }

    /// For a regular file or FIFO with more than one link: writes a hardlink member if an earlier
    /// path of its inode was written (true), or records this path as the inode's first (false).
    pub(super) fn hardlink(&mut self, stat: &FileStat, member: &[u8]) -> Result<bool, PackError> {
        if stat.st_nlink <= 1 {
            return Ok(false);
        }
        let inode = (stat.st_dev, stat.st_ino);
        let Some(first) = self.links.get(&inode).cloned() else {
            self.links.insert(inode, member.to_vec());
            return Ok(false);
        };
        let header = self.header(EntryType::Link, stat, 0);
        self.member(header, member, Some(&first), &[], Data::None)?;
        Ok(true)
    }

    /// The stat of what `fd` opened, refused unless it is the inode `listed`.
    pub(super) fn same_inode(
        &self,
        fd: BorrowedFd<'_>,
        listed: &FileStat,
        member: &[u8],
    ) -> Result<FileStat, PackError> {
        let stat = fstat(fd).map_err(self.errno("inspect", member))?;
        if stat.st_dev != listed.st_dev
            || stat.st_ino != listed.st_ino
            || file_type(&stat) != file_type(listed)
        {
            return Err(PackError::Changed {
                path: self.path(member),
            });
        }
        Ok(stat)
    }

    /// The kept xattrs of the file or directory `fd`; refuses the overlayfs markers that make a
    /// layer not self-contained.
    pub(super) fn xattrs(&self, fd: BorrowedFd<'_>, member: &[u8]) -> Result<Xattrs, PackError> {
        let mut xattrs = Xattrs::default();
        let mut names = list_xattrs(fd).map_err(self.io("list the xattrs of", member))?;
        names.sort();
        for name in names {
            if let Some(overlay) = name.strip_prefix(b"trusted.overlay.") {
                let refused = match overlay {
                    b"redirect" => Some("trusted.overlay.redirect"),
                    b"metacopy" => Some("trusted.overlay.metacopy"),
                    _ => None,
                };
                if let Some(xattr) = refused {
                    return Err(PackError::NotSelfContained {
                        path: self.path(member),
                        xattr,
                    });
                }
                if overlay == b"opaque" {
                    let value =
                        get_xattr(fd, &name).map_err(self.io("read the xattrs of", member))?;
                    xattrs.opaque = value.as_deref() == Some(b"y");
                }
                continue;
            }
            if !kept_xattr(&name) {
                continue;
            }
            if name.contains(&b'=') {
                return Err(PackError::UnrepresentableXattr {
                    path: self.path(member),
                    name: String::from_utf8_lossy(&name).into_owned(),
                });
            }
            let Some(mut value) =
                get_xattr(fd, &name).map_err(self.io("read the xattrs of", member))?
            else {
                // Removed between listing and reading.
                continue;
            };
            if name == b"security.capability" {
                unshift_capability_rootid(&mut value, self.opts.id_shift);
            }
            xattrs.kept.push((name, value));
        }
        Ok(xattrs)
    }
}

/// A v3 `security.capability` names the host uid that is root for it; unshift it like an owner
/// (the unpacker shifts it back). v2 values carry none and are kept as they are.
pub(super) fn unshift_capability_rootid(value: &mut [u8], shift: u32) {
    crate::unpack::map_capability_rootid(value, |rootid| unshift(rootid, shift));
}

/// The file type bits of a stat.
pub(super) fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// The xattr names of `fd`; none where the filesystem has no xattrs.
pub(super) fn list_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    // The list can grow between asking its size and reading it: ask again a few times.
    for _ in 0..8 {
        // SAFETY: a null buffer of size 0 asks only for the size; `fd` is open for the call.
        let size = unsafe { libc::flistxattr(fd.as_raw_fd(), std::ptr::null_mut(), 0) };
        let size = match usize::try_from(size) {
            Ok(0) => return Ok(Vec::new()),
            Ok(size) => size,
            Err(_) => match Errno::last() {
                Errno::ENOTSUP => return Ok(Vec::new()),
                errno => return Err(errno.into()),
            },
        };
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes; `fd` is open.
        let got =
            unsafe { libc::flistxattr(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        match usize::try_from(got) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(buffer
                    .split(|b| *b == 0)
                    .filter(|name| !name.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect());
            }
            Err(_) if Errno::last() == Errno::ERANGE => continue,
            Err(_) => return Err(Errno::last().into()),
        }
    }
    Err(Errno::ERANGE.into())
}

/// The value of xattr `name` of `fd`; `None` if it has none by that name.
pub(super) fn get_xattr(fd: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let Ok(name) = CString::new(name) else {
        return Ok(None);
    };
    for _ in 0..8 {
        // SAFETY: `name` is NUL-terminated; a null buffer of size 0 asks only for the size.
        let size =
            unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), std::ptr::null_mut(), 0) };
        let size = match usize::try_from(size) {
            Ok(size) => size,
            Err(_) => match Errno::last() {
                Errno::ENODATA => return Ok(None),
                errno => return Err(errno.into()),
            },
        };
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes; `name` is
        // NUL-terminated; `fd` is open.
        let got = unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        match usize::try_from(got) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(Some(buffer));
            }
            Err(_) => match Errno::last() {
                Errno::ERANGE => continue,
                Errno::ENODATA => return Ok(None),
                errno => return Err(errno.into()),
            },
        }
    }
    Err(Errno::ERANGE.into())
}
