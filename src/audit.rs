//! Where a change came from, for the audit trail.
//!
//! The web layer runs each request inside [`with_source`] with the client's
//! address (the socket peer, or the address a trusted proxy forwarded); a
//! change event staged while it runs ([`crate::sink::Sink::stage`]) records
//! it. Changes made elsewhere (the CLI, on a stopped server or through the
//! control socket, and the engine) have no source.

use std::future::Future;

tokio::task_local! {
    static SOURCE: String;
}

/// Runs `fut` with `source` as the origin of the changes it stages.
pub async fn with_source<F: Future>(source: String, fut: F) -> F::Output {
    SOURCE.scope(source, fut).await
}

/// Runs `fut` with the origin `source` (if any): for work a request hands
/// to a task of its own.
pub async fn with_source_opt<F: Future>(source: Option<String>, fut: F) -> F::Output {
    match source {
        Some(s) => SOURCE.scope(s, fut).await,
        None => fut.await,
    }
}

/// The origin of the change being made, if a request is making it.
pub fn current_source() -> Option<String> {
    SOURCE.try_with(Clone::clone).ok()
}
