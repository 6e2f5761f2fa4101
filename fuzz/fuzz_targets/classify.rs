//! Response classification (SPEC §3), from a status, headers and a body:
//!
//! - every status gets exactly one answer, and it is the table's: 2xx is a
//!   success, 429 a transient rate signal, 408 and 5xx transient, the rest
//!   permanent (`classify_status`);
//! - `response_error` (status and headers to a `PollError`) agrees with it,
//!   keeps the status, writes a one-line message, and takes a `Retry-After`
//!   only for a 429 or a 503 and never above the 60 s cap, whatever the header
//!   bytes are;
//! - `shape_of` (a `shape_from` group's body and JSON pointer) either counts
//!   exactly the array the pointer names in the body, with no more items than
//!   elements, or fails as a transient `body` error with a one-line message;
//! - a fan-out item put into a path (`item_path`, then `join_url`) stays one
//!   path segment that decodes back to the item, whatever its bytes.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use pollster::model::{ErrorCategory, ErrorKind, PollError};
use pollster::poll::classify::{RETRY_AFTER_CAP, classify_status, parse_retry_after, response_error};
use pollster::poll::{join_url, shape};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Arbitrary)]
enum Name {
    RetryAfter,
    Location,
    ContentType,
    Other,
}

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    status: u16,
    /// Seconds since the epoch of the clock `Retry-After` dates are read against.
    now: u32,
    headers: Vec<(Name, &'a [u8])>,
    retry_after: &'a str,
    pointer: &'a str,
    item_field: Option<&'a str>,
    item: &'a str,
    path: &'a str,
    body: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let now = UNIX_EPOCH + Duration::from_secs(u64::from(input.now));
    status(input.status);
    response(&input, now);
    if let Some(wait) = parse_retry_after(input.retry_after, now) {
        assert!(
            wait <= RETRY_AFTER_CAP,
            "Retry-After {:?} gives {wait:?}",
            input.retry_after
        );
    }
    body(input.body, input.pointer, input.item_field);
    item(input.item, input.path);
});

fn status(s: u16) {
    let expected = match s {
        200..=299 => None,
        429 => Some((ErrorCategory::Transient, ErrorKind::RateLimited)),
        408 | 500..=599 => Some((ErrorCategory::Transient, ErrorKind::Http)),
        _ => Some((ErrorCategory::Permanent, ErrorKind::Http)),
    };
    assert_eq!(classify_status(s), expected, "status {s}");
}

fn response(input: &Input<'_>, now: SystemTime) {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &input.headers {
        let name = match name {
            Name::RetryAfter => http::header::RETRY_AFTER,
            Name::Location => http::header::LOCATION,
            Name::ContentType => http::header::CONTENT_TYPE,
            Name::Other => http::HeaderName::from_static("x-other"),
        };
        if let Ok(value) = http::HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    let s = input.status;
    let Some(e) = response_error(s, &headers, now) else {
        assert!((200..=299).contains(&s), "status {s} taken as a success");
        return;
    };
    assert_eq!(Some((e.category, e.kind)), classify_status(s), "status {s}: {e:?}");
    assert_eq!(e.status, Some(s), "{e:?}");
    assert!(e.message.starts_with(&format!("HTTP {s}")), "status {s}: {e:?}");
    one_line(&e);
    if let Some(wait) = e.retry_after {
        assert!(matches!(s, 429 | 503), "status {s} has a Retry-After: {e:?}");
        assert!(wait <= RETRY_AFTER_CAP, "{e:?}");
    }
}

fn body(body: &[u8], pointer: &str, item_field: Option<&str>) {
    match shape::shape_of(body, pointer, item_field) {
        Ok(s) => {
            let doc: serde_json::Value = serde_json::from_slice(body).expect("an accepted body is JSON");
            let array = doc
                .pointer(pointer)
                .and_then(|v| v.as_array())
                .expect("an accepted pointer names an array");
            assert_eq!(s.count, array.len() as u64, "pointer {pointer:?}");
            assert!(s.items.len() as u64 <= s.count, "{s:?}");
            if item_field.is_none() {
                assert!(s.items.is_empty(), "items without item_field: {s:?}");
            }
        }
        Err(e) => {
            assert_eq!(
                (e.category, e.kind, e.status),
                (ErrorCategory::Transient, ErrorKind::Body, None)
            );
            one_line(&e);
        }
    }
}

fn item(item: &str, path: &str) {
    let shown = shape::display_item(item);
    assert!(shown.chars().count() <= 64 + 3, "{shown:?}");
    assert!(!shown.chars().any(char::is_control), "{shown:?}");

    // Any path: no panic, and no placeholder left.
    if let Ok(p) = shape::item_path(path, item) {
        assert!(
            !p.contains(shape::ITEM_PLACEHOLDER),
            "{path:?} with {item:?} gives {p:?}"
        );
        let _ = join_url("http://api.example/base", &p);
    }
    // The item fills exactly one segment of the URL and decodes back to itself.
    match shape::item_path("/nodes/{item}/status", item) {
        Ok(p) => {
            let url = join_url("http://api.example/base/", &p).expect("a valid url");
            let segments: Vec<&str> = url.path_segments().expect("a path").collect();
            assert_eq!(segments.len(), 4, "{item:?} gives {url}");
            assert_eq!(
                (segments[0], segments[1], segments[3]),
                ("base", "nodes", "status"),
                "{url}"
            );
            assert_eq!(percent_decode(segments[2]), item.as_bytes(), "{item:?} gives {url}");
        }
        Err(e) => {
            assert!(matches!(item, "" | "." | ".."), "{item:?} refused: {e:?}");
            assert_eq!((e.category, e.kind), (ErrorCategory::Permanent, ErrorKind::InvalidUrl));
        }
    }
}

fn one_line(e: &PollError) {
    assert!(!e.message.contains(['\n', '\r']), "{e:?}");
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}
