//! Pollster: polls many HTTP(S) APIs on an adaptive cadence, inside each API's
//! rate-limit budget, with circuit breakers, backoff and a durable dead-letter
//! queue.

pub mod config;
pub mod core;
pub mod engine;
pub mod metrics;
pub mod model;
pub mod poll;
pub mod store;
