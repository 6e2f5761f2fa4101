//! What both parity tests share: the exposition parser (series keyed by
//! name and labels), the named differences, the preset's rules run offline
//! on the simulator's bodies, and the recording of an exporter's answer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pollster::model::{GroupDef, TypeDef};
use pollster::poll::shape::{self, ItemNames};
use pollster::values::exposition::{write_head, write_sample};
use pollster::values::{Context, Extractor, Facts, Rule};
use serde_json::Value;

/// A series: metric name and its non-empty labels (sorted), `instance`
/// left out.
pub type SeriesKey = (String, BTreeMap<String, String>);

#[derive(Debug, Default)]
pub struct Exposition {
    /// Family → (help, type), for families with at least one sample.
    pub heads: BTreeMap<String, (String, String)>,
    pub series: BTreeMap<SeriesKey, f64>,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses the text format, keeping metrics that start with `prefix`.
pub fn parse_exposition(text: &str, prefix: &str) -> Exposition {
    let mut helps = BTreeMap::new();
    let mut types = BTreeMap::new();
    let mut x = Exposition::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            helps.insert(name.to_string(), unescape(help));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            types.insert(name.to_string(), ty.to_string());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels, value) = parse_sample(line).unwrap_or_else(|| panic!("malformed sample line: {line}"));
        if !name.starts_with(prefix) {
            continue;
        }
        x.heads.insert(
            name.clone(),
            (
                helps.get(&name).cloned().unwrap_or_default(),
                types.get(&name).cloned().unwrap_or_default(),
            ),
        );
        let labels = labels
            .into_iter()
            .filter(|(k, v)| k != "instance" && !v.is_empty())
            .collect();
        let previous = x.series.insert((name, labels), value);
        assert!(previous.is_none(), "a series appears twice: {line}");
    }
    x
}

fn parse_sample(line: &str) -> Option<(String, BTreeMap<String, String>, f64)> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut body) = rest.strip_prefix('{') {
        loop {
            body = body.trim_start_matches(',');
            if let Some(after) = body.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = body.split_once("=\"")?;
            // The value runs to the first quote that no backslash escapes.
            let mut escaped = false;
            let close = after.char_indices().find_map(|(i, c)| match (escaped, c) {
                (false, '\\') => {
                    escaped = true;
                    None
                }
                (false, '"') => Some(i),
                _ => {
                    escaped = false;
                    None
                }
            })?;
            labels.insert(key.trim().to_string(), unescape(&after[..close]));
            body = &after[close + 1..];
        }
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

pub fn show(key: &SeriesKey) -> String {
    let labels: Vec<String> = key.1.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", key.0, labels.join(","))
}

pub fn same_value(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Every difference between the exporter's series and Pollster's, named;
/// `superset` says which series Pollster may give beyond the exporter's.
pub fn differences(exporter: &Exposition, ours: &Exposition, superset: impl Fn(&SeriesKey) -> bool) -> Vec<String> {
    let mut diffs = Vec::new();
    for (key, value) in &exporter.series {
        match ours.series.get(key) {
            None => diffs.push(format!("missing: {} {value}", show(key))),
            Some(v) if !same_value(*v, *value) => {
                diffs.push(format!("different value: {} exporter {value}, Pollster {v}", show(key)))
            }
            Some(_) => {}
        }
    }
    for key in ours.series.keys() {
        if !exporter.series.contains_key(key) && !superset(key) {
            diffs.push(format!("extra: {} {}", show(key), ours.series[key]));
        }
    }
    for (family, head) in &exporter.heads {
        if let Some(ours_head) = ours.heads.get(family) {
            if ours_head.0 != head.0 {
                diffs.push(format!(
                    "different HELP for {family}: exporter {:?}, Pollster {:?}",
                    head.0, ours_head.0
                ));
            }
            if ours_head.1 != head.1 {
                diffs.push(format!(
                    "different TYPE for {family}: exporter {}, Pollster {}",
                    head.1, ours_head.1
                ));
            }
        }
    }
    diffs
}

/// A shipped type, by name.
pub fn shipped_type(name: &str) -> TypeDef {
    pollster::presets::all()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("the shipped {name} type"))
}

/// The items each `shape_from` group of `ty` learns from the simulated
/// API (`body` answers a group path, query included), by group.
pub fn learned_items(ty: &TypeDef, body: &dyn Fn(&str) -> Option<Value>) -> BTreeMap<String, Vec<String>> {
    let mut items = BTreeMap::new();
    for group in &ty.groups {
        let names = if group.item_fields.is_empty() {
            ItemNames::from(group.item_field.as_deref())
        } else {
            ItemNames::Fields(&group.item_fields)
        };
        if let (Some(pointer), Some(doc)) = (&group.shape_from, body(&group.path)) {
            let shape = shape::shape_in(&doc, pointer, names).expect("the shape");
            items.insert(group.name.clone(), shape.items);
        }
    }
    items
}

/// A group's bodies: its one body, or each fan-out item's (an item the
/// simulator does not answer, as the offline node, fails and has none).
fn group_bodies<'a>(
    group: &GroupDef,
    items: &'a BTreeMap<String, Vec<String>>,
    body: &dyn Fn(&str) -> Option<Value>,
) -> Vec<(Option<&'a str>, Value)> {
    let runs: Vec<Option<&str>> = match &group.fan_out {
        Some(source) => items[source.as_str()].iter().map(|i| Some(i.as_str())).collect(),
        None => vec![None],
    };
    let mut out = Vec::new();
    for item in runs {
        let path = match item {
            Some(i) => shape::item_path(&group.path, i).expect("an item path"),
            None => group.path.clone(),
        };
        // A group with an api_root calls below the API root, not the
        // instance's base: the simulator answers the path in full.
        let path = match &group.api_root {
            Some(root) => format!("{root}{path}"),
            None => path,
        };
        if let Some(doc) = body(&path) {
            out.push((item, doc));
        }
    }
    out
}

/// The exposition the preset's rules give for the simulated cluster's
/// bodies (at the caller's tick), as Pollster would serve them (no `instance`): the
/// shapes (fan-out items) and facts are read from the bodies first, as the
/// appliance learns them, then every group's rules run on its body (per
/// item for a fan-out).
pub fn offline_exposition(ty: &TypeDef, body: &dyn Fn(&str) -> Option<Value>) -> String {
    let items = learned_items(ty, body);
    let mut facts = Facts::new();
    for group in &ty.groups {
        if group.fan_out.is_some() && !group.lookups.is_empty() {
            // A fan-out's tables are learned over all its items' bodies.
            let mut rows = pollster::values::lookup::Rows::default();
            for (item, doc) in group_bodies(group, &items, body) {
                rows.add(&doc, item, &group.lookups);
            }
            facts = pollster::values::lookup::merge(&facts, rows.into_facts(&group.lookups));
        } else if !group.facts.is_empty() || !group.lookups.is_empty() {
            let doc = body(&group.path).expect("a fact group's body");
            let learned = pollster::values::lookup::learn(&doc, &group.facts, &group.lookups);
            for name in group.facts.keys() {
                assert!(learned.contains_key(name), "group {}: no fact {name}", group.name);
            }
            facts = pollster::values::lookup::merge(&facts, learned);
        }
    }
    let mut rules_all: Vec<Rule> = Vec::new();
    let mut samples = Vec::new();
    for (g, group) in ty.groups.iter().enumerate() {
        if group.values.is_empty() {
            continue;
        }
        let rules = group
            .compile_values(&ty.name, &format!("{}.groups[{g}]", ty.name))
            .expect("the preset's rules compile");
        let mut one = Extractor::new(group.max_series);
        for (item, doc) in group_bodies(group, &items, body) {
            let cx = Context {
                item,
                facts: Some(&facts),
                ..Context::default()
            };
            one.feed_in(&rules, &doc, cx);
        }
        let out = one.finish();
        assert!(!out.waiting_for_facts, "group {}: a fact is missing", group.name);
        samples.extend(out.samples);
        rules_all.extend(rules);
    }
    let mut out = String::new();
    let mut written = BTreeSet::new();
    for r in &rules_all {
        if !written.insert(r.metric.to_string()) {
            continue;
        }
        let mine: Vec<_> = samples.iter().filter(|s| s.metric == r.metric).collect();
        if mine.is_empty() {
            continue;
        }
        write_head(&mut out, &r.metric, &r.help, r.kind);
        for s in mine {
            write_sample(&mut out, &s.metric, None, &s.labels, s.value);
        }
    }
    out
}

pub fn report(what: &str, who: &str, exporter: &Exposition, diffs: &[String]) {
    let families: BTreeSet<&str> = exporter.series.keys().map(|k| k.0.as_str()).collect();
    println!(
        "{what}: compared {} exporter series in {} families",
        exporter.series.len(),
        families.len()
    );
    assert!(
        diffs.is_empty(),
        "{what}: {} differences from {who}:\n  {}",
        diffs.len(),
        diffs.join("\n  ")
    );
}

pub fn recorded_path(recorded: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(recorded)
}

/// The live exporter's answer equals the recording, or it is rewritten
/// with `PARITY_RECORD=1`.
pub fn check_recording(live: &str, recorded_name: &str, prefix: &str) {
    let path = recorded_path(recorded_name);
    if std::env::var("PARITY_RECORD").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("fixture dir");
        std::fs::write(&path, live).expect("write the recording");
        println!("recorded the exporter's answer in {}", path.display());
        return;
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (live, recorded) = (parse_exposition(live, prefix), parse_exposition(&recorded, prefix));
    let mut diffs = Vec::new();
    for (key, value) in &live.series {
        match recorded.series.get(key) {
            None => diffs.push(format!("not recorded: {} {value}", show(key))),
            Some(v) if !same_value(*v, *value) => diffs.push(format!("recorded {v}, live {value}: {}", show(key))),
            Some(_) => {}
        }
    }
    for key in recorded.series.keys().filter(|k| !live.series.contains_key(*k)) {
        diffs.push(format!("recorded but not given: {}", show(key)));
    }
    if live.heads != recorded.heads {
        diffs.push("HELP or TYPE lines differ".into());
    }
    assert!(
        diffs.is_empty(),
        "the exporter no longer gives {recorded_name} (rerun with PARITY_RECORD=1 if the simulator changed on purpose):\n  {}",
        diffs.join("\n  ")
    );
}

// ---------------------------------------------------------------- appliance

/// The appliance with one instance, on loopback port 0, and its own data
/// directory; stopped with [`App::stop`].
pub struct App {
    pub metrics_addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    _data_dir: tempfile::TempDir,
}

impl App {
    /// The defaults with `instance` as the only instance.
    pub async fn start(instance: pollster::model::InstanceConfig) -> App {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let mut c = pollster::config::load(None, &BTreeMap::new()).expect("default config loads");
        c.server.data_dir = data_dir.path().to_path_buf();
        c.instances = vec![instance];
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let app = pollster::app::Application::build_with_listeners(c, api, metrics)
            .await
            .expect("app builds");
        let metrics_addr = app.metrics_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        App {
            metrics_addr,
            stop: Some(tx),
            server: Some(server),
            _data_dir: data_dir,
        }
    }

    /// Poll `/values?instance=INSTANCE` until `differences` of its body is
    /// empty, and return that body; panic after `within` with the last
    /// differences.
    pub async fn wait_for_values(
        &self,
        instance: &str,
        within: std::time::Duration,
        differences: impl Fn(&str) -> Vec<String>,
    ) -> String {
        let url = format!("http://{}/values?instance={instance}", self.metrics_addr);
        let client = reqwest::Client::new();
        let deadline = std::time::Instant::now() + within;
        loop {
            let r = client.get(&url).send().await.expect("GET /values");
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            if status.is_success() {
                let diffs = differences(&body);
                if diffs.is_empty() {
                    return body;
                }
                if std::time::Instant::now() > deadline {
                    panic!(
                        "/values never matched the exporter; {} differences:\n  {}\n/values was:\n{body}",
                        diffs.len(),
                        diffs.join("\n  ")
                    );
                }
            } else if std::time::Instant::now() > deadline {
                panic!("GET /values?instance={instance}: {status}: {body}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
    }
}
