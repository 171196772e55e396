//! No code: this crate exists for its dependency list.
//!
//! The static agent is built after the daemon, in the same target directory
//! (`scripts/build-agent`). Cargo reuses a compiled crate only when its features, and its
//! dependencies', are the same in both builds, and it resolves features per build: left alone, the
//! agent's build would ask fewer features of `serde`, `regex`, `syn` and a few more, and recompile
//! them with everything above them. Both the daemon and the agent depend on this crate, which asks,
//! of each crate where the two builds differ, the union of what both ask, so each is compiled once.
//! `scripts/shared-deps` fails, printing the entries to add, when the list no longer covers a
//! difference.
