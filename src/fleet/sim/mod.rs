//! Simulated APIs: realistic bodies for the shipped presets, so the demo,
//! the tests and the benchmarks poll something that looks like a Proxmox
//! cluster or a Meraki organization rather than `{"status":"ok"}`.
//!
//! Each simulation is a pure function of the request path (below the
//! instance's `/i/{name}` prefix), its query string and a `tick` that the
//! fleet advances slowly, so figures move over time and tests can predict
//! every body exactly for a given tick.

pub mod meraki;
pub mod org;
pub mod pbs;
pub mod pmg;
pub mod pve;

use serde::{Deserialize, Serialize};

/// Which API an instance of the fleet simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimApi {
    Pve,
    Meraki,
    Pbs,
    Pmg,
}

impl SimApi {
    /// The shipped Pollster type that polls this API (`pve`, `meraki`, …).
    pub fn type_name(self) -> &'static str {
        match self {
            SimApi::Pve => "pve",
            SimApi::Meraki => "meraki",
            SimApi::Pbs => "pbs",
            SimApi::Pmg => "pmg",
        }
    }
}

/// The body `api` answers for `path` (e.g. `/api2/json/cluster/resources`)
/// and `query` (without `?`, possibly empty) at `tick`; `None` for a path
/// the simulated API does not have (the fleet answers 404).
pub fn answer(api: SimApi, path: &str, query: &str, tick: u64) -> Option<serde_json::Value> {
    match api {
        SimApi::Pve => pve::answer(path, query, tick),
        SimApi::Meraki => meraki::answer(path, query, tick),
        SimApi::Pbs => pbs::answer(path, query, tick),
        SimApi::Pmg => pmg::answer(path, query, tick),
    }
}

/// A slow triangle wave between 0 and `span` over `period` ticks.
fn wave(tick: u64, period: u64, span: f64) -> f64 {
    let p = (tick % period) as f64 / period as f64;
    let tri = if p < 0.5 { p * 2.0 } else { (1.0 - p) * 2.0 };
    tri * span
}

/// Rounds to `places` decimals, so bodies carry plausible figures.
fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}
