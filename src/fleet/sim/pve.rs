//! The simulated pve API (not written yet: every path is unknown).

/// See [`super::answer`].
pub fn answer(_path: &str, _query: &str, _tick: u64) -> Option<serde_json::Value> {
    None
}
