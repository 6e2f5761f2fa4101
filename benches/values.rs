//! Value rules (issue #12 §5): what turning polled JSON into samples costs,
//! and what serving them on `/values` costs.
//!
//! * `values/parse_pve_resources_1000` and `values/extract_pve_resources_1000`:
//!   a Proxmox `/cluster/resources` body with 1,000 guests, 3 nodes and 10
//!   storages, parsed (`serde_json::from_slice`) and then run through a
//!   realistic rule set (gauges labelled with a `"{/type}/{/vmid}"`
//!   template, a state set, an info with `sorted_lists` and `defaults`, a
//!   `map`/`map_default` gauge, `@count`). Throughput is in samples, so
//!   criterion's elements/s gives the time per sample.
//! * `values/render_1m_samples`: the `/values` exposition of 10,000 tasks ×
//!   100 samples (the latest-values cache as `Latest::fresh` hands it over),
//!   with the families of the catalog.
//!
//! ```text
//! cargo bench --bench values
//! ```
//!
//! Results: docs/BENCHMARKS.md, section "Values".

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pollster::core::catalog::ValueCatalog;
use pollster::model::{GroupDef, TaskKey, TypeDef};
use pollster::values::{Rule, Sample, ValueRule, extract};
use serde_json::{Value, json};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const GUESTS: usize = 1_000;
const NODES: usize = 3;
const STORAGES: usize = 10;
/// Well above the samples the rules make of one body (15,018), so none
/// is dropped for the limit.
const MAX_SERIES: usize = 100_000;

const TASKS: usize = 10_000;
const SAMPLES_PER_TASK: usize = 100;

/// A `/cluster/resources` answer as Proxmox VE gives it: guests (two thirds
/// qemu, one third lxc) spread over the nodes, then the nodes and storages.
fn pve_resources() -> Vec<u8> {
    let statuses = ["running", "running", "running", "running", "stopped", "paused"];
    let tags = ["", "prod,web", "db,prod", "backup,dev,web", "staging"];
    let hastates = [None, None, Some("started"), Some("stopped")];
    let locks = [
        None,
        None,
        None,
        None,
        None,
        Some("backup"),
        Some("migrate"),
        Some("snapshot"),
    ];
    let mut data = Vec::with_capacity(GUESTS + NODES + STORAGES);
    for i in 0..GUESTS {
        let vmid = 100 + i;
        let ty = if i % 3 == 2 { "lxc" } else { "qemu" };
        let node = format!("pve{}", i % NODES + 1);
        let status = statuses[i % statuses.len()];
        let running = status == "running";
        let mut g = json!({
            "id": format!("{ty}/{vmid}"),
            "type": ty,
            "node": node,
            "vmid": vmid,
            "name": format!("guest-{i:04}.example.org"),
            "status": status,
            "cpu": if running { (i % 97) as f64 / 97.0 * 0.8 } else { 0.0 },
            "maxcpu": 1 << (i % 4),
            "mem": if running { (512u64 << 20) + (i as u64 * 7_340_033) % (3u64 << 30) } else { 0 },
            "maxmem": 4u64 << 30,
            "disk": if ty == "lxc" { (i as u64 * 104_729) % (8u64 << 30) } else { 0 },
            "maxdisk": 32u64 << 30,
            "uptime": if running { 86_400 * (i as u64 % 40) + i as u64 } else { 0 },
            "netin": i as u64 * 1_234_567_891 % 1_000_000_000_000,
            "netout": i as u64 * 987_654_321 % 1_000_000_000_000,
            "diskread": i as u64 * 55_555_555 % 100_000_000_000,
            "diskwrite": i as u64 * 44_444_444 % 100_000_000_000,
            "template": u8::from(i % 200 == 199),
        });
        let obj = g.as_object_mut().expect("an object");
        let t = tags[i % tags.len()];
        if !t.is_empty() {
            obj.insert("tags".into(), json!(t));
        }
        if let Some(h) = hastates[i % hastates.len()] {
            obj.insert("hastate".into(), json!(h));
        }
        if let Some(l) = locks[i % locks.len()] {
            obj.insert("lock".into(), json!(l));
        }
        data.push(g);
    }
    for n in 1..=NODES {
        data.push(json!({
            "id": format!("node/pve{n}"), "type": "node", "node": format!("pve{n}"), "status": "online",
            "cpu": 0.31, "maxcpu": 64, "mem": 200u64 << 30, "maxmem": 512u64 << 30,
            "disk": 20u64 << 30, "maxdisk": 100u64 << 30, "uptime": 3_000_000, "level": "",
        }));
    }
    for s in 0..STORAGES {
        let node = format!("pve{}", s % NODES + 1);
        data.push(json!({
            "id": format!("storage/{node}/store{s}"), "type": "storage", "node": node,
            "storage": format!("store{s}"), "status": "available", "shared": u8::from(s < 4),
            "content": "images,rootdir", "plugintype": "zfspool",
            "disk": (s as u64 + 1) << 38, "maxdisk": 16u64 << 40,
        }));
    }
    serde_json::to_vec(&json!({ "data": data })).expect("JSON")
}

/// The kind of rules prometheus-pve-exporter's series need.
const PVE_RULES: &str = r#"
[[values]]
metric = "pve_up"
help = "Whether the guest is running"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/status"
labels = { id = "{/type}/{/vmid}" }
map = { running = 1 }
map_default = 0

[[values]]
metric = "pve_cpu_usage_ratio"
help = "CPU usage"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/cpu"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_cpu_usage_limit"
help = "CPUs assigned"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/maxcpu"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_memory_usage_bytes"
help = "Memory used"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/mem"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_memory_size_bytes"
help = "Memory assigned"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/maxmem"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_disk_size_bytes"
help = "Disk size"
each = "/data"
value = "/maxdisk"
labels = { id = "/id" }

[[values]]
metric = "pve_network_receive_bytes_total"
help = "Bytes received"
kind = "counter"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/netin"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_network_transmit_bytes_total"
help = "Bytes sent"
kind = "counter"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/netout"
labels = { id = "{/type}/{/vmid}" }

[[values]]
metric = "pve_uptime_seconds"
help = "Uptime"
each = "/data"
where = { "/type" = ["qemu", "lxc", "node"] }
value = "/uptime"
labels = { id = "/id" }

[[values]]
metric = "pve_lock_state"
help = "The guest's lock"
kind = "stateset"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/lock"
labels = { id = "{/type}/{/vmid}" }
states = ["backup", "migrate", "snapshot", "rollback"]

[[values]]
metric = "pve_guest_info"
help = "A guest's name, node, type and tags"
kind = "info"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
labels = { id = "{/type}/{/vmid}", node = "/node", name = "/name", type = "/type", tags = "/tags", template = "/template", hastate = "/hastate" }
defaults = { tags = "", hastate = "none" }
sorted_lists = ["tags"]

[[values]]
metric = "pve_ha_state"
help = "HA state of a guest (1 started, 0 stopped, -1 not managed)"
each = "/data"
where = { "/type" = ["qemu", "lxc"] }
value = "/hastate"
labels = { id = "{/type}/{/vmid}" }
map = { started = 1, stopped = 0 }
map_default = -1

[[values]]
metric = "pve_guests"
help = "Guests per type"
each = "/data"
where = { "/type" = "qemu" }
value = "@count"

[[values]]
metric = "pve_storages"
help = "Storages"
each = "/data"
where = { "/type" = "storage" }
value = "@count"
"#;

fn pve_rules() -> Vec<Rule> {
    #[derive(serde::Deserialize)]
    struct File {
        values: Vec<ValueRule>,
    }
    let file: File = toml::from_str(PVE_RULES).expect("the rules parse");
    file.values
        .iter()
        .map(|r| r.compile().unwrap_or_else(|e| panic!("{}: {e}", r.metric)))
        .collect()
}

fn extraction(c: &mut Criterion) {
    let body = pve_resources();
    let rules = pve_rules();
    let doc: Value = serde_json::from_slice(&body).expect("the body parses");
    let x = extract(&rules, &doc, None, MAX_SERIES);
    let samples = x.samples.len() as u64;
    assert!(
        x.skipped.keys().all(|(_, r)| *r != pollster::values::SkipReason::Limit),
        "no sample is dropped for the limit"
    );
    println!(
        "pve /cluster/resources: {} guests, {} bytes, {} rules, {} samples, {} skipped",
        GUESTS,
        body.len(),
        rules.len(),
        samples,
        x.skipped.values().sum::<u64>()
    );

    let mut g = c.benchmark_group("values");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    // Same element count on both, so elements/s compares them per sample.
    g.throughput(Throughput::Elements(samples));
    g.bench_function("parse_pve_resources_1000", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&body)).expect("JSON"))
    });
    g.bench_function("extract_pve_resources_1000", |b| {
        b.iter(|| extract(black_box(&rules), black_box(&doc), None, MAX_SERIES))
    });
    g.finish();
}

/// `VmHWM` (peak RSS) and `VmRSS` of this process, in MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

fn render(c: &mut Criterion) {
    // One group whose rules give ten metrics; every task gives ten series
    // of each (100 samples), labelled like guests.
    const METRICS: usize = 10;
    let mut text = String::new();
    for m in 0..METRICS {
        text.push_str(&format!(
            "[[values]]\nmetric = \"bench_metric_{m}_bytes\"\nhelp = \"Benchmark metric {m}\"\n\
             each = \"/data\"\nvalue = \"/v{m}\"\nlabels = {{ id = \"{{/type}}/{{/vmid}}\", node = \"/node\" }}\n\n"
        ));
    }
    #[derive(serde::Deserialize)]
    struct File {
        values: Vec<ValueRule>,
    }
    let file: File = toml::from_str(&text).expect("the rules parse");
    let mut group = GroupDef::new("resources", "/api2/json/cluster/resources", 2, Duration::from_secs(60));
    group.values = file.values;
    let ty = TypeDef {
        name: "pve".into(),
        groups: vec![group],
    };
    let catalog = ValueCatalog::build([&ty]);
    let metrics: Vec<Arc<str>> = (0..METRICS)
        .map(|m| Arc::from(format!("bench_metric_{m}_bytes")))
        .collect();
    assert!(metrics.iter().all(|m| catalog.family(m).is_some()));
    let (id, node): (Arc<str>, Arc<str>) = (Arc::from("id"), Arc::from("node"));

    let (hwm_before, rss_before) = memory();
    let mut tasks: Vec<(TaskKey, Arc<[Sample]>)> = (0..TASKS)
        .map(|t| {
            let key = TaskKey::new(&pollster::fleet::instance_name(t), "resources");
            let samples: Vec<Sample> = (0..SAMPLES_PER_TASK)
                .map(|s| {
                    let guest = s % (SAMPLES_PER_TASK / METRICS);
                    Sample {
                        metric: metrics[s / (SAMPLES_PER_TASK / METRICS)].clone(),
                        labels: vec![
                            (id.clone(), format!("qemu/{}", 100 + guest)),
                            (node.clone(), format!("pve{}", guest % 3 + 1)),
                        ],
                        value: (t * SAMPLES_PER_TASK + s) as f64 * 1024.0,
                    }
                })
                .collect();
            (key, samples.into())
        })
        .collect();
    tasks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let (hwm_after, rss_after) = memory();
    let out = pollster::engine::latest::render(&catalog, &tasks);
    let (hwm_render, _) = memory();
    let lines = out.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(lines, TASKS * SAMPLES_PER_TASK);
    println!(
        "render: {} tasks × {} samples; exposition {:.1} MB ({} bytes); RSS {:.1} → {:.1} MiB \
         (cache ≈ {:.0} B per sample), peak RSS {:.1} MiB before, {:.1} MiB with the cache, \
         {:.1} MiB after one render",
        TASKS,
        SAMPLES_PER_TASK,
        out.len() as f64 / 1e6,
        out.len(),
        rss_before,
        rss_after,
        (rss_after - rss_before) * 1048576.0 / (TASKS * SAMPLES_PER_TASK) as f64,
        hwm_before,
        hwm_after,
        hwm_render
    );
    drop(out);

    let mut g = c.benchmark_group("values");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements((TASKS * SAMPLES_PER_TASK) as u64));
    g.bench_function("render_1m_samples", |b| {
        b.iter(|| pollster::engine::latest::render(black_box(&catalog), black_box(&tasks)))
    });
    g.finish();
}

criterion_group!(benches, extraction, render);
criterion_main!(benches);
