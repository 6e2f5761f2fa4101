//! The simulated Proxmox Backup Server API: one host (`localhost`) with two
//! datastores — `backup` (a local ZFS pool, 8 TiB) and `offsite` (4 TiB,
//! the target of a pull sync) — their garbage collection, sync, verify and
//! prune jobs, two failed tasks, four disks and a subscription. Every body
//! is `{"data": …}` as the PBS API answers it; paths start at `/api2/json`.
//!
//! Usage grows slowly with `tick` (a few MiB per tick) and drops when a
//! garbage collection frees chunks every 1,440 ticks; load and memory drift.

use super::{round, wave};

use serde_json::{Value, json};

const GIB: u64 = 1024 * 1024 * 1024;
const TIB: u64 = 1024 * GIB;
/// A fixed start time (2026-12-01T00:00:00Z); one tick is a minute.
const EPOCH: u64 = 1_796_083_200;

/// A datastore: name, size, used bytes at tick 0, growth per tick.
struct Store {
    name: &'static str,
    total: u64,
    used0: u64,
    growth: u64,
}

const STORES: [Store; 2] = [
    Store {
        name: "backup",
        total: 8 * TIB,
        used0: 5 * TIB + 312 * GIB,
        growth: 9 * 1024 * 1024,
    },
    Store {
        name: "offsite",
        total: 4 * TIB,
        used0: TIB + 744 * GIB,
        growth: 4 * 1024 * 1024,
    },
];

fn store(name: &str) -> Option<&'static Store> {
    STORES.iter().find(|s| s.name == name)
}

/// Bytes used at `tick`: growth since the last daily garbage collection,
/// which gives back most of a day's growth.
fn used(s: &Store, tick: u64) -> u64 {
    let days = tick / 1440;
    s.used0 + days * 1440 * s.growth / 5 + (tick % 1440) * s.growth
}

fn now(tick: u64) -> u64 {
    EPOCH + tick * 60
}

/// The end of the last daily run at `hour`:`minute` UTC before `tick`.
fn last_daily(tick: u64, hour: u64, minute: u64, duration: u64) -> u64 {
    let at = hour * 3600 + minute * 60 + duration;
    let t = now(tick);
    let day = (t - EPOCH) / 86400;
    let today = EPOCH + day * 86400 + at;
    if today <= t { today } else { today - 86400 }
}

fn upid(kind: &str, id: &str, start: u64) -> String {
    format!("UPID:pbs-1:00000D4F:0012A3B1:00000000:{start:08X}:{kind}:{id}:root@pam:")
}

/// See [`super::answer`].
pub fn answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    let rest = path.strip_prefix("/api2/json")?;
    let data = match rest {
        "/version" => json!({ "version": "3.3", "release": "2", "repoid": "7a4f4f54c" }),
        "/nodes/localhost/tasks" => failed_tasks(query, tick),
        "/nodes/localhost/status" => node_status(tick),
        "/admin/datastore" => STORES
            .iter()
            .map(|s| json!({ "store": s.name, "comment": "" }))
            .collect(),
        "/status/datastore-usage" => datastore_usage(tick),
        "/admin/sync" => jobs("sync", tick),
        "/admin/verify" => jobs("verify", tick),
        "/admin/prune" => jobs("prune", tick),
        "/nodes/localhost/disks/list" => disks(tick),
        "/nodes/localhost/subscription" => json!({
            "status": "active",
            "serverid": "3C5A7F0E1B2D4C6A8E9F0A1B2C3D4E5F",
            "checktime": now(tick) - now(tick) % 86400,
            "key": "pbsc-0123456789",
            "level": "c",
            "productname": "Proxmox Backup Server Community Subscription 1 CPU/year",
            "regdate": "2025-03-01 00:00:00",
            "nextduedate": "2027-03-01",
            "url": "https://www.proxmox.com/en/proxmox-backup-server/pricing",
        }),
        _ => {
            let r = rest.strip_prefix("/admin/datastore/")?;
            let (name, what) = r.split_once('/')?;
            let s = store(name)?;
            match what {
                "status" => datastore_status(s, tick),
                "gc" => gc_status(s, tick),
                _ => return None,
            }
        }
    };
    let mut body = json!({ "data": data });
    if rest == "/nodes/localhost/tasks" {
        body["total"] = json!(body["data"].as_array().map_or(0, Vec::len));
    }
    Some(body)
}

/// `GET /nodes/localhost/tasks?errors=1…`: the tasks that did not end OK
/// (all of them answer without `errors`, the OK ones included).
fn failed_tasks(query: &str, tick: u64) -> Value {
    let errors_only = query.split('&').any(|kv| kv == "errors=1" || kv == "errors=true");
    let day = now(tick) - (now(tick) - EPOCH) % 86400;
    let mut tasks = vec![
        json!({
            "upid": upid("verificationjob", "offsite:v-3f1a6c2e-9b7d", day - 86400 + 7200),
            "node": "pbs-1", "pid": 3407, "pstart": 1222577,
            "starttime": day - 86400 + 7200, "endtime": day - 86400 + 9012,
            "worker_type": "verificationjob", "worker_id": "offsite:v-3f1a6c2e-9b7d",
            "user": "root@pam", "status": "verification failed - please check the log for details"
        }),
        json!({
            "upid": upid("backup", "backup:vm/104", day - 3600),
            "node": "pbs-1", "pid": 3981, "pstart": 1222577,
            "starttime": day - 3600, "endtime": day - 3540,
            "worker_type": "backup", "worker_id": "backup:vm/104",
            "user": "backup@pbs!pve1", "status": "connection error: timed out"
        }),
    ];
    if !errors_only {
        tasks.push(json!({
            "upid": upid("garbage_collection", "backup", day + 3 * 3600),
            "node": "pbs-1", "pid": 4101, "pstart": 1222577,
            "starttime": day + 3 * 3600, "endtime": day + 3 * 3600 + 1740,
            "worker_type": "garbage_collection", "worker_id": "backup",
            "user": "root@pam", "status": "OK"
        }));
    }
    Value::Array(tasks)
}

/// `GET /nodes/localhost/status`.
fn node_status(tick: u64) -> Value {
    let mem_total = 64 * GIB;
    let mem_used = 21 * GIB + (wave(tick, 180, 6.0) * GIB as f64) as u64;
    json!({
        "cpu": round(0.04 + wave(tick, 90, 0.3), 4),
        "wait": round(wave(tick, 70, 0.02), 4),
        "loadavg": [round(0.4 + wave(tick, 90, 2.4), 2), round(0.5 + wave(tick, 120, 1.8), 2), round(0.6 + wave(tick, 200, 1.2), 2)],
        "memory": { "total": mem_total, "used": mem_used, "free": mem_total - mem_used },
        "swap": { "total": 8 * GIB, "used": 0, "free": 8 * GIB },
        "root": { "total": 100 * GIB, "used": 7 * GIB + tick * 4096, "avail": 93 * GIB - tick * 4096 },
        "uptime": 3_888_000 + tick * 60,
        "kversion": "Linux 6.8.12-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4 (2024-11-06T15:04Z)",
        "cpuinfo": { "cpus": 16, "model": "AMD EPYC 4344P 8-Core Processor", "sockets": 1 },
        "info": { "fingerprint": "d1:7e:94:3b:0c:55:a6:2f:18:c4:e9:70:bb:21:5d:86:3a:f0:49:c7:12:6e:ad:95:38:0b:f4:72:61:dc:83:5a" },
        "boot-info": { "mode": "efi", "secureboot": false },
    })
}

/// `GET /admin/datastore/{store}/status`.
fn datastore_status(s: &Store, tick: u64) -> Value {
    let u = used(s, tick);
    json!({ "total": s.total, "used": u, "avail": s.total - u })
}

/// `GET /status/datastore-usage`: every store with its history and the
/// date it is estimated to run full.
fn datastore_usage(tick: u64) -> Value {
    STORES
        .iter()
        .map(|s| {
            let u = used(s, tick);
            let per_day = (1440 * s.growth / 5) as f64;
            let days_left = ((s.total - u) as f64 / per_day).floor() as u64;
            let start = now(tick) - now(tick) % 86400 - 30 * 86400;
            let history: Vec<Value> = (0..30u64)
                .map(|d| {
                    let t = tick.saturating_sub((30 - d) * 1440);
                    json!(round(used(s, t) as f64 / s.total as f64, 6))
                })
                .collect();
            json!({
                "store": s.name,
                "total": s.total,
                "used": u,
                "avail": s.total - u,
                "history": history,
                "history-start": start,
                "history-delta": 86400,
                "estimated-full-date": now(tick) - now(tick) % 86400 + days_left * 86400,
                "mount-status": "nonremovable",
                "gc-status": gc_status(s, tick),
            })
        })
        .collect()
}

/// `GET /admin/datastore/{store}/gc`: the garbage collection job's status
/// with the figures of its last run.
fn gc_status(s: &Store, tick: u64) -> Value {
    let (hour, duration) = if s.name == "backup" { (3, 1740) } else { (4, 860) };
    let end = last_daily(tick, hour, 0, duration);
    let u = used(s, tick);
    let index = u * 31 / 10;
    json!({
        "store": s.name,
        "upid": upid("garbage_collection", s.name, end - duration),
        "last-run-upid": upid("garbage_collection", s.name, end - duration),
        "last-run-state": "ok",
        "last-run-endtime": end,
        "duration": duration,
        "schedule": "daily",
        "next-run": end - duration + 86400,
        "index-file-count": if s.name == "backup" { 2184 } else { 902 },
        "index-data-bytes": index,
        "disk-bytes": u,
        "disk-chunks": u / (2 * 1024 * 1024),
        "removed-bytes": 1440 * s.growth * 4 / 5,
        "removed-chunks": 1440 * s.growth * 4 / 5 / (2 * 1024 * 1024),
        "pending-bytes": 38 * 1024 * 1024 + (tick % 1440) * s.growth / 10,
        "pending-chunks": 19 + (tick % 1440) / 20,
        "removed-bad": 0,
        "still-bad": 0,
    })
}

/// `GET /admin/{sync,verify,prune}`: the jobs of that kind with their last
/// run. The verify job of `offsite` failed its last run.
fn jobs(kind: &str, tick: u64) -> Value {
    let job = |id: &str, store: &str, schedule: &str, hour: u64, duration: u64, state: &str, extra: Value| {
        let end = last_daily(tick, hour, 30, duration);
        let mut j = json!({
            "id": id,
            "store": store,
            "schedule": schedule,
            "last-run-upid": upid(kind, id, end - duration),
            "last-run-state": state,
            "last-run-endtime": end,
            "next-run": end - duration + 86400,
        });
        if let (Value::Object(j), Value::Object(e)) = (&mut j, extra) {
            j.extend(e);
        }
        j
    };
    match kind {
        "sync" => json!([job(
            "s-8b2e4f1a-c3d9",
            "offsite",
            "daily",
            1,
            2410,
            "ok",
            json!({ "remote": "pbs-hq", "remote-store": "backup", "remove-vanished": true })
        )]),
        "verify" => json!([
            job(
                "v-1c5e9a7d-2f0b",
                "backup",
                "daily",
                5,
                5100,
                "ok",
                json!({ "ignore-verified": true, "outdated-after": 30 })
            ),
            job(
                "v-3f1a6c2e-9b7d",
                "offsite",
                "daily",
                2,
                1812,
                "verification failed - please check the log for details",
                json!({ "ignore-verified": true, "outdated-after": 30 })
            ),
        ]),
        _ => json!([
            job(
                "p-0d4b7e2c-6a1f",
                "backup",
                "daily",
                0,
                95,
                "ok",
                json!({ "keep-daily": 7, "keep-weekly": 4, "keep-monthly": 6 })
            ),
            job(
                "p-9e3a5c1b-7d2f",
                "offsite",
                "daily",
                0,
                41,
                "ok",
                json!({ "keep-daily": 14, "keep-monthly": 12 })
            ),
        ]),
    }
}

/// `GET /nodes/localhost/disks/list`: two system SSDs, two data HDDs.
fn disks(tick: u64) -> Value {
    let disk = |name: &str, kind: &str, size: u64, model: &str, serial: &str, wearout: Value, used: &str| {
        json!({
            "name": name,
            "devpath": format!("/dev/{name}"),
            "disk-type": kind,
            "size": size,
            "model": model,
            "serial": serial,
            "vendor": "ATA",
            "wwn": format!("0x5000c500{serial}"),
            "gpt": true,
            "health": "PASSED",
            "wearout": wearout,
            "used": used,
            "rpm": if kind == "hdd" { json!(7200) } else { Value::Null },
        })
    };
    let wear = 3 + tick / 20_000;
    json!([
        disk(
            "sda",
            "ssd",
            480 * GIB,
            "SAMSUNG MZ7L3480HCHQ",
            "S6RRNX0W401234",
            json!(wear),
            "partitions"
        ),
        disk(
            "sdb",
            "ssd",
            480 * GIB,
            "SAMSUNG MZ7L3480HCHQ",
            "S6RRNX0W401235",
            json!(wear + 1),
            "partitions"
        ),
        disk(
            "sdc",
            "hdd",
            8 * TIB,
            "ST8000NM017B-2TJ103",
            "WWZ4K1L0",
            Value::Null,
            "ZFS"
        ),
        disk(
            "sdd",
            "hdd",
            8 * TIB,
            "ST8000NM017B-2TJ103",
            "WWZ4K1L7",
            Value::Null,
            "ZFS"
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset_paths() -> Vec<(String, Option<String>, Option<String>)> {
        let t = crate::presets::all()
            .into_iter()
            .find(|t| t.name == "pbs")
            .expect("pbs preset");
        t.groups
            .iter()
            .map(|g| (g.path.clone(), g.fan_out.clone(), g.shape_from.clone()))
            .collect()
    }

    #[test]
    fn every_preset_path_answers_for_every_datastore() {
        for (path, fan_out, _) in preset_paths() {
            let items: Vec<&str> = if fan_out.is_some() {
                STORES.iter().map(|s| s.name).collect()
            } else {
                vec![""]
            };
            for item in items {
                let p = path.replace("{item}", item);
                let (p, q) = p.split_once('?').unwrap_or((&p, ""));
                let body = answer(p, q, 7).unwrap_or_else(|| panic!("{p} has no body"));
                assert!(body.get("data").is_some(), "{p}: no data");
            }
        }
        assert_eq!(answer("/api2/json/admin/datastore/nope/status", "", 0), None);
        assert_eq!(answer("/api2/json/admin/datastore/backup/snapshots", "", 0), None);
        assert_eq!(answer("/version", "", 0), None);
    }

    #[test]
    fn the_datastore_shape_learns_two_stores() {
        let body = answer("/api2/json/admin/datastore", "", 0).unwrap();
        let items: Vec<&str> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["store"].as_str().unwrap())
            .collect();
        assert_eq!(items, ["backup", "offsite"]);
        let (_, _, shape) = preset_paths()
            .into_iter()
            .find(|(p, _, _)| p == "/api2/json/admin/datastore")
            .unwrap();
        assert_eq!(shape.as_deref(), Some("/data"));
    }

    #[test]
    fn usage_adds_up_and_grows_slowly() {
        for tick in [0, 100, 1439, 1440, 5000] {
            for s in &STORES {
                let d = datastore_status(s, tick);
                let (t, u, a) = (
                    d["total"].as_u64().unwrap(),
                    d["used"].as_u64().unwrap(),
                    d["avail"].as_u64().unwrap(),
                );
                assert_eq!(t, u + a);
                assert!(u < t);
            }
        }
        let u = |t| used(&STORES[0], t);
        assert!(u(1) > u(0) && u(1) - u(0) < 10 * 1024 * 1024);
        assert!(u(1440) < u(1439), "the daily GC gives space back");
        assert_eq!(
            answer("/api2/json/admin/datastore/backup/status", "", 9),
            answer("/api2/json/admin/datastore/backup/status", "", 9)
        );
    }

    #[test]
    fn failed_tasks_filter_on_errors() {
        let n = |q: &str| {
            answer("/api2/json/nodes/localhost/tasks", q, 0).unwrap()["data"]
                .as_array()
                .unwrap()
                .len()
        };
        assert_eq!(n("errors=1&limit=50"), 2);
        assert_eq!(n(""), 3);
        assert_eq!(
            answer("/api2/json/nodes/localhost/tasks", "errors=1", 0).unwrap()["total"],
            2
        );
    }

    #[test]
    fn gc_and_jobs_have_the_fields_rules_read() {
        let gc = answer("/api2/json/admin/datastore/backup/gc", "", 600).unwrap();
        for f in [
            "last-run-state",
            "last-run-endtime",
            "duration",
            "removed-bytes",
            "pending-bytes",
            "disk-bytes",
            "index-data-bytes",
        ] {
            assert!(!gc["data"][f].is_null(), "gc {f}");
        }
        assert!(gc["data"]["last-run-endtime"].as_u64().unwrap() <= now(600));
        let verify = answer("/api2/json/admin/verify", "", 0).unwrap();
        assert_eq!(verify["data"].as_array().unwrap().len(), 2);
        assert_ne!(verify["data"][1]["last-run-state"], "ok");
    }
}
