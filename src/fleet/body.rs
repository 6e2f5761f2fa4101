//! The streamed body of a `Huge` answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Bytes, HttpBody};
use http_body::{Frame, SizeHint};

/// Size of the static buffer the spaces are sliced from (and of each frame).
const CHUNK: usize = 64 * 1024;

static SPACES: [u8; CHUNK] = [b' '; CHUNK];

/// `{`, then spaces, then `}`: valid JSON of exactly `len` bytes when
/// `len >= 2` (shorter bodies are all spaces). Frames are slices of a static
/// buffer, produced only as fast as the connection takes them, so a body of
/// any size costs no allocation. The exact length is announced as
/// `Content-Length`.
pub(super) struct HugeBody {
    len: u64,
    sent: u64,
}

impl HugeBody {
    pub(super) fn new(len: u64) -> HugeBody {
        HugeBody { len, sent: 0 }
    }

    fn remaining(&self) -> u64 {
        self.len - self.sent
    }
}

impl HttpBody for HugeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let remaining = this.remaining();
        if remaining == 0 {
            return Poll::Ready(None);
        }
        let braces = this.len >= 2;
        let chunk = if braces && this.sent == 0 {
            Bytes::from_static(b"{")
        } else if braces && remaining == 1 {
            Bytes::from_static(b"}")
        } else {
            // Keep the last byte for the closing brace.
            let room = remaining - u64::from(braces);
            let n = usize::try_from(room).map_or(CHUNK, |r| r.min(CHUNK));
            Bytes::from_static(&SPACES[..n])
        };
        this.sent += chunk.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining())
    }
}
