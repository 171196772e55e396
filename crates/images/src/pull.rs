//! One image pull: resolve the manifest, fetch the config, stream every missing layer into the
//! layer store.
//!
//! Contract: [`pull`] returns only when every layer of the image is installed and verified (see
//! [`crate::layers`]); layers already present are not fetched again. Each layer's blob streams from
//! the registry straight into the unpacker (no temporary file): the bytes are hashed on the way and
//! the layer becomes visible only once the digest matched. Up to three layers stream at once. Deduplication across concurrent callers is
//! not this module's: the daemon holds a claim per image around the call.

use crate::config::RunConfig;
use crate::layers::LayerStore;
use crate::reference::ImageRef;
use crate::registry::{Credentials, LayerDescriptor, Registry, Resolved, Session};
use crate::ImageError;
use futures::{StreamExt, TryStreamExt};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// How many layers of one image download and unpack at once.
const PARALLEL_LAYERS: usize = 3;

/// How far a pull got, for progress displays. Shared with the caller; updated as bytes arrive.
#[derive(Debug, Default)]
pub struct Progress {
    /// Compressed bytes of the image's layers (known once the manifest is).
    pub total: AtomicU64,
    /// Compressed bytes fetched or found present so far.
    pub done: AtomicU64,
}

/// What a completed pull produced.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The manifest, for this platform.
    pub resolved: Resolved,
    /// The run settings from the config blob.
    pub config: RunConfig,
    /// Bytes each layer's files take unpacked, in layer order (0 for a layer that was present).
    pub unpacked: Vec<u64>,
}

/// Resolves `reference` at the registry (which fetches nothing but its manifest).
pub async fn resolve(
    registry: &Registry,
    reference: &ImageRef,
    credentials: Option<&Credentials>,
) -> Result<(Session, Resolved), ImageError> {
    Ok(registry.resolve(reference, credentials).await?)
}

/// Fetches the config and every layer of `resolved` that `layers` lacks.
pub async fn pull(
    session: &Session,
    resolved: Resolved,
    layers: &LayerStore,
    progress: Arc<Progress>,
) -> Result<Pulled, ImageError> {
    progress.total.store(
        resolved.layers.iter().map(|l| l.size).sum(),
        Ordering::Relaxed,
    );
    let config_blob = session.small_blob(&resolved.config).await?;
    let config = RunConfig::parse(&config_blob)?;
    // Layers are independent directories: up to PARALLEL_LAYERS stream at once, each into its own
    // staging dir, and the first failure fails the pull.
    // Boxed so the stream's futures have one nameable type (a spawned caller needs it `Send`).
    type Fetch<'a> =
        Pin<Box<dyn std::future::Future<Output = Result<u64, ImageError>> + Send + 'a>>;
    let fetches: Vec<Fetch<'_>> = resolved
        .layers
        .iter()
        .map(|layer| {
            let progress = progress.clone();
            Box::pin(async move {
                if layers.contains(&layer.digest) {
                    progress.done.fetch_add(layer.size, Ordering::Relaxed);
                    return Ok(0);
                }
                fetch_layer(session, layers, layer, progress).await
            }) as Fetch<'_>
        })
        .collect();
    let unpacked: Vec<u64> = futures::stream::iter(fetches)
        .buffered(PARALLEL_LAYERS)
        .try_collect()
        .await?;
    Ok(Pulled {
        resolved,
        config,
        unpacked,
    })
}

/// Streams one layer's blob into the layer store.
async fn fetch_layer(
    session: &Session,
    layers: &LayerStore,
    layer: &LayerDescriptor,
    progress: Arc<Progress>,
) -> Result<u64, ImageError> {
    let (writer, reader) = tokio::io::duplex(256 * 1024);
    let store = layers.clone();
    let descriptor = layer.clone();
    let unpacking = tokio::task::spawn_blocking(move || {
        store.install(&descriptor, tokio_util::io::SyncIoBridge::new(reader))
    });
    let fetched = session
        .blob(
            layer,
            Counting {
                inner: writer,
                progress,
            },
        )
        .await;
    // The unpacker's verdict comes first: it saw the bytes and checked the digest itself. A fetch
    // that failed midway shows there as a short or mismatched blob, but its own error says why.
    let unpacked = unpacking
        .await
        .map_err(|e| ImageError::Task(e.to_string()))?;
    match (fetched, unpacked) {
        (Ok(()), Ok(bytes)) => Ok(bytes),
        (Err(e), _) => Err(e.into()),
        (Ok(()), Err(e)) => Err(e),
    }
}

/// Counts bytes on their way to the unpacker.
struct Counting<W> {
    inner: W,
    progress: Arc<Progress>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counting<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.progress.done.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
