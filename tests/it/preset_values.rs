//! The shipped presets' value rules on the fleet simulator's bodies: every
//! group of `meraki`, `pbs` and `pmg` is polled from its simulated API at a
//! fixed tick (fan-outs once per item its shape learned), its compiled
//! rules run, and the samples of key series are checked exactly; no sample
//! is skipped, every metric gives samples, and `promtool check metrics`
//! accepts the exposition.

use crate::common::promtool;

use std::collections::BTreeMap;

use pollster::fleet::sim::{self, SimApi};
use pollster::model::{GroupDef, TypeDef};
use pollster::poll::shape::{self, ItemNames};
use pollster::values::{Context, DEFAULT_MAX_SERIES, Extractor, Facts, exposition};

/// The tick every body is taken at: the Lyon MX is alerting then.
const TICK: u64 = 95;

/// What a preset's rules made of the simulated bodies.
struct Run {
    /// `metric{labels}` → value (labels sorted, as exposed).
    series: BTreeMap<String, f64>,
    /// metric → (help, # TYPE, sample lines).
    families: BTreeMap<String, (String, String, Vec<String>)>,
    /// (group, item, metric, reason, count) of every skipped sample.
    skipped: Vec<String>,
}

impl Run {
    fn get(&self, series: &str) -> f64 {
        *self
            .series
            .get(series)
            .unwrap_or_else(|| panic!("no series {series}; have:\n{}", self.names().join("\n")))
    }

    fn names(&self) -> Vec<String> {
        self.series.keys().cloned().collect()
    }

    /// The series of one metric, `metric{labels} value` per line, sorted.
    fn of(&self, metric: &str) -> Vec<String> {
        self.series
            .iter()
            .filter(|(k, _)| k.split('{').next() == Some(metric))
            .map(|(k, v)| {
                let mut s = format!("{k} ");
                exposition::write_value(&mut s, *v);
                s
            })
            .collect()
    }

    fn exposition(&self) -> String {
        let mut out = String::new();
        for (metric, (help, kind, lines)) in &self.families {
            out.push_str(&format!("# HELP {metric} {help}\n# TYPE {metric} {kind}\n"));
            for l in lines {
                out.push_str(l);
            }
        }
        out
    }
}

fn preset(name: &str) -> TypeDef {
    pollster::presets::all()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("preset {name}"))
}

/// The simulated body of `path` (its query split off).
fn body(api: SimApi, path: &str) -> serde_json::Value {
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    sim::answer(api, p, q, TICK).unwrap_or_else(|| panic!("{api:?} has no body for {path}"))
}

/// The items a poll of `group` runs: one `None` for a group without
/// `fan_out`, else each item its shape group learns from the simulator.
fn items_of(api: SimApi, t: &TypeDef, group: &GroupDef) -> Vec<Option<String>> {
    let Some(shape) = &group.fan_out else {
        return vec![None];
    };
    let src = t.groups.iter().find(|o| &o.name == shape).expect("shape group");
    let names = if src.item_fields.is_empty() {
        ItemNames::from(src.item_field.as_deref())
    } else {
        ItemNames::Fields(&src.item_fields)
    };
    let pointer = src.shape_from.as_deref().expect("shape_from");
    shape::shape_in(&body(api, &src.path), pointer, names)
        .expect("shape list")
        .items
        .into_iter()
        .map(Some)
        .collect()
}

/// The body of `group` for `item` (its path filled in; below the API root,
/// the simulator answers the path in full).
fn item_body(api: SimApi, group: &GroupDef, item: Option<&str>) -> serde_json::Value {
    let path = match item {
        Some(i) => shape::item_path(&group.path, i).expect("an item path"),
        None => group.path.clone(),
    };
    let path = match &group.api_root {
        Some(root) => format!("{root}{path}"),
        None => path,
    };
    body(api, &path)
}

fn run(api: SimApi, name: &str) -> Run {
    let t = preset(name);
    t.validate(&t.name).expect("the preset validates");
    let mut out = Run {
        series: BTreeMap::new(),
        families: BTreeMap::new(),
        skipped: Vec::new(),
    };
    // The instance's facts and lookup tables first, as the appliance learns
    // them (meraki's org_id and org_name, and its device and network
    // tables, label the exporter's families).
    let mut facts = Facts::new();
    for group in t.groups.iter().filter(|g| !g.facts.is_empty() || !g.lookups.is_empty()) {
        if group.fan_out.is_some() {
            // A fan-out's tables are learned over all its items' bodies.
            let mut rows = pollster::values::lookup::Rows::default();
            for item in items_of(api, &t, group) {
                rows.add(&item_body(api, group, item.as_deref()), item.as_deref(), &group.lookups);
            }
            facts = pollster::values::lookup::merge(&facts, rows.into_facts(&group.lookups));
            continue;
        }
        let doc = body(api, &group.path);
        let learned = pollster::values::lookup::learn(&doc, &group.facts, &group.lookups);
        for name in group.facts.keys() {
            assert!(learned.contains_key(name), "{}: fact {name}", group.name);
        }
        facts = pollster::values::lookup::merge(&facts, learned);
    }
    for (g, group) in t.groups.iter().enumerate() {
        let rules = group
            .compile_values(&t.name, &format!("groups[{g}]"))
            .expect("rules compile");
        if rules.is_empty() {
            continue;
        }
        let items = items_of(api, &t, group);
        // One extraction over every item, as a poll of the group makes it
        // (an `aggregate` rule combines the items).
        let mut one = Extractor::new(DEFAULT_MAX_SERIES);
        for item in items {
            let cx = Context {
                item: item.as_deref(),
                facts: Some(&facts),
                ..Context::default()
            };
            one.feed_in(&rules, &item_body(api, group, item.as_deref()), cx);
        }
        let x = one.finish();
        for ((metric, reason), n) in &x.skipped {
            out.skipped
                .push(format!("{}: {metric} {} {n}", group.name, reason.as_str()));
        }
        {
            for s in &x.samples {
                let rule = rules.iter().find(|r| r.metric == s.metric).expect("its rule");
                let mut line = String::new();
                exposition::write_sample(&mut line, &s.metric, None, &s.labels, s.value);
                let key = line.rsplit_once(' ').expect("value").0.to_string();
                assert!(
                    out.series.insert(key.clone(), s.value).is_none(),
                    "{key} made twice (group {})",
                    group.name
                );
                out.families
                    .entry(s.metric.to_string())
                    .or_insert_with(|| {
                        (
                            rule.help.to_string(),
                            rule.kind.exposition_type().to_string(),
                            Vec::new(),
                        )
                    })
                    .2
                    .push(line);
            }
        }
    }
    out
}

/// Every metric any rule of the preset names gives at least one sample,
/// except `quiet` ones; nothing is skipped.
fn complete(name: &str, r: &Run, quiet: &[&str]) {
    assert!(r.skipped.is_empty(), "{name}: skipped samples: {:#?}", r.skipped);
    for g in preset(name).groups {
        for rule in &g.values {
            let has = r.families.contains_key(&rule.metric);
            assert!(
                has || quiet.contains(&rule.metric.as_str()),
                "{name}.{}: {} gives no sample",
                g.name,
                rule.metric
            );
        }
    }
}

#[test]
fn meraki() {
    let r = run(SimApi::Meraki, "meraki");
    complete("meraki", &r, &["meraki_mt_water_detected"]);

    assert_eq!(
        r.of("meraki_org_devices_availability"),
        [
            "meraki_org_devices_availability{status=\"alerting\"} 2",
            "meraki_org_devices_availability{status=\"dormant\"} 1",
            "meraki_org_devices_availability{status=\"offline\"} 1",
            "meraki_org_devices_availability{status=\"online\"} 8",
        ]
    );
    // Devices labelled as the exporter labels them: name, model and network
    // name joined from the device and network lookup tables, the type the
    // model's first two letters, and the organization's facts.
    let dev = |serial: &str, name: &str, model: &str, net: (&str, &str)| {
        format!(
            "{{device_type=\"{}\",model=\"{model}\",name=\"{name}\",network_id=\"{}\",network_name=\"{}\",\
             org_id=\"549236\",org_name=\"Pollster Lab\",serial=\"{serial}\"}}",
            &model[..2],
            net.0,
            net.1
        )
    };
    let hq = ("L_646829496481105433", "HQ Paris");
    let lyon = ("L_646829496481105434", "Branch Lyon");
    assert_eq!(
        r.get(&format!(
            "meraki_device_up{}",
            dev("Q2BX-6UVW-L2M3", "lyon-sw", "MS120-8FP", lyon)
        )),
        1.0
    );
    assert_eq!(
        r.get(&format!(
            "meraki_device_up{}",
            dev("Q2HP-4RST-J9K1", "hq-floor2-sw", "MS120-24P", hq)
        )),
        0.0,
        "alerting"
    );
    assert_eq!(
        r.get(&format!(
            "meraki_device_up{}",
            dev("Q2KN-5X8M-A1B2", "hq-mx", "MX68", hq)
        )),
        0.0,
        "an MX is 0 whatever its status, as the exporter's"
    );
    assert_eq!(
        r.get(&format!(
            "meraki_device_up{}",
            dev("Q3AC-2FGH-S8T9", "lyon-ap", "MR36", lyon)
        )),
        0.0
    );
    assert_eq!(r.of("meraki_device_up").len(), 12);
    let lille = dev(
        "Q3AD-4JKL-U1V2",
        "lille-ap",
        "MR33",
        ("N_646829496481105435", "Warehouse Lille"),
    );
    assert_eq!(
        r.get(&format!(
            "meraki_device_status_info{},status=\"dormant\"}}",
            lille.trim_end_matches('}')
        )),
        1.0
    );
    assert_eq!(
        r.of("meraki_org_devices_total"),
        [
            "meraki_org_devices_total{device_type=\"MG\",org_id=\"549236\",org_name=\"Pollster Lab\"} 1",
            "meraki_org_devices_total{device_type=\"MR\",org_id=\"549236\",org_name=\"Pollster Lab\"} 4",
            "meraki_org_devices_total{device_type=\"MS\",org_id=\"549236\",org_name=\"Pollster Lab\"} 3",
            "meraki_org_devices_total{device_type=\"MT\",org_id=\"549236\",org_name=\"Pollster Lab\"} 2",
            "meraki_org_devices_total{device_type=\"MX\",org_id=\"549236\",org_name=\"Pollster Lab\"} 2",
        ]
    );
    // Devices by product type give the firmware inventory (no switches: the
    // preset lists appliances, gateways, access points and sensors only).
    assert_eq!(r.of("meraki_device_firmware_info").len(), 9);
    assert_eq!(
        r.get(
            "meraki_device_firmware_info{firmware=\"cellular-gateway-1-5-1\",model=\"MG21\",name=\"lille-mg\",\
             network_id=\"N_646829496481105435\",product_type=\"cellularGateway\",serial=\"Q2ZY-8HJK-E5F6\"}"
        ),
        1.0
    );

    // Uplinks: one state set per device and interface, six in all.
    let up = |serial: &str, model: &str, net: &str, iface: &str, status: &str| {
        format!(
            "meraki_uplink_status{{interface=\"{iface}\",model=\"{model}\",network_id=\"{net}\",serial=\"{serial}\",status=\"{status}\"}}"
        )
    };
    assert_eq!(r.of("meraki_uplink_status").len(), 6 * 5);
    assert_eq!(r.get(&up("Q2PN-3QRT-C3D4", "MX67C", lyon.0, "wan2", "failed")), 1.0);
    assert_eq!(r.get(&up("Q2PN-3QRT-C3D4", "MX67C", lyon.0, "wan2", "ready")), 0.0);
    assert_eq!(
        r.get(&up("Q2PN-3QRT-C3D4", "MX67C", lyon.0, "cellular", "not connected")),
        1.0
    );
    assert_eq!(r.get(&up("Q2KN-5X8M-A1B2", "MX68", hq.0, "wan1", "active")), 1.0);
    assert_eq!(
        r.get(&up(
            "Q2ZY-8HJK-E5F6",
            "MG21",
            "N_646829496481105435",
            "cellular",
            "active"
        )),
        1.0
    );
    let on: f64 = r
        .of("meraki_uplink_status")
        .iter()
        .filter(|l| l.ends_with(" 1"))
        .map(|_| 1.0)
        .sum();
    assert_eq!(on, 6.0, "exactly one state per uplink");

    // Sensors, wherever the reading sits in the list.
    assert_eq!(
        r.of("meraki_mt_temperature_celsius"),
        [format!(
            "meraki_mt_temperature_celsius{} 23.9",
            dev("Q3CA-6MNP-W3X4", "hq-serverroom-temp", "MT10", hq)
        )]
    );
    assert_eq!(
        r.of("meraki_mt_door_status"),
        [format!(
            "meraki_mt_door_status{} 0",
            dev("Q3CB-8QRS-Y5Z6", "hq-serverroom-door", "MT20", hq)
        )]
    );
    assert_eq!(r.of("meraki_mt_battery_percentage").len(), 2);
    assert_eq!(r.of("meraki_ap_channel_utilization_percent").len(), 8);

    assert_eq!(r.get("meraki_org_license_ok"), 1.0);
    assert_eq!(r.get("meraki_org_licensed_devices{model=\"MR36\"}"), 2.0);
    assert_eq!(
        r.get(&format!(
            "meraki_network_info{{network_id=\"{}\",network_name=\"HQ Paris\",time_zone=\"Europe/Paris\"}}",
            hq.0
        )),
        1.0
    );
    // The SSIDs are enabled in all three networks, which the table learned
    // over the per-network SSID calls counts.
    assert_eq!(
        r.of("meraki_mr_ssid_client_count"),
        [
            "meraki_mr_ssid_client_count{network_id=\"multiple\",network_name=\"multiple_(3_networks)\",org_id=\"549236\",org_name=\"Pollster Lab\",ssid=\"Lab-Corp\"} 27",
            "meraki_mr_ssid_client_count{network_id=\"multiple\",network_name=\"multiple_(3_networks)\",org_id=\"549236\",org_name=\"Pollster Lab\",ssid=\"Lab-Guest\"} 9",
        ]
    );
    promtool::check_metrics(&r.exposition());
}

#[test]
fn pbs() {
    let r = run(SimApi::Pbs, "pbs");
    complete("pbs", &r, &[]);

    let tib = 1024f64.powi(4);
    let gib = 1024f64.powi(3);
    let used_backup = 5.0 * tib + 312.0 * gib + 95.0 * 9.0 * 1024.0 * 1024.0;
    assert_eq!(
        r.of("pbs_datastore_used_bytes"),
        [
            format!("pbs_datastore_used_bytes{{store=\"backup\"}} {}", used_backup as u64),
            format!(
                "pbs_datastore_used_bytes{{store=\"offsite\"}} {}",
                (tib + 744.0 * gib + 95.0 * 4.0 * 1024.0 * 1024.0) as u64
            ),
        ]
    );
    assert_eq!(r.get("pbs_datastore_size_bytes{store=\"backup\"}"), 8.0 * tib);
    assert_eq!(
        r.get("pbs_datastore_avail_bytes{store=\"backup\"}"),
        8.0 * tib - used_backup
    );
    assert!(r.get("pbs_datastore_estimated_full_timestamp_seconds{store=\"offsite\"}") > 1.8e9);

    assert_eq!(r.get("pbs_gc_last_run_success{store=\"backup\"}"), 1.0);
    assert_eq!(r.get("pbs_gc_last_run_duration_seconds{store=\"backup\"}"), 1740.0);
    // The day's 03:29 end of the backup store's GC is after tick 95 (01:35),
    // so the last run is the previous day's.
    assert_eq!(
        r.get("pbs_gc_last_run_timestamp_seconds{store=\"backup\"}"),
        1_796_083_200.0 - 86400.0 + 3.0 * 3600.0 + 1740.0
    );
    assert_eq!(
        r.of("pbs_verify_job_last_run_success"),
        [
            "pbs_verify_job_last_run_success{id=\"v-1c5e9a7d-2f0b\",store=\"backup\"} 1",
            "pbs_verify_job_last_run_success{id=\"v-3f1a6c2e-9b7d\",store=\"offsite\"} 0",
        ]
    );
    assert_eq!(
        r.get("pbs_sync_job_last_run_success{id=\"s-8b2e4f1a-c3d9\",store=\"offsite\"}"),
        1.0
    );
    assert_eq!(r.of("pbs_prune_job_last_run_timestamp_seconds").len(), 2);
    assert_eq!(r.get("pbs_failed_tasks"), 2.0);
    assert_eq!(r.of("pbs_disk_health_ok").len(), 4);
    assert_eq!(
        r.of("pbs_disk_wearout_ratio"),
        [
            "pbs_disk_wearout_ratio{disk=\"sda\",model=\"SAMSUNG MZ7L3480HCHQ\",serial=\"S6RRNX0W401234\",type=\"ssd\"} 0.03",
            "pbs_disk_wearout_ratio{disk=\"sdb\",model=\"SAMSUNG MZ7L3480HCHQ\",serial=\"S6RRNX0W401235\",type=\"ssd\"} 0.04",
        ]
    );
    assert_eq!(r.get("pbs_node_memory_total_bytes"), 64.0 * gib);
    assert_eq!(r.get("pbs_version_info{release=\"2\",version=\"3.3\"}"), 1.0);
    assert_eq!(
        r.get("pbs_subscription_info{level=\"c\",next_due_date=\"2027-03-01\",status=\"active\"}"),
        1.0
    );
    promtool::check_metrics(&r.exposition());
}

#[test]
fn pmg() {
    let r = run(SimApi::Pmg, "pmg");
    complete("pmg", &r, &[]);

    assert_eq!(
        r.of("pmg_deferred_queue_mails"),
        [
            "pmg_deferred_queue_mails{node=\"pmg1\"} 10",
            "pmg_deferred_queue_mails{node=\"pmg2\"} 80",
        ]
    );
    assert_eq!(r.get("pmg_deferred_queue_old_mails{node=\"pmg2\"}"), 19.0);

    assert_eq!(r.get("pmg_mail_incoming"), 66_476.0);
    assert_eq!(r.get("pmg_mail_outgoing"), 17_171.0);
    assert_eq!(r.get("pmg_mail_spam_incoming"), 24_728.0);
    assert_eq!(r.get("pmg_mail_virus_incoming"), 57.0);
    assert_eq!(r.get("pmg_mail_bounces_outgoing"), 321.0);
    assert_eq!(r.get("pmg_mail_incoming_bytes"), 66_476.0 * 61_440.0);

    assert_eq!(r.get("pmg_spam_quarantine_mails"), 1861.0);
    assert_eq!(r.get("pmg_virus_quarantine_bytes"), 4.55 * 1_048_576.0);
    assert_eq!(r.of("pmg_service_running").len(), 24);
    assert_eq!(r.get("pmg_service_running{node=\"pmg2\",service=\"postfix\"}"), 1.0);
    assert_eq!(
        r.get("pmg_cluster_node_in_sync{cid=\"2\",node=\"pmg2\",type=\"node\"}"),
        1.0
    );
    assert_eq!(
        r.of("pmg_failed_tasks"),
        ["pmg_failed_tasks{node=\"pmg1\"} 1", "pmg_failed_tasks{node=\"pmg2\"} 0"]
    );
    assert_eq!(
        r.get("pmg_node_memory_total_bytes{node=\"pmg1\"}"),
        8.0 * 1024f64.powi(3)
    );
    promtool::check_metrics(&r.exposition());
}
