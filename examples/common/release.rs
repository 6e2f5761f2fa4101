//! What the examples that run the release binary as a process share:
//! where that binary is.

use std::path::{Path, PathBuf};

/// `target/release/pollster` when the example runs as
/// `target/release/examples/NAME`.
pub fn default_bin() -> PathBuf {
    std::env::current_exe()
        .expect("the path of this executable")
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("pollster"))
        .expect("examples/ has a parent directory")
}
