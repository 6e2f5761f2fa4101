//! The simulated Proxmox Mail Gateway API: a two-node cluster (`pmg1`, the
//! master, and `pmg2`) with its services, host status, deferred mail queue
//! (qshape), the mail counters of the last 24 hours, both quarantines, a
//! failed task and the subscription. Every body is `{"data": …}` as the PMG
//! API answers it; paths start at `/api2/json`.
//!
//! Counters follow a daily rhythm of `tick` (one tick a minute); the
//! deferred queue of `pmg2` swells for a while every 240 ticks.

use super::{round, wave};

use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
/// A fixed start time (2026-12-01T00:00:00Z); one tick is a minute.
const EPOCH: u64 = 1_796_083_200;

const NODES: [&str; 2] = ["pmg1", "pmg2"];

fn now(tick: u64) -> u64 {
    EPOCH + tick * 60
}

/// See [`super::answer`].
pub fn answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    let rest = path.strip_prefix("/api2/json")?;
    let data = match rest {
        "/version" => json!({ "version": "8.1.4", "release": "8.1", "repoid": "c0d4b1e3" }),
        "/nodes" => NODES.iter().map(|n| json!({ "node": n })).collect(),
        "/config/cluster/nodes" => cluster_nodes(),
        "/config/cluster/status" => cluster_status(tick),
        "/statistics/mail" => mail_stats(tick),
        "/quarantine/spamstatus" => json!({
            "count": 1830 + tick / 3 % 400,
            "mbytes": round((1830 + tick / 3 % 400) as f64 * 41.0 / 1024.0, 2),
            "avgbytes": 41_984,
            "avgspam": round(7.2 + wave(tick, 300, 1.5), 2),
        }),
        "/quarantine/virusstatus" => json!({
            "count": 12 + tick / 60 % 8,
            "mbytes": round((12 + tick / 60 % 8) as f64 * 0.35, 2),
            "avgbytes": 367_001,
        }),
        _ => {
            let r = rest.strip_prefix("/nodes/")?;
            let (node, what) = r.split_once('/')?;
            if !NODES.contains(&node) {
                return None;
            }
            match what {
                "services" => services(node, tick),
                "status" => node_status(node, tick),
                "postfix/qshape" => qshape(node, tick),
                "tasks" => failed_tasks(node, query, tick),
                "subscription" => json!({
                    "status": "active",
                    "level": "b",
                    "productname": "Proxmox Mail Gateway Basic Subscription 1 year",
                    "serverid": if node == "pmg1" { "7D1B3F5A9C2E4B6D8F0A1C3E5B7D9F1A" } else { "2E4C6A8B0D1F3E5A7C9B1D3F5E7A9C0B" },
                    "key": format!("pmgb-{}", if node == "pmg1" { "1a2b3c4d5e" } else { "6f7a8b9c0d" }),
                    "checktime": now(tick) - now(tick) % 86400,
                    "regdate": "2025-06-01 00:00:00",
                    "nextduedate": "2027-06-01",
                }),
                _ => return None,
            }
        }
    };
    Some(json!({ "data": data }))
}

fn cluster_nodes() -> Value {
    json!([
        { "cid": 1, "name": "pmg1", "type": "master", "ip": "10.10.0.21",
          "fingerprint": "4A:0C:E2:51:9B:77:13:D8:6F:A0:2B:C5:81:3E:F9:64:D2:07:5B:A8:31:CC:90:1E:7F:46:B3:28:E5:0A:9D:62" },
        { "cid": 2, "name": "pmg2", "type": "node", "ip": "10.10.0.22",
          "fingerprint": "9E:21:7B:C4:03:58:AF:16:D9:62:4E:B0:85:3A:F7:1C:60:E4:29:9D:B5:0F:73:C8:2A:E1:46:97:3B:0D:58:F2" }
    ])
}

/// `GET /config/cluster/status`: each member with its sync state; pmg2
/// loses sync for ten ticks in every 500.
fn cluster_status(tick: u64) -> Value {
    let pmg2_in_sync = tick % 500 < 490;
    let mut list = vec![
        json!({ "cid": 1, "name": "pmg1", "type": "master", "ip": "10.10.0.21", "insync": 1, "level": "",
                "uptime": 2_592_000 + tick * 60, "load": [0.31, 0.28, 0.25] }),
        json!({ "cid": 2, "name": "pmg2", "type": "node", "ip": "10.10.0.22", "insync": u8::from(pmg2_in_sync), "level": "",
                "uptime": 1_296_000 + tick * 60, "load": [0.22, 0.19, 0.17] }),
    ];
    if !pmg2_in_sync {
        list[1]["conn_error"] = json!("database sync failed: connection timed out");
    }
    Value::Array(list)
}

/// `GET /statistics/mail`: the last 24 hours' counters, following a daily
/// rhythm (busier in the afternoon).
fn mail_stats(tick: u64) -> Value {
    let f = 1.0 + wave(tick + 360, 1440, 0.6);
    let n = |base: f64| (base * f).round() as u64;
    let count_in = n(48_200.0);
    let count_out = n(12_450.0);
    json!({
        "count": count_in + count_out,
        "count_in": count_in,
        "count_out": count_out,
        "spamcount_in": n(17_930.0),
        "spamcount_out": n(14.0),
        "viruscount_in": n(41.0),
        "viruscount_out": 0,
        "bounces_in": n(820.0),
        "bounces_out": n(233.0),
        "bytes_in": n(48_200.0) * 61_440,
        "bytes_out": n(12_450.0) * 92_160,
        "glcount": n(6_120.0),
        "junk_in": n(24_690.0),
        "junk_out": n(14.0),
        "pregreet_rejects": n(2_315.0),
        "rbl_rejects": n(4_006.0),
        "spfcount": n(377.0),
        "avptime": round(0.82 + wave(tick, 720, 0.4), 3),
    })
}

/// `GET /nodes/{node}/services`.
fn services(node: &str, tick: u64) -> Value {
    let list = [
        ("pmgproxy", "PMG API Web Proxy Server"),
        ("pmgdaemon", "PMG API Daemon"),
        ("pmgpolicy", "Proxmox Mail Gateway Policy Daemon"),
        ("pmg-smtp-filter", "Proxmox Mail Gateway SMTP Filter Daemon"),
        ("postfix", "Postfix Mail Transport Agent"),
        ("clamav-daemon", "Clam AntiVirus userspace daemon"),
        ("clamav-freshclam", "ClamAV virus database updater"),
        ("pmgmirror", "Proxmox Mail Gateway Database Mirror Daemon"),
        ("pmgtunnel", "Proxmox Mail Gateway Cluster Tunnel Daemon"),
        ("postgres", "PostgreSQL"),
        ("chrony", "chrony, an NTP client/server"),
        ("sshd", "OpenBSD Secure Shell server"),
    ];
    // freshclam on pmg2 is stopped for 30 ticks of every 720.
    let freshclam_down = node == "pmg2" && tick % 720 >= 690;
    list.iter()
        .map(|(service, desc)| {
            let down = *service == "clamav-freshclam" && freshclam_down;
            json!({
                "service": service,
                "name": service,
                "desc": desc,
                "state": if down { "stopped" } else { "running" },
                "active-state": if down { "failed" } else { "active" },
                "unit-state": "enabled",
            })
        })
        .collect()
}

/// `GET /nodes/{node}/status`.
fn node_status(node: &str, tick: u64) -> Value {
    let k = if node == "pmg1" { 0 } else { 37 };
    let mem_total = 8 * GIB;
    let mem_used = 3 * GIB + (wave(tick + k, 200, 1.5) * GIB as f64) as u64;
    json!({
        "cpu": round(0.06 + wave(tick + k, 60, 0.25), 4),
        "wait": round(wave(tick + k, 45, 0.01), 4),
        "loadavg": [format!("{:.2}", 0.2 + wave(tick + k, 60, 1.4)), format!("{:.2}", 0.3 + wave(tick + k, 90, 1.0)), format!("{:.2}", 0.3 + wave(tick + k, 150, 0.7))],
        "memory": { "total": mem_total, "used": mem_used, "free": mem_total - mem_used },
        "swap": { "total": 2 * GIB, "used": 52 * MIB, "free": 2 * GIB - 52 * MIB },
        "rootfs": { "total": 60 * GIB, "used": 14 * GIB + tick * 8192, "avail": 43 * GIB - tick * 8192, "free": 46 * GIB - tick * 8192 },
        "uptime": if node == "pmg1" { 2_592_000 } else { 1_296_000 } + tick * 60,
        "kversion": "Linux 6.8.12-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4 (2024-11-06T15:04Z)",
        "insync": 1,
        "time": now(tick),
        "cpuinfo": { "cpus": 4, "model": "Intel(R) Xeon(R) E-2334 CPU @ 3.40GHz", "sockets": 1 },
    })
}

/// `GET /nodes/{node}/postfix/qshape`: the deferred queue by recipient
/// domain and age bucket, the TOTAL row first.
fn qshape(node: &str, tick: u64) -> Value {
    let swell = if node == "pmg2" {
        (wave(tick, 240, 60.0)) as u64
    } else {
        0
    };
    let domains: [(&str, u64); 3] = [
        ("gmail.com", 2 + swell / 2),
        ("example.net", 7 + swell),
        ("orange.fr", 1 + tick / 100 % 3),
    ];
    let row = |domain: &str, total: u64| {
        let old = total / 4;
        let mid = total / 3;
        let young = total - old - mid;
        json!({
            "domain": domain, "total": total,
            "5s": 0, "10s": 0, "20s": 0, "40s": 0, "80s": 0, "160s": young,
            "320s": 0, "640s": mid, "1280s": 0, "1280s+": old,
        })
    };
    let total: u64 = domains.iter().map(|(_, n)| n).sum();
    let mut rows = vec![row("TOTAL", 0)];
    for (d, n) in domains {
        rows.push(row(d, n));
    }
    for key in ["160s", "640s", "1280s+"] {
        rows[0][key] = json!(rows[1..].iter().map(|r| r[key].as_u64().unwrap_or(0)).sum::<u64>());
    }
    rows[0]["total"] = json!(total);
    Value::Array(rows)
}

/// `GET /nodes/{node}/tasks?errors=1…`: pmg1 had a failed backup; pmg2 none.
fn failed_tasks(node: &str, _query: &str, tick: u64) -> Value {
    if node != "pmg1" {
        return json!([]);
    }
    let day = now(tick) - (now(tick) - EPOCH) % 86400;
    let start = day - 86400 + 3 * 3600;
    json!([{
        "upid": format!("UPID:pmg1:000A1F3C:01B2C3D4:{start:08X}:backup::root@pam:"),
        "node": "pmg1", "pid": 663356, "pstart": 28492756,
        "starttime": start, "endtime": start + 14,
        "type": "backup", "id": "", "user": "root@pam",
        "status": "unable to open file '/var/lib/pmg/backup/pmg-backup_2026_11_30.tgz.tmp' - No space left on device"
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_path_answers_for_every_node() {
        let t = crate::presets::all()
            .into_iter()
            .find(|t| t.name == "pmg")
            .expect("pmg preset");
        for g in &t.groups {
            let items: Vec<&str> = if g.fan_out.is_some() { NODES.to_vec() } else { vec![""] };
            for item in items {
                let p = g.path.replace("{item}", item);
                let (p, q) = p.split_once('?').unwrap_or((&p, ""));
                let body = answer(p, q, 7).unwrap_or_else(|| panic!("{p} has no body"));
                assert!(body.get("data").is_some(), "{p}");
            }
        }
        assert_eq!(answer("/api2/json/nodes/pmg3/status", "", 0), None);
        assert_eq!(answer("/api2/json/nodes/pmg1/postfix/queue", "", 0), None);
        assert_eq!(answer("/nodes", "", 0), None);
    }

    #[test]
    fn shapes_learn_two_nodes_and_a_cluster() {
        let nodes = answer("/api2/json/nodes", "", 0).unwrap();
        let names: Vec<&str> = nodes["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["node"].as_str().unwrap())
            .collect();
        assert_eq!(names, NODES);
        assert_eq!(
            answer("/api2/json/config/cluster/nodes", "", 0).unwrap()["data"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn qshape_total_row_sums_the_domains() {
        for tick in [0, 60, 119, 500] {
            for node in NODES {
                let q = qshape(node, tick);
                let rows = q.as_array().unwrap();
                assert_eq!(rows[0]["domain"], "TOTAL");
                for key in ["total", "160s", "640s", "1280s+"] {
                    let sum: u64 = rows[1..].iter().map(|r| r[key].as_u64().unwrap()).sum();
                    assert_eq!(rows[0][key].as_u64().unwrap(), sum, "{node} {key} at {tick}");
                }
            }
        }
        let total = |n, t| qshape(n, t)[0]["total"].as_u64().unwrap();
        assert!(total("pmg2", 120) > total("pmg2", 0) + 40, "pmg2's queue swells");
    }

    #[test]
    fn mail_counters_are_consistent_and_move_slowly() {
        let s = mail_stats(0);
        let n = |f: &str| s[f].as_u64().unwrap();
        assert_eq!(n("count"), n("count_in") + n("count_out"));
        assert!(n("spamcount_in") < n("count_in") && n("viruscount_in") < n("spamcount_in"));
        let later = mail_stats(10);
        let diff = later["count_in"].as_i64().unwrap() - s["count_in"].as_i64().unwrap();
        assert!(diff != 0 && diff.abs() < 500, "{diff}");
        assert_eq!(mail_stats(10), mail_stats(10));
    }
}
