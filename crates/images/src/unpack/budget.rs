//! Metering what the tar parser reads on its own, between members.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use super::MAX_MEMBER_HEADERS;

/// Counts the bytes the tar parser reads on its own (between members: headers, PAX records,
/// long names, padding) and fails the read past [`MAX_MEMBER_HEADERS`].
#[derive(Debug, Clone, Default)]
pub(super) struct HeaderBudget {
    /// Bytes read since [`HeaderBudget::start`], `None` while member data is being read.
    used: Rc<Cell<Option<u64>>>,
    exceeded: Rc<Cell<bool>>,
}

impl HeaderBudget {
    pub(super) fn start(&self) {
        self.used.set(Some(0));
    }

    pub(super) fn stop(&self) {
        self.used.set(None);
    }

    pub(super) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    pub(super) fn charge(&self, read: usize) -> io::Result<()> {
        if let Some(used) = self.used.get() {
            let used = used.saturating_add(read as u64);
            self.used.set(Some(used));
            if used > MAX_MEMBER_HEADERS {
                self.exceeded.set(true);
                return Err(io::Error::other("member headers exceed their limit"));
            }
        }
        Ok(())
    }
}

pub(super) struct Metered<R> {
    pub(super) inner: R,
    pub(super) budget: HeaderBudget,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.budget.charge(read)?;
        Ok(read)
    }
}
