//! A response body written by a blocking thread in chunks: `/metrics` at
//! 100,000 tasks is about 200 MB of text, which is sent as it is written
//! rather than built first.
//!
//! The writer and the body share a channel of [`IN_FLIGHT`] chunks: the
//! writer waits while the client is slower than it, so a scrape holds a few
//! chunks, not the whole text. When the client goes, the body is dropped
//! and the writer's next chunk is refused, which stops it. A writer that
//! ends without finishing (a panic) ends the body with an error, so the
//! client sees a broken response, never a short one that looks whole.

use axum::body::Bytes;
use http_body::Frame;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Chunks written and not yet sent.
pub const IN_FLIGHT: usize = 4;

/// The writer's end: hands chunks to the body.
pub struct ChunkSender {
    tx: mpsc::Sender<Bytes>,
    finished: Arc<AtomicBool>,
}

impl ChunkSender {
    /// The writer wrote everything: the body may end.
    pub fn finish(self) {
        self.finished.store(true, Ordering::Release);
    }
}

impl crate::metrics::ChunkSink for ChunkSender {
    fn chunk(&mut self, chunk: Vec<u8>) -> bool {
        self.tx.blocking_send(Bytes::from(chunk)).is_ok()
    }
}

/// The body's end.
pub struct ChunkBody {
    rx: mpsc::Receiver<Bytes>,
    finished: Arc<AtomicBool>,
}

/// A channel from a blocking writer to a response body.
pub fn channel() -> (ChunkSender, ChunkBody) {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let finished = Arc::new(AtomicBool::new(false));
    (
        ChunkSender {
            tx,
            finished: finished.clone(),
        },
        ChunkBody { rx, finished },
    )
}

/// The writer stopped before it finished.
#[derive(Debug, thiserror::Error)]
#[error("the response's writer stopped before the end")]
pub struct Unfinished;

impl http_body::Body for ChunkBody {
    type Data = Bytes;
    type Error = Unfinished;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Unfinished>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            // The sender is gone: `finish` was called before it was dropped,
            // or the writer stopped.
            Poll::Ready(None) if self.finished.load(Ordering::Acquire) => Poll::Ready(None),
            Poll::Ready(None) => Poll::Ready(Some(Err(Unfinished))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ChunkSink;
    use http_body_util::BodyExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_arrive_in_order_and_the_end_is_told_apart_from_a_stop() {
        let (mut tx, body) = channel();
        let writer = tokio::task::spawn_blocking(move || {
            for i in 0..20u8 {
                assert!(tx.chunk(vec![i; 3]));
            }
            tx.finish();
        });
        let all = body.collect().await.expect("a whole body").to_bytes();
        writer.await.expect("writer");
        let expected: Vec<u8> = (0..20u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(&all[..], &expected[..]);

        let (mut tx, body) = channel();
        let writer = tokio::task::spawn_blocking(move || {
            assert!(tx.chunk(b"half".to_vec()));
            drop(tx);
        });
        writer.await.expect("writer");
        assert!(
            body.collect().await.is_err(),
            "a writer that did not finish breaks the body"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_is_refused_once_the_body_is_gone() {
        let (mut tx, body) = channel();
        drop(body);
        let refused = tokio::task::spawn_blocking(move || tx.chunk(b"x".to_vec()))
            .await
            .expect("writer");
        assert!(!refused);
    }
}
