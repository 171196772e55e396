//! Pseudo-terminals for processes started with `pty`.
//!
//! [`open`] allocates a pair the way `openpty(3)` does but race-free for a multithreaded agent: the
//! master is opened `O_CLOEXEC | O_NONBLOCK`, the slave through `TIOCGPTPEER` (falling back to its
//! `/dev/pts/N` path), also `O_CLOEXEC`, so no other child ever inherits either. The child gets the slave
//! as stdin, stdout and stderr and makes it its controlling terminal (after `setsid`, in
//! [`super::launch`]); the agent keeps the [`PtyMaster`], reads the terminal's output from it
//! ([`PtyReader`]), writes input to it and resizes it.

use sandboxd_envd::process::PtySize;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};

/// The agent's end of a terminal. Writes are serialized, so concurrent inputs never interleave.
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
    write_lock: tokio::sync::Mutex<()>,
}

/// Allocates a terminal of `size`; returns its master and slave.
pub fn open(size: PtySize) -> io::Result<(PtyMaster, OwnedFd)> {
    const PTMX: &[u8] = b"/dev/ptmx\0";
    // SAFETY: PTMX is NUL-terminated; the returned fd, if valid, is owned by nobody else.
    let master = unsafe {
        let fd = libc::open(
            PTMX.as_ptr().cast(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let slave = open_slave(&master)?;
    set_size(&master, size)?;
    Ok((
        PtyMaster {
            // SAFETY: `master` is an open fd the PtyMaster owns until it drops.
            fd: unsafe { AsyncFd::register(master) }.map_err(|e| e.into_parts().1)?,
            write_lock: tokio::sync::Mutex::new(()),
        },
        slave,
    ))
}

fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags by value and returns a new fd we then own.
    let fd = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if fd >= 0 {
        // SAFETY: a fresh fd returned by the kernel.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // Kernels before 4.13: open the slave by its number.
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int to a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let path = std::ffi::CString::new(format!("/dev/pts/{n}"))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path; a fresh fd we then own.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn set_size(fd: &impl AsRawFd, size: PtySize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: u16::try_from(size.rows).unwrap_or(u16::MAX),
        ws_col: u16::try_from(size.cols).unwrap_or(u16::MAX),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl PtyMaster {
    /// Resizes the terminal; the kernel sends `SIGWINCH` to its foreground process group.
    pub fn resize(&self, size: PtySize) -> io::Result<()> {
        set_size(self.fd.get_ref(), size)
    }

    /// Writes all of `data` as terminal input.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        let _serialized = self.write_lock.lock().await;
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            let written = guard.try_io(|fd| {
                // SAFETY: writes from a valid slice to an fd we own.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match written {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }
}

/// Reads the terminal's output; `EIO` (every slave closed: the session is over) reads as end of file.
pub struct PtyReader(pub Arc<PtyMaster>);

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = guard.try_io(|fd| {
                // SAFETY: reads into a valid, initialized buffer of `unfilled.len()` bytes.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn master_and_slave_talk_and_resize_applies() {
        let (master, slave) = open(PtySize { cols: 80, rows: 24 }).unwrap();
        let master = Arc::new(master);
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes one winsize to a valid pointer.
        assert_eq!(
            unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            0
        );
        assert_eq!((ws.ws_col, ws.ws_row), (80, 24));
        master
            .resize(PtySize {
                cols: 100,
                rows: 30,
            })
            .unwrap();
        // SAFETY: as above.
        unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
        assert_eq!((ws.ws_col, ws.ws_row), (100, 30));
        // Input written to the master is echoed back by the line discipline.
        master.write_all(b"hi\n").await.unwrap();
        let mut reader = PtyReader(master.clone());
        let mut buf = [0u8; 64];
        let n = reader.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"hi"), "{:?}", &buf[..n]);
        // With the slave closed the master reads end of file.
        drop(slave);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
    }
}
