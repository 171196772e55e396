//! Bodies that count their bytes as they pass, for the audit log's byte counts.
//!
//! Contract: [`Metered`] forwards every frame of the body it wraps unchanged, buffering nothing,
//! and adds each data frame's length to its [`Meter`]. [`Metered::finishing`] also runs a closure
//! exactly once: when the body is seen to end (its last frame handed on, before the server writes
//! it), or when it is dropped unfinished (the client went away, the upstream broke).

use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// A count of bytes, shared between a body and whoever reads it.
#[derive(Debug, Clone, Default)]
pub struct Meter(Arc<AtomicU64>);

impl Meter {
    /// The bytes counted so far.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }
}

type Finish = Box<dyn FnOnce() + Send + Sync>;

/// A body whose data bytes are counted on a [`Meter`].
pub struct Metered<B> {
    inner: B,
    meter: Meter,
    finish: Option<Finish>,
}

impl<B> Metered<B> {
    /// `inner`, counted on `meter`.
    pub fn new(inner: B, meter: Meter) -> Self {
        Self {
            inner,
            meter,
            finish: None,
        }
    }

    /// `inner`, counted on `meter`, running `finish` once when it ends or is dropped.
    pub fn finishing(
        inner: B,
        meter: Meter,
        finish: impl FnOnce() + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            meter,
            finish: Some(Box::new(finish)),
        }
    }

    fn finish(&mut self) {
        if let Some(finish) = self.finish.take() {
            finish();
        }
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B> Body for Metered<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.add(data.remaining());
                }
                if this.inner.is_end_stream() {
                    this.finish();
                }
            }
            Poll::Ready(_) => this.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicU32;

    /// A body of chunks whose end is known only when asked for more (as a chunked one's is).
    struct Chunks(VecDeque<&'static str>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|s| Ok(Frame::data(Bytes::from(s)))))
        }
    }

    fn counter() -> (Arc<AtomicU32>, impl FnOnce() + Send + Sync + 'static) {
        let runs = Arc::new(AtomicU32::new(0));
        let seen = runs.clone();
        (runs, move || {
            seen.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test]
    async fn every_data_byte_is_counted_and_the_end_is_seen_once() {
        let (runs, finish) = counter();
        let meter = Meter::default();
        let chunks = Chunks(["abc", "", "defgh"].into());
        let body = Metered::finishing(chunks, meter.clone(), finish);
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(&collected[..], b"abcdefgh", "frames pass unchanged");
        assert_eq!(meter.bytes(), 8);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "finished once, not again on drop"
        );
    }

    #[tokio::test]
    async fn a_body_of_known_length_finishes_with_its_last_frame() {
        let (runs, finish) = counter();
        let meter = Meter::default();
        let full = Full::new(Bytes::from_static(b"12345"));
        let mut body = Metered::finishing(full, meter.clone(), finish);
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap().len(), 5);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "finished as the last frame is handed on, before anyone asks for more"
        );
        drop(body);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_body_dropped_unread_still_finishes_once() {
        let (runs, finish) = counter();
        let full = Full::new(Bytes::from_static(b"x"));
        drop(Metered::finishing(full, Meter::default(), finish));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_plain_meter_counts_without_finishing() {
        let meter = Meter::default();
        let body = Metered::new(Chunks(["ab"].into()), meter.clone());
        let mut body = std::pin::pin!(body);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(matches!(
            body.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert_eq!(meter.bytes(), 2);
    }
}
