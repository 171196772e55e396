//! OCI images for sandboxes: what an image reference names, how its blobs are fetched and verified,
//! and how its layers become read-only directories a sandbox's overlay root stacks.
//!
//! Contract: every layer directory this crate hands out was unpacked completely from a blob whose
//! digest was verified, and nothing a layer's tar says can write or link outside that directory
//! ([`unpack`]). Which images and layers exist, and who uses them, is the store's to record; this
//! crate only knows the bytes on disk.

pub mod unpack;
