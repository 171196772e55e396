//! Incremental NDJSON decoding of the exec stream.
//!
//! Contract: [`LineSplitter`] turns an arbitrary chunking of a byte stream into the same sequence of
//! lines, whatever the chunk boundaries (a line — even a multi-byte character — may be split across any
//! number of chunks). Lines end at `\n`; a trailing `\r` is dropped; blank lines are skipped; a final
//! line without `\n` is returned by [`LineSplitter::finish`]. A line longer than [`MAX_LINE`] is a
//! protocol error, so a misbehaving server cannot make the client buffer without bound.

use crate::ClientError;
use sandboxd_api_types::ExecEvent;

/// Longest accepted line (one event), in bytes.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Splits a chunked byte stream into lines.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Feeds one chunk; returns the lines it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.partial);
            if let Some(line) = non_blank(line) {
                lines.push(line);
            }
            rest = &rest[pos + 1..];
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE {
            return Err(ClientError::Protocol(format!(
                "exec stream line longer than {MAX_LINE} bytes"
            )));
        }
        Ok(lines)
    }

    /// Ends the stream; returns the last line if it was not terminated by `\n`.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        non_blank(std::mem::take(&mut self.partial))
    }
}

fn non_blank(mut line: Vec<u8>) -> Option<Vec<u8>> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(line)
    }
}

/// Decodes one line into an [`ExecEvent`].
pub fn decode_event(line: &[u8]) -> Result<ExecEvent, ClientError> {
    serde_json::from_slice(line).map_err(|source| ClientError::Decode {
        what: "exec stream event",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "{\"type\":\"start\",\"pid\":7}\n",
        "{\"type\":\"stdout\",\"data\":\"Mgo=\"}\r\n",
        "\n",
        "{\"type\":\"stderr\",\"data\":\"w6k=\"}\n",
        "{\"type\":\"exit\",\"exitCode\":3}"
    );

    fn split_all(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut splitter = LineSplitter::default();
        let mut lines = Vec::new();
        for chunk in chunks {
            lines.extend(splitter.push(chunk).expect("line within limit"));
        }
        lines.extend(splitter.finish());
        lines
    }

    #[test]
    fn every_chunking_yields_the_same_lines() {
        let bytes = STREAM.as_bytes();
        let whole = split_all(&[bytes]);
        assert_eq!(whole.len(), 4);
        for size in 1..bytes.len() {
            let chunks: Vec<&[u8]> = bytes.chunks(size).collect();
            assert_eq!(split_all(&chunks), whole, "chunk size {size}");
        }
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(split_all(&[a, b]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn split_lines_decode_to_events() {
        let events: Vec<ExecEvent> = split_all(&[b"{\"type\":\"exit\",", b"\"exitCode\":3}\n"])
            .iter()
            .map(|l| decode_event(l).expect("valid event"))
            .collect();
        assert_eq!(events, vec![ExecEvent::Exit { exit_code: 3 }]);
    }

    #[test]
    fn a_line_over_the_limit_is_a_protocol_error() {
        let mut splitter = LineSplitter::default();
        let big = vec![b'x'; MAX_LINE];
        assert!(splitter.push(&big).is_ok());
        assert!(matches!(
            splitter.push(b"xx"),
            Err(ClientError::Protocol(_))
        ));
    }

    #[test]
    fn garbage_is_a_decode_error() {
        assert!(matches!(
            decode_event(b"{\"type\":\"nope\"}"),
            Err(ClientError::Decode { .. })
        ));
    }
}
