//! A loopback HTTP target that answers 200 only to `Authorization: Bearer
//! TOKEN` and counts those answers (401 to anything else): proof that an
//! instance still sends its stored credential.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct AuthTarget {
    pub url: String,
    ok: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl AuthTarget {
    pub async fn start(token: &str) -> AuthTarget {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let ok = Arc::new(AtomicUsize::new(0));
        let want = format!("authorization: bearer {}", token.to_ascii_lowercase());
        let count = ok.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (want, count) = (want.clone(), count.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                    let reply: &[u8] = if head.lines().any(|l| l.trim() == want) {
                        count.fetch_add(1, Ordering::SeqCst);
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
                    } else {
                        b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    };
                    let _ = conn.write_all(reply).await;
                });
            }
        });
        AuthTarget { url, ok, task }
    }

    /// Answers given to the right token so far.
    pub fn ok(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
    }

    /// Waits until the right token has been seen more than `than` times.
    pub async fn wait_more_than(&self, than: usize, within: Duration) {
        let start = Instant::now();
        while self.ok() <= than {
            assert!(start.elapsed() < within, "the target saw no poll with the right token");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for AuthTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}
