//! `promtool check metrics`: the Prometheus project's own lint of the text
//! exposition format. Suites that need nothing else of `common` include
//! this file alone (`#[path = "common/promtool.rs"] mod promtool;`).
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// Lint findings accepted on purpose: names prometheus-pve-exporter gives
/// and dashboards read, kept exactly (docs/PARITY.md).
const EXPORTER_NAMES: &[&str] = &["pve_not_backed_up_total non-counter metrics should not have \"_total\" suffix"];

/// Families of meraki-dashboard-exporter 0.26.0 that the `meraki` preset
/// gives under their names (gauges ending in `_total`, `_kb`, `_minutes`,
/// `_days`, `_count`, `_mb`, `_mbps`, `_watthours`, `_watts`, packet counters and priorities without a unit), kept exactly for dashboards (docs/PARITY.md): any
/// lint finding about these names is accepted.
const MERAKI_EXPORTER_NAMES: &[&str] = &[
    "meraki_alerts_total_by_network",
    "meraki_alerts_total_by_severity",
    "meraki_ap_channel_utilization_2_4ghz_percent",
    "meraki_ap_channel_utilization_5ghz_percent",
    "meraki_mr_aggregation_speed_mbps",
    "meraki_mr_connection_stats_total",
    "meraki_mr_cpu_load_5min",
    "meraki_mr_network_packets_downstream_lost",
    "meraki_mr_network_packets_downstream_total",
    "meraki_mr_network_packets_lost_total",
    "meraki_mr_network_packets_total",
    "meraki_mr_network_packets_upstream_lost",
    "meraki_mr_network_packets_upstream_total",
    "meraki_mr_packets_downstream_lost",
    "meraki_mr_packets_downstream_total",
    "meraki_mr_packets_lost_total",
    "meraki_mr_packets_total",
    "meraki_mr_packets_upstream_lost",
    "meraki_mr_packets_upstream_total",
    "meraki_mr_port_link_negotiation_speed_mbps",
    "meraki_mr_ssid_client_count",
    "meraki_mr_ssid_usage_downstream_mb",
    "meraki_mr_ssid_usage_total_mb",
    "meraki_mr_ssid_usage_upstream_mb",
    "meraki_ms_poe_network_total_watthours",
    "meraki_ms_poe_port_power_watthours",
    "meraki_ms_poe_total_power_watthours",
    "meraki_ms_port_client_count",
    "meraki_ms_port_packets_broadcast",
    "meraki_ms_port_packets_collisions",
    "meraki_ms_port_packets_crcerrors",
    "meraki_ms_port_packets_fragments",
    "meraki_ms_port_packets_multicast",
    "meraki_ms_port_packets_rate_broadcast",
    "meraki_ms_port_packets_rate_collisions",
    "meraki_ms_port_packets_rate_crcerrors",
    "meraki_ms_port_packets_rate_fragments",
    "meraki_ms_port_packets_rate_multicast",
    "meraki_ms_port_packets_rate_topologychanges",
    "meraki_ms_port_packets_rate_total",
    "meraki_ms_port_packets_topologychanges",
    "meraki_ms_port_packets_total",
    "meraki_ms_port_status",
    "meraki_ms_port_traffic_bytes",
    "meraki_ms_port_usage_bytes",
    "meraki_ms_ports_active_total",
    "meraki_ms_ports_by_link_speed_total",
    "meraki_ms_ports_by_media_total",
    "meraki_ms_ports_inactive_total",
    "meraki_ms_power_usage_watts",
    "meraki_ms_stp_priority",
    "meraki_network_bluetooth_clients_total",
    "meraki_network_wireless_connection_stats_total",
    "meraki_network_wireless_download_kbps",
    "meraki_network_wireless_upload_kbps",
    "meraki_org_application_usage_downstream_mb",
    "meraki_org_application_usage_total_mb",
    "meraki_org_application_usage_upstream_mb",
    "meraki_org_clients_total",
    "meraki_org_configuration_changes_total",
    "meraki_org_devices_availability_total",
    "meraki_org_devices_by_model_total",
    "meraki_org_devices_total",
    "meraki_org_licenses_total",
    "meraki_org_login_security_different_passwords_count",
    "meraki_org_login_security_idle_timeout_minutes",
    "meraki_org_login_security_password_expiration_days",
    "meraki_org_networks_total",
    "meraki_org_packetcaptures_total",
    "meraki_org_usage_downstream_kb",
    "meraki_org_usage_total_kb",
    "meraki_org_usage_upstream_kb",
    "meraki_sensor_alerts_total",
];

fn accepted(finding: &str) -> bool {
    EXPORTER_NAMES.contains(&finding)
        || finding
            .split_once(' ')
            .is_some_and(|(name, _)| MERAKI_EXPORTER_NAMES.contains(&name))
}

/// Asserts that `promtool check metrics` accepts `text`: it parses, and
/// every lint finding is one of [`EXPORTER_NAMES`] or about one of
/// [`MERAKI_EXPORTER_NAMES`]. Without promtool the
/// check is skipped with a note, except under `CI=true`, where promtool
/// must be installed (Debian package `prometheus`).
pub fn check_metrics(text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but promtool is not on PATH (Debian package `prometheus`)"
        );
        println!("note: promtool is not on PATH; the exposition was not checked with it");
        return;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool runs");
    // Lint findings come on stderr, one per line, with exit code 3; a
    // parse error is "error while linting: …" and exit code 1.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let findings: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let only_accepted = out.status.code() == Some(3) && !findings.is_empty() && findings.iter().all(|f| accepted(f));
    assert!(
        out.status.success() || only_accepted,
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
