//! Where randomness comes from, in one place: the operating system's
//! generator for what must not be guessed (keys, nonces, session ids,
//! tokens, the event ids of a command with no engine), and seeded
//! generators for what should replay under a seed (the scheduler's jitter,
//! the sink's event ids). Nothing reads the thread's global generator.

pub use rand::rngs::{SmallRng, StdRng, SysRng};

/// The operating system's generator as an infallible one: a failure to
/// read it is a panic, since there is no safe fallback for a key or a
/// nonce.
pub fn os() -> rand::rand_core::UnwrapErr<SysRng> {
    rand::rand_core::UnwrapErr(SysRng)
}

/// A generator seeded from `seed`, for tests and replays.
pub fn seeded(seed: u64) -> StdRng {
    rand::SeedableRng::seed_from_u64(seed)
}
