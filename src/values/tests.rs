use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn rule(toml_text: &str) -> ValueRule {
    toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}\n{toml_text}"))
}

fn compile(toml_text: &str) -> Rule {
    rule(toml_text).compile().unwrap_or_else(|e| panic!("{e}"))
}

fn compile_err(toml_text: &str) -> RuleError {
    rule(toml_text).compile().expect_err(toml_text)
}

fn resources() -> Value {
    json!({"data": [
        {"id": "qemu/100", "type": "qemu", "vmid": 100, "name": "web", "node": "pve1", "status": "running",
         "cpu": 0.25, "maxcpu": 4, "mem": 1073741824u64, "tags": "prod;web", "template": 0},
        {"id": "lxc/201", "type": "lxc", "vmid": 201, "name": "db", "node": "pve2", "status": "stopped",
         "cpu": 0, "maxcpu": 2, "mem": 0, "hastate": "started", "template": 0},
        {"id": "node/pve3", "type": "node", "node": "pve3", "status": "offline"},
        {"id": "storage/pve1/local", "type": "storage", "storage": "local", "node": "pve1",
         "status": "available", "content": "vztmpl,iso,backup", "shared": 0},
        {"id": "qemu/9000", "type": "qemu", "vmid": 9000, "name": "tmpl", "node": "pve1",
         "status": "stopped", "cpu": "n/a", "template": 1}
    ]})
}

fn series(x: &Extraction) -> Vec<String> {
    x.samples
        .iter()
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{}{{{}}} {}", s.metric, labels.join(","), s.value)
        })
        .collect()
}

#[test]
fn a_gauge_over_each_element_with_where_labels_and_scale() {
    let r = compile(
        r#"
        metric = "pve_cpu_usage_ratio"
        help = "CPU usage"
        each = "/data"
        where = { "/type" = ["qemu", "lxc"] }
        value = "/cpu"
        labels = { id = "/id", node = "/node" }
        scale = 1.0
        "#,
    );
    let x = extract(&[r], &resources(), None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "pve_cpu_usage_ratio{id=qemu/100,node=pve1} 0.25",
            "pve_cpu_usage_ratio{id=lxc/201,node=pve2} 0"
        ]
    );
    // The template's "n/a" is not a number: skipped and counted, not fatal.
    assert_eq!(x.skipped_for(SkipReason::NotNumber), 1);
}

#[test]
fn map_map_default_and_unmapped_strings() {
    let up = compile(
        r#"
        metric = "pve_up"
        each = "/data"
        value = "/status"
        labels = { id = "/id" }
        map = { running = 1, online = 1, available = 1 }
        map_default = 0
        "#,
    );
    let x = extract(&[up], &resources(), None, DEFAULT_MAX_SERIES);
    let values: Vec<f64> = x.samples.iter().map(|s| s.value).collect();
    assert_eq!(values, [1.0, 0.0, 0.0, 1.0, 0.0]);

    let strict = compile(
        r#"
        metric = "guest_running"
        each = "/data"
        value = "/status"
        map = { running = 1 }
        labels = { id = "/id" }
        "#,
    );
    let x = extract(&[strict], &resources(), None, DEFAULT_MAX_SERIES);
    assert_eq!(series(&x), ["guest_running{id=qemu/100} 1"]);
    assert_eq!(x.skipped_for(SkipReason::Unmapped), 4);
}

#[test]
fn a_missing_label_takes_its_default_or_is_empty_and_lists_sort() {
    let info = compile(
        r#"
        metric = "pve_guest_info"
        kind = "info"
        each = "/data"
        where = { "/type" = ["qemu", "lxc"], "/template" = "0" }
        labels = { id = "/id", tags = "/tags", ha = "/hastate" }
        defaults = { ha = "none" }
        "#,
    );
    let x = extract(&[info], &resources(), None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "pve_guest_info{ha=none,id=qemu/100,tags=prod;web} 1",
            "pve_guest_info{ha=started,id=lxc/201,tags=} 1"
        ]
    );

    let storage = compile(
        r#"
        metric = "pve_storage_info"
        kind = "info"
        each = "/data"
        where = { "/type" = "storage" }
        labels = { id = "/id", content = "/content" }
        sorted_lists = ["content"]
        "#,
    );
    let x = extract(&[storage], &resources(), None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        ["pve_storage_info{content=backup,iso,vztmpl,id=storage/pve1/local} 1"]
    );
}

#[test]
fn a_state_set_gives_every_state_one_hot_and_all_zero_when_absent() {
    let ha = compile(
        r#"
        metric = "pve_ha_state"
        kind = "stateset"
        each = "/data"
        where = { "/type" = ["qemu", "lxc"], "/template" = "0" }
        value = "/hastate"
        states = ["started", "stopped", "error"]
        labels = { id = "/id" }
        "#,
    );
    let x = extract(&[ha], &resources(), None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "pve_ha_state{id=qemu/100,state=started} 0",
            "pve_ha_state{id=qemu/100,state=stopped} 0",
            "pve_ha_state{id=qemu/100,state=error} 0",
            "pve_ha_state{id=lxc/201,state=started} 1",
            "pve_ha_state{id=lxc/201,state=stopped} 0",
            "pve_ha_state{id=lxc/201,state=error} 0"
        ]
    );
}

#[test]
fn templates_keys_items_and_counts() {
    let body = json!({"nodes": {"pve1": {"uptime": 10}, "pve2": {"uptime": 20}}, "cluster": "lab"});
    let up = compile(
        r#"
        metric = "node_uptime_seconds"
        each = "/nodes"
        value = "/uptime"
        labels = { id = "node/{@key}", via = "@item" }
        "#,
    );
    let count = compile(
        r#"
        metric = "nodes_total"
        kind = "counter"
        each = "/nodes"
        value = "@count"
        labels = { id = "cluster/{/cluster}" }
        "#,
    );
    let x = extract(&[up, count], &body, Some("pve1"), DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "node_uptime_seconds{id=node/pve1,via=pve1} 10",
            "node_uptime_seconds{id=node/pve2,via=pve1} 20",
            "nodes_total{id=cluster/lab} 2"
        ]
    );
}

#[test]
fn item_fields_and_facts_fill_labels_and_an_unknown_fact_holds_the_sample_back() {
    let body = json!({"data": {"onboot": 1}, "list": [1, 2, 3]});
    let onboot = compile(
        r#"
        metric = "pve_onboot_status"
        value = "/data/onboot"
        labels = { id = "{@item.type}/{@item.vmid}", node = "@item.node", type = "@item.type" }
        "#,
    );
    let total = compile(
        r#"
        metric = "pve_not_backed_up_total"
        each = "/list"
        value = "@count"
        labels = { id = "cluster/{@fact.cluster}" }
        "#,
    );
    let rules = [onboot, total];
    let item = item::compose(&[("node", "pve1".into()), ("type", "qemu".into()), ("vmid", "100".into())]);
    let facts = Facts::from([("cluster".to_string(), "lab".to_string())]);
    let run = |facts: Option<&Facts>| {
        let mut x = Extractor::new(DEFAULT_MAX_SERIES);
        x.feed_in(
            &rules,
            &body,
            Context {
                item: Some(&item),
                facts,
                ..Context::default()
            },
        );
        x.finish()
    };
    let x = run(Some(&facts));
    assert_eq!(
        series(&x),
        [
            "pve_onboot_status{id=qemu/100,node=pve1,type=qemu} 1",
            "pve_not_backed_up_total{id=cluster/lab} 3"
        ]
    );
    assert!(!x.waiting_for_facts);
    let x = run(None);
    assert_eq!(series(&x), ["pve_onboot_status{id=qemu/100,node=pve1,type=qemu} 1"]);
    assert!(x.waiting_for_facts, "the total waits for the cluster's name");
    assert_eq!(x.skipped_for(SkipReason::Missing), 1);
    let other = Facts::from([("node".to_string(), "pve1".to_string())]);
    assert!(run(Some(&other)).waiting_for_facts, "another fact is not the one named");
}

#[test]
fn where_presence_and_text_times() {
    let body = json!({"data": [
        {"id": "a", "due": "2027-06-30", "at": "2026-12-02T08:15:00+01:00"},
        {"id": "b", "due": null, "at": "yesterday"},
        {"id": "c"},
        {"id": "d", "due": "30.06.2027", "at": 5}
    ]});
    let due = compile(
        r#"
        metric = "due_timestamp_seconds"
        each = "/data"
        where = { "/due" = true }
        value = "/due"
        parse = "date"
        labels = { id = "/id" }
        "#,
    );
    let at = compile(
        r#"
        metric = "seen_timestamp_ms"
        each = "/data"
        value = "/at"
        parse = "rfc3339"
        scale = 1000.0
        labels = { id = "/id" }
        "#,
    );
    let absent = compile(
        r#"
        metric = "undated"
        kind = "info"
        each = "/data"
        where = { "/due" = false }
        labels = { id = "/id" }
        "#,
    );
    let x = extract(&[due, at, absent], &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "due_timestamp_seconds{id=a} 1814313600",
            "seen_timestamp_ms{id=a} 1796195700000",
            "undated{id=b} 1",
            "undated{id=c} 1"
        ]
    );
    // "30.06.2027", "yesterday" and the number 5 are not times; c has no `at`.
    assert_eq!(x.skipped_for(SkipReason::NotNumber), 3);
}

#[test]
fn duplicates_across_rules_and_the_series_limit_are_counted() {
    let a = compile("metric = \"m\"\neach = \"/data\"\nvalue = \"/vmid\"\nlabels = { node = \"/node\" }");
    let x = extract(std::slice::from_ref(&a), &resources(), None, DEFAULT_MAX_SERIES);
    // Two guests on pve1 give the same labels: the second is a duplicate.
    assert_eq!(series(&x), ["m{node=pve1} 100", "m{node=pve2} 201"]);
    assert_eq!(x.skipped_for(SkipReason::Duplicate), 1);
    assert_eq!(x.skipped_for(SkipReason::Missing), 2, "node and storage have no vmid");

    let b = compile("metric = \"n\"\neach = \"/data\"\nvalue = \"/vmid\"\nlabels = { id = \"/id\" }");
    let x = extract(&[b], &resources(), None, 2);
    assert_eq!(x.samples.len(), 2);
    assert_eq!(x.skipped_for(SkipReason::Limit), 1);
}

#[test]
fn an_each_that_is_not_there_is_one_missing() {
    let r = compile("metric = \"m\"\neach = \"/nope\"\nvalue = \"/x\"");
    let x = extract(&[r], &json!({"data": []}), None, 10);
    assert!(x.samples.is_empty());
    assert_eq!(x.skipped_for(SkipReason::Missing), 1);
}

#[test]
fn bad_rules_are_refused_naming_the_key() {
    let cases = [
        ("metric = \"9x\"\nvalue = \"/a\"", "metric"),
        ("metric = \"pollster_x\"\nvalue = \"/a\"", "metric"),
        ("metric = \"x\"\nkind = \"counter\"\nvalue = \"/a\"", "metric"),
        ("metric = \"x\"\nvalue = \"a\"", "value"),
        ("metric = \"x\"", "value"),
        ("metric = \"x\"\nkind = \"info\"\nvalue = \"/a\"", "value"),
        ("metric = \"x\"\nvalue = \"@count\"", "value"),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { instance = \"/i\" }",
            "labels.instance",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { \"bad-name\" = \"/i\" }",
            "labels.bad-name",
        ),
        ("metric = \"x\"\nvalue = \"/a\"\nlabels = { id = \"id\" }", "labels.id"),
        ("metric = \"x\"\nvalue = \"/a\"\nlabels = { id = \"{/a\" }", "labels.id"),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { id = \"@key\" }",
            "labels.id",
        ),
        (
            "metric = \"x\"\neach = \"/d\"\nvalue = \"@count\"\nlabels = { id = \"n/{@key}\" }",
            "labels.id",
        ),
        ("metric = \"x\"\nvalue = \"/a\"\nwhere = {}", "where"),
        ("metric = \"x\"\nvalue = \"/a\"\nwhere = { \"/t\" = [] }", "where./t"),
        ("metric = \"x\"\nvalue = \"/a\"\nwhere = { \"t\" = \"a\" }", "where.t"),
        (
            "metric = \"x_total\"\nkind = \"counter\"\nvalue = \"/a\"\nmap = { a = 1 }",
            "map",
        ),
        ("metric = \"x\"\nkind = \"stateset\"\nvalue = \"/a\"", "states"),
        (
            "metric = \"x\"\nkind = \"stateset\"\nvalue = \"/a\"\nstates = [\"a\", \"a\"]",
            "states",
        ),
        (
            "metric = \"x\"\nkind = \"stateset\"\nvalue = \"/a\"\nstates = [\"a\"]\nlabels = { state = \"/s\" }",
            "labels.state",
        ),
        ("metric = \"x\"\nvalue = \"/a\"\nstates = [\"a\"]", "states"),
        (
            "metric = \"x\"\nvalue = \"/a\"\ndefaults = { id = \"\" }",
            "defaults.id",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nsorted_lists = [\"id\"]",
            "sorted_lists",
        ),
        ("metric = \"x\"\nvalue = \"/a\"\nscale = 0.0", "scale"),
        ("metric = \"x\"\nvalue = \"/a\"\nhelp = \"a\\nb\"", "help"),
        ("metric = \"x\"\nkind = \"info\"\nparse = \"date\"", "parse"),
        (
            "metric = \"x\"\nvalue = \"/a\"\nparse = \"date\"\nmap = { a = 1 }",
            "parse",
        ),
        (
            "metric = \"x\"\neach = \"/d\"\nvalue = \"@count\"\nparse = \"rfc3339\"",
            "parse",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { id = \"{@fact.a-b}\" }",
            "labels.id",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { id = \"@item.\" }",
            "labels.id",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { media = \"/m\" }\nfixed_labels = { media = \"rj45\" }",
            "fixed_labels.media",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nfixed_labels = { instance = \"a\" }",
            "fixed_labels.instance",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nfixed_labels = { \"a-b\" = \"a\" }",
            "fixed_labels.a-b",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nfixed_labels = { a = \"\" }",
            "fixed_labels.a",
        ),
        (
            "metric = \"x\"\nkind = \"stateset\"\nvalue = \"/a\"\nstates = [\"a\"]\nfixed_labels = { state = \"s\" }",
            "fixed_labels.state",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { s = \"/s\" }\ncount_by = [\"s\"]",
            "count_by",
        ),
        (
            "metric = \"x\"\neach = \"\"\nvalue = \"@count\"\ncount_by = [\"s\"]",
            "count_by",
        ),
        (
            "metric = \"x\"\neach = \"\"\nvalue = \"@count\"\nlabels = { s = \"/s\" }\ncount_by = [\"s\", \"s\"]",
            "count_by",
        ),
        ("metric = \"x\"\nvalue = \"/a\"\ntruncate = { s = 2 }", "truncate.s"),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { s = \"/s\" }\ntruncate = { s = 0 }",
            "truncate.s",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { s = \"@lookup.device[serial].name\" }",
            "labels.s",
        ),
        (
            "metric = \"x\"\nvalue = \"/a\"\nlabels = { s = \"@lookup.device[/serial]\" }",
            "labels.s",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(compile_err(text).key, key, "{text}");
    }
    // Unknown keys are refused by the reader.
    assert!(toml::from_str::<ValueRule>("metric = \"x\"\nvalue = \"/a\"\nlabel = {}").is_err());
}

#[test]
fn fixed_labels_are_on_every_sample_as_written() {
    let r = compile(
        "metric = \"meraki_ms_ports_by_media_total\"\nvalue = \"/counts/rj45/total\"\n\
         labels = { org = \"/org\" }\nfixed_labels = { media = \"rj45\", status = \"{active}\" }",
    );
    let x = extract(
        std::slice::from_ref(&r),
        &json!({"org": "lab", "counts": {"rj45": {"total": 56}}}),
        None,
        DEFAULT_MAX_SERIES,
    );
    // Literal text, braces and all: nothing in a fixed label is read.
    assert_eq!(
        series(&x),
        ["meraki_ms_ports_by_media_total{media=rj45,org=lab,status={active}} 56"]
    );
}

#[test]
fn nested_walks_a_list_inside_each_element_and_parent_reads_its_holder() {
    let body = json!([
        {"portId": "1", "packets": [
            {"desc": "Total", "total": 120, "ratePerSec": {"total": 0.4}},
            {"desc": "Broadcast", "total": 3, "ratePerSec": {"total": 0.1}}
        ]},
        {"portId": "2", "packets": [{"desc": "Total", "total": 0}]},
        {"portId": "3"},
        {"portId": "4", "packets": {"a": {"desc": "Total", "total": 7}}}
    ]);
    let r = compile(
        r#"
        metric = "port_packets"
        each = ""
        nested = "/packets"
        where = { "/desc" = "Total" }
        value = "/total"
        labels = { port = "@parent/portId", name = "Port {@parent/portId}", key = "@key" }
        "#,
    );
    let x = extract(std::slice::from_ref(&r), &body, None, DEFAULT_MAX_SERIES);
    // A holder without the list gives nothing and is not counted missing;
    // an object's elements have their key.
    assert_eq!(
        series(&x),
        [
            "port_packets{key=,name=Port 1,port=1} 120",
            "port_packets{key=,name=Port 2,port=2} 0",
            "port_packets{key=a,name=Port 4,port=4} 7",
        ]
    );
    assert!(x.skipped.is_empty(), "{:?}", x.skipped);
    // A count counts the nested elements; count_by may read the parent.
    let c = compile(
        r#"
        metric = "packet_kinds_total"
        each = ""
        nested = "/packets"
        value = "@count"
        labels = { port = "@parent/portId" }
        count_by = ["port"]
        "#,
    );
    let x = extract(std::slice::from_ref(&c), &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "packet_kinds_total{port=1} 2",
            "packet_kinds_total{port=2} 1",
            "packet_kinds_total{port=4} 1",
        ]
    );
}

#[test]
fn a_sum_adds_fields_and_over_divides_by_another_sum() {
    let rules = [
        compile(
            r#"
            metric = "packets_total"
            each = ""
            value = { sum = ["/down/total", "/up/total"] }
            labels = { ap = "/ap" }
            "#,
        ),
        compile(
            r#"
            metric = "loss_percent"
            each = ""
            value = { sum = ["/down/lost", "/up/lost"], over = ["/down/total", "/up/total"] }
            labels = { ap = "/ap" }
            scale = 100
            map_default = 0
            "#,
        ),
        compile(
            r#"
            metric = "loss_ratio"
            each = ""
            value = { sum = ["/down/lost"], over = ["/down/total"] }
            labels = { ap = "/ap" }
            "#,
        ),
    ];
    let body = json!([
        {"ap": "a", "down": {"total": 300, "lost": 3}, "up": {"total": "100", "lost": true}},
        {"ap": "b", "down": {"total": 0, "lost": 0}, "up": {"total": 0, "lost": 0}},
        {"ap": "c", "down": {"total": 10, "lost": "x"}},
        {"ap": "d", "down": {"total": [1], "lost": 1}, "up": {"total": 1, "lost": 0}}
    ]);
    let x = extract(&rules, &body, None, DEFAULT_MAX_SERIES);
    // Numbers, numeric strings and booleans add; over 0 or a missing
    // field is missing (map_default, else skipped).
    assert_eq!(
        series(&x),
        [
            "packets_total{ap=a} 400",
            "packets_total{ap=b} 0",
            "loss_percent{ap=a} 1",
            "loss_percent{ap=b} 0",
            "loss_ratio{ap=a} 0.01",
        ]
    );
    let m = |metric: &str| std::sync::Arc::<str>::from(metric);
    assert_eq!(x.skipped.get(&(m("packets_total"), SkipReason::Missing)), Some(&1));
    assert_eq!(x.skipped.get(&(m("packets_total"), SkipReason::NotNumber)), Some(&1));
    assert_eq!(x.skipped.get(&(m("loss_percent"), SkipReason::NotNumber)), Some(&2));
    assert_eq!(x.skipped.get(&(m("loss_ratio"), SkipReason::Missing)), Some(&1));
    assert_eq!(x.skipped.get(&(m("loss_ratio"), SkipReason::NotNumber)), Some(&2));
}

#[test]
fn a_sum_is_checked() {
    let e = compile_err("metric = \"m\"\nvalue = { sum = [] }");
    assert_eq!(e.key, "value.sum");
    let e = compile_err("metric = \"m\"\nvalue = { sum = [\"/a\"], over = [\"b\"] }");
    assert_eq!(e.key, "value.over");
    let e = compile_err("metric = \"m\"\nvalue = { sum = [\"/a\"] }\nmap = { x = 1 }");
    assert_eq!(e.key, "map");
    let e = compile_err("metric = \"m\"\nkind = \"info\"\nvalue = { sum = [\"/a\"] }");
    assert_eq!(e.key, "value");
    // An unknown key in the form is refused when the rule is read.
    assert!(toml::from_str::<ValueRule>("metric = \"m\"\nvalue = { sum = [\"/a\"], times = 2 }").is_err());
}

#[test]
fn nested_and_parent_are_checked() {
    let e = compile_err("metric = \"m\"\nnested = \"/packets\"\nvalue = \"/total\"");
    assert_eq!(e.key, "nested");
    let e = compile_err("metric = \"m\"\neach = \"\"\nnested = \"packets\"\nvalue = \"/total\"");
    assert_eq!(e.key, "nested");
    let e = compile_err("metric = \"m\"\neach = \"\"\nvalue = \"/total\"\nlabels = { port = \"@parent/portId\" }");
    assert_eq!(e.key, "labels.port");
    assert!(e.message.contains("set nested"), "{}", e.message);
    let e = compile_err(
        "metric = \"m\"\neach = \"\"\nnested = \"/p\"\nvalue = \"@count\"\nlabels = { port = \"@parent/portId\" }",
    );
    assert_eq!(e.key, "labels.port");
    let e =
        compile_err("metric = \"m\"\neach = \"\"\nnested = \"/p\"\nvalue = \"/t\"\nlabels = { port = \"@parent\" }");
    assert_eq!(e.key, "labels.port");
}

#[test]
fn count_by_counts_per_set_of_element_labels_and_truncate_cuts_them() {
    let r = compile(
        r#"
        metric = "guests_total"
        each = "/data"
        where = { "/type" = ["qemu", "lxc", "node"] }
        value = "@count"
        labels = { kind = "/type", node = "/node", initial = "/name", cluster = "@fact.cluster" }
        count_by = ["kind", "node", "initial"]
        truncate = { initial = 1, kind = 2 }
        "#,
    );
    let facts = Facts::from([("cluster".to_string(), "lab".to_string())]);
    let mut x = Extractor::new(DEFAULT_MAX_SERIES);
    let cx = Context {
        facts: Some(&facts),
        ..Context::default()
    };
    x.feed_in(&[r], &resources(), cx);
    assert_eq!(
        series(&x.finish()),
        [
            "guests_total{cluster=lab,initial=w,kind=qe,node=pve1} 1",
            "guests_total{cluster=lab,initial=d,kind=lx,node=pve2} 1",
            "guests_total{cluster=lab,initial=,kind=no,node=pve3} 1",
            "guests_total{cluster=lab,initial=t,kind=qe,node=pve1} 1",
        ]
    );
    let by_node = compile(
        r#"
        metric = "guests_total"
        each = "/data"
        value = "@count"
        labels = { node = "/node", first = "/data/0/node" }
        count_by = ["node"]
        "#,
    );
    assert_eq!(
        series(&extract(&[by_node], &resources(), None, DEFAULT_MAX_SERIES)),
        [
            "guests_total{first=pve1,node=pve1} 3",
            "guests_total{first=pve1,node=pve2} 1",
            "guests_total{first=pve1,node=pve3} 1",
        ],
        "labels outside count_by read the body"
    );
    let waits = compile(
        r#"
        metric = "guests_total"
        each = "/data"
        value = "@count"
        labels = { node = "@lookup.node[/node].name" }
        count_by = ["node"]
        "#,
    );
    let x = extract(&[waits], &resources(), None, DEFAULT_MAX_SERIES);
    assert!(
        x.samples.is_empty() && x.waiting_for_facts,
        "no table yet: the counts wait"
    );
}

#[test]
fn lookups_join_fields_of_another_body_by_a_key_of_the_element() {
    let devices = json!([
        {"serial": "A", "name": "hq-mx", "model": "MX68", "networkId": "N1"},
        {"serial": "B", "name": "hq-sw", "model": "MS120-8", "networkId": "N1"},
    ]);
    let networks = json!([{"id": "N1", "name": "HQ Paris"}]);
    let table = |key: &str, fields: &[(&str, &str)]| Lookup {
        each: String::new(),
        key: key.into(),
        fields: fields.iter().map(|(f, p)| (f.to_string(), p.to_string())).collect(),
        ..Lookup::default()
    };
    let mut facts = lookup::learn(
        &devices,
        &BTreeMap::new(),
        &BTreeMap::from([(
            "device".to_string(),
            table(
                "/serial",
                &[("name", "/name"), ("model", "/model"), ("network", "/networkId")],
            ),
        )]),
    );
    facts.extend(lookup::learn(
        &networks,
        &BTreeMap::new(),
        &BTreeMap::from([("network".to_string(), table("/id", &[("name", "/name")]))]),
    ));
    let r = compile(
        r#"
        metric = "device_up"
        each = ""
        value = "/status"
        map = { online = 1 }
        map_default = 0
        labels = { serial = "/serial", name = "@lookup.device[/serial].name", model = "@lookup.device[/serial].model", device_type = "@lookup.device[/serial].model", network_name = "@lookup.network[/network/id].name" }
        truncate = { device_type = 2 }
        defaults = { name = "unknown" }
        "#,
    );
    let body = json!([
        {"serial": "A", "status": "online", "network": {"id": "N1"}},
        {"serial": "C", "status": "offline", "network": {"id": "N9"}},
    ]);
    let cx = Context {
        facts: Some(&facts),
        ..Context::default()
    };
    let mut x = Extractor::new(DEFAULT_MAX_SERIES);
    x.feed_in(std::slice::from_ref(&r), &body, cx);
    let x = x.finish();
    assert!(!x.waiting_for_facts);
    assert_eq!(
        series(&x),
        [
            "device_up{device_type=MX,model=MX68,name=hq-mx,network_name=HQ Paris,serial=A} 1",
            "device_up{device_type=,model=,name=unknown,network_name=,serial=C} 0",
        ],
        "a key a learned table lacks is a missing label"
    );
    let x = extract(&[r], &body, None, DEFAULT_MAX_SERIES);
    assert!(
        x.samples.is_empty() && x.waiting_for_facts,
        "tables not learned: the samples wait"
    );
}

#[test]
fn rules_feeding_one_metric_must_agree() {
    let a = compile("metric = \"pve_up\"\nhelp = \"up\"\nvalue = \"/a\"\nlabels = { id = \"/id\" }");
    let b =
        compile("metric = \"pve_up\"\nhelp = \"up\"\neach = \"/d\"\nvalue = \"/b\"\nlabels = { id = \"{/t}/{/n}\" }");
    assert_eq!(check_families(&[&a, &b]), Ok(()));
    let c = compile("metric = \"pve_up\"\nhelp = \"up\"\nvalue = \"/a\"\nlabels = { name = \"/id\" }");
    let e = check_families(&[&a, &b, &c]).expect_err("labels differ");
    assert_eq!((e.first, e.second), (0, 2));
    assert!(e.message.contains("labels"), "{e}");
    let d = compile("metric = \"pve_up\"\nhelp = \"other\"\nvalue = \"/a\"\nlabels = { id = \"/id\" }");
    assert!(check_families(&[&a, &d]).expect_err("help").message.contains("help"));
    let i = compile("metric = \"pve_up\"\nhelp = \"up\"\nkind = \"info\"\nlabels = { id = \"/id\" }");
    assert!(check_families(&[&a, &i]).expect_err("kind").message.contains("kind"));
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1e9f64..1e9).prop_map(|n| json!(n)),
        "[a-z0-9,.]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any body: no panic, never more than the limit, every sample carries
    /// every label of its rule, and no two samples share metric and labels.
    #[test]
    fn extraction_is_total_and_bounded(body in json_value(), limit in 0usize..8) {
        let rules = [
            compile("metric = \"a\"\neach = \"\"\nvalue = \"/a\"\nlabels = { k = \"@key\", b = \"/b\" }\nmap = { x = 1 }"),
            compile("metric = \"s\"\nkind = \"stateset\"\neach = \"/a\"\nvalue = \"/b\"\nstates = [\"x\", \"1\"]\nlabels = { c = \"{/c}-{/a}\" }"),
            compile("metric = \"c_total\"\nkind = \"counter\"\neach = \"/b\"\nwhere = { \"/a\" = [\"1\", \"true\"] }\nvalue = \"@count\""),
            compile("metric = \"i\"\nkind = \"info\"\nlabels = { a = \"/a\" }\nsorted_lists = [\"a\"]"),
            compile("metric = \"t\"\neach = \"/a\"\nwhere = { \"/b\" = true }\nvalue = \"/b\"\nparse = \"date\"\nlabels = { f = \"@fact.f\", n = \"{@item.n}\" }"),
            compile("metric = \"u\"\neach = \"/a\"\nwhere = { \"/c\" = false }\nvalue = \"/b\"\nparse = \"rfc3339\"\nlabels = { k = \"@key\" }"),
        ];
        let facts = Facts::from([("f".to_string(), "x".to_string())]);
        let item = item::compose(&[("n", "a,b=%".into())]);
        let mut x = Extractor::new(limit);
        x.feed_in(&rules, &body, Context { item: Some(&item), facts: Some(&facts), ..Context::default() });
        let x = x.finish();
        prop_assert!(x.samples.len() <= limit);
        let mut seen = std::collections::HashSet::new();
        for s in &x.samples {
            let rule = rules.iter().find(|r| r.metric == s.metric).expect("a rule's metric");
            let names: Vec<&str> = s.labels.iter().map(|(k, _)| &**k).collect();
            prop_assert_eq!(names, rule.label_names());
            prop_assert!(s.value.is_finite());
            prop_assert!(seen.insert((s.metric.clone(), s.labels.clone())));
        }
    }
}

#[test]
fn duplicates_are_found_below_and_above_the_scan_limit_and_across_items() {
    // 40 elements, ids 0..20 twice: the second half are all duplicates,
    // some found by the scan (the first 16 samples), the rest by the table.
    let data: Vec<serde_json::Value> = (0..40).map(|i| json!({"id": i % 20, "v": i})).collect();
    let r = compile("metric = \"m\"\neach = \"/data\"\nvalue = \"/v\"\nlabels = { id = \"/id\" }");
    let x = extract(
        std::slice::from_ref(&r),
        &json!({ "data": data }),
        None,
        DEFAULT_MAX_SERIES,
    );
    assert_eq!(x.samples.len(), 20);
    assert_eq!(x.skipped_for(SkipReason::Duplicate), 20);
    // The first of each series is kept.
    assert!(x.samples.iter().all(|s| s.value < 20.0), "{:?}", series(&x));
    // One extraction over two fan-out items: the second item's series are
    // duplicates unless `@item` tells them apart.
    let body = json!({ "data": (0..20).map(|i| json!({"id": i, "v": i})).collect::<Vec<_>>() });
    let mut e = Extractor::new(DEFAULT_MAX_SERIES);
    e.feed(std::slice::from_ref(&r), &body, Some("n1"));
    e.feed(std::slice::from_ref(&r), &body, Some("n2"));
    let x = e.finish();
    assert_eq!((x.samples.len(), x.skipped_for(SkipReason::Duplicate)), (20, 20));
    let by_item =
        compile("metric = \"m\"\neach = \"/data\"\nvalue = \"/v\"\nlabels = { id = \"/id\", node = \"@item\" }");
    let mut e = Extractor::new(DEFAULT_MAX_SERIES);
    e.feed(std::slice::from_ref(&by_item), &body, Some("n1"));
    e.feed(std::slice::from_ref(&by_item), &body, Some("n2"));
    let x = e.finish();
    assert_eq!((x.samples.len(), x.skipped_for(SkipReason::Duplicate)), (40, 0));
}

/// A switch's ports, as getDeviceSwitchPortsStatuses gives them.
fn ports(draws: &[(bool, f64)]) -> Value {
    Value::Array(
        draws
            .iter()
            .enumerate()
            .map(|(i, (on, wh))| json!({"portId": (i + 1).to_string(), "poe": {"isAllocated": on}, "powerUsageInWh": wh}))
            .collect(),
    )
}

#[test]
fn aggregate_combines_the_elements_of_one_series_across_rules_and_items() {
    let rules = [
        compile(
            r#"
            metric = "switch_poe_wh"
            each = ""
            where = { "/poe/isAllocated" = "true" }
            value = "/powerUsageInWh"
            labels = { serial = "@item" }
            aggregate = "sum"
            "#,
        ),
        // The ports without PoE add 0, so a switch without any still has
        // its series.
        compile(
            r#"
            metric = "switch_poe_wh"
            each = ""
            where = { "/poe/isAllocated" = "false" }
            value = "/poe/isAllocated"
            labels = { serial = "@item" }
            aggregate = "sum"
            "#,
        ),
        compile(
            r#"
            metric = "network_poe_wh"
            each = ""
            where = { "/poe/isAllocated" = "true" }
            value = "/powerUsageInWh"
            labels = { network = "@fact.net" }
            aggregate = "sum"
            "#,
        ),
        compile(
            r#"
            metric = "port_wh_avg"
            each = ""
            value = "/powerUsageInWh"
            labels = { serial = "@item" }
            aggregate = "avg"
            "#,
        ),
        compile(
            r#"
            metric = "port_wh_max"
            each = ""
            value = "/powerUsageInWh"
            labels = { serial = "@item" }
            aggregate = "max"
            scale = 2
            "#,
        ),
        compile(
            r#"
            metric = "port_wh_min"
            each = ""
            value = "/powerUsageInWh"
            aggregate = "min"
            "#,
        ),
    ];
    let facts = Facts::from([("net".to_string(), "hq".to_string())]);
    let mut x = Extractor::new(DEFAULT_MAX_SERIES);
    for (item, body) in [
        ("sw1", ports(&[(true, 10.5), (false, 3.0), (true, 4.5)])),
        ("sw2", ports(&[(false, 0.0), (false, 7.0)])),
    ] {
        let cx = Context {
            item: Some(item),
            facts: Some(&facts),
            ..Context::default()
        };
        x.feed_in(&rules, &body, cx);
    }
    let x = x.finish();
    assert_eq!(
        series(&x),
        [
            "switch_poe_wh{serial=sw1} 15",
            "network_poe_wh{network=hq} 15",
            "port_wh_avg{serial=sw1} 6",
            "port_wh_max{serial=sw1} 21",
            "port_wh_min{} 0",
            "switch_poe_wh{serial=sw2} 0",
            "port_wh_avg{serial=sw2} 3.5",
            "port_wh_max{serial=sw2} 14",
        ]
    );
    assert!(x.skipped.is_empty(), "{:?}", x.skipped);

    // An element without the value is left out of the average (and
    // counted); a fact not learned holds the series back.
    let avg =
        compile("metric = \"a\"\neach = \"\"\nvalue = \"/u\"\nlabels = { net = \"@fact.net\" }\naggregate = \"avg\"");
    let body = json!([{"u": 30.9}, {"u": 20.1}, {"x": 1}]);
    let cx = Context {
        facts: Some(&facts),
        ..Context::default()
    };
    let mut x = Extractor::new(DEFAULT_MAX_SERIES);
    x.feed_in(std::slice::from_ref(&avg), &body, cx);
    let x = x.finish();
    assert_eq!(series(&x), ["a{net=hq} 25.5"]);
    assert_eq!(x.skipped_for(SkipReason::Missing), 1);
    let x = extract(&[avg], &body, None, DEFAULT_MAX_SERIES);
    assert!(x.samples.is_empty() && x.waiting_for_facts);

    // A combined series counts against max_series like any other.
    let x = extract(&rules[3..5], &ports(&[(true, 1.0)]), Some("sw1"), 1);
    assert_eq!(series(&x), ["port_wh_avg{serial=sw1} 1"]);
    assert_eq!(x.skipped_for(SkipReason::Limit), 1);
}

#[test]
fn aggregate_is_checked() {
    let cases = [
        (
            "metric = \"m\"\nvalue = \"/a\"\naggregate = \"sum\"",
            "aggregate",
            "set each",
        ),
        (
            "metric = \"m\"\neach = \"\"\nvalue = \"@count\"\naggregate = \"sum\"",
            "aggregate",
            "@count",
        ),
        (
            "metric = \"m\"\nkind = \"info\"\neach = \"\"\naggregate = \"avg\"",
            "aggregate",
            "info",
        ),
        (
            "metric = \"m\"\neach = \"\"\nvalue = \"/a\"\naggregate = \"avg\"\nkeep_first = true",
            "keep_first",
            "aggregate",
        ),
    ];
    for (text, key, why) in cases {
        let e = compile_err(text);
        assert_eq!(e.key, key, "{text}");
        assert!(e.message.contains(why), "{text}: {}", e.message);
    }
    assert!(
        toml::from_str::<ValueRule>("metric = \"m\"\neach = \"\"\nvalue = \"/a\"\naggregate = \"median\"").is_err()
    );

    // Rules of one metric agree on it.
    let a = compile("metric = \"m\"\neach = \"\"\nvalue = \"/a\"\naggregate = \"sum\"");
    let b = compile("metric = \"m\"\neach = \"\"\nvalue = \"/a\"");
    let e = check_families(&[&a, &b]).expect_err("a clash");
    assert!(e.message.contains("aggregate none here, sum"), "{}", e.message);
    let c = compile("metric = \"m\"\neach = \"\"\nvalue = \"/b\"\naggregate = \"sum\"");
    assert!(check_families(&[&a, &c]).is_ok());
}

#[test]
fn replace_and_slug_rewrite_a_label() {
    let r = compile(
        r#"
        metric = "usage_mb"
        each = ""
        value = "/total"
        labels = { category = "/category", raw = "/category", enabled = "/enabled" }
        replace = { category = [[" & ", "_and_"], ["&", "_and_"], [" - ", "_"], ["-", "_"], [" ", "_"], ["/", "_"]], enabled = [["true", "True"], ["false", "False"]] }
        slug = ["category"]
        defaults = { category = "unknown" }
        "#,
    );
    let body = json!([
        {"category": "Video & music", "total": 1, "enabled": true},
        {"category": "File sharing/P2P", "total": 2, "enabled": false},
        {"category": "  Misc. (other) -- VoIP & Chat ", "total": 3},
        {"category": "ÉTÉ ΟΔΟΣ", "total": 4},
        {"category": "?!", "total": 5},
        {"total": 6},
    ]);
    let x = extract(&[r], &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "usage_mb{category=video_and_music,enabled=True,raw=Video & music} 1",
            "usage_mb{category=file_sharing_p2p,enabled=False,raw=File sharing/P2P} 2",
            "usage_mb{category=misc_other_voip_and_chat,enabled=,raw=  Misc. (other) -- VoIP & Chat } 3",
            "usage_mb{category=été_οδος,enabled=,raw=ÉTÉ ΟΔΟΣ} 4",
            "usage_mb{category=unknown,enabled=,raw=?!} 5",
            "usage_mb{category=unknown,enabled=,raw=} 6",
        ]
    );
}

#[test]
fn replace_and_slug_are_checked() {
    let cases = [
        (
            "metric = \"m\"\nvalue = \"/a\"\nreplace = { c = [[\"a\", \"b\"]] }",
            "replace.c",
        ),
        (
            "metric = \"m\"\nvalue = \"/a\"\nlabels = { c = \"/c\" }\nreplace = { c = [] }",
            "replace.c",
        ),
        (
            "metric = \"m\"\nvalue = \"/a\"\nlabels = { c = \"/c\" }\nreplace = { c = [[\"\", \"x\"]] }",
            "replace.c",
        ),
        ("metric = \"m\"\nvalue = \"/a\"\nslug = [\"c\"]", "slug"),
        (
            "metric = \"m\"\nvalue = \"/a\"\nlabels = { c = \"/c\" }\nslug = [\"c\", \"c\"]",
            "slug",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(compile_err(text).key, key, "{text}");
    }
    // A pair is two texts.
    assert!(
        toml::from_str::<ValueRule>(
            "metric = \"m\"\nvalue = \"/a\"\nlabels = { c = \"/c\" }\nreplace = { c = [[\"a\"]] }"
        )
        .is_err()
    );
}

#[test]
fn a_value_read_from_the_parent_and_keep_first() {
    // STP: each priority once for a list of switches.
    let stp = json!({"stpBridgePriority": [
        {"switches": ["Q2-A"], "stpPriority": 4096},
        {"switches": ["Q2-B", "Q2-C"], "stpPriority": 32768},
        {"switches": ["Q2-D"]}
    ]});
    let r = compile(
        r#"
        metric = "stp_priority"
        each = "/stpBridgePriority"
        nested = "/switches"
        value = "@parent/stpPriority"
        labels = { serial = "@element" }
        map_default = 32768
        "#,
    );
    let x = extract(&[r], &stp, None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "stp_priority{serial=Q2-A} 4096",
            "stp_priority{serial=Q2-B} 32768",
            "stp_priority{serial=Q2-C} 32768",
            "stp_priority{serial=Q2-D} 32768",
        ]
    );
    assert!(x.skipped.is_empty(), "{:?}", x.skipped);

    // keep_first: the radios of each AP, one basic service set per SSID on
    // each radio; the first of each radio is kept, quietly.
    let body = json!([{"serial": "Q3-A", "basicServiceSets": [
        {"ssid": "corp", "radio": {"band": "2.4", "index": "0", "channel": 1}},
        {"ssid": "corp", "radio": {"band": "5", "index": "1", "channel": 100}},
        {"ssid": "guest", "radio": {"band": "2.4", "index": "0", "channel": 6}},
        {"ssid": "guest", "radio": {"band": "5", "index": "1", "channel": 149}}
    ]}]);
    let radio = |keep_first: bool| {
        compile(&format!(
            "metric = \"radio_channel\"\neach = \"\"\nnested = \"/basicServiceSets\"\nvalue = \"/radio/channel\"\n\
             labels = {{ serial = \"@parent/serial\", band = \"/radio/band\" }}\nkeep_first = {keep_first}"
        ))
    };
    let x = extract(&[radio(true)], &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(
        series(&x),
        [
            "radio_channel{band=2.4,serial=Q3-A} 1",
            "radio_channel{band=5,serial=Q3-A} 100"
        ]
    );
    assert!(x.skipped.is_empty(), "{:?}", x.skipped);
    let x = extract(&[radio(false)], &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(x.samples.len(), 2);
    assert_eq!(x.skipped_for(SkipReason::Duplicate), 2);
    // Beyond the samples compared one by one (a table by hash): the same.
    let many: Vec<Value> = (0..20)
        .map(|i| {
            let sets: Vec<Value> = ["corp", "guest"]
                .iter()
                .flat_map(|_| [("2.4", 1), ("5", 36 + i)])
                .map(|(band, ch)| json!({"radio": {"band": band, "channel": ch}}))
                .collect();
            json!({"serial": format!("Q3-{i}"), "basicServiceSets": sets})
        })
        .collect();
    let x = extract(&[radio(true)], &Value::Array(many.clone()), None, DEFAULT_MAX_SERIES);
    assert_eq!(x.samples.len(), 40);
    assert!(x.skipped.is_empty(), "{:?}", x.skipped);
    let x = extract(&[radio(false)], &Value::Array(many), None, DEFAULT_MAX_SERIES);
    assert_eq!(x.samples.len(), 40);
    assert_eq!(x.skipped_for(SkipReason::Duplicate), 40);
    // Another rule's series is still a duplicate: the second rule's four
    // repeat the first rule's two series (and the first repeats itself twice).
    let x = extract(&[radio(false), radio(true)], &body, None, DEFAULT_MAX_SERIES);
    assert_eq!(x.samples.len(), 2);
    assert_eq!(x.skipped_for(SkipReason::Duplicate), 6);

    // @parent as a value needs nested.
    let e = compile_err("metric = \"m\"\neach = \"\"\nvalue = \"@parent/stpPriority\"");
    assert_eq!(e.key, "value");
    assert!(e.message.contains("set nested"), "{}", e.message);
    let e = compile_err("metric = \"m\"\neach = \"\"\nnested = \"/s\"\nvalue = \"@parent/a~2\"");
    assert_eq!(e.key, "value");
}

/// The per-network SSID lists of a fan-out over networks (items made of
/// `id` and `name`), as Meraki's getNetworkWirelessSsids gives them.
fn ssid_lists() -> Vec<(String, Value)> {
    let net = |id: &str, name: &str| item::compose(&[("id", id.into()), ("name", name.into())]);
    vec![
        (
            net("N1", "HQ Paris"),
            json!([{"name": "Corp", "enabled": true}, {"name": "Guest", "enabled": true},
                   {"name": "Unconfigured SSID 3", "enabled": false}]),
        ),
        (
            net("N2", "Lyon"),
            json!([{"name": "Corp", "enabled": true}, {"name": "Guest", "enabled": false},
                   {"name": "Lab", "enabled": true}]),
        ),
        (
            net("N3", "Nice"),
            json!([{"name": "Corp", "enabled": true}, {"name": "Old", "enabled": false}]),
        ),
    ]
}

fn ssid_table() -> BTreeMap<String, Lookup> {
    let table: Lookup = toml::from_str(
        r#"
        each = ""
        where = { "/enabled" = "true" }
        key = "/name"
        fields = { id = "@item.id", name = "@item.name" }
        many = { id = "multiple", name = "multiple_({@count}_networks)" }
        "#,
    )
    .expect("the table parses");
    assert_eq!(table.check("ssid_network"), Ok(()));
    BTreeMap::from([("ssid_network".to_string(), table)])
}

#[test]
fn a_fan_out_table_is_learned_over_its_items_and_counts_the_elements_of_a_key() {
    let lookups = ssid_table();
    let mut rows = lookup::Rows::default();
    for (item, doc) in ssid_lists() {
        let mut one = lookup::Rows::default();
        one.add(&doc, Some(&item), &lookups);
        rows.extend(one);
    }
    let facts = rows.into_facts(&lookups);
    let want: Facts = [
        ("ssid_network[]", "3"),
        ("ssid_network[Corp].id", "multiple"),
        ("ssid_network[Corp].name", "multiple_(3_networks)"),
        ("ssid_network[Guest].id", "N1"),
        ("ssid_network[Guest].name", "HQ Paris"),
        ("ssid_network[Lab].id", "N2"),
        ("ssid_network[Lab].name", "Lyon"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        facts, want,
        "disabled SSIDs give no row; Guest is enabled in one network only"
    );

    // Without `many`, a key several elements have keeps its first row.
    let mut plain = lookups.clone();
    plain.get_mut("ssid_network").expect("the table").many.clear();
    let mut rows = lookup::Rows::default();
    for (item, doc) in ssid_lists() {
        rows.add(&doc, Some(&item), &plain);
    }
    let facts = rows.into_facts(&plain);
    assert_eq!(facts["ssid_network[Corp].id"], "N1");
    assert_eq!(facts["ssid_network[Corp].name"], "HQ Paris");

    // In one body too, `many` reads the number of elements with the key.
    let one_body = lookup::learn(
        &json!([{"name": "Corp", "enabled": true}, {"name": "Corp", "enabled": true}]),
        &BTreeMap::new(),
        &lookups,
    );
    assert_eq!(one_body["ssid_network[Corp].name"], "multiple_(2_networks)");
    assert_eq!(one_body["ssid_network[Corp].id"], "multiple");
    let single = lookup::learn(&json!([{"name": "Corp", "enabled": true}]), &BTreeMap::new(), &lookups);
    assert_eq!(
        single.keys().collect::<Vec<_>>(),
        ["ssid_network[]"],
        "outside a fan-out @item reads nothing: a row of no fields"
    );
}

#[test]
fn a_rule_labels_by_the_count_a_fan_out_table_learned() {
    let lookups = ssid_table();
    let mut rows = lookup::Rows::default();
    for (item, doc) in ssid_lists() {
        rows.add(&doc, Some(&item), &lookups);
    }
    let facts = rows.into_facts(&lookups);
    let r = compile(
        r#"
        metric = "meraki_mr_ssid_client_count"
        each = ""
        value = "/clients/counts/total"
        labels = { ssid = "/name", network_id = "@lookup.ssid_network[/name].id", network_name = "@lookup.ssid_network[/name].name" }
        defaults = { network_id = "unknown", network_name = "unknown" }
        "#,
    );
    let usage = json!([
        {"name": "Corp", "clients": {"counts": {"total": 27}}},
        {"name": "Guest", "clients": {"counts": {"total": 9}}},
        {"name": "Old", "clients": {"counts": {"total": 1}}},
    ]);
    let cx = Context {
        facts: Some(&facts),
        ..Context::default()
    };
    let mut x = Extractor::new(DEFAULT_MAX_SERIES);
    x.feed_in(std::slice::from_ref(&r), &usage, cx);
    let got: Vec<(String, String, String, f64)> = x
        .finish()
        .samples
        .iter()
        .map(|s| {
            let l = |n: &str| s.labels.iter().find(|(k, _)| &**k == n).expect(n).1.clone();
            (l("ssid"), l("network_id"), l("network_name"), s.value)
        })
        .collect();
    let want = [
        ("Corp", "multiple", "multiple_(3_networks)", 27.0),
        ("Guest", "N1", "HQ Paris", 9.0),
        ("Old", "unknown", "unknown", 1.0),
    ];
    let want: Vec<(String, String, String, f64)> = want
        .iter()
        .map(|(a, b, c, v)| (a.to_string(), b.to_string(), c.to_string(), *v))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn broken_fan_out_tables_are_refused_naming_the_key() {
    let good = ssid_table().remove("ssid_network").expect("the table");
    let err = |change: fn(&mut Lookup)| {
        let mut t = good.clone();
        change(&mut t);
        t.check("ssid_network").expect_err("refused")
    };
    let e = err(|t| {
        t.many.insert("zone".into(), "x".into());
    });
    assert_eq!((e.key.as_str(), e.value.as_str()), ("many.zone", "x"));
    assert!(e.message.contains("its fields are id, name"), "{e}");
    let e = err(|t| {
        t.many.insert("name".into(), "multiple_({count})".into());
    });
    assert_eq!(e.key, "many.name");
    assert!(e.message.contains("{@count}"), "{e}");
    let e = err(|t| {
        t.fields.insert("zone".into(), "@item.a-b".into());
    });
    assert_eq!(e.key, "fields.zone");
    let e = err(|t| {
        t.fields.insert("zone".into(), "zone".into());
    });
    assert_eq!(e.key, "fields.zone");
    assert!(e.message.contains("@item.FIELD"), "{e}");
    let e = err(|t| t.where_ = Some(BTreeMap::new()));
    assert_eq!(e.key, "where");
    let e = err(|t| t.where_ = Some(BTreeMap::from([("enabled".into(), OneOrMany::One("true".into()))])));
    assert_eq!((e.key.as_str(), e.value.as_str()), ("where.enabled", "enabled"));
    let e = err(|t| t.where_ = Some(BTreeMap::from([("/enabled".into(), OneOrMany::Many(Vec::new()))])));
    assert_eq!(e.key, "where./enabled");
}
