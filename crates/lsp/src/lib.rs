//! Talking to a language server that runs in a sandbox.
//!
//! The server is an ordinary process of the sandbox's agent, tagged so any call can find it; the
//! daemon keeps no connection to it between calls. So each call joins the server's output from
//! where it is (perhaps in the middle of a message), writes its own messages to the server's
//! stdin, and reads until the answer carrying its own id. This crate is that exchange, without the
//! transport:
//!
//! - [`framing`]: LSP's base protocol (`Content-Length` headers), a decoder that finds the next
//!   whole message in a stream joined at any byte;
//! - [`message`]: requests and notifications as bytes, incoming messages sorted into answers,
//!   the server's own requests (answered with `null` by whoever reads them) and notifications;
//! - [`results`]: the servers' varied result shapes (a completion list or a bare array, flat or
//!   nested symbols) in the one shape each surface serves.
//!
//! Contract: nothing here blocks or does I/O; malformed input is an [`Error`], never a panic.

pub mod framing;
pub mod message;
pub mod results;

pub use framing::{encode, Decoder};
pub use message::{answer_null, notification, request, Incoming};
pub use results::{completion_list, flat_symbols};

/// What went wrong reading a language server's output.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// a message from the language server is not JSON-RPC: {0}
    #[error("a message from the language server is not JSON-RPC: {0}")]
    Malformed(String),
    /// the language server answered with an error {code}: {message}
    #[error("the language server answered with error {code}: {message}")]
    Server { code: i64, message: String },
    /// the language server's message header is too large or its length is not a number
    #[error("the language server's message header is invalid: {0}")]
    Header(String),
}
