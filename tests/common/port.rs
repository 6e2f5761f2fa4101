//! A free loopback port, for a process a test starts that takes its port
//! from the command line or a config file (an in-process server binds
//! `127.0.0.1:0` itself and needs none of this). Kept in a file of its own,
//! with no other dependency, so the torture driver and the examples that
//! include `tests/common` files by path can use it too.
#![allow(dead_code)]

/// A port the OS just handed out and released. Another process may take it
/// before ours binds it; the OS hands out ports in turn, so that is rare.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// [`free_port`] for callers that report errors instead of panicking.
pub fn try_free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
