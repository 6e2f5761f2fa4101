use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("client")
}

fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("client")
}

async fn start(instances: &[(&str, Behaviour)]) -> Fleet {
    let instances = instances.iter().map(|(n, b)| (n.to_string(), b.clone())).collect();
    Fleet::start(loopback(), instances).await.expect("start fleet")
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

async fn fetch(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("body").to_vec();
    Answer { status, headers, body }
}

async fn get(url: &str) -> Answer {
    fetch(client().get(url)).await
}

/// Polls `cond` every 20 ms for up to 5 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn healthy_answers_the_same_json_every_time() {
    let fleet = start(&[("a", Behaviour::Healthy)]).await;
    let first = get(&fleet.url("a")).await;
    let second = get(&fleet.url("a")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(first.body, second.body);
    assert_eq!(first.json(), json!({"instance": "a", "status": "ok"}));
    fleet.stop().await;
}

#[tokio::test]
async fn changing_answers_a_different_body_every_time() {
    let fleet = start(&[("c", Behaviour::Changing)]).await;
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let a = get(&fleet.url("c")).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.json()["instance"], "c");
        bodies.push(a.body);
    }
    assert_ne!(bodies[0], bodies[1]);
    assert_ne!(bodies[1], bodies[2]);
    assert_ne!(bodies[0], bodies[2]);
    fleet.stop().await;
}

#[tokio::test]
async fn slow_answers_after_its_delay_without_blocking_others() {
    let fleet = start(&[
        ("s", Behaviour::Slow { delay_ms: 300 }),
        ("long", Behaviour::Slow { delay_ms: 3_000 }),
        ("h", Behaviour::Healthy),
    ])
    .await;
    let t0 = Instant::now();
    let a = get(&fleet.url("s")).await;
    assert_eq!(a.status, 200);
    assert!(t0.elapsed() >= Duration::from_millis(300), "{:?}", t0.elapsed());

    let long = tokio::spawn(client().get(fleet.url("long")).send());
    eventually("the long request to arrive", || fleet.hits("long") == 1).await;
    assert_eq!(get(&fleet.url("h")).await.status, 200);
    assert!(!long.is_finished(), "the slow answer came before its delay");
    let long = long.await.expect("join").expect("slow answer");
    assert_eq!(long.status().as_u16(), 200);
    fleet.stop().await;
}

#[tokio::test]
async fn flapping_alternates_between_200_and_503() {
    let fleet = start(&[("f", Behaviour::Flapping { period_ms: 200 })]).await;
    let mut seen = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.len() < 2 && Instant::now() < deadline {
        let a = get(&fleet.url("f")).await;
        *seen.entry(a.status).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(seen.contains_key(&200), "{seen:?}");
    assert!(seen.contains_key(&503), "{seen:?}");
    assert!(seen.keys().all(|s| *s == 200 || *s == 503), "{seen:?}");
    fleet.stop().await;
}

#[test]
fn rate_limit_window_admits_per_second_then_resets() {
    let window = AtomicU64::new(0);
    let admitted: Vec<bool> = (0..5).map(|_| admit(&window, 7, 3)).collect();
    assert_eq!(admitted, [true, true, true, false, false]);
    assert!(admit(&window, 8, 3), "a new second starts a new window");
    assert!(admit(&window, 8, 3));
    assert!(admit(&window, 8, 3));
    assert!(!admit(&window, 8, 3));
    assert!(!admit(&window, 9, 0), "a limit of 0 admits nothing");
}

#[tokio::test]
async fn rate_limited_answers_429_with_retry_after_beyond_the_limit() {
    let fleet = start(&[(
        "r",
        Behaviour::RateLimited {
            per_second: 3,
            retry_after_secs: 5,
        },
    )])
    .await;
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..10 {
        let a = get(&fleet.url("r")).await;
        match a.status {
            200 => ok += 1,
            429 => {
                limited += 1;
                assert_eq!(a.header("retry-after"), Some("5"));
                assert_eq!(a.json()["error"], "rate limited");
            }
            other => panic!("unexpected status {other}"),
        }
    }
    // Ten quick requests touch at most two one-second windows.
    assert!((3..=6).contains(&ok), "ok = {ok}");
    assert_eq!(ok + limited, 10);
    fleet.stop().await;
}

#[tokio::test]
async fn error_behaviours_answer_their_status() {
    let fleet = start(&[
        ("e", Behaviour::ServerError),
        ("u", Behaviour::Unauthorized),
        ("n", Behaviour::NotFound),
    ])
    .await;
    let e = get(&fleet.url("e")).await;
    assert_eq!(e.status, 500);
    assert_eq!(e.json()["instance"], "e");
    let u = get(&fleet.url("u")).await;
    assert_eq!(u.status, 401);
    assert!(u.header("www-authenticate").is_some());
    let n = get(&fleet.url("n")).await;
    assert_eq!(n.status, 404);
    assert_eq!(n.json()["instance"], "n");
    fleet.stop().await;
}

#[tokio::test]
async fn hung_never_answers_and_lets_go_when_the_client_gives_up() {
    let fleet = start(&[("h", Behaviour::Hung), ("ok", Behaviour::Healthy)]).await;
    let url = fleet.url("h");
    let pending = tokio::spawn(async move { client_with_timeout(Duration::from_millis(300)).get(url).send().await });
    eventually("the hung request to be open", || fleet.stats().hung_open == 1).await;
    // Other instances still answer while one hangs.
    assert_eq!(get(&fleet.url("ok")).await.status, 200);
    let err = pending
        .await
        .expect("join")
        .expect_err("a hung instance must not answer");
    assert!(err.is_timeout(), "{err}");
    assert_eq!(fleet.hits("h"), 1);
    eventually("the hung request to be dropped", || fleet.stats().hung_open == 0).await;
    fleet.stop().await;
}

#[tokio::test]
async fn huge_streams_exactly_the_requested_bytes() {
    let bytes = 1_000_003;
    let fleet = start(&[
        ("big", Behaviour::Huge { bytes }),
        ("zero", Behaviour::Huge { bytes: 0 }),
        ("one", Behaviour::Huge { bytes: 1 }),
        ("two", Behaviour::Huge { bytes: 2 }),
    ])
    .await;
    let a = get(&fleet.url("big")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len() as u64, bytes);
    assert_eq!(a.header("content-length"), Some("1000003"));
    assert_eq!(a.json(), json!({}));
    assert_eq!(get(&fleet.url("zero")).await.body, b"");
    assert_eq!(get(&fleet.url("one")).await.body, b" ");
    assert_eq!(get(&fleet.url("two")).await.body, b"{}");
    fleet.stop().await;
}

#[tokio::test]
async fn invalid_utf8_is_labelled_json_but_is_not_utf8() {
    let fleet = start(&[("x", Behaviour::InvalidUtf8)]).await;
    let a = get(&fleet.url("x")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert!(!a.body.is_empty());
    assert!(std::str::from_utf8(&a.body).is_err());
    fleet.stop().await;
}

#[tokio::test]
async fn sub_paths_and_queries_route_to_the_instance() {
    let fleet = start(&[("a", Behaviour::Healthy), ("b", Behaviour::ServerError)]).await;
    let base = fleet.base_url();
    for path in ["/i/a/api2/json/cluster", "/i/a/status", "/i/a?x=1", "/i/a/"] {
        let a = get(&format!("{base}{path}")).await;
        assert_eq!(a.status, 200, "{path}");
        assert_eq!(a.json()["instance"], "a", "{path}");
    }
    let b = fetch(client().post(format!("{base}/i/b/deep/er")).body("x")).await;
    assert_eq!(b.status, 500);
    assert_eq!(fleet.hits("a"), 4);
    assert_eq!(fleet.hits("b"), 1);

    let unknown = get(&format!("{base}/i/nope/x")).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json(), json!({"error": "unknown instance", "instance": "nope"}));
    let elsewhere = get(&format!("{base}/elsewhere")).await;
    assert_eq!(elsewhere.status, 404);
    assert_eq!(elsewhere.json()["error"], "no such route");
    assert_eq!(fleet.total_hits(), 5, "unknown instances are not counted");
    fleet.stop().await;
}

#[tokio::test]
async fn set_flips_a_behaviour_for_the_next_request() {
    let fleet = start(&[("a", Behaviour::Healthy)]).await;
    assert_eq!(get(&fleet.url("a")).await.status, 200);
    assert!(fleet.set("a", Behaviour::ServerError));
    assert_eq!(fleet.behaviour("a"), Some(Behaviour::ServerError));
    assert_eq!(get(&fleet.url("a")).await.status, 500);
    assert!(fleet.set("a", Behaviour::Unauthorized));
    assert_eq!(get(&fleet.url("a")).await.status, 401);
    assert!(!fleet.set("nope", Behaviour::Healthy));
    assert_eq!(fleet.behaviour("nope"), None);
    fleet.stop().await;
}

#[tokio::test]
async fn hits_count_per_instance_and_in_total() {
    let fleet = start(&[
        ("a", Behaviour::Healthy),
        ("b", Behaviour::NotFound),
        ("c", Behaviour::Healthy),
    ])
    .await;
    for _ in 0..3 {
        get(&fleet.url("a")).await;
    }
    get(&fleet.url("b")).await;
    assert_eq!(fleet.hits("a"), 3);
    assert_eq!(fleet.hits("b"), 1);
    assert_eq!(fleet.hits("c"), 0);
    assert_eq!(fleet.hits("nope"), 0);
    assert_eq!(fleet.total_hits(), 4);
    let snapshot = fleet.snapshot();
    assert_eq!(snapshot.iter().map(|s| s.hits).collect::<Vec<_>>(), [3, 1, 0]);
    fleet.stop().await;
}

#[tokio::test]
async fn control_api_lists_shows_flips_and_counts() {
    let fleet = start(&[("a", Behaviour::Healthy), ("b", Behaviour::Changing)]).await;
    let base = fleet.base_url();
    get(&fleet.url("a")).await;
    get(&fleet.url("a")).await;
    get(&fleet.url("b")).await;

    let list = get(&format!("{base}/_control")).await;
    assert_eq!(list.status, 200);
    assert_eq!(
        list.json(),
        json!({
            "instances": [
                {"name": "a", "behaviour": {"kind": "healthy"}, "hits": 2},
                {"name": "b", "behaviour": {"kind": "changing"}, "hits": 1},
            ],
            "total_hits": 3,
        })
    );

    let flip = fetch(
        client()
            .put(format!("{base}/_control/b"))
            .json(&json!({"kind": "rate_limited", "per_second": 0, "retry_after_secs": 9})),
    )
    .await;
    assert_eq!(flip.status, 200);
    assert_eq!(
        flip.json()["behaviour"],
        json!({"kind": "rate_limited", "per_second": 0, "retry_after_secs": 9})
    );
    let b = get(&fleet.url("b")).await;
    assert_eq!(b.status, 429);
    assert_eq!(b.header("retry-after"), Some("9"));

    let one = get(&format!("{base}/_control/b")).await;
    let one: InstanceStatus = serde_json::from_slice(&one.body).expect("status");
    assert_eq!(one.hits, 2);
    assert_eq!(
        one.behaviour,
        Behaviour::RateLimited {
            per_second: 0,
            retry_after_secs: 9
        }
    );

    let stats = get(&format!("{base}/_control/stats")).await;
    assert_eq!(stats.status, 200);
    let stats: FleetStats = serde_json::from_slice(&stats.body).expect("stats");
    assert_eq!(stats.instances, 2);
    assert_eq!(stats.total_hits, 4);
    assert_eq!(stats.by_kind.get("healthy"), Some(&1));
    assert_eq!(stats.by_kind.get("rate_limited"), Some(&1));

    let unknown = fetch(
        client()
            .put(format!("{base}/_control/nope"))
            .json(&json!({"kind": "healthy"})),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"], "unknown instance");
    assert_eq!(get(&format!("{base}/_control/nope")).await.status, 404);

    let bad = fetch(
        client()
            .put(format!("{base}/_control/a"))
            .json(&json!({"kind": "exploding"})),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid behaviour")),
        "{:?}",
        bad.json()
    );
    assert_eq!(fleet.behaviour("a"), Some(Behaviour::Healthy));
    fleet.stop().await;
}

#[tokio::test]
async fn stop_closes_hung_connections_and_the_listener() {
    let fleet = start(&[("h", Behaviour::Hung)]).await;
    let addr = fleet.addr();
    let url = fleet.url("h");
    let pending = tokio::spawn(async move { client_with_timeout(Duration::from_secs(60)).get(url).send().await });
    eventually("the hung request to be open", || fleet.stats().hung_open == 1).await;
    tokio::time::timeout(Duration::from_secs(10), fleet.stop())
        .await
        .expect("stop must not wait for hung requests");
    let err = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("the hung request ends with the fleet")
        .expect("join")
        .expect_err("no answer");
    assert!(!err.is_timeout(), "{err}");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn start_rejects_duplicate_and_unroutable_names() {
    for names in [vec!["a", "a"], vec![""], vec!["a/b"], vec!["a b"]] {
        let instances = names.iter().map(|n| (n.to_string(), Behaviour::Healthy)).collect();
        let err = Fleet::start(loopback(), instances).await.expect_err("bad names");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{names:?}");
    }
}

#[tokio::test]
async fn urls_and_config_snippet_name_every_instance() {
    let fleet = Fleet::start(loopback(), mix(3, &[(Behaviour::Healthy, 1)]))
        .await
        .expect("start");
    let port = fleet.addr().port();
    assert_eq!(fleet.url("inst-0001"), format!("http://127.0.0.1:{port}/i/inst-0001"));
    let snippet = fleet.config_snippet();
    assert_eq!(snippet.matches("[[instances]]").count(), 3);
    assert_eq!(snippet.matches("type = \"http\"").count(), 3);
    assert!(snippet.contains(&format!(
        "name = \"inst-0002\"\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/i/inst-0002\"\n"
    )));
    fleet.stop().await;
}

#[test]
fn behaviour_json_is_tagged_by_kind() {
    assert_eq!(
        serde_json::to_value(Behaviour::Slow { delay_ms: 5 }).expect("json"),
        json!({"kind": "slow", "delay_ms": 5})
    );
    assert_eq!(
        serde_json::to_value(Behaviour::InvalidUtf8).expect("json"),
        json!({"kind": "invalid_utf8"})
    );
    let defaults = MixDefaults::default();
    for key in Behaviour::KEYS {
        let b = Behaviour::from_key(key, &defaults).expect("known key");
        assert_eq!(b.key(), key);
        assert_eq!(serde_json::to_value(&b).expect("json")["kind"], key);
        let back: Behaviour = serde_json::from_value(serde_json::to_value(&b).expect("json")).expect("parse");
        assert_eq!(back, b);
    }
    assert_eq!(Behaviour::from_key("bogus", &defaults), None);
}

fn kind_counts(instances: &[(String, Behaviour)]) -> HashMap<&'static str, usize> {
    let mut counts = HashMap::new();
    for (_, b) in instances {
        *counts.entry(b.key()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn mix_is_deterministic_and_exact() {
    let weights = [(Behaviour::Healthy, 80), (Behaviour::ServerError, 20)];
    let a = mix(1000, &weights);
    assert_eq!(a, mix(1000, &weights));
    assert_eq!(a.len(), 1000);
    assert_eq!(a[0].0, "inst-0000");
    assert_eq!(a[999].0, "inst-0999");
    let counts = kind_counts(&a);
    assert_eq!(counts["healthy"], 800);
    assert_eq!(counts["server_error"], 200);
    // Interleaved, not in blocks: every ten consecutive instances hold two errors.
    for window in a.chunks(10) {
        let errors = window.iter().filter(|(_, b)| *b == Behaviour::ServerError).count();
        assert_eq!(errors, 2);
    }
}

#[test]
fn mix_rounds_by_largest_remainder_and_skips_zero_weights() {
    let weights = [
        (Behaviour::Healthy, 80),
        (Behaviour::Changing, 10),
        (Behaviour::Slow { delay_ms: 1 }, 5),
        (Behaviour::ServerError, 5),
        (Behaviour::Hung, 0),
    ];
    let m = mix(7, &weights);
    let counts = kind_counts(&m);
    assert_eq!(counts.values().sum::<usize>(), 7);
    // 7 * (.8, .1, .05, .05) = 5.6, .7, .35, .35: floors 5, 0, 0, 0; the two
    // left over go to the largest remainders, .7 and .6.
    assert_eq!(counts["healthy"], 6);
    assert_eq!(counts["changing"], 1);
    assert!(!counts.contains_key("hung"));
    assert!(!counts.contains_key("slow") && !counts.contains_key("server_error"));

    let m = mix(1000, &weights);
    let counts = kind_counts(&m);
    assert_eq!(
        (
            counts["healthy"],
            counts["changing"],
            counts["slow"],
            counts["server_error"]
        ),
        (800, 100, 50, 50)
    );
    assert!(!counts.contains_key("hung"));

    assert_eq!(
        mix(3, &[]),
        vec![
            ("inst-0000".to_string(), Behaviour::Healthy),
            ("inst-0001".to_string(), Behaviour::Healthy),
            ("inst-0002".to_string(), Behaviour::Healthy),
        ]
    );
    assert!(mix(0, &weights).is_empty());
    assert_eq!(mix(12_345, &weights)[12_344].0, "inst-12344");
}

#[test]
fn parse_mix_reads_weights_and_rejects_mistakes() {
    let defaults = MixDefaults::default();
    let parsed = parse_mix(" healthy=80, slow = 5,huge=1,", &defaults).expect("valid mix");
    assert_eq!(
        parsed,
        vec![
            (Behaviour::Healthy, 80),
            (Behaviour::Slow { delay_ms: 2_000 }, 5),
            (Behaviour::Huge { bytes: 8 * 1024 * 1024 }, 1),
        ]
    );
    assert_eq!(
        parse_mix("rate_limited=1,flapping=1", &defaults).expect("valid"),
        vec![
            (
                Behaviour::RateLimited {
                    per_second: 1,
                    retry_after_secs: 5
                },
                1
            ),
            (Behaviour::Flapping { period_ms: 20_000 }, 1),
        ]
    );
    assert_eq!(
        parse_mix("healthy", &defaults),
        Err(MixError::Malformed("healthy".into()))
    );
    assert_eq!(
        parse_mix("sleepy=3", &defaults),
        Err(MixError::UnknownKind { key: "sleepy".into() })
    );
    assert_eq!(
        parse_mix("healthy=-1", &defaults),
        Err(MixError::BadWeight {
            key: "healthy".into(),
            value: "-1".into()
        })
    );
    assert_eq!(
        parse_mix("hung=1,hung=2", &defaults),
        Err(MixError::Duplicate("hung".into()))
    );
    assert_eq!(parse_mix("healthy=0", &defaults), Err(MixError::NoWeight));
    assert_eq!(parse_mix("", &defaults), Err(MixError::NoWeight));
}

#[tokio::test]
async fn prometheus_format_serves_text_exposition_to_healthy_answers_only() {
    let instances = vec![
        ("a".to_string(), Behaviour::Healthy),
        ("b".to_string(), Behaviour::ServerError),
    ];
    let fleet = Fleet::start_with(loopback(), instances, BodyFormat::Prometheus)
        .await
        .expect("start fleet");
    let ok = get(&fleet.url("a")).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = String::from_utf8(ok.body).expect("UTF-8");
    assert_eq!(
        text,
        "# TYPE fleet_up gauge\nfleet_up 1\n# TYPE fleet_info gauge\nfleet_info{instance_name=\"a\",status=\"ok\"} 1\n"
    );
    let failing = get(&fleet.url("b")).await;
    assert_eq!(failing.status, 500);
    assert_eq!(failing.header("content-type"), Some("application/json"));
    fleet.stop().await;
}

#[tokio::test]
async fn a_simulating_member_answers_the_simulated_api_below_its_prefix() {
    let fleet = Fleet::start_members(
        loopback(),
        vec![
            Member::simulating("lab", Behaviour::Healthy, sim::SimApi::Pve),
            Member::new("plain", Behaviour::Healthy),
        ],
        BodyFormat::Json,
    )
    .await
    .expect("start fleet");
    let tick = 0; // the test runs well within the first SIM_TICK
    let resources = get(&format!("{}/api2/json/cluster/resources?type=vm", fleet.url("lab"))).await;
    assert_eq!(resources.status, 200);
    assert_eq!(resources.header("content-type"), Some("application/json"));
    let expected = sim::answer(sim::SimApi::Pve, "/api2/json/cluster/resources", "type=vm", tick).expect("body");
    assert_eq!(resources.json(), expected);
    // A path the simulated API does not have: 404 JSON.
    let missing = get(&format!("{}/api2/json/nope", fleet.url("lab"))).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["instance"], "lab");
    // Other members keep the generic body.
    let plain = get(&format!("{}/api2/json/version", fleet.url("plain"))).await;
    assert_eq!(plain.json(), json!({"instance": "plain", "status": "ok"}));
    // A behaviour other than a healthy answer wins over the simulation.
    let snippet = fleet.config_snippet();
    assert!(snippet.contains("name = \"lab\"\ntype = \"pve\""), "{snippet}");
    assert!(snippet.contains("name = \"plain\"\ntype = \"http\""), "{snippet}");
    assert!(fleet.set("lab", Behaviour::ServerError));
    assert_eq!(
        get(&format!("{}/api2/json/version", fleet.url("lab"))).await.status,
        500
    );
    assert_eq!(fleet.hits("lab"), 3);
}

#[test]
fn pairs_convert_to_plain_members() {
    let m: Member = ("a".to_string(), Behaviour::Healthy).into();
    assert_eq!(m, Member::new("a", Behaviour::Healthy));
    assert_eq!(m.sim, None);
}
