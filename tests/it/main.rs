//! The integration tests: one binary, so the crate links once for all of
//! them (on two cores each test binary used to cost a link of its own).
//! Each module is one suite against the running appliance, named as the
//! file was before; `cargo test --test it security::` runs one of them.
//!
//! The shared helpers live beside this folder, in `tests/common` (the
//! in-process server, the fleet, promtool, the browser, the torture
//! harness), so a suite names them `crate::common::…`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/torture/events.rs"]
mod events;
#[path = "../common/torture/mod.rs"]
mod torture;

mod api;
mod backup;
mod browser;
mod budget;
mod cluster;
mod control;
mod crash;
mod engine;
mod hostile;
mod logs;
mod maintenance;
mod pages;
mod parity;
mod preset_values;
mod process;
mod prometheus;
mod read_model;
mod reload;
mod scheduler;
mod scheduling;
mod secrets;
mod security;
mod sink;
mod tls;
mod values_cli;
