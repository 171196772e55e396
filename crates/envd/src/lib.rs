//! Wire types shared by the daemon and the in-sandbox agent.
//!
//! The agent speaks the protocol of E2B's in-sandbox daemon "envd" so the real E2B SDK can drive it
//! unmodified: Connect RPC with the JSON codec over HTTP/1.1 (`process.Process/*`,
//! `filesystem.Filesystem/*`), plus plain HTTP `/files` and `/health`. This crate holds
//! - [`connect`]: the Connect framing (envelopes, end-of-stream frames) and the error codes with their
//!   HTTP statuses;
//! - [`process`], [`filesystem`], [`files`]: the messages, in protobuf's canonical JSON mapping
//!   (camelCase names, int64 as strings, bytes as base64, enums by name);
//! - [`client`]: [`EnvdClient`], the Rust client the daemon and the tests use to reach an agent over its
//!   unix socket;
//! - `boot`: the handshake between the runtime and the agent at sandbox start.
//! - [`callback`]: the events an agent reports to the daemon (call-home: readiness).
//!
//! Nothing here touches the host: it is pure encoding plus one client.

pub mod boot;
pub mod callback;
pub mod client;
pub mod connect;
mod error;
pub mod files;
pub mod filesystem;
pub mod init;
pub mod json;
pub mod process;
pub mod version;

pub use client::{EnvdClient, ExecOptions, ExecOutput, ProcessStream};
pub use connect::{Code, ConnectError};
pub use error::Error;

/// Header carrying the sandbox's access token on every call.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// Header with which a client asks for keepalive events every N seconds on a server stream.
pub const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";
/// Header carrying a Connect call's deadline in milliseconds.
pub const TIMEOUT_HEADER: &str = "connect-timeout-ms";
