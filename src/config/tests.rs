//! Tests for loading, validation and environment overrides.

use super::*;
use crate::model::{Auth, Profile, SchedulerMode};
use std::io::Write;
use std::time::Duration;

/// The example of SPEC §7, with a `pve` type so the `pve/storage` pin resolves.
const EXAMPLE: &str = r#"
[server]
listen = "0.0.0.0:7655"
metrics_listen = "0.0.0.0:9091"
data_dir = "/var/lib/pollster"

[adaptive]
enabled = true
base_interval = "10s"
min_interval = "5s"
max_interval = "5m"

[scheduler]
mode = "adaptive"           # or "fixed"
workers = 16
target_utilization = 0.7    # 0.1–1.0
max_stretch_factor = 4.0    # 1–16
max_interval = "1h"
resolve_interval = "15m"
aimd_enabled = true
aimd_backoff_multiplier = 0.5
aimd_recovery_rps_per_minute = 0.1
profile = "full"            # optional: availability | standard | full
state_flush_interval = "1s"
group_interval_overrides = { "pve/storage" = "15m" }   # "type/group" = interval

[failure]
backoff_initial = "5s"
backoff_multiplier = 2.0
backoff_jitter = 0.2
backoff_max = "5m"
breaker_threshold = 3
dead_letter_after = 5
dead_letter_recheck = "30m"

[sink]
url = "https://collector.example/ingest"
headers = { Authorization = "Bearer s3cret" }
batch_size = 1000
buffering = "2s"
retry_limit = "10m"
queue_limit = 100000

[[budgets]]
name = "meraki-org"
requests_per_second = 10.0
shared_fraction = 0.8
burst = 10

[[types]]
name = "myapi"
[[types.groups]]
name = "status"
path = "/status"
priority = 1
floor = "30s"
cost = 1

[[types]]
name = "pve"
[[types.groups]]
name = "storage"
path = "/api2/json/cluster/resources?type=storage"
priority = 3
floor = "1m"
cost = 2.5

[[instances]]
name = "web-1"
type = "http"
url = "http://127.0.0.1:8080/health"
timeout = "10s"
budget = "meraki-org"       # optional
labels = { critical = "true" }
"#;

/// A file in a temporary directory; the directory lives as long as the value.
struct TempConfig {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TempConfig {
    fn new(text: &str) -> TempConfig {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pollster.toml");
        let mut f = std::fs::File::create(&path).expect("create config");
        f.write_all(text.as_bytes()).expect("write config");
        TempConfig { _dir: dir, path }
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

fn no_env() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn load_text(text: &str, env: &BTreeMap<String, String>) -> (TempConfig, Result<Config, ConfigError>) {
    let tc = TempConfig::new(text);
    let r = load(Some(&tc.path), env);
    (tc, r)
}

/// Load `text`, expect an error, and check that its file, key and value are
/// the given ones and that its one-line message shows all three.
fn expect_file_error(text: &str, key: &str, value: &str) -> ConfigError {
    let (tc, r) = load_text(text, &no_env());
    let e = match r {
        Ok(_) => panic!("expected an error at {key}"),
        Err(e) => e,
    };
    assert_eq!(e.file, tc.name(), "{e}");
    assert_eq!(e.key, key, "{e}");
    assert_eq!(e.value, value, "{e}");
    let shown = e.to_string();
    assert!(!shown.contains('\n'), "one line: {shown}");
    assert!(shown.starts_with(&format!("{}: {key}", tc.name())), "{shown}");
    if !value.is_empty() {
        assert!(shown.contains(&format!("{key} = {value}: ")), "{shown}");
    }
    e
}

fn expect_env_error(text: &str, env: &[(&str, &str)], key: &str, value: &str) -> ConfigError {
    let (_tc, r) = load_text(text, &env_of(env));
    let e = match r {
        Ok(_) => panic!("expected an error at {key}"),
        Err(e) => e,
    };
    assert_eq!(e.file, "environment", "{e}");
    assert_eq!(e.key, key, "{e}");
    assert_eq!(e.value, value, "{e}");
    assert!(
        e.to_string().starts_with(&format!("environment: {key} = {value}: ")),
        "{e}"
    );
    e
}

// ---------------------------------------------------------------- the example

#[test]
fn full_example_loads_with_every_value() {
    let (tc, r) = load_text(EXAMPLE, &no_env());
    let c = r.expect("example is valid");
    assert_eq!(c.file.as_deref(), Some(tc.path.as_path()));
    assert!(c.warnings.is_empty());
    assert!(c.env.is_empty());
    assert_eq!(c.admin_password, None);

    assert_eq!(c.server.listen, "0.0.0.0:7655".parse().expect("addr"));
    assert_eq!(c.server.metrics_listen, "0.0.0.0:9091".parse().expect("addr"));
    assert_eq!(c.server.data_dir, PathBuf::from("/var/lib/pollster"));

    let m = &c.monitoring_file;
    assert!(m.adaptive.enabled);
    assert_eq!(m.adaptive.base_interval, Duration::from_secs(10));
    assert_eq!(m.adaptive.min_interval, Duration::from_secs(5));
    assert_eq!(m.adaptive.max_interval, Duration::from_secs(300));
    let s = &m.scheduler;
    assert_eq!(s.mode, SchedulerMode::Adaptive);
    assert_eq!(s.workers, 16);
    assert_eq!(s.target_utilization, 0.7);
    assert_eq!(s.max_stretch_factor, 4.0);
    assert_eq!(s.max_interval, Duration::from_secs(3600));
    assert_eq!(s.resolve_interval, Duration::from_secs(900));
    assert!(s.aimd_enabled);
    assert_eq!(s.aimd_backoff_multiplier, 0.5);
    assert_eq!(s.aimd_recovery_rps_per_minute, 0.1);
    assert_eq!(s.profile, Some(Profile::Full));
    assert_eq!(s.state_flush_interval, Duration::from_secs(1));
    assert_eq!(
        s.group_interval_overrides,
        BTreeMap::from([("pve/storage".to_string(), Duration::from_secs(900))])
    );
    let f = &m.failure;
    assert_eq!(f.backoff_initial, Duration::from_secs(5));
    assert_eq!(f.backoff_multiplier, 2.0);
    assert_eq!(f.backoff_jitter, 0.2);
    assert_eq!(f.backoff_max, Duration::from_secs(300));
    assert_eq!(f.breaker_threshold, 3);
    assert_eq!(f.dead_letter_after, 5);
    assert_eq!(f.dead_letter_recheck, Duration::from_secs(1800));

    let sink = c.sink.as_ref().expect("sink");
    assert_eq!(sink.url, "https://collector.example/ingest");
    assert_eq!(
        sink.headers.get("Authorization").map(String::as_str),
        Some("Bearer s3cret")
    );
    assert_eq!(sink.batch_size, 1000);
    assert_eq!(sink.buffering, Duration::from_secs(2));
    assert_eq!(sink.retry_limit, Duration::from_secs(600));
    assert_eq!(sink.queue_limit, 100_000);
    assert!(!sink.gzip);

    assert_eq!(
        c.budgets,
        vec![BudgetConfig {
            name: "meraki-org".into(),
            requests_per_second: 10.0,
            shared_fraction: 0.8,
            burst: 10,
        }]
    );

    assert_eq!(c.types.len(), 2);
    let t = &c.types[0];
    assert_eq!(t.name, "myapi");
    assert_eq!(t.groups.len(), 1);
    let g = &t.groups[0];
    assert_eq!(
        (g.name.as_str(), g.path.as_str(), g.priority, g.floor, g.cost),
        ("status", "/status", 1, Duration::from_secs(30), 1.0)
    );
    assert!(g.gated);
    assert_eq!(c.types[1].groups[0].cost, 2.5);

    assert_eq!(c.instances.len(), 1);
    let i = &c.instances[0];
    assert_eq!(i.name, "web-1");
    assert_eq!(i.type_name, "http");
    assert_eq!(i.url, "http://127.0.0.1:8080/health");
    assert_eq!(i.timeout, Duration::from_secs(10));
    assert_eq!(i.budget.as_deref(), Some("meraki-org"));
    assert_eq!(i.labels, BTreeMap::from([("critical".to_string(), "true".to_string())]));
    assert!(i.enabled);
    assert_eq!(i.auth, Auth::None {});

    // With no environment the effective settings are the file's.
    assert_eq!(&c.monitoring(), m);
}

#[test]
fn no_file_gives_defaults_and_env_still_applies() {
    let c = load(None, &no_env()).expect("defaults");
    assert_eq!(c.file, None);
    assert_eq!(c.server, ServerConfig::default());
    assert_eq!(c.server.data_dir, PathBuf::from("./data"));
    assert_eq!(c.server.listen.to_string(), "0.0.0.0:7655");
    assert_eq!(c.server.metrics_listen.to_string(), "0.0.0.0:9091");
    assert_eq!(c.monitoring_file, MonitoringSettings::default());
    assert!(c.sink.is_none() && c.budgets.is_empty() && c.types.is_empty());
    assert!(c.instances.is_empty());

    let c = load(None, &env_of(&[("POLLSTER_SCHEDULER_WORKERS", "4")])).expect("env only");
    assert_eq!(c.monitoring_file.scheduler.workers, 16);
    assert_eq!(c.monitoring().scheduler.workers, 4);
}

#[test]
fn empty_file_is_all_defaults_and_sections_are_partial() {
    let (_tc, r) = load_text("", &no_env());
    let c = r.expect("empty file");
    assert_eq!(c.monitoring_file, MonitoringSettings::default());
    assert_eq!(c.server.data_dir, PathBuf::from("./data"));

    let (_tc, r) = load_text("[scheduler]\nworkers = 3\n", &no_env());
    let c = r.expect("partial");
    assert_eq!(c.monitoring_file.scheduler.workers, 3);
    assert_eq!(c.monitoring_file.scheduler.target_utilization, 0.7);
}

// ---------------------------------------------------------------- file errors

#[test]
fn missing_file_names_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nope.toml");
    let e = load(Some(&path), &no_env()).expect_err("missing file");
    assert_eq!(e.file, path.display().to_string());
    assert!(e.message.contains("cannot read config file"), "{e}");
    assert!(e.to_string().starts_with(&path.display().to_string()));
}

#[test]
fn syntax_error_names_file_and_line() {
    let text = "[scheduler]\nworkers = 4\ntarget_utilization = = 0.5\n";
    let (tc, r) = load_text(text, &no_env());
    let e = r.expect_err("syntax");
    assert_eq!(e.file, tc.name());
    assert!(e.message.contains("line 3"), "{e}");
    assert!(e.message.starts_with("TOML syntax error"), "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");
}

#[test]
fn duplicate_toml_key_is_a_syntax_error_with_line() {
    let (_tc, r) = load_text("[failure]\nbreaker_threshold = 3\n\nbreaker_threshold = 4\n", &no_env());
    let e = r.expect_err("duplicate key");
    assert!(e.message.contains("line 4"), "{e}");
}

#[test]
fn unknown_key_names_full_path_and_suggests() {
    let e = expect_file_error("[scheduler]\nwokers = 32\n", "scheduler.wokers", "32");
    assert!(e.message.contains("unknown key"), "{e}");
    assert!(e.message.contains("did you mean scheduler.workers?"), "{e}");
    assert!(e.message.contains("line 2"), "{e}");
}

#[test]
fn unknown_section_and_nested_keys() {
    let e = expect_file_error("[sheduler]\nworkers = 4\n", "sheduler", "{ workers = 4 }");
    assert!(e.message.contains("did you mean scheduler?"), "{e}");

    let text = format!("{EXAMPLE}\n[[instances]]\nname = \"b\"\nurl = \"http://b\"\ntimout = \"5s\"\n");
    let e = expect_file_error(&text, "instances[1].timout", "\"5s\"");
    assert!(e.message.contains("did you mean instances[1].timeout?"), "{e}");

    let text = "[[types]]\nname = \"t\"\n[[types.groups]]\nname = \"g\"\nflor = \"1s\"\n";
    let e = expect_file_error(text, "types[0].groups[0].flor", "\"1s\"");
    assert!(e.message.contains("did you mean types[0].groups[0].floor?"), "{e}");

    // Nothing close: list what is known instead of guessing.
    let e = expect_file_error("[server]\nzzzzzzzz = 1\n", "server.zzzzzzzz", "1");
    assert!(
        e.message.contains("known keys here: listen, metrics_listen, data_dir"),
        "{e}"
    );
}

#[test]
fn bad_duration_names_key_and_value() {
    let e = expect_file_error(
        "[failure]\nbackoff_max = \"5 parsecs\"\n",
        "failure.backoff_max",
        "\"5 parsecs\"",
    );
    assert!(e.message.contains("invalid duration"), "{e}");
    expect_file_error("[adaptive]\nbase_interval = 10\n", "adaptive.base_interval", "10");
}

#[test]
fn wrong_types_and_unknown_variants() {
    expect_file_error("[scheduler]\nworkers = \"many\"\n", "scheduler.workers", "\"many\"");
    let e = expect_file_error("[scheduler]\nprofile = \"ful\"\n", "scheduler.profile", "\"ful\"");
    assert!(e.message.contains("did you mean \"full\"?"), "{e}");
    let e = expect_file_error("[scheduler]\nmode = \"sometimes\"\n", "scheduler.mode", "\"sometimes\"");
    assert!(e.message.contains("adaptive, fixed"), "{e}");
    expect_file_error("[server]\nlisten = \"localhost\"\n", "server.listen", "\"localhost\"");
}

#[test]
fn missing_required_key() {
    let e = expect_file_error("[[instances]]\nname = \"a\"\n", "instances[0].url", "");
    assert!(e.message.contains("required key is missing"), "{e}");
    assert_eq!(e.to_string(), format!("{}: instances[0].url: {}", e.file, e.message));
}

#[test]
fn min_above_base_matches_the_documented_message() {
    let text = "[adaptive]\nmin_interval = \"20s\"\n";
    let (tc, r) = load_text(text, &no_env());
    let e = r.expect_err("min > base");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: adaptive.min_interval = \"20s\": must not exceed base_interval (10s)",
            tc.name()
        )
    );
}

#[test]
fn out_of_range_values() {
    expect_file_error("[scheduler]\nworkers = 0\n", "scheduler.workers", "0");
    expect_file_error(
        "[scheduler]\ntarget_utilization = 1.5\n",
        "scheduler.target_utilization",
        "1.5",
    );
    expect_file_error(
        "[adaptive]\nbase_interval = \"10m\"\n",
        "adaptive.base_interval",
        "\"10m\"",
    );
}

#[test]
fn type_errors() {
    let e = expect_file_error("[[types]]\nname = \"empty\"\n", "types[0].groups", "[]");
    assert!(e.message.contains("at least one group"), "{e}");

    let group = "[[types.groups]]\nname = \"g\"\n";
    let e = expect_file_error(
        &format!("[[types]]\nname = \"http\"\n{group}"),
        "types[0].name",
        "\"http\"",
    );
    assert!(e.message.contains("built-in"), "{e}");

    let twice = format!("[[types]]\nname = \"a\"\n{group}[[types]]\nname = \"a\"\n{group}");
    let e = expect_file_error(&twice, "types[1].name", "\"a\"");
    assert!(e.message.contains("duplicate type"), "{e}");

    let bad_priority = "[[types]]\nname = \"a\"\n[[types.groups]]\nname = \"g\"\npriority = 7\n";
    expect_file_error(bad_priority, "types[0].groups[0].priority", "7");
}

#[test]
fn value_rule_errors_name_the_rule_key_type_and_group() {
    let group = "[[types]]\nname = \"pve\"\n[[types.groups]]\nname = \"resources\"\npath = \"/r\"\n";
    let bad_label = format!(
        "{group}[[types.groups.values]]\nmetric = \"pve_up\"\nvalue = \"/status\"\nlabels = {{ instance = \"/id\" }}\n"
    );
    let e = expect_file_error(
        &bad_label,
        "types[0].groups[0].values[0].labels.instance",
        "\"instance\"",
    );
    assert!(e.message.contains("type pve, group resources, rule 0: pve_up"), "{e}");

    let bad_pointer = format!("{group}[[types.groups.values]]\nmetric = \"pve_up\"\nvalue = \"status\"\n");
    let e = expect_file_error(&bad_pointer, "types[0].groups[0].values[0].value", "\"status\"");
    assert!(e.message.contains("JSON pointer"), "{e}");

    let unknown_key = format!("{group}[[types.groups.values]]\nmetric = \"pve_up\"\nvalue = \"/s\"\nlable = {{}}\n");
    let (_, r) = load_text(&unknown_key, &no_env());
    assert!(r.expect_err("unknown key").to_string().contains("lable"));

    let clash = format!(
        "{group}[[types.groups.values]]\nmetric = \"pve_up\"\nvalue = \"/a\"\nlabels = {{ id = \"/id\" }}\n\
         [[types.groups.values]]\nmetric = \"pve_up\"\nvalue = \"/b\"\nlabels = {{ name = \"/n\" }}\n"
    );
    let e = expect_file_error(&clash, "types[0].groups[0].values[1].metric", "\"pve_up\"");
    assert!(e.message.contains("types[0].groups[0].values[0]"), "{e}");

    let no_each = format!("{group}[[types.groups.values]]\nmetric = \"poe\"\nvalue = \"/w\"\naggregate = \"sum\"\n");
    let e = expect_file_error(&no_each, "types[0].groups[0].values[0].aggregate", "\"sum\"");
    assert!(e.message.contains("set each"), "{e}");
    let bad_slug =
        format!("{group}[[types.groups.values]]\nmetric = \"usage\"\nvalue = \"/t\"\nslug = [\"category\"]\n");
    let e = expect_file_error(&bad_slug, "types[0].groups[0].values[0].slug", "\"category\"");
    assert!(e.message.contains("names no label"), "{e}");

    let limit = format!("{group}max_series = 0\n");
    expect_file_error(&limit, "types[0].groups[0].max_series", "0");

    // A fan-out's lookup table reads its items' fields; `many` names one.
    let fan_out = "[[types]]\nname = \"meraki\"\n[[types.groups]]\nname = \"nets\"\npath = \"/networks\"\n\
                   shape_from = \"\"\nitem_fields = [\"id\", \"name\"]\n\
                   [[types.groups]]\nname = \"ssids\"\npath = \"/networks/{item.id}/ssids\"\nfan_out = \"nets\"\n";
    let table = |fields: &str, many: &str| {
        format!(
            "{fan_out}lookups = {{ ssid = {{ each = \"\", key = \"/name\", fields = {{ {fields} }}, many = {{ {many} }} }} }}\n"
        )
    };
    let good = table("id = \"@item.id\", name = \"@item.name\"", "id = \"multiple\"");
    load_text(&good, &no_env())
        .1
        .expect("a fan-out table of the items' fields");
    let e = expect_file_error(
        &table("id = \"@item.zone\"", ""),
        "types[0].groups[1].lookups.ssid.fields.id",
        "\"@item.zone\"",
    );
    assert!(e.message.contains("item_fields are id, name"), "{e}");
    let e = expect_file_error(
        &table("id = \"@item.id\"", "name = \"multiple_({@count}_networks)\""),
        "types[0].groups[1].lookups.ssid.many.name",
        "\"multiple_({@count}_networks)\"",
    );
    assert!(e.message.contains("not a field of the table"), "{e}");
}

#[test]
fn instance_errors() {
    let one = "[[instances]]\nname = \"a\"\nurl = \"http://a\"\n";

    let text = format!("{one}[[instances]]\nname = \"b\"\nurl = \"ftp://b\"\n");
    let e = expect_file_error(&text, "instances[1].url", "\"ftp://b\"");
    assert!(e.message.contains("http"), "{e}");

    let text = format!("{one}{one}");
    let e = expect_file_error(&text, "instances[1].name", "\"a\"");
    assert!(e.message.contains("duplicate instance name"), "{e}");

    let text = format!("{one}type = \"nosuch\"\n");
    let e = expect_file_error(&text, "instances[0].type", "\"nosuch\"");
    assert!(
        e.message.contains("unknown type (known: http, meraki, pbs, pmg, pve)"),
        "{e}"
    );

    let text = format!("{one}budget = \"org\"\n");
    let e = expect_file_error(&text, "instances[0].budget", "\"org\"");
    assert!(e.message.contains("unknown budget"), "{e}");

    let text = format!("{one}timeout = \"250ms\"\nmax_response_bytes = 0\n");
    expect_file_error(&text, "instances[0].max_response_bytes", "0");
}

#[test]
fn instance_secrets_never_appear_in_errors() {
    let text = "[[instances]]\nname = \"a\"\nurl = \"http://a\"\n\
                auth = { kind = \"bearer\", token = \"hunter2\", tokn = \"hunter3\" }\n";
    let (_tc, r) = load_text(text, &no_env());
    let e = r.expect_err("unknown auth key");
    assert!(!e.to_string().contains("hunter"), "{e}");

    let text = "[[instances]]\nname = \"a\"\nurl = \"http://a\"\n\
                auth = { kind = \"basic\", username = \"u:x\", password = \"hunter2\" }\n";
    let e = expect_file_error(text, "instances[0].auth.username", "\"u:x\"");
    assert!(!e.to_string().contains("hunter"), "{e}");

    let text = "[sink]\nurl = \"http://s\"\nheaders = { \"X-Key\" = \"hunter2\\n\" }\n";
    let e = expect_file_error(text, "sink.headers.X-Key", "(hidden)");
    assert!(!e.to_string().contains("hunter"), "{e}");
}

#[test]
fn budget_errors() {
    let b = |body: &str| format!("[[budgets]]\nname = \"p\"\n{body}\n");
    expect_file_error(&b("requests_per_second = 0.0"), "budgets[0].requests_per_second", "0");
    expect_file_error(&b("requests_per_second = -1.0"), "budgets[0].requests_per_second", "-1");
    expect_file_error(&b("requests_per_second = nan"), "budgets[0].requests_per_second", "NaN");
    // The API's limit holds for the file too, so a pool the file sets can be
    // edited over the API (an invariant the config fuzz target checks).
    expect_file_error(
        &b("requests_per_second = 2e6"),
        "budgets[0].requests_per_second",
        "2000000",
    );
    assert!(load_text(&b("requests_per_second = 1e6"), &no_env()).1.is_ok());
    expect_file_error(
        &b("requests_per_second = 1.0\nshared_fraction = 1.5"),
        "budgets[0].shared_fraction",
        "1.5",
    );
    expect_file_error(
        &b("requests_per_second = 1.0\nshared_fraction = 0.0"),
        "budgets[0].shared_fraction",
        "0",
    );
    expect_file_error(&b("requests_per_second = 1.0\nburst = 0"), "budgets[0].burst", "0");
    expect_file_error(&b("requests_per_second = 1.0\nburst = 101"), "budgets[0].burst", "101");
    let twice = format!("{}{}", b("requests_per_second = 1.0"), b("requests_per_second = 2.0"));
    let e = expect_file_error(&twice, "budgets[1].name", "\"p\"");
    assert!(e.message.contains("duplicate"), "{e}");
    let bad = "[[budgets]]\nname = \"-p\"\nrequests_per_second = 1.0\n";
    expect_file_error(bad, "budgets[0].name", "\"-p\"");
}

#[test]
fn pins_must_name_an_existing_type_and_group() {
    let e = expect_file_error(
        "[scheduler]\ngroup_interval_overrides = { \"nosuch/storage\" = \"15m\" }\n",
        "scheduler.group_interval_overrides.nosuch/storage",
        "\"15m\"",
    );
    assert!(e.message.contains("no type \"nosuch\""), "{e}");
    // The example of the product documentation pins a shipped preset's group.
    let (_tc, r) = load_text(
        "[scheduler]\ngroup_interval_overrides = { \"pve/storage\" = \"15m\" }\n",
        &no_env(),
    );
    assert!(r.is_ok(), "{r:?}");

    let e = expect_file_error(
        "[scheduler]\ngroup_interval_overrides = { \"http/prob\" = \"1m\" }\n",
        "scheduler.group_interval_overrides.http/prob",
        "\"1m\"",
    );
    assert!(e.message.contains("has no group \"prob\" (its groups: probe)"), "{e}");

    let (_tc, r) = load_text(
        "[scheduler]\ngroup_interval_overrides = { \"http/probe\" = \"30s\" }\n",
        &no_env(),
    );
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn sink_errors() {
    let e = expect_file_error("[sink]\nurl = \"file:///tmp/x\"\n", "sink.url", "\"file:///tmp/x\"");
    assert!(e.message.contains("http"), "{e}");
    expect_file_error("[sink]\nurl = \"http://s\"\nbatch_size = 0\n", "sink.batch_size", "0");
    let e = expect_file_error(
        "[sink]\nurl = \"http://s\"\nbufering = \"1s\"\n",
        "sink.bufering",
        "\"1s\"",
    );
    assert!(e.message.contains("did you mean sink.buffering?"), "{e}");
    expect_file_error("[sink]\nbatch_size = 5\n", "sink.url", "");
}

#[test]
fn presets_are_known_types() {
    let text = "[[instances]]\nname = \"n1\"\ntype = \"pve\"\nurl = \"https://n1:8006\"\n";
    let tc = TempConfig::new(text);
    let c = load(Some(&tc.path), &no_env()).expect("shipped preset known");
    assert_eq!(c.instances[0].type_name, "pve");
    assert!(c.types.is_empty(), "presets are not file types");
    // Without the presets, the type is unknown.
    assert!(load_with_presets(Some(&tc.path), &no_env(), &[]).is_err());
}

// ---------------------------------------------------------------- durations

#[test]
fn sub_second_durations_are_accepted() {
    let text = "[failure]\nbackoff_initial = \"250ms\"\nbackoff_max = \"1s\"\n\
                dead_letter_recheck = \"500ms\"\n[scheduler]\nstate_flush_interval = \"10ms\"\n";
    let (_tc, r) = load_text(text, &env_of(&[("POLLSTER_FAILURE_BACKOFF_MAX", "750ms")]));
    let c = r.expect("sub-second");
    let f = &c.monitoring_file.failure;
    assert_eq!(f.backoff_initial, Duration::from_millis(250));
    assert_eq!(f.backoff_max, Duration::from_secs(1));
    assert_eq!(f.dead_letter_recheck, Duration::from_millis(500));
    assert_eq!(
        c.monitoring_file.scheduler.state_flush_interval,
        Duration::from_millis(10)
    );
    assert_eq!(c.monitoring().failure.backoff_max, Duration::from_millis(750));
}

// ---------------------------------------------------------------- environment

#[test]
fn env_overrides_file_and_saved_settings_and_is_locked() {
    let env = env_of(&[
        ("ADAPTIVE_POLLING_ENABLED", "no"),
        ("ADAPTIVE_POLLING_BASE_INTERVAL", "20s"),
        ("POLLSTER_SCHEDULER_WORKERS", "8"),
        ("POLLSTER_SCHEDULER_PROFILE", "standard"),
        ("POLLSTER_SCHEDULER_MODE", "fixed"),
        ("POLLSTER_FAILURE_BACKOFF_JITTER", "0.1"),
    ]);
    let (_tc, r) = load_text(EXAMPLE, &env);
    let c = r.expect("valid");

    // The file layer is untouched by the environment.
    assert!(c.monitoring_file.adaptive.enabled);
    assert_eq!(c.monitoring_file.scheduler.workers, 16);

    // Saved-from-UI values sit between: env wins where set, saved elsewhere.
    let mut saved = c.monitoring_file.clone();
    saved.scheduler.workers = 32;
    saved.scheduler.target_utilization = 0.5;
    saved.failure.breaker_threshold = 7;
    c.env.apply(&mut saved);
    assert!(!saved.adaptive.enabled);
    assert_eq!(saved.adaptive.base_interval, Duration::from_secs(20));
    assert_eq!(saved.scheduler.workers, 8);
    assert_eq!(saved.scheduler.profile, Some(Profile::Standard));
    assert_eq!(saved.scheduler.mode, SchedulerMode::Fixed);
    assert_eq!(saved.failure.backoff_jitter, 0.1);
    assert_eq!(saved.scheduler.target_utilization, 0.5);
    assert_eq!(saved.failure.breaker_threshold, 7);

    let expected: BTreeMap<String, String> = [
        ("adaptive.enabled", "ADAPTIVE_POLLING_ENABLED"),
        ("adaptive.base_interval", "ADAPTIVE_POLLING_BASE_INTERVAL"),
        ("scheduler.workers", "POLLSTER_SCHEDULER_WORKERS"),
        ("scheduler.profile", "POLLSTER_SCHEDULER_PROFILE"),
        ("scheduler.mode", "POLLSTER_SCHEDULER_MODE"),
        ("failure.backoff_jitter", "POLLSTER_FAILURE_BACKOFF_JITTER"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(c.env.locked(), expected);
    assert!(c.env.locked_sink().is_empty());
    assert_eq!(
        c.env.variable_for("scheduler.workers"),
        Some("POLLSTER_SCHEDULER_WORKERS")
    );
    assert_eq!(c.env.variable_for("scheduler.max_interval"), None);
}

#[test]
fn profile_none_clears_the_file_profile() {
    let (_tc, r) = load_text(EXAMPLE, &env_of(&[("POLLSTER_SCHEDULER_PROFILE", "none")]));
    let c = r.expect("valid");
    assert_eq!(c.monitoring_file.scheduler.profile, Some(Profile::Full));
    assert_eq!(c.monitoring().scheduler.profile, None);
}

#[test]
fn booleans_accept_all_spellings() {
    for (raw, want) in [
        ("true", true),
        ("false", false),
        ("1", true),
        ("0", false),
        ("yes", true),
        ("no", false),
        ("YES", true),
        ("False", false),
    ] {
        let c = load(None, &env_of(&[("POLLSTER_SCHEDULER_AIMD_ENABLED", raw)])).expect(raw);
        assert_eq!(c.monitoring().scheduler.aimd_enabled, want, "{raw}");
    }
    let e = load(None, &env_of(&[("ADAPTIVE_POLLING_ENABLED", "maybe")])).expect_err("maybe");
    assert_eq!(
        e.to_string(),
        "environment: ADAPTIVE_POLLING_ENABLED = \"maybe\": must be true, false, 1, 0, yes or no"
    );
}

#[test]
fn empty_variable_counts_as_unset() {
    let c = load(None, &env_of(&[("POLLSTER_SCHEDULER_WORKERS", "")])).expect("empty");
    assert!(c.env.is_empty());
    assert_eq!(c.monitoring().scheduler.workers, 16);
}

#[test]
fn bad_env_values_name_the_variable() {
    expect_env_error(
        "",
        &[("POLLSTER_SCHEDULER_WORKERS", "lots")],
        "POLLSTER_SCHEDULER_WORKERS",
        "\"lots\"",
    );
    expect_env_error(
        "",
        &[("POLLSTER_SCHEDULER_WORKERS", "-1")],
        "POLLSTER_SCHEDULER_WORKERS",
        "\"-1\"",
    );
    let e = expect_env_error(
        "",
        &[("ADAPTIVE_POLLING_MAX_INTERVAL", "5 fortnights")],
        "ADAPTIVE_POLLING_MAX_INTERVAL",
        "\"5 fortnights\"",
    );
    assert!(e.message.contains("invalid duration"), "{e}");
    expect_env_error(
        "",
        &[("POLLSTER_SCHEDULER_TARGET_UTILIZATION", "inf")],
        "POLLSTER_SCHEDULER_TARGET_UTILIZATION",
        "\"inf\"",
    );
    expect_env_error("", &[("POLLSTER_LISTEN", "7655")], "POLLSTER_LISTEN", "\"7655\"");
    expect_env_error(
        "",
        &[("POLLSTER_SINK_URL", "not a url")],
        "POLLSTER_SINK_URL",
        "\"not a url\"",
    );
}

#[test]
fn env_values_are_validated_after_applying() {
    // Out of range for the field the variable sets.
    let e = expect_env_error(
        EXAMPLE,
        &[("POLLSTER_SCHEDULER_TARGET_UTILIZATION", "0.05")],
        "POLLSTER_SCHEDULER_TARGET_UTILIZATION",
        "\"0.05\"",
    );
    assert!(e.message.contains("between 0.1 and 1"), "{e}");
    let e = expect_env_error(
        EXAMPLE,
        &[("ADAPTIVE_POLLING_MIN_INTERVAL", "20s")],
        "ADAPTIVE_POLLING_MIN_INTERVAL",
        "\"20s\"",
    );
    assert!(e.message.contains("must not exceed base_interval (10s)"), "{e}");

    // A cross-field rule broken by a variable that sets the other field.
    let (_tc, r) = load_text(EXAMPLE, &env_of(&[("ADAPTIVE_POLLING_BASE_INTERVAL", "2s")]));
    let e = r.expect_err("min > base after env");
    assert_eq!(e.file, "environment");
    assert_eq!(e.key, "adaptive.min_interval");
    assert!(e.message.contains("ADAPTIVE_POLLING_BASE_INTERVAL"), "{e}");
}

#[test]
fn server_env() {
    let env = env_of(&[
        ("POLLSTER_LISTEN", "127.0.0.1:8000"),
        ("POLLSTER_METRICS_LISTEN", "[::1]:9100"),
        ("POLLSTER_DATA_DIR", "/srv/pollster"),
    ]);
    let (_tc, r) = load_text(EXAMPLE, &env);
    let c = r.expect("valid");
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8000");
    assert_eq!(c.server.metrics_listen.to_string(), "[::1]:9100");
    assert_eq!(c.server.data_dir, PathBuf::from("/srv/pollster"));
}

#[test]
fn sink_url_alone_enables_the_sink() {
    let env = env_of(&[
        ("POLLSTER_SINK_URL", "http://vector:8080/"),
        ("POLLSTER_SINK_GZIP", "yes"),
    ]);
    let c = load(None, &env).expect("sink from env");
    let s = c.sink.as_ref().expect("sink");
    assert_eq!(s.url, "http://vector:8080/");
    assert!(s.gzip);
    assert_eq!(s.batch_size, 1000);
    assert_eq!(s.buffering, Duration::from_secs(2));
    assert_eq!(
        c.env.locked_sink().get("sink.url").map(String::as_str),
        Some("POLLSTER_SINK_URL")
    );
    assert!(c.env.locked().is_empty(), "sink fields are not monitoring fields");

    // Overrides a file sink field by field.
    let (_tc, r) = load_text(EXAMPLE, &env_of(&[("POLLSTER_SINK_BATCH_SIZE", "50")]));
    let c = r.expect("valid");
    let s = c.sink.as_ref().expect("sink");
    assert_eq!((s.batch_size, s.url.as_str()), (50, "https://collector.example/ingest"));

    // Out of range from the environment names the variable.
    expect_env_error(
        EXAMPLE,
        &[("POLLSTER_SINK_BATCH_SIZE", "0")],
        "POLLSTER_SINK_BATCH_SIZE",
        "\"0\"",
    );

    // Without any url the other variables are ignored, with a warning.
    let c = load(None, &env_of(&[("POLLSTER_SINK_BATCH_SIZE", "50")])).expect("ignored");
    assert!(c.sink.is_none());
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0].contains("POLLSTER_SINK_BATCH_SIZE is ignored"),
        "{:?}",
        c.warnings
    );
}

#[test]
fn unknown_pollster_variable_warns_with_suggestion() {
    let env = env_of(&[
        ("POLLSTER_SCHEDULER_WOKERS", "8"),
        ("POLLSTER_ADAPTIVE_ENABLED", "false"),
        ("HOME", "/root"),
        ("POLLSTER_SCHEDULER_WORKERS", "4"),
    ]);
    let c = load(None, &env).expect("warnings only");
    assert_eq!(
        c.warnings,
        vec![
            "unknown environment variable POLLSTER_ADAPTIVE_ENABLED (did you mean ADAPTIVE_POLLING_ENABLED?)"
                .to_string(),
            "unknown environment variable POLLSTER_SCHEDULER_WOKERS (did you mean POLLSTER_SCHEDULER_WORKERS?)"
                .to_string(),
        ]
    );
    // The misspelt variable changed nothing.
    assert_eq!(c.monitoring().scheduler.workers, 4);
}

#[test]
fn admin_password_is_read_and_never_debug_printed() {
    let c = load(None, &env_of(&[("POLLSTER_ADMIN_PASSWORD", "hunter2")])).expect("ok");
    assert_eq!(c.admin_password.as_deref(), Some("hunter2"));
    assert!(c.warnings.is_empty());
    assert!(!format!("{c:?}").contains("hunter2"));

    let (_tc, r) = load_text(EXAMPLE, &no_env());
    let c = r.expect("valid");
    assert!(!format!("{c:?}").contains("s3cret"), "sink header hidden");
}

#[test]
fn the_admin_password_may_come_from_a_systemd_credential() {
    let dir = tempfile::tempdir().expect("tempdir");
    let creds = dir.path().to_string_lossy().to_string();
    let c = load(None, &env_of(&[("CREDENTIALS_DIRECTORY", &creds)])).expect("ok");
    assert_eq!(c.admin_password, None, "no credential file: no password");
    std::fs::write(dir.path().join("admin_password"), "from-a-credential\n").expect("write");
    let c = load(None, &env_of(&[("CREDENTIALS_DIRECTORY", &creds)])).expect("ok");
    assert_eq!(c.admin_password.as_deref(), Some("from-a-credential"));
    let both = env_of(&[
        ("CREDENTIALS_DIRECTORY", &creds),
        ("POLLSTER_ADMIN_PASSWORD", "the-variable"),
    ]);
    assert_eq!(
        load(None, &both).expect("ok").admin_password.as_deref(),
        Some("the-variable")
    );
}

#[test]
fn trusted_proxies_are_addresses_or_ranges_and_a_bad_one_is_named() {
    let c = load(
        None,
        &env_of(&[("POLLSTER_TRUSTED_PROXIES", "10.0.0.5, 10.1.0.0/16,::1")]),
    )
    .expect("ok");
    assert_eq!(c.server.trusted_proxies.len(), 3);
    assert_eq!(c.server.proxy_nets().len(), 3);
    let err = load(None, &env_of(&[("POLLSTER_TRUSTED_PROXIES", "10.0.0.5,nope")])).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("POLLSTER_TRUSTED_PROXIES") && msg.contains("nope"),
        "{msg}"
    );
    let (_tc, r) = load_text("[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", &no_env());
    let msg = r.unwrap_err().to_string();
    assert!(
        msg.contains("server.trusted_proxies[0]") && msg.contains("10.0.0.0/33"),
        "{msg}"
    );
    // trust_proxy alone trusts loopback.
    let c = load(None, &env_of(&[("POLLSTER_TRUST_PROXY", "true")])).expect("ok");
    let nets = c.server.proxy_nets();
    assert!(
        nets.iter()
            .any(|n| n.contains(&"127.0.0.1".parse::<std::net::IpAddr>().expect("ip")))
    );
    assert!(
        !nets
            .iter()
            .any(|n| n.contains(&"10.0.0.1".parse::<std::net::IpAddr>().expect("ip")))
    );
}

#[test]
fn known_env_vars_cover_every_scalar_setting() {
    let known = known_env_vars();
    let mut unique = known.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), known.len(), "no duplicates");

    // Every leaf of the monitoring settings, except the pin map, has a variable.
    let json = serde_json::to_value(MonitoringSettings::default()).expect("json");
    let sections = json.as_object().expect("object");
    for (section, fields) in sections {
        for field in fields.as_object().expect("section").keys() {
            if field == "group_interval_overrides" {
                continue;
            }
            let var = if section == "adaptive" {
                format!("ADAPTIVE_POLLING_{}", field.to_uppercase())
            } else {
                format!("POLLSTER_{}_{}", section.to_uppercase(), field.to_uppercase())
            };
            assert!(known.contains(&var.as_str()), "{var} missing");
        }
    }
    // Sink scalars (not headers) and the server keys.
    let sink = serde_json::to_value(SinkConfig::new("http://x")).expect("json");
    for field in sink.as_object().expect("sink").keys() {
        if field != "headers" {
            let var = format!("POLLSTER_SINK_{}", field.to_uppercase());
            assert!(known.contains(&var.as_str()), "{var} missing");
        }
    }
    for var in [
        "POLLSTER_LISTEN",
        "POLLSTER_METRICS_LISTEN",
        "POLLSTER_DATA_DIR",
        "POLLSTER_TRUST_PROXY",
        "POLLSTER_TRUSTED_PROXIES",
        "POLLSTER_MAX_CONNECTIONS",
        "POLLSTER_MAX_CONNECTIONS_PER_CLIENT",
        "POLLSTER_TLS_CERT",
        "POLLSTER_TLS_KEY",
        "POLLSTER_METRICS_TLS_CERT",
        "POLLSTER_METRICS_TLS_KEY",
        "POLLSTER_METRICS_AUTH",
        "POLLSTER_ADMIN_PASSWORD",
        "POLLSTER_SECRET_KEY_FILE",
        "POLLSTER_LOG_FORMAT",
        "POLLSTER_LOG_LEVEL",
        "POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS",
        "POLLSTER_CLUSTER_NAME",
        "POLLSTER_CLUSTER_MEMBER",
        "POLLSTER_CLUSTER_LISTEN",
        "POLLSTER_CLUSTER_ADVERTISE",
        "POLLSTER_CLUSTER_SEEDS",
        "POLLSTER_CLUSTER_KEY_FILE",
        "POLLSTER_CLUSTER_MIN_MEMBERS",
        "POLLSTER_CLUSTER_GOSSIP_INTERVAL",
    ] {
        assert!(known.contains(&var), "{var} missing");
    }
    // And nothing else.
    assert_eq!(known.len(), 22 + 12 + 6 + 2 + 2 + 1 + 8);
}

#[test]
fn the_secret_key_file_comes_from_its_variable() {
    let c = load(None, &env_of(&[])).expect("ok");
    assert_eq!(c.secret_key_file, None);
    let c = load(
        None,
        &env_of(&[(
            "POLLSTER_SECRET_KEY_FILE",
            "/run/credentials/pollster.service/secret.key",
        )]),
    )
    .expect("ok");
    assert_eq!(
        c.secret_key_file.as_deref(),
        Some(std::path::Path::new("/run/credentials/pollster.service/secret.key"))
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn env_table_fields_match_their_variable_names() {
    for row in super::env::MONITORING_VARS {
        let (section, key) = row.field.split_once('.').expect("dotted");
        let want = if section == "adaptive" {
            format!("ADAPTIVE_POLLING_{}", key.to_uppercase())
        } else {
            format!("POLLSTER_{}_{}", section.to_uppercase(), key.to_uppercase())
        };
        assert_eq!(row.var, want);
    }
}

#[test]
fn error_display_forms() {
    let e = ConfigError::new("f.toml", "a.b", "\"x\"", "bad");
    assert_eq!(e.to_string(), "f.toml: a.b = \"x\": bad");
    let e = ConfigError::new("f.toml", "a.b", "", "missing");
    assert_eq!(e.to_string(), "f.toml: a.b: missing");
    let e = ConfigError::new("f.toml", "", "", "TOML syntax error at line 1, column 1: x");
    assert_eq!(e.to_string(), "f.toml: TOML syntax error at line 1, column 1: x");
}

#[test]
fn map_values_render_on_one_line_with_quoted_keys() {
    expect_file_error(
        "[scheduler]\ngroup_interval_overrides = { \"pve/storage\" = \"15x\" }\n",
        "scheduler.group_interval_overrides",
        "{ \"pve/storage\" = \"15x\" }",
    );
}

#[test]
fn validate_pins_checks_type_and_group() {
    let pins = |k: &str| BTreeMap::from([(k.to_string(), Duration::from_secs(60))]);
    let types = [TypeDef::builtin_http()];
    assert!(validate_pins(&pins("http/probe"), &types).is_ok());
    let e = validate_pins(&pins("http/nope"), &types).expect_err("no group");
    assert_eq!(e.field, "scheduler.group_interval_overrides.http/nope");
    assert_eq!(e.value, "1m");
    assert!(validate_pins(&pins("x/probe"), &types).is_err());
    assert!(validate_pins(&pins("noslash"), &types).is_err());
}

#[test]
fn the_environment_applies_over_a_sink_saved_from_the_ui() {
    let tc = TempConfig::new("[sink]\nurl = \"http://file:1/\"\nbatch_size = 10\n");
    let env = env_of(&[("POLLSTER_SINK_BATCH_SIZE", "5")]);
    let c = load(Some(&tc.path), &env).expect("loads");
    assert_eq!(c.sink_file.as_ref().map(|s| s.batch_size), Some(10), "file as written");
    assert_eq!(c.sink.as_ref().map(|s| s.batch_size), Some(5), "environment applied");
    let mut saved = SinkConfig::new("http://saved:2/");
    saved.batch_size = 50;
    saved.queue_limit = 7;
    let layered = c.env.apply_sink(Some(saved)).expect("a sink");
    assert_eq!(
        (layered.url.as_str(), layered.batch_size, layered.queue_limit),
        ("http://saved:2/", 5, 7)
    );
    // With no sink saved or in the file, POLLSTER_SINK_URL alone makes one.
    let c = load(None, &env_of(&[("POLLSTER_SINK_URL", "http://env:3/")])).expect("loads");
    assert_eq!(c.env.apply_sink(None).map(|s| s.url), Some("http://env:3/".to_string()));
    assert_eq!(load(None, &no_env()).expect("loads").env.apply_sink(None), None);
}

// ---------------------------------------------------------------- connection caps

#[test]
fn the_per_client_connection_cap_is_in_range_from_the_file_and_the_environment() {
    let c = load(None, &no_env()).expect("loads");
    assert_eq!(
        c.server.max_connections_per_client,
        crate::config::DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    );
    for bad in ["0", "65537"] {
        let e = expect_file_error(
            &format!("[server]\nmax_connections_per_client = {bad}\n"),
            "server.max_connections_per_client",
            bad,
        );
        assert!(e.message.contains("between 1 and 65536"), "{e}");
        expect_env_error(
            "",
            &[("POLLSTER_MAX_CONNECTIONS_PER_CLIENT", bad)],
            "POLLSTER_MAX_CONNECTIONS_PER_CLIENT",
            bad,
        );
    }
    let (_tc, c) = load_text("[server]\nmax_connections_per_client = 4\n", &no_env());
    assert_eq!(c.expect("loads").server.max_connections_per_client, 4);
    let (_tc, c) = load_text("", &env_of(&[("POLLSTER_MAX_CONNECTIONS_PER_CLIENT", "7")]));
    assert_eq!(c.expect("loads").server.max_connections_per_client, 7);
    // The timeouts are the product's, not the file's.
    expect_file_error("[server]\nconnection_timeouts = 1\n", "server.connection_timeouts", "1");
}

// ---------------------------------------------------------------- TLS and scrapes

#[test]
fn tls_keys_come_in_pairs_and_metrics_auth_is_none_or_token() {
    expect_file_error("[server]\ntls_cert = \"/x.crt\"\n", "server.tls_cert", "\"/x.crt\"");
    expect_file_error(
        "[server]\nmetrics_tls_key = \"/x.key\"\n",
        "server.metrics_tls_key",
        "\"/x.key\"",
    );
    let e = expect_file_error(
        "[server]\nmetrics_auth = \"basic\"\n",
        "server.metrics_auth",
        "\"basic\"",
    );
    assert!(e.message.contains("token"), "{e}");
    expect_env_error(
        "",
        &[("POLLSTER_METRICS_AUTH", "basic")],
        "POLLSTER_METRICS_AUTH",
        "\"basic\"",
    );
    expect_env_error("", &[("POLLSTER_TLS_KEY", "/x.key")], "POLLSTER_TLS_KEY", "\"/x.key\"");
    let (_tc, c) = load_text("[server]\nmetrics_auth = \"token\"\n", &no_env());
    assert_eq!(c.expect("loads").server.metrics_auth, MetricsAuth::Token);
    let (_tc, c) = load_text("", &env_of(&[("POLLSTER_METRICS_AUTH", "token")]));
    assert_eq!(c.expect("loads").server.metrics_auth, MetricsAuth::Token);
}

#[test]
fn unusable_certificate_files_are_named_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.crt");
    let text = format!(
        "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
        missing.display().to_string(),
        dir.path().join("missing.key").display().to_string()
    );
    let e = expect_file_error(
        &text,
        "server.tls_cert",
        &format!("{:?}", missing.display().to_string()),
    );
    assert!(e.message.contains("cannot read"), "{e}");

    // A pair whose key belongs to another certificate names the key file;
    // the metrics listener's own pair is checked too.
    let a = crate::tls::write_pair(dir.path(), "a");
    let b = crate::tls::write_pair(dir.path(), "b");
    let (a, b) = ((a.cert, a.key), (b.cert, b.key));
    let text = format!(
        "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
        a.0.display().to_string(),
        b.1.display().to_string()
    );
    let e = expect_file_error(&text, "server.tls_key", &format!("{:?}", b.1.display().to_string()));
    assert!(e.message.contains("does not match"), "{e}");
    let text = format!(
        "[server]\ntls_cert = {:?}\ntls_key = {:?}\nmetrics_tls_cert = {:?}\nmetrics_tls_key = {:?}\n",
        a.0.display().to_string(),
        a.1.display().to_string(),
        b.0.display().to_string(),
        a.1.display().to_string()
    );
    expect_file_error(
        &text,
        "server.metrics_tls_key",
        &format!("{:?}", a.1.display().to_string()),
    );

    // Set by the environment, the variable is named.
    let (_tc, r) = load_text(
        "",
        &env_of(&[
            ("POLLSTER_TLS_CERT", &a.0.display().to_string()),
            ("POLLSTER_TLS_KEY", &b.1.display().to_string()),
        ]),
    );
    let e = r.expect_err("refused");
    assert_eq!((e.file.as_str(), e.key.as_str()), ("environment", "POLLSTER_TLS_KEY"));

    // A good pair loads, and the metrics listener defaults to it.
    let (_tc, r) = load_text(
        &format!(
            "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
            a.0.display().to_string(),
            a.1.display().to_string()
        ),
        &no_env(),
    );
    let c = r.expect("loads");
    assert_eq!(c.server.metrics_tls(), c.server.api_tls());
    assert!(c.server.api_tls().is_some());
}

#[test]
fn the_log_comes_from_the_file_then_the_environment_and_rust_log_when_pollster_log_level_is_unset() {
    let t = TempConfig::new("[log]\nformat = \"json\"\nlevel = \"warn\"\n");
    let c = load(Some(&t.path), &env_of(&[])).expect("loads");
    assert_eq!(c.log.format, crate::config::LogFormat::Json);
    assert_eq!(c.log.level, "warn");
    let c = load(Some(&t.path), &env_of(&[("RUST_LOG", "debug")])).expect("loads");
    assert_eq!(c.log.level, "debug", "RUST_LOG is the environment");
    let c = load(
        Some(&t.path),
        &env_of(&[
            ("RUST_LOG", "debug"),
            ("POLLSTER_LOG_LEVEL", "error"),
            ("POLLSTER_LOG_FORMAT", "text"),
        ]),
    )
    .expect("loads");
    assert_eq!(c.log.level, "error", "POLLSTER_LOG_LEVEL wins over RUST_LOG");
    assert_eq!(c.log.format, crate::config::LogFormat::Text);
    let e = load(Some(&t.path), &env_of(&[("RUST_LOG", "pollster=loud")])).expect_err("a bad RUST_LOG");
    assert!(e.to_string().contains("RUST_LOG"), "{e}");
}

#[test]
fn per_instance_histograms_is_on_by_default_and_set_by_the_file_then_the_environment() {
    let (_tc, r) = load_text("", &no_env());
    assert!(
        r.expect("loads").metrics.per_instance_histograms,
        "the seed's label stays"
    );
    assert!(load(None, &no_env()).expect("defaults").metrics.per_instance_histograms);
    let (_tc, r) = load_text("[metrics]\nper_instance_histograms = false\n", &no_env());
    assert!(!r.expect("loads").metrics.per_instance_histograms);
    let (_tc, r) = load_text(
        "[metrics]\nper_instance_histograms = false\n",
        &env_of(&[("POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS", "true")]),
    );
    assert!(
        r.expect("loads").metrics.per_instance_histograms,
        "the environment wins"
    );
    assert!(known_env_vars().contains(&"POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS"));
}

#[test]
fn a_bad_metrics_key_or_value_names_it() {
    expect_file_error(
        "[metrics]\nper_instance_histograms = \"no\"\n",
        "metrics.per_instance_histograms",
        "\"no\"",
    );
    expect_file_error(
        "[metrics]\nper_instance_histograms = 0\n",
        "metrics.per_instance_histograms",
        "0",
    );
    let e = expect_file_error(
        "[metrics]\nper_instance_histogram = false\n",
        "metrics.per_instance_histogram",
        "false",
    );
    assert!(
        e.message.contains("did you mean metrics.per_instance_histograms?"),
        "{e}"
    );
    expect_env_error(
        "",
        &[("POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS", "sometimes")],
        "POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS",
        "\"sometimes\"",
    );
}

// ---------------------------------------------------------------- [cluster]

/// A key file with `mode`, in a directory that lives as long as the guard.
fn cluster_key(mode: u32) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.key");
    std::fs::write(&path, crate::secrets::DataKey::from_bytes([3; 32]).to_file_text()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    let p = path.display().to_string();
    (dir, p)
}

#[test]
fn without_a_cluster_section_or_variable_the_server_runs_alone() {
    let (_tc, r) = load_text("", &no_env());
    assert!(r.unwrap().cluster.is_none());
}

#[test]
fn a_cluster_section_loads_with_its_defaults_and_the_environment_over_it() {
    let (_d, key) = cluster_key(0o600);
    let text = format!(
        "[cluster]\nname = \"lab\"\nseeds = [\"pollster-0.pollster:7946\", \"10.0.0.5:7946\"]\nkey_file = {key:?}\n"
    );
    let (_tc, r) = load_text(
        &text,
        &env_of(&[
            ("POLLSTER_CLUSTER_MIN_MEMBERS", "2"),
            ("POLLSTER_CLUSTER_MEMBER", "pollster-1"),
        ]),
    );
    let c = r.unwrap().cluster.expect("a cluster member");
    assert_eq!(c.name, "lab");
    assert_eq!(c.member_name(), "pollster-1");
    assert_eq!(c.listen, "0.0.0.0:7946".parse().unwrap());
    assert_eq!(c.seeds, ["pollster-0.pollster:7946", "10.0.0.5:7946"]);
    assert_eq!(c.min_members, 2);
    assert_eq!(c.gossip_interval, Duration::from_secs(1));
}

#[test]
fn cluster_variables_alone_make_a_member() {
    let (_d, key) = cluster_key(0o400);
    let (_tc, r) = load_text(
        "",
        &env_of(&[
            ("POLLSTER_CLUSTER_KEY_FILE", &key),
            ("POLLSTER_CLUSTER_SEEDS", "a:7946, b:7946"),
        ]),
    );
    let c = r.unwrap().cluster.expect("a cluster member");
    assert_eq!(c.seeds, ["a:7946", "b:7946"]);
}

#[test]
fn a_cluster_key_readable_by_others_or_missing_is_refused_naming_the_key() {
    let (_d, key) = cluster_key(0o644);
    let e = expect_file_error(
        &format!("[cluster]\nkey_file = {key:?}\n"),
        "cluster.key_file",
        &format!("{key:?}"),
    );
    assert!(e.message.contains("readable by others"), "{e}");
    let e = expect_file_error(
        "[cluster]\nkey_file = \"/nonexistent/cluster.key\"\n",
        "cluster.key_file",
        "\"/nonexistent/cluster.key\"",
    );
    assert!(e.message.contains("cannot read"), "{e}");
    let e = expect_file_error("[cluster]\nname = \"lab\"\n", "cluster.key_file", "");
    assert!(e.message.contains("required"), "{e}");
    let e = expect_env_error(
        "",
        &[("POLLSTER_CLUSTER_KEY_FILE", "/nonexistent/k")],
        "POLLSTER_CLUSTER_KEY_FILE",
        "\"/nonexistent/k\"",
    );
    assert!(e.message.contains("cannot read"), "{e}");
}

#[test]
fn bad_cluster_values_are_refused_naming_the_key_or_variable() {
    let (_d, key) = cluster_key(0o600);
    let with = |extra: &str| format!("[cluster]\nkey_file = {key:?}\n{extra}\n");
    expect_file_error(&with("seeds = [\"no-port\"]"), "cluster.seeds[0]", "\"no-port\"");
    expect_file_error(&with("min_members = 0"), "cluster.min_members", "0");
    expect_file_error(&with("name = \"has space\""), "cluster.name", "\"has space\"");
    expect_file_error(
        &with("advertise = \"0.0.0.0:7946\""),
        "cluster.advertise",
        "0.0.0.0:7946",
    );
    expect_file_error(&with("gossip_interval = \"1m\""), "cluster.gossip_interval", "\"1m\"");
    expect_env_error(
        &with(""),
        &[("POLLSTER_CLUSTER_MIN_MEMBERS", "0")],
        "POLLSTER_CLUSTER_MIN_MEMBERS",
        "\"0\"",
    );
    expect_env_error(
        &with(""),
        &[("POLLSTER_CLUSTER_LISTEN", "nope")],
        "POLLSTER_CLUSTER_LISTEN",
        "\"nope\"",
    );
    expect_file_error(&with("listen = 5"), "cluster.listen", "5");
}
