//! Volumes' files, handled from the host.
//!
//! A volume is a directory tree that sandboxes mount and write to; what a sandbox puts there
//! (symbolic links to `/`, a directory swapped for a link between two calls) is hostile input to
//! anything on the host that touches the tree. This crate is the one place that does:
//!
//! - [`beneath`]: a path inside a volume ([`RelPath`]) and how it is opened: one `openat2` from the
//!   volume's root with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, so no link is ever followed and
//!   nothing outside the root is ever reached, whatever the tree holds at that moment;
//! - [`files`]: the volume file API (stat, list, read, write, mkdir, remove, metadata) built only on
//!   descriptors from [`beneath`], showing owners as the sandboxes see them;
//! - [`mounts`]: where in a sandbox a volume may appear (never over the system, never overlapping
//!   another mount).

pub mod beneath;
pub mod files;
pub mod mounts;

pub use beneath::RelPath;
pub use files::{Entry, EntryKind, Volume, VolumeError, WriteOpts};
pub use mounts::{check_mounts, MountPathError};
