//! Today's exact bytes of every table value, checked in. Each fixture has
//! every field set; it must decode to the domain value beside it, and that
//! value must encode back to the very same bytes, through the store's own
//! tables. A change of the on-disk format, deliberate or not, fails here:
//! a deliberate one is a new format version with an upgrade in `codec`, and
//! these fixtures stay as the old version's bytes.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable};

use super::super::codec::{self, FORMAT_JSON_V1};
use super::super::tables::{self, HISTORY, INSTANCES, META, OUTBOX, SESSIONS, SETTINGS, TASKS, TOKENS, USERS};
use super::super::{
    OutboxEvent, Rollup, SessionRow, SessionWrite, Store, StoreError, TokenInfo, TokenScope, UserRecord,
};
use super::instance::INSTANCE_SEALED_V2;
use super::sink::SINK_SEALED_V2;
use super::task::TASK_BINARY_V2;
use super::*;
use crate::model::*;

/// A value as it sits in a table: its format version, then its payload
/// (JSON, or binary where that version is binary).
struct Fixture {
    version: u8,
    payload: &'static [u8],
}

impl Fixture {
    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![self.version];
        out.extend_from_slice(self.payload);
        out
    }
}

/// [`task`] in format 1 (JSON), as releases before format 2 wrote it.
const TASK: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"last_attempt":1764480000000,"last_success":1764479990000,"last_change":1764470000000,"digest":1234567890123456789,"failures":5,"breaker":"half_open","retry_at":1764481800000,"backoff_delay_ms":40000,"next_run":1764481800001,"interval_ms":10000,"idle_streak":3,"dead_letter":{"reason":"permanent_failure","since":1764480000000,"next_recheck":1764481800000,"rechecks":1},"disabled":true,"last_error":{"category":"transient","kind":"rate_limited","message":"HTTP 429 Too Many Requests","status":429,"retry_after":"1m30s"},"failed_items":[{"item":"node-1","error":{"category":"permanent","kind":"invalid_credentials","message":"HTTP 401","status":401,"retry_after":null}}]}"#,
};

fn task() -> TaskRecord {
    TaskRecord {
        last_attempt: Some(Timestamp(1_764_480_000_000)),
        last_success: Some(Timestamp(1_764_479_990_000)),
        last_change: Some(Timestamp(1_764_470_000_000)),
        digest: Some(1_234_567_890_123_456_789),
        failures: 5,
        breaker: BreakerState::HalfOpen,
        retry_at: Some(Timestamp(1_764_481_800_000)),
        backoff_delay_ms: 40_000,
        next_run: Timestamp(1_764_481_800_001),
        interval_ms: 10_000,
        idle_streak: 3,
        dead_letter: Some(DeadLetterRecord {
            reason: DeadLetterReason::PermanentFailure,
            since: Timestamp(1_764_480_000_000),
            next_recheck: Timestamp(1_764_481_800_000),
            rechecks: 1,
        }),
        disabled: true,
        last_error: Some(PollError {
            category: ErrorCategory::Transient,
            kind: ErrorKind::RateLimited,
            message: "HTTP 429 Too Many Requests".into(),
            status: Some(429),
            retry_after: Some(Duration::from_secs(90)),
        }),
        failed_items: vec![FailedItem {
            item: "node-1".into(),
            error: PollError {
                status: Some(401),
                ..PollError::new(ErrorCategory::Permanent, ErrorKind::InvalidCredentials, "HTTP 401")
            },
        }],
    }
}

/// A fresh task in format 1: `failed_items` was left out when empty, and
/// nothing else.
const TASK_FRESH: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"last_attempt":null,"last_success":null,"last_change":null,"digest":null,"failures":0,"breaker":"closed","retry_at":null,"backoff_delay_ms":0,"next_run":1000,"interval_ms":0,"idle_streak":0,"dead_letter":null,"disabled":false,"last_error":null}"#,
};

fn task_fresh() -> TaskRecord {
    TaskRecord {
        next_run: Timestamp(1000),
        ..TaskRecord::default()
    }
}

/// [`task`] in format 2 (postcard): varints, one-byte enum codes, strings
/// length-prefixed, fields in `TaskV2`'s order.
const TASK_V2: Fixture = Fixture {
    version: TASK_BINARY_V2,
    payload: &[
        1, 128, 192, 208, 153, 173, 51, // last_attempt: Some(1764480000000)
        1, 240, 241, 207, 153, 173, 51, // last_success
        1, 128, 147, 238, 148, 173, 51, // last_change
        1, 149, 130, 166, 239, 199, 158, 132, 145, 17, // digest
        5,  // failures
        2,  // breaker: half_open
        1, 192, 174, 190, 154, 173, 51, // retry_at
        192, 184, 2, // backoff_delay_ms: 40000
        193, 174, 190, 154, 173, 51, // next_run
        144, 78, // interval_ms: 10000
        3,  // idle_streak
        1, 1, 128, 192, 208, 153, 173, 51, 192, 174, 190, 154, 173, 51,
        1, // dead_letter: permanent_failure, since, next_recheck, rechecks
        1, // disabled
        1, 0, 4, 26, b'H', b'T', b'T', b'P', b' ', b'4', b'2', b'9', b' ', b'T', b'o', b'o', b' ', b'M', b'a', b'n',
        b'y', b' ', b'R', b'e', b'q', b'u', b'e', b's', b't', b's', 1, 173, 3, 1, 90,
        0, // last_error: transient, rate_limited, message, 429, 90 s
        1, 6, b'n', b'o', b'd', b'e', b'-', b'1', 1, 8, 8, b'H', b'T', b'T', b'P', b' ', b'4', b'0', b'1', 1, 145, 3,
        0, // failed_items: one, node-1, permanent, invalid_credentials, HTTP 401, 401, no retry_after
    ],
};

/// [`task_fresh`] in format 2: 16 bytes (245 in format 1).
const TASK_FRESH_V2: Fixture = Fixture {
    version: TASK_BINARY_V2,
    payload: &[0, 0, 0, 0, 0, 0, 0, 0, 232, 7, 0, 0, 0, 0, 0, 0],
};

const INSTANCE: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"name":"pve-1","type":"proxmox_ve","url":"https://pve.example:8006/","timeout":"2s500ms","budget":"lab","labels":{"site":"lab-1"},"enabled":false,"auth":{"kind":"pve_token","user":"monitor@pve","token_id":"pollster","secret":"s3cret"},"tls_verify":false,"tls_fingerprint":"ab:cd","max_response_bytes":1048576,"shape":{"nodes":3}}"#,
};

fn instance() -> InstanceConfig {
    InstanceConfig {
        name: InstanceName::parse("pve-1").expect("valid"),
        type_name: "proxmox_ve".into(),
        url: "https://pve.example:8006/".into(),
        timeout: Duration::from_millis(2_500),
        budget: Some("lab".into()),
        labels: BTreeMap::from([("site".to_string(), "lab-1".to_string())]),
        enabled: false,
        auth: Auth::PveToken {
            user: "monitor@pve".into(),
            token_id: "pollster".into(),
            secret: "s3cret".into(),
        },
        tls_verify: false,
        tls_fingerprint: Some("ab:cd".into()),
        max_response_bytes: 1 << 20,
        shape: BTreeMap::from([("nodes".to_string(), 3)]),
    }
}

/// Every other way to authenticate, on an instance with its defaults
/// (the optional fields that are unset are left out).
fn instance_with(auth: Auth) -> InstanceConfig {
    InstanceConfig {
        auth,
        ..InstanceConfig::new("web-1", "http", "http://web-1/")
    }
}

/// The data key the sealed fixtures were made with.
fn fixture_key() -> crate::secrets::DataKey {
    crate::secrets::DataKey::from_bytes([9; crate::secrets::KEY_LEN])
}

/// Sealed as the store seals, with nonces from a seeded generator, so the
/// bytes are fixed.
fn encode_sealed_instance(i: &InstanceConfig) -> Result<Vec<u8>, StoreError> {
    use rand::SeedableRng;
    let mut rng = crate::model::random::StdRng::seed_from_u64(1);
    let s = StoredInstance::seal(i, Some(&fixture_key()), &mut rng).expect("seal");
    codec::encode_stored(&s)
}

fn encode_sealed_sink(doc: &serde_json::Value) -> Result<Vec<u8>, StoreError> {
    use rand::SeedableRng;
    let mut rng = crate::model::random::StdRng::seed_from_u64(1);
    let s = StoredSink::seal(doc, Some(&fixture_key()), &mut rng).expect("seal");
    codec::encode_stored(&s)
}

/// An instance whose URL holds a password.
fn instance_with_url_password() -> InstanceConfig {
    InstanceConfig::new("web-2", "http", "https://probe:pa%20ss@web-2.example:8443/health")
}

fn sink_doc() -> serde_json::Value {
    serde_json::json!({
        "url": "https://ship:hunter2@logs.example/ingest",
        "headers": {"Authorization": "Bearer sink-token", "X-Scope": "lab"},
        "batch_size": 500,
        "gzip": true
    })
}

/// An instance's JSON with one way to authenticate, and that way.
type AuthFixture = (&'static [u8], fn() -> Auth);

const INSTANCE_AUTHS: [AuthFixture; 4] = [
    (
        br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"none"},"tls_verify":true,"max_response_bytes":4194304}"#,
        || Auth::None {},
    ),
    (
        br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"bearer","token":"t0k"},"tls_verify":true,"max_response_bytes":4194304}"#,
        || Auth::Bearer { token: "t0k".into() },
    ),
    (
        br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"header","name":"X-Key","value":"v"},"tls_verify":true,"max_response_bytes":4194304}"#,
        || Auth::Header {
            name: "X-Key".into(),
            value: "v".into(),
        },
    ),
    (
        br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"basic","username":"u","password":"p"},"tls_verify":true,"max_response_bytes":4194304}"#,
        || Auth::Basic {
            username: "u".into(),
            password: "p".into(),
        },
    ),
];

const INSTANCE_V2: Fixture = Fixture {
    version: INSTANCE_SEALED_V2,
    payload: br#"{"name":"pve-1","type":"proxmox_ve","url":"https://pve.example:8006/","timeout":"2s500ms","budget":"lab","labels":{"site":"lab-1"},"enabled":false,"auth":{"kind":"pve_token","user":"monitor@pve","token_id":"pollster","secret":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbU8EpOijeGbfpVnb3fuffskyNNaaVEY="},"tls_verify":false,"tls_fingerprint":"ab:cd","max_response_bytes":1048576,"shape":{"nodes":3}}"#,
};

const INSTANCE_URL_V2: Fixture = Fixture {
    version: INSTANCE_SEALED_V2,
    payload: br#"{"name":"web-2","type":"http","url":"https://probe@web-2.example:8443/health","url_sealed":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbVRDs+q1NijKPFV7QfZsEfbToQ5SItFTq8du3OefS4dbc3WQtScnT68T/R3h7H6WHWotPxLx3SF3ZCNM8/GpSg==","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"none"},"tls_verify":true,"max_response_bytes":4194304}"#,
};

const INSTANCE_AUTHS_V2: [AuthFixture; 3] = [
    (br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"bearer","token":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbUgHrGz0kmwAu0DPf0bzIxnJQ8g="},"tls_verify":true,"max_response_bytes":4194304}"#, || Auth::Bearer { token: "t0k".into() }),
    (br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"header","name":"X-Key","value":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbUqfaO51WsP/+8Bnv1xdEpaQ"},"tls_verify":true,"max_response_bytes":4194304}"#, || Auth::Header {
        name: "X-Key".into(),
        value: "v".into(),
    }),
    (br#"{"name":"web-1","type":"http","url":"http://web-1/","timeout":"10s","labels":{},"enabled":true,"auth":{"kind":"basic","username":"u","password":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbUxO2OFh+by2mieICyP7t3tz"},"tls_verify":true,"max_response_bytes":4194304}"#, || Auth::Basic {
        username: "u".into(),
        password: "p".into(),
    }),
];

const SINK_V2: Fixture = Fixture {
    version: SINK_SEALED_V2,
    payload: br#"{"batch_size":500,"gzip":true,"headers":{"Authorization":"AWEYMNNkGmj5SmkNzCXR9LDayUgyWsGPbX5SpuijfieWJUl/Duc5CvKYWLzN8jK/RNiVR8wEQkWAVQ==","X-Scope":"AdMlZDcXNfMsVHQ9xeJNKkE7FZWEwSJt9rvGWoDfYB0z0Bx6dysvWictKgE="},"url":"https://ship@logs.example/ingest","url_sealed":"AezPxMqozXtjx8tW/2bNYLWms7McHD81hVGlF9lo1wXlG2nz3kGoPexF7MP3sd6AVHY+hLa5hUp1kIQNyTszVEj8qmYm4W+BGiV1lWpiPEom"}"#,
};

const SETTINGS_DOC: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"adaptive":{"base_interval":"20s","enabled":false},"failure":{"backoff_jitter":0.1,"dead_letter_after":3},"scheduler":{"group_interval_overrides":{"pve/storage":"15m"},"target_utilization":0.55,"workers":4}}"#,
};

fn settings_doc() -> serde_json::Value {
    serde_json::json!({
        "adaptive": {"enabled": false, "base_interval": "20s"},
        "scheduler": {"workers": 4, "target_utilization": 0.55, "group_interval_overrides": {"pve/storage": "15m"}},
        "failure": {"backoff_jitter": 0.1, "dead_letter_after": 3},
    })
}

const USER: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"name":"admin","password_hash":"$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA","created":1764480000000,"updated":1764480060000}"#,
};

fn user() -> UserRecord {
    UserRecord {
        name: "admin".into(),
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        created: Timestamp(1_764_480_000_000),
        updated: Timestamp(1_764_480_060_000),
    }
}

const TOKEN: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"id":"0a1b2c3d","name":"grafana","created":1764480000000,"scope":"read"}"#,
};

fn token() -> TokenInfo {
    TokenInfo {
        id: "0a1b2c3d".into(),
        name: "grafana".into(),
        created: Timestamp(1_764_480_000_000),
        scope: TokenScope::Read,
    }
}

const SESSION: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"expires":1764480000,"record":"{\"id\":\"\",\"data\":{},\"expiry_date\":[2026,1]}","user":"admin"}"#,
};

fn session() -> SessionRow {
    SessionRow {
        expires: 1_764_480_000,
        record: r#"{"id":"","data":{},"expiry_date":[2026,1]}"#.into(),
        user: Some("admin".into()),
    }
}

const ROLLUP: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"polls":120,"errors":3,"queue_depth":7,"dead_letter":1}"#,
};

fn rollup() -> Rollup {
    Rollup {
        polls: 120,
        errors: 3,
        queue_depth: 7,
        dead_letter: 1,
    }
}

const AIMD: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"configured_rps":8.0,"effective_rps":4.25,"last_decrease":1764480000000,"last_429":1764480001000,"last_429_rps":5.25,"held_rps":4.5,"probe_after":1764480300000,"recovery":{"kind":"fast","rps_per_minute":0.25,"until_rps":4.725},"at":1764480060000,"announced":{"over_budget":true,"shed":["net/inventory"]}}"#,
};

fn aimd() -> crate::core::aimd::AimdState {
    crate::core::aimd::AimdState {
        configured_rps: 8.0,
        effective_rps: 4.25,
        last_decrease: Some(Timestamp(1_764_480_000_000)),
        last_429: Some(Timestamp(1_764_480_001_000)),
        last_429_rps: Some(5.25),
        held_rps: Some(4.5),
        probe_after: Some(Timestamp(1_764_480_300_000)),
        recovery: crate::core::aimd::Recovery::Fast {
            rps_per_minute: 0.25,
            until_rps: 4.725,
        },
        at: Timestamp(1_764_480_060_000),
        announced: crate::core::aimd::Announced {
            over_budget: true,
            shed: vec!["net/inventory".into()],
        },
    }
}

/// Saved before the level of the last 429 was kept: it decodes with none.
const AIMD_WITHOUT_LEVEL: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"configured_rps":8.0,"effective_rps":4.25,"last_decrease":1764480000000,"last_429":1764480001000,"recovery":{"kind":"fast","rps_per_minute":1.6,"until_rps":7.2},"at":1764480060000}"#,
};

fn aimd_without_level() -> crate::core::aimd::AimdState {
    crate::core::aimd::AimdState {
        configured_rps: 8.0,
        effective_rps: 4.25,
        last_decrease: Some(Timestamp(1_764_480_000_000)),
        last_429: Some(Timestamp(1_764_480_001_000)),
        last_429_rps: None,
        held_rps: None,
        probe_after: None,
        recovery: crate::core::aimd::Recovery::Fast {
            rps_per_minute: 1.6,
            until_rps: 7.2,
        },
        at: Timestamp(1_764_480_060_000),
        announced: Default::default(),
    }
}

const AIMD_ADDITIVE: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"configured_rps":10.0,"effective_rps":10.0,"recovery":{"kind":"additive"},"at":1764480060000}"#,
};

fn aimd_additive() -> crate::core::aimd::AimdState {
    crate::core::aimd::AimdState {
        configured_rps: 10.0,
        effective_rps: 10.0,
        last_decrease: None,
        last_429: None,
        last_429_rps: None,
        held_rps: None,
        probe_after: None,
        recovery: crate::core::aimd::Recovery::Additive,
        at: Timestamp(1_764_480_060_000),
        announced: Default::default(),
    }
}

const OUTBOX_EVENT: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"id":"e-1","line":"{\"id\":\"e-1\",\"type\":\"dead_letter\"}\n"}"#,
};

fn outbox_event() -> OutboxEvent {
    OutboxEvent::new("e-1", "{\"id\":\"e-1\",\"type\":\"dead_letter\"}\n")
}

const AUDIT_ENTRY: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"time":1764480000000,"source":"10.0.0.5","line":"{\"kind\":\"operator\",\"action\":\"login\"}"}"#,
};

fn audit_entry() -> crate::store::AuditEntry {
    crate::store::AuditEntry {
        seq: 0,
        time: Timestamp(1_764_480_000_000),
        source: Some("10.0.0.5".into()),
        line: "{\"kind\":\"operator\",\"action\":\"login\"}".into(),
    }
}

const VALUES: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"polled_at":1764480000000,"stale_after":"2m","rules":"00ff00ff00ff00ff","samples":[{"metric":"pve_up","labels":[["id","qemu/100"]],"value":1.0},{"metric":"pve_cpu_usage_ratio","labels":[],"value":0.25}]}"#,
};

fn values() -> TaskValues {
    use crate::values::Sample;
    TaskValues {
        polled_at: Timestamp(1_764_480_000_000),
        stale_after: Duration::from_secs(120),
        fingerprint: 0x00ff_00ff_00ff_00ff,
        samples: vec![
            Sample {
                metric: "pve_up".into(),
                labels: vec![("id".into(), "qemu/100".into())],
                value: 1.0,
            },
            Sample {
                metric: "pve_cpu_usage_ratio".into(),
                labels: vec![],
                value: 0.25,
            },
        ]
        .into(),
    }
}

/// A body fixture's JSON and the record it holds.
type BodyFixture = (&'static [u8], fn() -> BodyRecord);

/// A kept UTF-8 body, a kept binary one, and one too large to keep.
const BODIES: [BodyFixture; 3] = [
    (
        br#"{"polled_at":1764480000000,"content_type":"application/json","size":11,"etag":"abc","text":"{\"data\":1}\n"}"#,
        || BodyRecord {
            polled_at: Timestamp(1_764_480_000_000),
            content_type: "application/json".into(),
            size: 11,
            etag: "abc".into(),
            bytes: Some(std::sync::Arc::from(&b"{\"data\":1}\n"[..])),
        },
    ),
    (
        br#"{"polled_at":1764480000000,"content_type":"","size":2,"etag":"def","hex":"ff00"}"#,
        || BodyRecord {
            polled_at: Timestamp(1_764_480_000_000),
            content_type: String::new(),
            size: 2,
            etag: "def".into(),
            bytes: Some(std::sync::Arc::from(&[0xff_u8, 0][..])),
        },
    ),
    (
        br#"{"polled_at":1764480000000,"content_type":"","size":2000000,"etag":""}"#,
        || BodyRecord::too_large(Timestamp(1_764_480_000_000), 2_000_000),
    ),
];

/// `meta` numbers: format 1 for ever (an older release reads the schema
/// version to refuse a newer file).
const META_NUMBER: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: b"42",
};

/// The outbox's next sequence after one row.
const META_NUMBER_TWO: [u8; 2] = *b"\x012";

/// `decode` reads the fixture as `want`; `encode` writes `want` as the fixture.
fn check<D: PartialEq + Debug>(
    what: &str,
    fixture: &Fixture,
    want: &D,
    encode: impl Fn(&D) -> Result<Vec<u8>, StoreError>,
    decode: impl Fn(&[u8]) -> Result<D, StoreError>,
) {
    let bytes = fixture.bytes();
    let got = decode(&bytes).unwrap_or_else(|e| panic!("{what}: today's bytes no longer decode: {e}"));
    assert_eq!(&got, want, "{what}: today's bytes decode to another value");
    let written = encode(want).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&bytes),
        "{what}: the value is no longer written in today's format"
    );
    assert_eq!(written, bytes, "{what}");
}

fn stored<S: codec::Versioned, D>(table: &'static str, bytes: &[u8]) -> Result<D, StoreError>
where
    D: From<S>,
{
    codec::decode_stored::<S>(table, b"k", bytes).map(D::from)
}

#[test]
fn every_value_decodes_from_and_encodes_to_todays_bytes() {
    use super::super::records::{decode_instance, decode_instance_with, decode_sink, decode_task, encode_task};
    check("task", &TASK_V2, &task(), encode_task, |b| {
        decode_task(b"pve-1\0nodes", b).map(|(_, r)| r)
    });
    check("fresh task", &TASK_FRESH_V2, &task_fresh(), encode_task, |b| {
        decode_task(b"web-1\0probe", b).map(|(_, r)| r)
    });
    // Format 1 (JSON), as releases before format 2 wrote them: still read,
    // and still written exactly so for the cluster's gossip.
    let v1 = |r: &TaskRecord| super::encode_task_v1(r).map_err(|reason| StoreError::Encode { what: "task", reason });
    check("task format 1", &TASK, &task(), v1, |b| {
        decode_task(b"pve-1\0nodes", b).map(|(_, r)| r)
    });
    check("fresh task format 1", &TASK_FRESH, &task_fresh(), v1, |b| {
        decode_task(b"web-1\0probe", b).map(|(_, r)| r)
    });
    // The gossip's rows are format 1 and read back; a format-2 row (from
    // a later release's gossip, or the table) reads too.
    let key = TaskKey::new("pve-1", "nodes");
    let (k, v) = crate::store::wire::task_to_bytes(&key, &task()).expect("a row");
    assert_eq!(v, TASK.bytes());
    assert_eq!(crate::store::wire::task_from_bytes(&k, &v), Some((key.clone(), task())));
    assert_eq!(
        crate::store::wire::task_from_bytes(&k, &TASK_V2.bytes()),
        Some((key, task()))
    );
    // Format 1 (credentials in plaintext, as older releases wrote them)
    // still reads; it is never written again outside a backup.
    let v1 = |b: &[u8]| codec::decode_stored::<StoredInstance>("instances", b"k", b);
    let plain = |i: &InstanceConfig| codec::encode_stored_version(FORMAT_JSON_V1, &StoredInstance::plain(i));
    check("instance format 1", &INSTANCE, &instance(), plain, |b| {
        decode_instance(b"pve-1", b)
    });
    for (json, auth) in INSTANCE_AUTHS {
        let fixture = Fixture {
            version: FORMAT_JSON_V1,
            payload: json,
        };
        check("instance auth format 1", &fixture, &instance_with(auth()), plain, |b| {
            decode_instance(b"web-1", b)
        });
        assert!(v1(&fixture.bytes()).is_ok());
    }
    // Format 2: sealed.
    let sealed = |name: &'static [u8]| move |b: &[u8]| decode_instance_with(name, b, Some(&fixture_key()));
    check(
        "sealed instance",
        &INSTANCE_V2,
        &instance(),
        encode_sealed_instance,
        sealed(b"pve-1"),
    );
    check(
        "sealed URL password",
        &INSTANCE_URL_V2,
        &instance_with_url_password(),
        encode_sealed_instance,
        sealed(b"web-2"),
    );
    for (json, auth) in INSTANCE_AUTHS_V2 {
        let fixture = Fixture {
            version: INSTANCE_SEALED_V2,
            payload: json,
        };
        check(
            "sealed instance auth",
            &fixture,
            &instance_with(auth()),
            encode_sealed_instance,
            sealed(b"web-1"),
        );
    }
    check("sealed sink", &SINK_V2, &sink_doc(), encode_sealed_sink, |b| {
        decode_sink(b, Some(&fixture_key()))
    });
    // The plain sink document of older releases still reads.
    let old_sink = codec::encode("settings", &sink_doc()).expect("v1");
    assert_eq!(decode_sink(&old_sink, None).expect("v1 sink"), sink_doc());
    check(
        "settings",
        &SETTINGS_DOC,
        &settings_doc(),
        |d| codec::encode_stored(&StoredSettingsRef(d)),
        |b| codec::decode_stored::<StoredSettings>("settings", b"k", b).map(|s| s.0),
    );
    check(
        "user",
        &USER,
        &user(),
        |u| codec::encode_stored(&StoredUser::from(u)),
        |b| stored::<StoredUser, _>("users", b),
    );
    check(
        "token",
        &TOKEN,
        &token(),
        |t| codec::encode_stored(&StoredToken::from(t)),
        |b| stored::<StoredToken, _>("tokens", b),
    );
    check(
        "session",
        &SESSION,
        &session(),
        |s| codec::encode_stored(&StoredSession::from(s)),
        |b| stored::<StoredSession, _>("sessions", b),
    );
    check(
        "rollup",
        &ROLLUP,
        &rollup(),
        |r| codec::encode_stored(&StoredRollup::from(r)),
        |b| stored::<StoredRollup, _>("history", b),
    );
    check(
        "outbox event",
        &OUTBOX_EVENT,
        &outbox_event(),
        |e| codec::encode_stored(&StoredOutboxEventRef::from(e)),
        |b| stored::<StoredOutboxEvent, _>("outbox", b),
    );
    check(
        "audit entry",
        &AUDIT_ENTRY,
        &audit_entry(),
        |e| {
            codec::encode_stored(&super::StoredAuditRef {
                time: e.time.0,
                source: e.source.as_deref(),
                line: &e.line,
            })
        },
        |b| codec::decode_stored::<super::StoredAudit>("audit", b"k", b).map(|s| s.into_entry(0)),
    );
    check(
        "values",
        &VALUES,
        &values(),
        |v| codec::encode_stored(&StoredValuesRef::from(v)),
        |b| {
            codec::decode_stored::<StoredValues>("values", b"k", b).and_then(|s| {
                TaskValues::try_from(s).map_err(|e| StoreError::Corrupt {
                    table: "values",
                    key: "k".into(),
                    reason: e,
                })
            })
        },
    );
    for (json, body) in BODIES {
        check(
            "body",
            &Fixture {
                version: FORMAT_JSON_V1,
                payload: json,
            },
            &body(),
            |b| codec::encode_stored(&StoredBodyRef::from(b)),
            |b| {
                codec::decode_stored::<StoredBody>("bodies", b"k", b).and_then(|s| {
                    BodyRecord::try_from(s).map_err(|e| StoreError::Corrupt {
                        table: "bodies",
                        key: "k".into(),
                        reason: e,
                    })
                })
            },
        );
    }
    check(
        "aimd",
        &AIMD,
        &aimd(),
        |a| codec::encode_stored(&StoredAimd::from(a)),
        |b| stored::<StoredAimd, _>("aimd", b),
    );
    check(
        "aimd without the level of the last 429",
        &AIMD_WITHOUT_LEVEL,
        &aimd_without_level(),
        |a| codec::encode_stored(&StoredAimd::from(a)),
        |b| stored::<StoredAimd, _>("aimd", b),
    );
    check(
        "aimd additive",
        &AIMD_ADDITIVE,
        &aimd_additive(),
        |a| codec::encode_stored(&StoredAimd::from(a)),
        |b| stored::<StoredAimd, _>("aimd", b),
    );
    check(
        "meta number",
        &META_NUMBER,
        &42u64,
        |n| codec::encode("meta", n),
        |b| codec::decode("meta", b"k", b),
    );
}

/// Writes raw bytes into `table`, as an older release left them.
fn put_raw(store: &Store, table: tables::Table, key: &[u8], value: &[u8]) {
    let txn = store.db.begin_write().expect("begin");
    {
        let mut t = txn.open_table(table.def).expect("table");
        t.insert(key, value).expect("insert");
    }
    txn.commit().expect("commit");
}

fn get_raw(store: &Store, table: tables::Table, key: &[u8]) -> Vec<u8> {
    let txn = store.db.begin_read().expect("begin");
    let t = txn.open_table(table.def).expect("table");
    let v = t.get(key).expect("get").expect("present");
    v.value().to_vec()
}

#[test]
fn a_file_with_todays_bytes_reads_through_the_store_and_is_written_back_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let task_key = b"pve-1\0nodes";
    put_raw(&store, TASKS, task_key, &TASK.bytes());
    put_raw(&store, INSTANCES, b"pve-1", &INSTANCE.bytes());
    put_raw(&store, SETTINGS, b"monitoring", &SETTINGS_DOC.bytes());
    put_raw(&store, USERS, b"admin", &USER.bytes());
    let token_key = [7u8; 32];
    put_raw(&store, TOKENS, &token_key, &TOKEN.bytes());
    put_raw(&store, SESSIONS, b"s", &SESSION.bytes());
    let minute = 1_764_480_000u64.to_be_bytes();
    put_raw(&store, HISTORY, &minute, &ROLLUP.bytes());
    put_raw(&store, OUTBOX, &1u64.to_be_bytes(), &OUTBOX_EVENT.bytes());
    put_raw(&store, META, b"outbox_next_seq", &META_NUMBER_TWO);
    drop(store);

    // Reopened as a release would open an existing file (the server opens
    // it with its data key, which seals the plaintext credentials).
    let store = Store::open_with_key(dir.path(), fixture_key()).expect("reopen");
    let sealed = get_raw(&store, INSTANCES, b"pve-1");
    assert_eq!(sealed[0], INSTANCE_SEALED_V2, "sealed at open");
    assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
    let (tasks, bad) = store.load_tasks().expect("tasks");
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(tasks, vec![(TaskKey::new("pve-1", "nodes"), task())]);
    assert_eq!(store.list_instances().expect("instances"), vec![instance()]);
    assert_eq!(
        store.get_settings("monitoring").expect("settings"),
        Some(settings_doc())
    );
    assert_eq!(store.get_user("admin").expect("user"), Some(user()));
    assert_eq!(store.list_tokens().expect("tokens"), vec![token()]);
    assert_eq!(store.get_session("s").expect("session"), Some(session()));
    assert_eq!(
        store.history_since(0).expect("history"),
        vec![(1_764_480_000, rollup())]
    );
    let page = store.outbox_page(0, 10).expect("outbox");
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].1.as_ref().expect("event"), &outbox_event());

    // Written again through the store: the same bytes.
    store
        .write_tasks(&[(TaskKey::new("pve-1", "nodes"), Some(task()))])
        .expect("task");
    store.put_instance(&instance()).expect("instance");
    store.put_settings("monitoring", &settings_doc()).expect("settings");
    store.put_user(&user()).expect("user");
    assert!(
        store
            .put_session("s", &session(), SessionWrite::Update)
            .expect("session")
    );
    store.put_rollup(1_764_480_000, &rollup(), 0).expect("rollup");
    store.delete_outbox(&[1]).expect("delete");
    store.append_outbox(&[outbox_event()]).expect("outbox");
    // A task read in format 1 is written in format 2.
    assert_eq!(get_raw(&store, TASKS, task_key), TASK_V2.bytes());
    // Sealed with a fresh nonce each time: the same value, not the same bytes.
    let written = get_raw(&store, INSTANCES, b"pve-1");
    assert_eq!(written[0], INSTANCE_SEALED_V2);
    assert_ne!(written, sealed);
    assert_eq!(get_raw(&store, SETTINGS, b"monitoring"), SETTINGS_DOC.bytes());
    assert_eq!(get_raw(&store, USERS, b"admin"), USER.bytes());
    assert_eq!(get_raw(&store, SESSIONS, b"s"), SESSION.bytes());
    assert_eq!(get_raw(&store, HISTORY, &minute), ROLLUP.bytes());
    assert_eq!(get_raw(&store, OUTBOX, &2u64.to_be_bytes()), OUTBOX_EVENT.bytes());
    assert_eq!(get_raw(&store, META, b"outbox_next_seq"), b"\x013");
    // A token's bytes are written only when it is created (with a fresh secret).
    let (_, info) = store
        .create_token("grafana", TokenScope::Read, Timestamp(1_764_480_000_000))
        .expect("token");
    let digest = store
        .db
        .begin_read()
        .expect("read")
        .open_table(TOKENS.def)
        .expect("table")
        .iter()
        .expect("iter")
        .map(|e| e.expect("row").0.value().to_vec())
        .find(|k| k.as_slice() != token_key)
        .expect("the new token");
    let want = TOKEN.bytes();
    let want = String::from_utf8_lossy(&want).replace("0a1b2c3d", &info.id);
    assert_eq!(String::from_utf8_lossy(&get_raw(&store, TOKENS, &digest)), want);
}

#[test]
fn every_enum_value_has_its_fixed_name() {
    use super::super::records::{decode_task, encode_task};
    use super::task::{breaker_code, category_code, kind_code, reason_code};
    // Each value: its format-1 name and its format-2 code.
    let kinds = [
        (ErrorKind::Timeout, "timeout", 0),
        (ErrorKind::Connect, "connect", 1),
        (ErrorKind::Dns, "dns", 2),
        (ErrorKind::Http, "http", 3),
        (ErrorKind::RateLimited, "rate_limited", 4),
        (ErrorKind::Tls, "tls", 5),
        (ErrorKind::Body, "body", 6),
        (ErrorKind::InvalidUrl, "invalid_url", 7),
        (ErrorKind::InvalidCredentials, "invalid_credentials", 8),
        (ErrorKind::Other, "other", 9),
    ];
    let breakers = [
        (BreakerState::Closed, "closed", 0),
        (BreakerState::Open, "open", 1),
        (BreakerState::HalfOpen, "half_open", 2),
    ];
    let reasons = [
        (DeadLetterReason::MaxRetryAttempts, "max_retry_attempts", 0),
        (DeadLetterReason::PermanentFailure, "permanent_failure", 1),
    ];
    let categories = [
        (ErrorCategory::Transient, "transient", 0),
        (ErrorCategory::Permanent, "permanent", 1),
    ];
    // (record, its format-1 JSON, the code format 2 writes, the code)
    let mut records = Vec::new();
    for (kind, name, code) in kinds {
        let error = PollError::new(ErrorCategory::Transient, kind, "m");
        records.push((
            TaskRecord {
                last_error: Some(error),
                ..TaskRecord::default()
            },
            format!(r#"{{"last_error":{{"category":"transient","kind":"{name}","message":"m","status":null}}}}"#),
            kind_code(kind),
            code,
        ));
    }
    for (category, name, code) in categories {
        let error = PollError::new(category, ErrorKind::Other, "m");
        records.push((
            TaskRecord {
                last_error: Some(error),
                ..TaskRecord::default()
            },
            format!(r#"{{"last_error":{{"category":"{name}","kind":"other","message":"m","status":null}}}}"#),
            category_code(category),
            code,
        ));
    }
    for (breaker, name, code) in breakers {
        records.push((
            TaskRecord {
                breaker,
                ..TaskRecord::default()
            },
            format!(r#"{{"breaker":"{name}"}}"#),
            breaker_code(breaker),
            code,
        ));
    }
    for (reason, name, code) in reasons {
        let dead_letter = DeadLetterRecord {
            reason,
            ..DeadLetterRecord::default()
        };
        records.push((
            TaskRecord {
                dead_letter: Some(dead_letter),
                ..TaskRecord::default()
            },
            format!(r#"{{"dead_letter":{{"reason":"{name}"}}}}"#),
            reason_code(reason),
            code,
        ));
    }
    for (record, v1, written, code) in records {
        assert_eq!(written, code, "{record:?}");
        let bytes = encode_task(&record).expect("encode");
        assert_eq!(decode_task(b"i\0g", &bytes).expect("decode").1, record);
        let mut old = vec![FORMAT_JSON_V1];
        old.extend_from_slice(v1.as_bytes());
        assert_eq!(decode_task(b"i\0g", &old).expect(&v1).1, record, "{v1}");
    }
    // Every cut of a format-2 record, and one with a byte after its end,
    // is a corrupt record naming the table and key.
    let full = TASK_V2.bytes();
    for cut in 1..full.len() {
        let err = decode_task(b"i\0g", &full[..cut]).expect_err("a cut record");
        assert!(matches!(err, StoreError::Corrupt { table: "tasks", .. }), "{err}");
    }
    let mut long = full.clone();
    long.push(0);
    let err = decode_task(b"i\0g", &long).expect_err("a byte after the end");
    assert!(err.to_string().contains("1 bytes after its end"), "{err}");
    // A record larger than the encoder's stack buffer (20 failed items
    // with long messages) is written whole and reads back the same.
    let big = TaskRecord {
        failed_items: (0..20)
            .map(|i| FailedItem {
                item: format!("node-{i}"),
                error: PollError::new(ErrorCategory::Transient, ErrorKind::Http, "x".repeat(200)),
            })
            .collect(),
        ..task()
    };
    let bytes = encode_task(&big).expect("encode");
    assert!(bytes.len() > 4_000, "{}", bytes.len());
    assert_eq!(decode_task(b"i\0g", &bytes).expect("decode").1, big);
    // A code no release wrote is a corrupt record, not a default.
    let mut bytes = encode_task(&TaskRecord::default()).expect("encode");
    bytes[6] = 3; // the breaker, after the version byte and four `None`s and `failures`
    let err = decode_task(b"i\0g", &bytes).expect_err("unknown breaker code");
    assert!(err.to_string().contains("unknown breaker state code 3"), "{err}");
    for (scope, name) in [(TokenScope::Read, "read"), (TokenScope::Admin, "admin")] {
        let info = TokenInfo { scope, ..token() };
        let bytes = codec::encode_stored(&StoredToken::from(&info)).expect("encode");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(&format!(r#""scope":"{name}""#)), "{text}");
        assert_eq!(
            stored::<StoredToken, TokenInfo>("tokens", &bytes).expect("decode"),
            info
        );
    }
}

#[test]
fn older_records_with_missing_fields_still_read() {
    use super::super::records::{decode_instance, decode_task};
    // A task written before most fields existed.
    let (_, rec) = decode_task(b"web-1\0probe", b"\x01{\"next_run\":0,\"breaker\":\"closed\"}").expect("task");
    assert_eq!(rec, TaskRecord::default());
    // An instance with only what is required.
    let inst = decode_instance(b"pve", b"\x01{\"name\":\"pve\",\"url\":\"https://pve:8006/\"}").expect("instance");
    assert_eq!(inst, InstanceConfig::new("pve", "http", "https://pve:8006/"));
    // A token from before scopes is an admin token; a session from before
    // users were kept has none; a rollup's counts default to 0.
    let t: TokenInfo =
        stored::<StoredToken, _>("tokens", b"\x01{\"id\":\"0a0b0c0d\",\"name\":\"old\",\"created\":5}").expect("token");
    assert_eq!(t.scope, TokenScope::Admin);
    let s: SessionRow =
        stored::<StoredSession, _>("sessions", b"\x01{\"expires\":1,\"record\":\"{}\"}").expect("session");
    assert_eq!(s.user, None);
    let r: Rollup = stored::<StoredRollup, _>("history", b"\x01{\"polls\":2}").expect("rollup");
    assert_eq!(
        r,
        Rollup {
            polls: 2,
            ..Rollup::default()
        }
    );
}

#[test]
fn unknown_fields_are_refused_in_an_instance_and_ignored_in_a_task() {
    use super::super::records::{decode_instance, decode_task};
    let err = decode_instance(b"a", b"\x01{\"name\":\"a\",\"url\":\"http://a/\",\"colour\":\"red\"}").unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { table: "instances", .. }), "{err:?}");
    let err = decode_instance(
        b"a",
        b"\x01{\"name\":\"a\",\"url\":\"http://a/\",\"auth\":{\"kind\":\"none\",\"token\":\"t\"}}",
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let (_, rec) = decode_task(b"i\0g", b"\x01{\"failures\":2,\"later_field\":true}").expect("task");
    assert_eq!(rec.failures, 2);
}

const MAINTENANCE_ONCE: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"id":"01KBW0000000000000000000AC","target":{"kind":"instances","names":["pve-1","pve-2"]},"schedule":{"kind":"once","start":1764480000000,"end":1764487200000},"reason":"PVE 9 upgrade","created":1764479000000,"created_by":"user:admin","open_since":1764480000000}"#,
};

const MAINTENANCE_WEEKLY: Fixture = Fixture {
    version: FORMAT_JSON_V1,
    payload: br#"{"id":"01KBW0000000000000000000AD","target":{"kind":"type","name":"pbs"},"schedule":{"kind":"weekly","days":["mon","sun"],"at":"02:30","duration":"1h30m","timezone":"Europe/Berlin"},"reason":"","created":1764479000000,"created_by":"token:ci(0a0b0c0d)"}"#,
};

fn maintenance_once() -> crate::core::maintenance::MaintenanceWindow {
    use crate::core::maintenance::{MaintenanceTarget, MaintenanceWindow, Schedule};
    MaintenanceWindow {
        id: "01KBW0000000000000000000AC".into(),
        target: MaintenanceTarget::Instances(vec!["pve-1".into(), "pve-2".into()]),
        schedule: Schedule::Once {
            start: Timestamp(1_764_480_000_000),
            end: Timestamp(1_764_487_200_000),
        },
        reason: "PVE 9 upgrade".into(),
        created: Timestamp(1_764_479_000_000),
        created_by: "user:admin".into(),
        open_since: Some(Timestamp(1_764_480_000_000)),
    }
}

fn maintenance_weekly() -> crate::core::maintenance::MaintenanceWindow {
    use crate::core::maintenance::{Day, LocalTime, MaintenanceTarget, MaintenanceWindow, Schedule, Weekly, Zone};
    MaintenanceWindow {
        id: "01KBW0000000000000000000AD".into(),
        target: MaintenanceTarget::Type("pbs".into()),
        schedule: Schedule::Weekly(
            Weekly::new(
                vec![Day::Sun, Day::Mon],
                LocalTime::parse("02:30").expect("time"),
                Duration::from_secs(5400),
                Zone::parse("Europe/Berlin").expect("zone"),
            )
            .expect("repeat"),
        ),
        reason: String::new(),
        created: Timestamp(1_764_479_000_000),
        created_by: "token:ci(0a0b0c0d)".into(),
        open_since: None,
    }
}

#[test]
fn maintenance_windows_decode_from_and_encode_to_todays_bytes() {
    use crate::core::maintenance::MaintenanceWindow;
    let decode = |b: &[u8]| {
        codec::decode_stored::<StoredMaintenance>("maintenance", b"k", b).and_then(|s| {
            MaintenanceWindow::try_from(s).map_err(|reason| StoreError::Corrupt {
                table: "maintenance",
                key: "k".into(),
                reason,
            })
        })
    };
    let encode = |w: &MaintenanceWindow| codec::encode_stored(&StoredMaintenance::from(w));
    check(
        "maintenance window",
        &MAINTENANCE_ONCE,
        &maintenance_once(),
        encode,
        decode,
    );
    check(
        "weekly maintenance window",
        &MAINTENANCE_WEEKLY,
        &maintenance_weekly(),
        encode,
        decode,
    );
}
