//! Per-key limits on creates: how many sandboxes one API key may hold, and how many of its creates
//! may be in flight at once.
//!
//! Contract: a create made with a key ([`crate::sandboxes::CreatePlan::owner`]) is checked against
//! [`KeyLimits`] in the same write transaction that inserts its row ([`sandboxd_store::per_key`]),
//! so racing creates never pass a limit together, and a refused create has made nothing: no row, no
//! slot, no event. The refusal is [`ServiceError::LimitExceeded`] (429 with `Retry-After`). A create
//! without a key (internal flows such as template builds) is not limited. 0 means no limit.

use crate::ServiceError;
use sandboxd_store::KeyUsage;

/// The limits; 0 is none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// Sandboxes one key may hold (`--max-sandboxes-per-key`).
    pub max_sandboxes: u32,
    /// Creates of one key that may be in flight at once (`--max-concurrent-creates-per-key`).
    pub max_concurrent_creates: u32,
}

/// How long a refused create should wait: a create in flight finishes within seconds; a sandbox
/// held goes only when someone deletes it or its timeout ends it.
const RETRY_AFTER_CREATES_SECS: u64 = 1;
const RETRY_AFTER_SANDBOXES_SECS: u64 = 10;

impl KeyLimits {
    /// Whether a create of key `owner` is checked against these limits: a key's (the empty owner
    /// is no key's) where any limit is set. When none is, a create reads no key's usage.
    pub fn apply_to(&self, owner: &str) -> bool {
        !owner.is_empty() && (self.max_sandboxes > 0 || self.max_concurrent_creates > 0)
    }

    /// Whether a key holding `usage` may create one more sandbox.
    pub fn admit(&self, usage: KeyUsage) -> Result<(), ServiceError> {
        if self.max_sandboxes > 0 && usage.sandboxes >= self.max_sandboxes {
            return Err(ServiceError::LimitExceeded {
                message: format!(
                    "this API key holds {} sandboxes, its limit: delete one first",
                    usage.sandboxes
                ),
                retry_after_secs: RETRY_AFTER_SANDBOXES_SECS,
            });
        }
        if self.max_concurrent_creates > 0 && usage.creating >= self.max_concurrent_creates {
            return Err(ServiceError::LimitExceeded {
                message: format!(
                    "this API key has {} creates in flight, its limit: retry when one finished",
                    usage.creating
                ),
                retry_after_secs: RETRY_AFTER_CREATES_SECS,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_at_the_limit_and_zero_is_none() {
        let usage = |sandboxes, creating| KeyUsage {
            sandboxes,
            creating,
        };
        let limits = KeyLimits {
            max_sandboxes: 3,
            max_concurrent_creates: 2,
        };
        assert!(limits.admit(usage(2, 1)).is_ok());
        let full = limits.admit(usage(3, 0)).unwrap_err();
        assert!(
            matches!(
                full,
                ServiceError::LimitExceeded {
                    retry_after_secs: 10,
                    ..
                }
            ),
            "{full:?}"
        );
        let busy = limits.admit(usage(2, 2)).unwrap_err();
        assert!(
            matches!(
                busy,
                ServiceError::LimitExceeded {
                    retry_after_secs: 1,
                    ..
                }
            ),
            "{busy:?}"
        );
        assert!(KeyLimits::default().admit(usage(10_000, 10_000)).is_ok());
    }

    #[test]
    fn limits_apply_to_a_keys_creates_only_when_one_is_set() {
        let some = KeyLimits {
            max_sandboxes: 0,
            max_concurrent_creates: 1,
        };
        assert!(some.apply_to("k1"));
        assert!(!some.apply_to(""));
        assert!(!KeyLimits::default().apply_to("k1"));
    }
}
