//! `sandboxd-errors`: the one way an error is written out, in API answers, CLI messages and logs.
//!
//! Contract: each layer's error says only its own part and chains its cause (`#[source]`), so the whole
//! story is the error followed by every cause, `: `-separated: `creating sandbox: mounting rootfs: No
//! space left on device`. A `transparent` variant shows its inner error once, not twice: its `source`
//! is the inner error's cause, not the inner error.

use std::error::Error;
use std::fmt;

/// Displays an error and its causes, `: `-separated.
pub struct Chain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

/// `e` and its causes, `: `-separated.
pub fn chain(e: &(dyn Error + '_)) -> String {
    Chain(e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error of one layer, with the cause below it.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn every_cause_follows_its_error_once() {
        let io = Layer("No space left on device", None);
        let mount = Layer("mounting rootfs", Some(Box::new(io)));
        let create = Layer("creating sandbox", Some(Box::new(mount)));
        assert_eq!(
            chain(&create),
            "creating sandbox: mounting rootfs: No space left on device"
        );
        assert_eq!(chain(&Layer("alone", None)), "alone");
    }
}
