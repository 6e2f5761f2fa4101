//! The pure scheduling core: no I/O, no clock reads, no global randomness.
//!
//! Time arrives as a [`Timestamp`](crate::model::Timestamp) argument and
//! randomness as an injected `&mut impl Rng`, so identical inputs give
//! identical outputs and every rule is testable with a fake clock. The engine
//! (`crate::engine`) owns the only clock and the only I/O.

pub mod aimd;
pub mod backoff;
pub mod bucket;
pub mod catalog;
pub mod classify;
pub mod interval;
pub mod maintenance;
pub mod ownership;
pub mod phase;
pub mod plan;
pub mod queue;
pub mod retry_schedule;
pub mod scheduler;
pub mod solver;
pub mod staleness;
pub mod task;

pub use scheduler::Scheduler;
