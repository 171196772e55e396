//! Connect protocol framing (JSON codec) as the E2B SDK speaks it.
//!
//! - Unary calls: `POST /<pkg>.<Service>/<Method>` with `content-type: application/json`; success is 200
//!   with the JSON message, failure any other status with a [`ConnectError`] body. [`Code::http_status`]
//!   is the one mapping between the two, taken from the Connect specification.
//! - Server streams: `content-type: application/connect+json`; both directions are a sequence of
//!   envelopes (1 flag byte, 4-byte big-endian length, payload). The response ends with one envelope
//!   flagged [`END_STREAM_FLAG`] whose payload is [`EndStream`] (`{}` or `{"error": {...}}`).
//!
//! The decoder never trusts a length prefix beyond [`MAX_MESSAGE_BYTES`], so a hostile peer cannot make
//! either side allocate unbounded memory.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::fmt;
use tokio_util::codec::Decoder;

/// Content type of unary JSON calls.
pub const UNARY_CONTENT_TYPE: &str = "application/json";
/// Content type of streaming JSON calls.
pub const STREAM_CONTENT_TYPE: &str = "application/connect+json";
/// Envelope flag: the payload is compressed (we never compress, and refuse compressed input).
pub const COMPRESSED_FLAG: u8 = 0x01;
/// Envelope flag: this is the end-of-stream frame.
pub const END_STREAM_FLAG: u8 = 0x02;
/// Largest envelope payload either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Connect error codes, serialized by their wire names (`"not_found"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// The HTTP status a unary error with this code is sent with (Connect specification).
    pub fn http_status(self) -> u16 {
        match self {
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        }
    }

    /// The code a client infers from an HTTP status when the body carries none (Connect specification).
    pub fn from_http_status(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502..=504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }

    /// The wire name, e.g. `"not_found"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Connect error as it travels: the body of a failed unary call, or the `error` of an end frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectError {
    pub code: Code,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// The JSON body of this error.
    pub fn to_json(&self) -> Bytes {
        // Serializing a struct of an enum and a string cannot fail.
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ConnectError {}

/// The payload of an end-of-stream frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndStream {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectError>,
}

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub flags: u8,
    pub data: Bytes,
}

impl Envelope {
    pub fn is_end_stream(&self) -> bool {
        self.flags & END_STREAM_FLAG != 0
    }

    pub fn is_compressed(&self) -> bool {
        self.flags & COMPRESSED_FLAG != 0
    }
}

/// Frames `data` as one envelope with `flags`.
pub fn encode_envelope(flags: u8, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + data.len());
    out.put_u8(flags);
    // Messages above 4 GiB are impossible here: callers send bounded chunks.
    out.put_u32(u32::try_from(data.len()).unwrap_or(u32::MAX));
    out.put_slice(data);
    out.freeze()
}

/// Serializes `msg` as JSON and frames it as a message envelope.
pub fn encode_message<T: Serialize>(msg: &T) -> Result<Bytes, serde_json::Error> {
    Ok(encode_envelope(0, &serde_json::to_vec(msg)?))
}

/// The end-of-stream frame, successful (`None`) or carrying `error`.
pub fn encode_end_stream(error: Option<ConnectError>) -> Bytes {
    let body = serde_json::to_vec(&EndStream { error }).unwrap_or_else(|_| b"{}".to_vec());
    encode_envelope(END_STREAM_FLAG, &body)
}

/// Why an envelope could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("envelope of {0} bytes exceeds the {MAX_MESSAGE_BYTES} byte limit")]
    TooLarge(usize),
    #[error("stream ended inside an envelope")]
    Truncated,
    #[error("reading the stream failed")]
    Io(#[from] std::io::Error),
}

/// A `tokio_util` decoder splitting a byte stream into [`Envelope`]s.
#[derive(Debug, Default, Clone, Copy)]
pub struct EnvelopeDecoder;

impl Decoder for EnvelopeDecoder {
    type Item = Envelope;
    type Error = EnvelopeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Envelope>, EnvelopeError> {
        if src.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[1], src[2], src[3], src[4]]) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(EnvelopeError::TooLarge(len));
        }
        if src.len() < 5 + len {
            src.reserve(5 + len - src.len());
            return Ok(None);
        }
        let flags = src.get_u8();
        src.advance(4);
        let data = src.split_to(len).freeze();
        Ok(Some(Envelope { flags, data }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Envelope>, EnvelopeError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(EnvelopeError::Truncated),
        }
    }
}

/// Decodes exactly one envelope from a complete buffer (a server-stream request body).
pub fn decode_single(buf: &[u8]) -> Result<Envelope, EnvelopeError> {
    let mut src = BytesMut::from(buf);
    EnvelopeDecoder
        .decode_eof(&mut src)?
        .ok_or(EnvelopeError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_through_decoder_split_at_every_byte() {
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&encode_envelope(0, br#"{"a":1}"#));
        wire.extend_from_slice(&encode_end_stream(None));
        // Feed the decoder one byte at a time: it must wait for whole frames.
        let mut src = BytesMut::new();
        let mut frames = Vec::new();
        for b in wire.iter() {
            src.put_u8(*b);
            while let Some(f) = EnvelopeDecoder.decode(&mut src).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(&frames[0].data[..], br#"{"a":1}"#);
        assert!(!frames[0].is_end_stream());
        assert!(frames[1].is_end_stream());
        assert_eq!(&frames[1].data[..], b"{}");
    }

    #[test]
    fn end_stream_carries_error_json() {
        let frame = encode_end_stream(Some(ConnectError::new(Code::NotFound, "gone")));
        let env = decode_single(&frame).unwrap();
        assert_eq!(env.flags, END_STREAM_FLAG);
        let end: EndStream = serde_json::from_slice(&env.data).unwrap();
        assert_eq!(end.error, Some(ConnectError::new(Code::NotFound, "gone")));
        assert_eq!(
            std::str::from_utf8(&env.data).unwrap(),
            r#"{"error":{"code":"not_found","message":"gone"}}"#
        );
    }

    #[test]
    fn oversized_or_truncated_envelopes_are_rejected() {
        let mut huge = BytesMut::from(&[0u8, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            EnvelopeDecoder.decode(&mut huge),
            Err(EnvelopeError::TooLarge(_))
        ));
        assert!(matches!(
            decode_single(&[0, 0, 0, 0, 9, b'{']),
            Err(EnvelopeError::Truncated)
        ));
        assert!(matches!(decode_single(&[]), Err(EnvelopeError::Truncated)));
    }

    #[test]
    fn codes_map_to_connect_http_statuses() {
        assert_eq!(Code::NotFound.http_status(), 404);
        assert_eq!(Code::AlreadyExists.http_status(), 409);
        assert_eq!(Code::InvalidArgument.http_status(), 400);
        assert_eq!(Code::PermissionDenied.http_status(), 403);
        assert_eq!(Code::Unauthenticated.http_status(), 401);
        assert_eq!(Code::Unimplemented.http_status(), 501);
        assert_eq!(Code::from_http_status(401), Code::Unauthenticated);
        assert_eq!(Code::from_http_status(503), Code::Unavailable);
        let json = serde_json::to_string(&Code::FailedPrecondition).unwrap();
        assert_eq!(json, r#""failed_precondition""#);
        assert_eq!(Code::FailedPrecondition.as_str(), "failed_precondition");
    }
}
