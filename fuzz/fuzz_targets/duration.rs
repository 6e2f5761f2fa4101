//! The duration parser of the config file, the environment and the settings
//! API (`250ms`, `10s`, `5m`, `1h`): any text is parsed or refused, never a
//! panic, and every duration it accepts is written back (`format`) as text
//! that parses to the same duration, with no spaces in it. Any duration at
//! all, whether it came from text or not, is written as text that parses back
//! to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pollster::model::duration_str::{format, parse};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(d) = parse(text)
    {
        round_trips(d, &format!("parsed from {text:?}"));
    }
    // The first twelve bytes as a duration (seconds, then nanoseconds).
    if let (Some(secs), Some(nanos)) = (data.get(..8), data.get(8..12)) {
        let secs = u64::from_le_bytes(secs.try_into().expect("8 bytes"));
        let nanos = u32::from_le_bytes(nanos.try_into().expect("4 bytes")) % 1_000_000_000;
        round_trips(Duration::new(secs, nanos), "built from bytes");
    }
});

fn round_trips(d: Duration, origin: &str) {
    let written = format(d);
    assert!(
        !written.contains(' '),
        "{d:?} ({origin}) is written with a space: {written:?}"
    );
    match parse(&written) {
        Ok(back) => assert_eq!(
            back, d,
            "{d:?} ({origin}) is written {written:?}, which parses to {back:?}"
        ),
        Err(e) => panic!("{d:?} ({origin}) is written {written:?}, which does not parse: {e}"),
    }
}
