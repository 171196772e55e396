//! The encoding of a packed layer: tar headers (PAX records for long names, big sizes and extended
//! attributes), file data and padding, written through the digest of the tar and of its
//! compressed blob.

use super::*;

/// A writer that hashes and counts what passes through it.
pub(super) struct Hashing<W> {
    pub(super) inner: W,
    pub(super) hasher: Sha256,
    pub(super) written: u64,
}

impl<W> Hashing<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The blob: the tar as it is, or gzipped.
pub(super) enum Blob<W: Write> {
    Plain(Hashing<W>),
    Gzip(GzEncoder<Hashing<W>>),
}

impl<W: Write> Blob<W> {
    /// Ends the compressed stream (its trailer) and gives back the hashed writer.
    pub(super) fn finish(self) -> io::Result<Hashing<W>> {
        match self {
            Blob::Plain(blob) => Ok(blob),
            Blob::Gzip(encoder) => encoder.finish(),
        }
    }
}

impl<W: Write> Write for Blob<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Blob::Plain(blob) => blob.write(buf),
            Blob::Gzip(encoder) => encoder.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Blob::Plain(blob) => blob.flush(),
            Blob::Gzip(encoder) => encoder.flush(),
        }
    }
}

impl<W: Write> Packer<'_, W> {
    /// A header with the file's mode, unshifted owner, whole-second mtime, `kind` and `size`.
    pub(super) fn header(&self, kind: EntryType, stat: &FileStat, size: u64) -> Header {
        let mut header = Header::new_ustar();
        header.set_entry_type(kind);
        header.set_mode(stat.st_mode & 0o7777);
        header.set_uid(u64::from(unshift(stat.st_uid, self.opts.id_shift)));
        header.set_gid(u64::from(unshift(stat.st_gid, self.opts.id_shift)));
        header.set_mtime(u64::try_from(stat.st_mtime).unwrap_or(0));
        header.set_size(size);
        header
    }

    /// Writes one member: its PAX records if it needs any, its header, its data and padding.
    pub(super) fn member(
        &mut self,
        mut header: Header,
        name: &[u8],
        link: Option<&[u8]>,
        xattrs: &[(Vec<u8>, Vec<u8>)],
        data: Data<'_>,
    ) -> Result<(), PackError> {
        if name.len() > MAX_NAME {
            return Err(PackError::NameTooLong {
                path: self.path(name),
                len: name.len(),
            });
        }
        let mut pax = Vec::new();
        let fields = header.as_old_mut();
        copy_name(&mut fields.name, name, b"path", &mut pax);
        if let Some(link) = link {
            copy_name(&mut fields.linkname, link, b"linkpath", &mut pax);
        }
        let size = header.size().unwrap_or(0);
        if size >= OCTAL_SIZE_LIMIT {
            pax_record(&mut pax, b"size", size.to_string().as_bytes());
        }
        for (key, value) in xattrs {
            let mut record = b"SCHILY.xattr.".to_vec();
            record.extend_from_slice(key);
            pax_record(&mut pax, &record, value);
        }
        if !pax.is_empty() {
            let mut extension = Header::new_ustar();
            extension.as_old_mut().name[..b"PaxHeader".len()].copy_from_slice(b"PaxHeader");
            extension.set_entry_type(EntryType::XHeader);
            extension.set_mode(0o644);
            extension.set_uid(0);
            extension.set_gid(0);
            extension.set_size(pax.len() as u64);
            extension.set_cksum();
            self.write(extension.as_bytes())?;
            self.write(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        header.set_cksum();
        self.write(header.as_bytes())?;
        if let Data::File(file) = data {
            self.copy(file, size, name)?;
            self.pad(size)?;
        }
        self.entries += 1;
        Ok(())
    }

    /// Copies exactly `size` bytes of `file` into the tar; a file that is shorter or longer now
    /// than when it was listed is [`PackError::Changed`] (the tar would be malformed otherwise).
    pub(super) fn copy(
        &mut self,
        file: &mut File,
        size: u64,
        name: &[u8],
    ) -> Result<(), PackError> {
        let mut remaining = size;
        loop {
            // One read past the end, to see that the file did not grow.
            let want = usize::try_from(remaining)
                .unwrap_or(usize::MAX)
                .clamp(1, self.buffer.len());
            let read = match file.read(&mut self.buffer[..want]) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(self.io("read", name)(error)),
            };
            if read == 0 && remaining == 0 {
                return Ok(());
            }
            if read == 0 || remaining == 0 {
                return Err(PackError::Changed {
                    path: self.path(name),
                });
            }
            self.tar
                .write_all(&self.buffer[..read])
                .map_err(PackError::Write)?;
            remaining -= read as u64;
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<(), PackError> {
        self.tar.write_all(bytes).map_err(PackError::Write)
    }

    /// Zeroes up to the next block boundary after `len` bytes of data.
    pub(super) fn pad(&mut self, len: u64) -> Result<(), PackError> {
        let rest = (len % BLOCK as u64) as usize;
        if rest == 0 {
            return Ok(());
        }
        self.write(&[0; BLOCK][rest..])
    }
}

/// Puts `name` in a header field if it fits, verbatim (no normalisation); else a PAX record
/// `key` carries it and the field holds its first bytes.
pub(super) fn copy_name(field: &mut [u8], name: &[u8], key: &[u8], pax: &mut Vec<u8>) {
    let fits = name.len().min(field.len());
    field[..fits].copy_from_slice(&name[..fits]);
    if name.len() > HEADER_NAME.min(field.len()) {
        pax_record(pax, key, name);
    }
}

/// Appends the PAX record `<length> <key>=<value>\n`, whose length counts its own digits.
pub(super) fn pax_record(pax: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut length = rest + rest.to_string().len();
    if length.to_string().len() != rest.to_string().len() {
        length = rest + length.to_string().len();
    }
    pax.extend_from_slice(length.to_string().as_bytes());
    pax.push(b' ');
    pax.extend_from_slice(key);
    pax.push(b'=');
    pax.extend_from_slice(value);
    pax.push(b'\n');
}

/// A host id as the sandbox sees it; one outside the sandbox's range is the overflow id.
pub(super) fn unshift(id: u32, shift: u32) -> u32 {
    id.checked_sub(shift)
        .filter(|id| *id < ID_RANGE)
        .unwrap_or(OVERFLOW_ID)
}
