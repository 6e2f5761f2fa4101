//! `pollster values`: a group's value rules run offline on a saved body, the
//! exact exposition printed, and the exit codes of what can go wrong.

use crate::common::promtool;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_pollster");

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/values")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p
}

/// Exit code, stdout, stderr. No `POLLSTER_` variable of the caller's
/// environment leaks into the config.
fn run(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("RUST_LOG");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("POLLSTER_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn values(config: &str, ty: &str, group: &str, body: &str, item: Option<&str>) -> (i32, String, String) {
    let mut args = vec![
        "values", "--config", config, "--type", ty, "--group", group, "--body", body,
    ];
    if let Some(i) = item {
        args.extend(["--item", i]);
    }
    run(&args)
}

const RESOURCES: &str = "\
# HELP pve_cpu_usage_ratio CPU usage of a guest (1 = one core busy)
# TYPE pve_cpu_usage_ratio gauge
pve_cpu_usage_ratio{id=\"qemu/100\",node=\"pve1\"} 0.25
pve_cpu_usage_ratio{id=\"lxc/201\",node=\"pve1\"} 0
# HELP pve_up Node, guest or storage is online, running or available
# TYPE pve_up gauge
pve_up{id=\"node/pve1\"} 1
pve_up{id=\"node/pve2\"} 0
pve_up{id=\"qemu/100\"} 1
pve_up{id=\"lxc/201\"} 0
pve_up{id=\"qemu/102\"} 0
pve_up{id=\"storage/pve1/local\"} 1
pve_up{id=\"storage/pve1/nfs\"} 0
# HELP pve_storage_info Storage: node, plugin type and content types
# TYPE pve_storage_info gauge
pve_storage_info{content=\"backup,iso,vztmpl\",id=\"storage/pve1/local\",node=\"pve1\",plugin=\"dir\"} 1
pve_storage_info{content=\"images\",id=\"storage/pve1/nfs\",node=\"pve1\",plugin=\"unknown\"} 1
# HELP pve_guest_status A guest's status
# TYPE pve_guest_status gauge
pve_guest_status{id=\"qemu/100\",state=\"running\"} 1
pve_guest_status{id=\"qemu/100\",state=\"stopped\"} 0
pve_guest_status{id=\"qemu/100\",state=\"paused\"} 0
pve_guest_status{id=\"lxc/201\",state=\"running\"} 0
pve_guest_status{id=\"lxc/201\",state=\"stopped\"} 1
pve_guest_status{id=\"lxc/201\",state=\"paused\"} 0
pve_guest_status{id=\"qemu/102\",state=\"running\"} 0
pve_guest_status{id=\"qemu/102\",state=\"stopped\"} 0
pve_guest_status{id=\"qemu/102\",state=\"paused\"} 1
# HELP pve_guests_total Guests defined in the cluster
# TYPE pve_guests_total counter
pve_guests_total 3
";

#[test]
fn a_group_s_rules_print_the_exact_exposition_and_skips_on_stderr() {
    let (code, out, err) = values(
        &fixture("pollster.toml"),
        "pve-lab",
        "resources",
        &fixture("resources.json"),
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, RESOURCES);
    // qemu/102's cpu is "n/a": skipped and counted, the run still succeeds.
    assert_eq!(err, "skipped: pve_cpu_usage_ratio not_number 1\n");
    promtool::check_metrics(&out);
}

#[test]
fn item_is_the_fan_out_item() {
    let (code, out, err) = values(
        &fixture("pollster.toml"),
        "pve-lab",
        "node_status",
        &fixture("node-status.json"),
        Some("pve1"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "# HELP pve_node_load1 One-minute load average of a node\n\
         # TYPE pve_node_load1 gauge\n\
         pve_node_load1{node=\"pve1\"} 0.42\n\
         # HELP pve_node_memory_used_bytes Memory used on a node\n\
         # TYPE pve_node_memory_used_bytes gauge\n\
         pve_node_memory_used_bytes{node=\"pve1\"} 4294967296\n"
    );
    assert_eq!(err, "");
    promtool::check_metrics(&out);

    // A body the rules find nothing in: no sample, each metric said so.
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = write(dir.path(), "empty.json", "{\"data\": {}}");
    let (code, out, err) = values(
        &fixture("pollster.toml"),
        "pve-lab",
        "node_status",
        &empty.to_string_lossy(),
        Some("pve1"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        "skipped: pve_node_load1 missing 1\nskipped: pve_node_memory_used_bytes missing 1\n"
    );
}

#[test]
fn unknown_type_or_group_exits_2_naming_it() {
    let config = fixture("pollster.toml");
    let body = fixture("resources.json");
    let (code, out, err) = values(&config, "pve-nope", "resources", &body, None);
    assert_eq!(code, 2, "{err}");
    assert_eq!(out, "");
    assert!(err.contains("--type \"pve-nope\""), "{err}");
    // Known types: the built-in, the presets and the file's.
    for known in ["http", "pve", "pve-lab"] {
        assert!(err.contains(known), "{known} not listed: {err}");
    }

    let (code, _, err) = values(&config, "pve-lab", "resourcez", &body, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--group \"resourcez\""), "{err}");
    assert!(err.contains("resources, nodes, node_status"), "{err}");

    // A group without value rules; a preset type is known.
    let (code, _, err) = values(&config, "pve-lab", "nodes", &body, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no value rules"), "{err}");
    let (code, _, err) = values(&config, "pve", "nodes", &body, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("type pve, group nodes has no value rules"), "{err}");
}

#[test]
fn a_bad_rule_exits_2_naming_its_key_as_check_config_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(
        dir.path(),
        "bad.toml",
        "[[types]]\nname = \"lab\"\n\n[[types.groups]]\nname = \"g\"\npath = \"/x\"\n\n\
         [[types.groups.values]]\nmetric = \"lab_up\"\nvalue = \"/up\"\n\n\
         [[types.groups.values]]\nmetric = \"lab_size\"\nvalue = \"/size\"\nlabels = { id = \"id\" }\n",
    );
    let config = config.to_string_lossy().to_string();
    let (code, out, err) = values(&config, "lab", "g", &fixture("resources.json"), None);
    assert_eq!(code, 2, "{err}");
    assert_eq!(out, "");
    assert!(err.contains(&config), "file not named: {err}");
    assert!(err.contains("types[0].groups[0].values[1].labels.id"), "{err}");
    let (code, _, check) = run(&["check-config", &config]);
    assert_eq!(code, 2);
    assert_eq!(err, check, "the same message as check-config");

    let (code, _, err) = values(
        "/nonexistent/pollster.toml",
        "lab",
        "g",
        &fixture("resources.json"),
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/pollster.toml"), "{err}");
}

#[test]
fn a_body_that_is_not_json_or_not_there_exits_1() {
    let config = fixture("pollster.toml");
    let bad = fixture("not-json.json");
    let (code, out, err) = values(&config, "pve-lab", "resources", &bad, None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    assert!(err.contains(&bad) && err.contains("is not JSON"), "{err}");
    assert!(err.contains("line 2 column"), "serde's position: {err}");

    let missing = fixture("no-such-body.json");
    let (code, _, err) = values(&config, "pve-lab", "resources", &missing, None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read body file") && err.contains(&missing), "{err}");
}

#[test]
fn facts_and_items_made_of_fields_are_given_on_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = write(
        dir.path(),
        "not-backed-up.json",
        r#"{"data": [{"type": "lxc", "vmid": 201}, {"type": "qemu", "vmid": 105}]}"#,
    );
    let body = body.to_string_lossy();
    let cfg = fixture("pollster.toml");
    let base = [
        "values",
        "--config",
        &cfg,
        "--type",
        "pve",
        "--group",
        "backup_info",
        "--body",
        &body,
    ];
    let (code, out, err) = run(&[&base[..], &["--fact", "cluster=lab"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pve_not_backed_up_total{id=\"cluster/lab\"} 2\n"), "{out}");
    assert!(out.contains("pve_not_backed_up_info{id=\"qemu/105\"} 1\n"), "{out}");
    promtool::check_metrics(&out);

    // Without the fact: the total waits for it, and stderr says why.
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("pve_not_backed_up_total"), "{out}");
    assert!(err.contains("--fact NAME=VALUE"), "{err}");
    assert!(err.contains("skipped: pve_not_backed_up_total missing 1"), "{err}");
    let (code, _, err) = run(&[&base[..], &["--fact", "cluster"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--fact \"cluster\""), "{err}");

    // A guest's config, its item made of node, type and vmid.
    let config = write(dir.path(), "config.json", r#"{"data": {"onboot": 1, "name": "web"}}"#);
    let (code, out, err) = values(
        &cfg,
        "pve",
        "guest_config",
        &config.to_string_lossy(),
        Some("node=pve1,type=qemu,vmid=100"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "# HELP pve_onboot_status Proxmox vm config onboot value\n\
         # TYPE pve_onboot_status gauge\n\
         pve_onboot_status{id=\"qemu/100\",node=\"pve1\",type=\"qemu\"} 1\n"
    );
}
