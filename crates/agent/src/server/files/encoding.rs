//! Content codings of `/files` bodies, negotiated like envd: an upload may be `Content-Encoding: gzip`
//! ([`request_coding`], [`gunzip_body`]); a download is gzip when `Accept-Encoding` prefers it
//! ([`wants_gzip`], [`gzip_file`]). Identity is always acceptable unless refused with `q=0`.
//!
//! The (de)compression runs on a blocking thread between two bounded channels, so neither a large
//! body nor a slow peer makes the agent hold more than a few chunks.

use super::super::error::ServerError;
use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::{Buf, Bytes};
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use futures::StreamExt;
use std::io::{self, Read};
use tokio::sync::mpsc;

/// Chunks in flight on each side of a (de)compressing thread.
const IN_FLIGHT: usize = 4;
/// Bytes read from a file per compressed chunk.
const READ_CHUNK: usize = 64 << 10;

/// The coding of an upload body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
}

/// The `Content-Encoding` of a request: absent or `identity`, or `gzip`; anything else is refused.
pub fn request_coding(headers: &HeaderMap) -> Result<Coding, ServerError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(Coding::Identity);
    };
    let text = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match text.split(';').next().unwrap_or("").trim() {
        "" | "identity" => Ok(Coding::Identity),
        "gzip" | "x-gzip" => Ok(Coding::Gzip),
        _ => Err(ServerError::InvalidArgument(format!(
            "unsupported Content-Encoding: {text}, supported: [gzip]"
        ))),
    }
}

/// Whether a download should be gzip: the highest-quality acceptable coding in `Accept-Encoding` is
/// gzip (or `*` while identity is refused).
pub fn wants_gzip(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mut codings: Vec<(String, f32)> = value
        .split(',')
        .filter_map(|item| {
            let mut parts = item.split(';');
            let name = parts.next()?.trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (!name.is_empty()).then_some((name, q))
        })
        .collect();
    codings.sort_by(|a, b| b.1.total_cmp(&a.1));
    let identity_refused = codings.iter().any(|(n, q)| n == "identity" && *q == 0.0);
    for (name, q) in &codings {
        if *q == 0.0 {
            continue;
        }
        match name.as_str() {
            "identity" => return false,
            "*" => return identity_refused,
            "gzip" | "x-gzip" => return true,
            _ => {}
        }
    }
    false
}

/// The decoded form of the gzip `body`; a corrupt stream ends it with an `InvalidData` error.
pub fn gunzip_body(body: Body) -> Body {
    let (in_tx, in_rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    let (out_tx, out_rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        while let Some(chunk) = data.next().await {
            let chunk = chunk.map_err(io::Error::other);
            let failed = chunk.is_err();
            if in_tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || {
        let input = ChannelReader {
            rx: in_rx,
            current: Bytes::new(),
        };
        let mut decoder = MultiGzDecoder::new(input);
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match decoder.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if out_tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        return; // the upload was abandoned
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = out_tx.blocking_send(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("error decompressing request body: {e}"),
                    )));
                    return;
                }
            }
        }
    });
    Body::from_stream(receiver_stream(out_rx))
}

/// The gzip-compressed content of `file`, read from its current position to the end.
pub fn gzip_file(mut file: std::fs::File) -> Body {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Err(e) = encoder.write_all(&buf[..n]) {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                    let out = std::mem::take(encoder.get_mut());
                    if !out.is_empty() && tx.blocking_send(Ok(Bytes::from(out))).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
        let _ = tx.blocking_send(encoder.finish().map(Bytes::from));
    });
    Body::from_stream(receiver_stream(rx))
}

fn receiver_stream(
    rx: mpsc::Receiver<io::Result<Bytes>>,
) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
}

/// Blocking `Read` over the chunks an async task feeds in.
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use http_body_util::BodyExt;

    fn accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn accept_encoding_negotiates_like_envd() {
        assert!(!wants_gzip(&HeaderMap::new()));
        assert!(wants_gzip(&accept("gzip")));
        assert!(wants_gzip(&accept("gzip, deflate, br, zstd")));
        assert!(wants_gzip(&accept("br;q=1, GZIP;q=0.5")));
        assert!(!wants_gzip(&accept("identity, gzip;q=0.5")));
        assert!(!wants_gzip(&accept("gzip;q=0")));
        assert!(!wants_gzip(&accept("*")));
        assert!(wants_gzip(&accept("*, identity;q=0")));
        assert!(!wants_gzip(&accept("br")));
    }

    #[test]
    fn content_encoding_is_identity_or_gzip() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(v));
            request_coding(&h)
        };
        assert_eq!(request_coding(&HeaderMap::new()).unwrap(), Coding::Identity);
        assert_eq!(with("identity").unwrap(), Coding::Identity);
        assert_eq!(with("GZIP").unwrap(), Coding::Gzip);
        assert!(with("br").is_err());
    }

    #[tokio::test]
    async fn gzip_file_and_gunzip_body_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let gz = gzip_file(std::fs::File::open(&path).unwrap())
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert!(gz.len() < data.len() / 4);
        let plain = gunzip_body(Body::from(gz))
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(plain.as_ref(), data.as_slice());
        let broken = gunzip_body(Body::from(&b"\x1f\x8b\x08\0\0\0\0\0\0\xffgarbage"[..]))
            .collect()
            .await;
        assert!(broken.is_err());
    }
}
