//! Pollster: polls many HTTP(S) APIs on an adaptive cadence, inside each API's
//! rate-limit budget, with circuit breakers, backoff and a durable dead-letter
//! queue.

pub mod accounts;
pub mod app;
pub mod audit;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod control;
pub mod core;
pub mod demo;
pub mod engine;
pub mod fleet;
pub mod metrics;
pub mod model;
pub mod poll;
pub mod presets;
pub mod read_model;
pub mod secrets;
pub mod service;
pub mod sink;
pub mod store;
pub mod tls;
pub mod values;
pub mod web;
