//! A simulated Proxmox VE cluster: three nodes in the cluster "lab", asked
//! through node `pve1` (the local node every per-node call defaults to).
//!
//! It has the cases real clusters have and exporters trip over:
//! - `pve3` is offline: `online: 0` in `cluster/status`, no figures in
//!   `cluster/resources`, its guest has status `unknown`, and every
//!   `/nodes/pve3/...` call fails (a real cluster answers 595; here: 404);
//! - a template (`qemu/9000`), running and stopped guests, guests with and
//!   without `tags`, with HA state (`hastate`) and with a config `lock`;
//! - storage whose `content` comes unsorted, a shared NFS storage, and one
//!   that is unavailable (`status: unknown`, no usage figures);
//! - `sdn` and `pool` entries in `cluster/resources`;
//! - a guest (`lxc/201`) that no backup job covers;
//! - replication jobs on `pve1` (one of them failing), subscriptions (an
//!   active one on `pve1` with its next due date, none on `pve2`), and a
//!   connected QDevice.
//!
//! Every answer is `{"data": ...}` like the real API. Figures (CPU, memory,
//! traffic, uptime, replication times) are pure functions of `tick`, so they
//! move slowly in the demo and are exact for a given tick in tests.

use serde_json::{Map, Value, json};

/// The cluster's name.
pub const CLUSTER: &str = "lab";
/// The node the API is asked through (`local: 1` in `cluster/status`).
pub const LOCAL_NODE: &str = "pve1";
/// Unix time at tick 0; one tick is ten seconds of simulated time.
const EPOCH: u64 = 1_767_225_600;
const TICK_SECONDS: u64 = 10;

struct Node {
    name: &'static str,
    nodeid: u64,
    ip: &'static str,
    online: bool,
    /// Subscription level as `cluster/status` gives it ("" for none).
    level: &'static str,
    maxcpu: u64,
    maxmem: u64,
    maxdisk: u64,
    boot_uptime: u64,
}

const NODES: [Node; 3] = [
    Node {
        name: "pve1",
        nodeid: 1,
        ip: "10.0.0.11",
        online: true,
        level: "c",
        maxcpu: 16,
        maxmem: 68_719_476_736,
        maxdisk: 100_861_726_720,
        boot_uptime: 1_209_600,
    },
    Node {
        name: "pve2",
        nodeid: 2,
        ip: "10.0.0.12",
        online: true,
        level: "",
        maxcpu: 8,
        maxmem: 34_359_738_368,
        maxdisk: 100_861_726_720,
        boot_uptime: 604_800,
    },
    Node {
        name: "pve3",
        nodeid: 3,
        ip: "10.0.0.13",
        online: false,
        level: "",
        maxcpu: 8,
        maxmem: 34_359_738_368,
        maxdisk: 100_861_726_720,
        boot_uptime: 0,
    },
];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Qemu,
    Lxc,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Qemu => "qemu",
            Kind::Lxc => "lxc",
        }
    }
}

struct Guest {
    kind: Kind,
    vmid: u64,
    name: &'static str,
    node: &'static str,
    /// `running`, `stopped` (a guest of an offline node is `unknown`).
    running: bool,
    template: bool,
    tags: Option<&'static str>,
    hastate: Option<&'static str>,
    lock: Option<&'static str>,
    /// `onboot` in the guest's config; `None`: the key is absent.
    onboot: Option<u64>,
    maxcpu: u64,
    maxmem: u64,
    maxdisk: u64,
    backed_up: bool,
}

const GUESTS: [Guest; 7] = [
    Guest {
        kind: Kind::Qemu,
        vmid: 100,
        name: "web",
        node: "pve1",
        running: true,
        template: false,
        tags: Some("prod;web"),
        hastate: Some("started"),
        lock: None,
        onboot: Some(1),
        maxcpu: 4,
        maxmem: 8_589_934_592,
        maxdisk: 34_359_738_368,
        backed_up: true,
    },
    Guest {
        kind: Kind::Qemu,
        vmid: 101,
        name: "db",
        node: "pve1",
        running: true,
        template: false,
        tags: None,
        hastate: None,
        lock: Some("backup"),
        onboot: Some(0),
        maxcpu: 8,
        maxmem: 17_179_869_184,
        maxdisk: 107_374_182_400,
        backed_up: true,
    },
    Guest {
        kind: Kind::Qemu,
        vmid: 102,
        name: "build",
        node: "pve2",
        running: true,
        template: false,
        tags: Some("ci"),
        hastate: Some("started"),
        lock: Some("snapshot"),
        onboot: Some(1),
        maxcpu: 4,
        maxmem: 8_589_934_592,
        maxdisk: 68_719_476_736,
        backed_up: true,
    },
    Guest {
        kind: Kind::Qemu,
        vmid: 103,
        name: "legacy",
        node: "pve3",
        running: false,
        template: false,
        tags: Some("old"),
        hastate: Some("fence"),
        lock: None,
        onboot: None,
        maxcpu: 2,
        maxmem: 4_294_967_296,
        maxdisk: 34_359_738_368,
        backed_up: true,
    },
    Guest {
        kind: Kind::Qemu,
        vmid: 9000,
        name: "debian-tmpl",
        node: "pve1",
        running: false,
        template: true,
        tags: Some("template"),
        hastate: None,
        lock: None,
        onboot: None,
        maxcpu: 2,
        maxmem: 2_147_483_648,
        maxdisk: 10_737_418_240,
        backed_up: false,
    },
    Guest {
        kind: Kind::Lxc,
        vmid: 200,
        name: "dns",
        node: "pve1",
        running: true,
        template: false,
        tags: Some("infra"),
        hastate: Some("started"),
        lock: None,
        onboot: Some(1),
        maxcpu: 2,
        maxmem: 1_073_741_824,
        maxdisk: 8_589_934_592,
        backed_up: true,
    },
    Guest {
        kind: Kind::Lxc,
        vmid: 201,
        name: "scratch",
        node: "pve2",
        running: false,
        template: false,
        tags: None,
        hastate: Some("stopped"),
        lock: Some("mounted"),
        onboot: Some(0),
        maxcpu: 1,
        maxmem: 536_870_912,
        maxdisk: 4_294_967_296,
        backed_up: false,
    },
];

struct Storage {
    storage: &'static str,
    node: &'static str,
    plugintype: &'static str,
    /// As Proxmox gives it: in no particular order.
    content: &'static str,
    shared: bool,
    available: bool,
    maxdisk: u64,
    used_permille: u64,
}

const STORAGE: [Storage; 6] = [
    Storage {
        storage: "local",
        node: "pve1",
        plugintype: "dir",
        content: "vztmpl,iso,backup",
        shared: false,
        available: true,
        maxdisk: 100_861_726_720,
        used_permille: 312,
    },
    Storage {
        storage: "local-lvm",
        node: "pve1",
        plugintype: "lvmthin",
        content: "rootdir,images",
        shared: false,
        available: true,
        maxdisk: 1_869_169_767_424,
        used_permille: 455,
    },
    Storage {
        storage: "nfs-backup",
        node: "pve1",
        plugintype: "nfs",
        content: "backup,iso",
        shared: true,
        available: true,
        maxdisk: 8_000_000_000_000,
        used_permille: 601,
    },
    Storage {
        storage: "local",
        node: "pve2",
        plugintype: "dir",
        content: "iso,vztmpl,backup",
        shared: false,
        available: true,
        maxdisk: 100_861_726_720,
        used_permille: 207,
    },
    Storage {
        storage: "local-zfs",
        node: "pve2",
        plugintype: "zfspool",
        content: "images,rootdir",
        shared: false,
        available: true,
        maxdisk: 960_197_124_096,
        used_permille: 388,
    },
    Storage {
        storage: "nfs-backup",
        node: "pve2",
        plugintype: "nfs",
        content: "iso,backup",
        shared: true,
        available: false,
        maxdisk: 0,
        used_permille: 0,
    },
];

struct Replication {
    id: &'static str,
    guest: u64,
    source: &'static str,
    target: &'static str,
    /// Failed attempts since the last success.
    fail_count: u64,
}

const REPLICATION: [Replication; 2] = [
    Replication {
        id: "100-0",
        guest: 100,
        source: "pve1",
        target: "pve2",
        fail_count: 0,
    },
    Replication {
        id: "200-0",
        guest: 200,
        source: "pve1",
        target: "pve2",
        fail_count: 3,
    },
];

/// A slowly moving fraction in [lo, hi] (period ≈ 90 ticks), rounded to 4
/// decimals, distinct per `seed`.
fn wave(seed: u64, tick: u64, lo: f64, hi: f64) -> f64 {
    let phase = (tick as f64 + seed as f64 * 17.0) / 14.3;
    let x = lo + (hi - lo) * (0.5 + 0.5 * phase.sin());
    (x * 10_000.0).round() / 10_000.0
}

/// Seconds of simulated time since tick 0.
fn elapsed(tick: u64) -> u64 {
    tick.saturating_mul(TICK_SECONDS)
}

fn node(name: &str) -> Option<&'static Node> {
    NODES.iter().find(|n| n.name == name)
}

fn online_node(name: &str) -> Option<&'static Node> {
    node(name).filter(|n| n.online)
}

fn guest_id(g: &Guest) -> String {
    format!("{}/{}", g.kind.as_str(), g.vmid)
}

/// Whether a guest's node is online (a guest of an offline node has no
/// figures and status `unknown`).
fn reachable(g: &Guest) -> bool {
    node(g.node).is_some_and(|n| n.online)
}

fn guest_status(g: &Guest) -> &'static str {
    if !reachable(g) {
        "unknown"
    } else if g.running {
        "running"
    } else {
        "stopped"
    }
}

/// The running figures of a guest at `tick` (zero when stopped).
fn guest_figures(g: &Guest, tick: u64, out: &mut Map<String, Value>) {
    let run = g.running;
    let seed = g.vmid;
    let secs = elapsed(tick);
    let cpu = if run { wave(seed, tick, 0.01, 0.35) } else { 0.0 };
    let mem = if run {
        (g.maxmem as f64 * wave(seed + 1, tick, 0.3, 0.8)) as u64
    } else {
        0
    };
    let rate = |per_tick: u64| {
        if run {
            seed * 1_000 + per_tick * (secs + 86_400)
        } else {
            0
        }
    };
    out.insert("cpu".into(), json!(cpu));
    out.insert("maxcpu".into(), json!(g.maxcpu));
    out.insert("mem".into(), json!(mem));
    out.insert("maxmem".into(), json!(g.maxmem));
    out.insert(
        "disk".into(),
        json!(if g.kind == Kind::Lxc && run { g.maxdisk / 3 } else { 0 }),
    );
    out.insert("maxdisk".into(), json!(g.maxdisk));
    out.insert("netin".into(), json!(rate(41_000)));
    out.insert("netout".into(), json!(rate(23_500)));
    out.insert("diskread".into(), json!(rate(9_100)));
    out.insert("diskwrite".into(), json!(rate(15_700)));
    out.insert("uptime".into(), json!(if run { 86_400 + seed * 60 + secs } else { 0 }));
}

fn guest_resource(g: &Guest, tick: u64) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(guest_id(g)));
    m.insert("type".into(), json!(g.kind.as_str()));
    m.insert("vmid".into(), json!(g.vmid));
    m.insert("name".into(), json!(g.name));
    m.insert("node".into(), json!(g.node));
    m.insert("status".into(), json!(guest_status(g)));
    m.insert("template".into(), json!(u8::from(g.template)));
    if let Some(t) = g.tags {
        m.insert("tags".into(), json!(t));
    }
    if let Some(h) = g.hastate {
        m.insert("hastate".into(), json!(h));
    }
    if let Some(l) = g.lock {
        m.insert("lock".into(), json!(l));
    }
    if reachable(g) {
        guest_figures(g, tick, &mut m);
    }
    Value::Object(m)
}

fn node_usage(n: &Node, tick: u64, out: &mut Map<String, Value>) {
    let seed = n.nodeid * 1_000;
    out.insert("cpu".into(), json!(wave(seed, tick, 0.02, 0.45)));
    out.insert("maxcpu".into(), json!(n.maxcpu));
    out.insert(
        "mem".into(),
        json!((n.maxmem as f64 * wave(seed + 1, tick, 0.35, 0.7)) as u64),
    );
    out.insert("maxmem".into(), json!(n.maxmem));
    out.insert("disk".into(), json!(n.maxdisk / 5 + elapsed(tick) * 1_024));
    out.insert("maxdisk".into(), json!(n.maxdisk));
    out.insert("uptime".into(), json!(n.boot_uptime + elapsed(tick)));
}

fn node_resource(n: &Node, tick: u64) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(format!("node/{}", n.name)));
    m.insert("type".into(), json!("node"));
    m.insert("node".into(), json!(n.name));
    m.insert("status".into(), json!(if n.online { "online" } else { "offline" }));
    m.insert("level".into(), json!(n.level));
    if n.online {
        m.insert("cgroup-mode".into(), json!(2));
        m.insert("hastate".into(), json!("online"));
        node_usage(n, tick, &mut m);
    } else {
        m.insert("hastate".into(), json!("unknown"));
    }
    Value::Object(m)
}

fn storage_resource(s: &Storage, tick: u64) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(format!("storage/{}/{}", s.node, s.storage)));
    m.insert("type".into(), json!("storage"));
    m.insert("storage".into(), json!(s.storage));
    m.insert("node".into(), json!(s.node));
    m.insert("plugintype".into(), json!(s.plugintype));
    m.insert("content".into(), json!(s.content));
    m.insert("shared".into(), json!(u8::from(s.shared)));
    m.insert(
        "status".into(),
        json!(if s.available { "available" } else { "unknown" }),
    );
    if s.available {
        m.insert("maxdisk".into(), json!(s.maxdisk));
        let used = s.maxdisk / 1_000 * s.used_permille + elapsed(tick) * 4_096;
        m.insert("disk".into(), json!(used.min(s.maxdisk)));
    }
    Value::Object(m)
}

/// `GET /cluster/resources[?type=vm|storage|node|sdn|pool]`.
fn resources(query: &str, tick: u64) -> Value {
    let wanted = query_param(query, "type");
    let mut out = Vec::new();
    let want = |t: &str| match wanted {
        None => true,
        Some("vm") => t == "qemu" || t == "lxc",
        Some(w) => w == t,
    };
    if want("node") {
        out.extend(NODES.iter().map(|n| node_resource(n, tick)));
    }
    for g in &GUESTS {
        if want(g.kind.as_str()) {
            out.push(guest_resource(g, tick));
        }
    }
    if want("storage") {
        out.extend(STORAGE.iter().map(|s| storage_resource(s, tick)));
    }
    if want("sdn") {
        for n in NODES.iter().filter(|n| n.online) {
            out.push(json!({
                "id": format!("sdn/{}/localnetwork", n.name),
                "type": "sdn",
                "sdn": "localnetwork",
                "node": n.name,
                "status": "ok",
            }));
        }
    }
    if want("pool") {
        out.push(json!({"id": "/pool/prod", "type": "pool", "pool": "prod"}));
    }
    Value::Array(out)
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn cluster_status() -> Value {
    let mut out = vec![json!({
        "type": "cluster",
        "id": "cluster",
        "name": CLUSTER,
        "nodes": NODES.len(),
        "quorate": 1,
        "version": 5,
    })];
    for n in &NODES {
        out.push(json!({
            "type": "node",
            "id": format!("node/{}", n.name),
            "name": n.name,
            "nodeid": n.nodeid,
            "ip": n.ip,
            "level": n.level,
            "local": u8::from(n.name == LOCAL_NODE),
            "online": u8::from(n.online),
        }));
    }
    Value::Array(out)
}

fn nodes(tick: u64) -> Value {
    NODES
        .iter()
        .map(|n| {
            let mut m = Map::new();
            m.insert("node".into(), json!(n.name));
            m.insert("id".into(), json!(format!("node/{}", n.name)));
            m.insert("type".into(), json!("node"));
            m.insert("status".into(), json!(if n.online { "online" } else { "offline" }));
            m.insert("level".into(), json!(n.level));
            if n.online {
                node_usage(n, tick, &mut m);
                m.insert(
                    "ssl_fingerprint".into(),
                    json!(format!("5C:3A:{:02X}:8E:11:C0:7D:29", n.nodeid)),
                );
            }
            Value::Object(m)
        })
        .collect()
}

fn node_status(n: &Node, tick: u64) -> Value {
    let seed = n.nodeid * 1_000;
    let mem_used = (n.maxmem as f64 * wave(seed + 1, tick, 0.35, 0.7)) as u64;
    let root_used = n.maxdisk / 5 + elapsed(tick) * 1_024;
    let load = |k: u64| format!("{:.2}", wave(seed + k, tick, 0.1, n.maxcpu as f64 / 4.0));
    json!({
        "uptime": n.boot_uptime + elapsed(tick),
        "cpu": wave(seed, tick, 0.02, 0.45),
        "wait": wave(seed + 7, tick, 0.0, 0.02),
        "idle": 0,
        "loadavg": [load(2), load(3), load(4)],
        "cpuinfo": {
            "model": "AMD EPYC 7302P 16-Core Processor",
            "cpus": n.maxcpu,
            "cores": n.maxcpu / 2,
            "sockets": 1,
            "mhz": "3000.000",
            "hvm": "1",
            "flags": "fpu vme de pse tsc msr pae mce",
        },
        "memory": {"total": n.maxmem, "used": mem_used, "free": n.maxmem - mem_used},
        "swap": {"total": 8_589_934_592u64, "used": 0, "free": 8_589_934_592u64},
        "rootfs": {"total": n.maxdisk, "used": root_used, "avail": n.maxdisk - root_used, "free": n.maxdisk - root_used},
        "ksm": {"shared": 0},
        "kversion": "Linux 6.8.12-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4",
        "pveversion": "pve-manager/8.3.2/3e76eec21c4a14a7",
        "current-kernel": {"sysname": "Linux", "release": "6.8.12-4-pve", "machine": "x86_64", "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4"},
        "boot-info": {"mode": "efi", "secureboot": 0},
    })
}

fn node_storage(n: &Node, tick: u64) -> Value {
    STORAGE
        .iter()
        .filter(|s| s.node == n.name)
        .map(|s| {
            let used = if s.available {
                (s.maxdisk / 1_000 * s.used_permille + elapsed(tick) * 4_096).min(s.maxdisk)
            } else {
                0
            };
            let mut m = Map::new();
            m.insert("storage".into(), json!(s.storage));
            m.insert("type".into(), json!(s.plugintype));
            m.insert("content".into(), json!(s.content));
            m.insert("shared".into(), json!(u8::from(s.shared)));
            m.insert("enabled".into(), json!(1));
            m.insert("active".into(), json!(u8::from(s.available)));
            if s.available {
                m.insert("total".into(), json!(s.maxdisk));
                m.insert("used".into(), json!(used));
                m.insert("avail".into(), json!(s.maxdisk - used));
                m.insert(
                    "used_fraction".into(),
                    json!(((used as f64 / s.maxdisk as f64) * 1e6).round() / 1e6),
                );
            }
            Value::Object(m)
        })
        .collect()
}

/// `GET /nodes/{node}/qemu` or `/lxc`: the node's guests of `kind`.
fn node_guests(n: &Node, kind: Kind, tick: u64) -> Value {
    GUESTS
        .iter()
        .filter(|g| g.node == n.name && g.kind == kind)
        .map(|g| {
            let mut m = Map::new();
            m.insert("vmid".into(), json!(g.vmid));
            m.insert("name".into(), json!(g.name));
            m.insert("status".into(), json!(guest_status(g)));
            m.insert("cpus".into(), json!(g.maxcpu));
            if g.template {
                m.insert("template".into(), json!(1));
            }
            if let Some(t) = g.tags {
                m.insert("tags".into(), json!(t));
            }
            if let Some(l) = g.lock {
                m.insert("lock".into(), json!(l));
            }
            let mut figures = Map::new();
            guest_figures(g, tick, &mut figures);
            m.extend(figures);
            m.remove("maxcpu");
            Value::Object(m)
        })
        .collect()
}

fn guest_config(g: &Guest) -> Value {
    let mut m = Map::new();
    match g.kind {
        Kind::Qemu => {
            m.insert("name".into(), json!(g.name));
            m.insert("cores".into(), json!(g.maxcpu));
            m.insert("memory".into(), json!((g.maxmem >> 20).to_string()));
            m.insert("ostype".into(), json!("l26"));
            m.insert(
                "scsi0".into(),
                json!(format!("local-lvm:vm-{}-disk-0,size={}G", g.vmid, g.maxdisk >> 30)),
            );
            m.insert("net0".into(), json!("virtio=BC:24:11:00:00:01,bridge=vmbr0"));
        }
        Kind::Lxc => {
            m.insert("hostname".into(), json!(g.name));
            m.insert("cores".into(), json!(g.maxcpu));
            m.insert("memory".into(), json!(g.maxmem >> 20));
            m.insert("ostype".into(), json!("debian"));
            m.insert(
                "rootfs".into(),
                json!(format!("local-lvm:vm-{}-disk-0,size={}G", g.vmid, g.maxdisk >> 30)),
            );
        }
    }
    if let Some(o) = g.onboot {
        m.insert("onboot".into(), json!(o));
    }
    if g.template {
        m.insert("template".into(), json!(1));
    }
    if let Some(t) = g.tags {
        m.insert("tags".into(), json!(t));
    }
    if let Some(l) = g.lock {
        m.insert("lock".into(), json!(l));
    }
    m.insert("digest".into(), json!(format!("{:040x}", g.vmid * 7_919)));
    Value::Object(m)
}

fn subscription(n: &Node) -> Value {
    if n.level.is_empty() {
        json!({
            "status": "notfound",
            "message": "There is no subscription key",
            "serverid": format!("{:032X}", n.nodeid * 0x1F2E_3D4C),
            "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing",
        })
    } else {
        json!({
            "status": "active",
            "level": n.level,
            "key": format!("pve4c-{:010x}", n.nodeid * 0xABCDEF),
            "productname": "Proxmox VE Community Subscription 4 CPUs/year",
            "regdate": "2026-06-30 00:00:00",
            "nextduedate": "2027-06-30",
            "checktime": EPOCH - 3_600,
            "serverid": format!("{:032X}", n.nodeid * 0x1F2E_3D4C),
            "sockets": 1,
            "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing",
        })
    }
}

/// A replication job with its state, as `/nodes/{node}/replication` and
/// `/nodes/{node}/replication/{id}/status` give it.
fn replication_state(r: &Replication, tick: u64) -> Value {
    let now = EPOCH + elapsed(tick);
    let last_try = now - now % 900;
    let last_sync = if r.fail_count == 0 {
        last_try
    } else {
        last_try - 900 * r.fail_count
    };
    let (vmid, jobnum) = r.id.split_once('-').unwrap_or((r.id, "0"));
    let vmtype = GUESTS
        .iter()
        .find(|g| g.vmid == r.guest)
        .map_or("qemu", |g| g.kind.as_str());
    let mut m = Map::new();
    m.insert("id".into(), json!(r.id));
    m.insert("guest".into(), json!(vmid.parse::<u64>().unwrap_or(r.guest)));
    m.insert("jobnum".into(), json!(jobnum.parse::<u64>().unwrap_or(0)));
    m.insert("type".into(), json!("local"));
    m.insert("vmtype".into(), json!(vmtype));
    m.insert("source".into(), json!(r.source));
    m.insert("target".into(), json!(r.target));
    m.insert("schedule".into(), json!("*/15"));
    m.insert("last_sync".into(), json!(last_sync));
    m.insert("last_try".into(), json!(last_try));
    m.insert("next_sync".into(), json!(last_try + 900));
    m.insert("duration".into(), json!(wave(r.guest, tick, 1.5, 9.0)));
    m.insert("fail_count".into(), json!(r.fail_count));
    if r.fail_count > 0 {
        m.insert("error".into(), json!("command 'zfs snapshot' failed: dataset is busy"));
    }
    Value::Object(m)
}

fn replication_config() -> Value {
    REPLICATION
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "guest": r.guest,
                "jobnum": 0,
                "type": "local",
                "source": r.source,
                "target": r.target,
                "schedule": "*/15",
            })
        })
        .collect()
}

fn not_backed_up() -> Value {
    GUESTS
        .iter()
        .filter(|g| !g.backed_up && !g.template)
        .map(|g| json!({"type": g.kind.as_str(), "vmid": g.vmid, "name": g.name}))
        .collect()
}

fn backup_jobs() -> Value {
    let covered: Vec<String> = GUESTS
        .iter()
        .filter(|g| g.backed_up)
        .map(|g| g.vmid.to_string())
        .collect();
    json!([{
        "id": "backup-a1b2c3d4-0001",
        "type": "vzdump",
        "enabled": 1,
        "schedule": "21:00",
        "storage": "nfs-backup",
        "mode": "snapshot",
        "compress": "zstd",
        "vmid": covered.join(","),
        "next-run": EPOCH + 86_400,
    }])
}

fn ha_sid(g: &Guest) -> String {
    format!("{}:{}", if g.kind == Kind::Qemu { "vm" } else { "ct" }, g.vmid)
}

fn ha_resources() -> Value {
    GUESTS
        .iter()
        .filter(|g| g.hastate.is_some())
        .map(|g| {
            json!({
                "sid": ha_sid(g),
                "type": if g.kind == Kind::Qemu { "vm" } else { "ct" },
                "state": if g.running { "started" } else { "stopped" },
                "digest": format!("{:040x}", g.vmid),
            })
        })
        .collect()
}

fn ha_status(tick: u64) -> Value {
    let now = EPOCH + elapsed(tick);
    let mut out = vec![
        json!({"id": "quorum", "type": "quorum", "node": LOCAL_NODE, "status": "OK", "quorate": 1}),
        json!({"id": "master", "type": "master", "node": LOCAL_NODE, "status": format!("{LOCAL_NODE} (active, {now})"), "timestamp": now}),
    ];
    for n in &NODES {
        let state = if n.online { "active" } else { "old timestamp - dead?" };
        out.push(json!({
            "id": format!("lrm:{}", n.name),
            "type": "lrm",
            "node": n.name,
            "status": format!("{} ({state}, {now})", n.name),
            "timestamp": now,
        }));
    }
    for g in GUESTS.iter().filter(|g| g.hastate.is_some()) {
        let state = g.hastate.unwrap_or("stopped");
        out.push(json!({
            "id": format!("service:{}", ha_sid(g)),
            "type": "service",
            "sid": ha_sid(g),
            "node": g.node,
            "state": state,
            "crm_state": state,
            "request_state": if g.running { "started" } else { "stopped" },
            "status": format!("{} ({}, {state})", ha_sid(g), g.node),
        }));
    }
    Value::Array(out)
}

fn tasks(tick: u64) -> Value {
    let now = EPOCH + elapsed(tick);
    let start = now - now % 3_600;
    let task = |node: &str, kind: &str, id: &str, status: &str, at: u64| {
        json!({
            "upid": format!("UPID:{node}:000{at:X}:00000000:{at:08X}:{kind}:{id}:root@pam:"),
            "node": node,
            "type": kind,
            "id": id,
            "user": "root@pam",
            "starttime": at,
            "endtime": at + 42,
            "status": status,
        })
    };
    json!([
        task("pve1", "vzdump", "100", "OK", start - 7_200),
        task("pve1", "vzdump", "101", "OK", start - 7_100),
        task("pve2", "vzdump", "102", "WARNINGS: 1", start - 7_000),
        task("pve2", "qmstart", "102", "OK", start - 600),
        task("pve1", "vzdump", "", "job errors", start - 86_400),
    ])
}

/// See [`super::answer`].
pub fn answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    let rest = path.strip_prefix("/api2/json")?.trim_end_matches('/');
    let segments: Vec<&str> = rest.split('/').skip(1).collect();
    let data = match segments.as_slice() {
        ["version"] => json!({"version": "8.3.2", "release": "8.3", "repoid": "3e76eec21c4a14a7"}),
        ["cluster", "status"] => cluster_status(),
        ["cluster", "resources"] => resources(query, tick),
        ["cluster", "tasks"] => tasks(tick),
        ["cluster", "backup"] => backup_jobs(),
        ["cluster", "backup-info", "not-backed-up"] => not_backed_up(),
        ["cluster", "replication"] => replication_config(),
        ["cluster", "ha", "resources"] => ha_resources(),
        ["cluster", "ha", "status", "current"] => ha_status(tick),
        // A QDevice as `corosync-qdevice-tool -s` reports it (a cluster
        // without one answers an empty object).
        ["cluster", "config", "qdevice"] => json!({
            "Model": "Net",
            "Algorithm": "Fifty-Fifty split",
            "QNetd host": "10.0.0.9:5403",
            "Tie-breaker": "Node with lowest node ID",
            "State": "Connected",
        }),
        ["nodes"] => nodes(tick),
        ["nodes", name, rest @ ..] => {
            let n = online_node(if *name == "localhost" { LOCAL_NODE } else { name })?;
            node_answer(n, rest, tick)?
        }
        _ => return None,
    };
    Some(json!({ "data": data }))
}

/// Paths below `/nodes/{node}` of an online node.
fn node_answer(n: &Node, rest: &[&str], tick: u64) -> Option<Value> {
    let guest = |kind: Kind, vmid: &str| {
        GUESTS
            .iter()
            .find(|g| g.node == n.name && g.kind == kind && g.vmid.to_string() == vmid)
    };
    Some(match rest {
        ["status"] => node_status(n, tick),
        ["storage"] => node_storage(n, tick),
        ["qemu"] => node_guests(n, Kind::Qemu, tick),
        ["lxc"] => node_guests(n, Kind::Lxc, tick),
        ["qemu", vmid, "config"] => guest_config(guest(Kind::Qemu, vmid)?),
        ["lxc", vmid, "config"] => guest_config(guest(Kind::Lxc, vmid)?),
        ["subscription"] => subscription(n),
        ["replication"] => REPLICATION
            .iter()
            .filter(|r| r.source == n.name)
            .map(|r| replication_state(r, tick))
            .collect(),
        ["replication", id, "status"] => {
            let r = REPLICATION.iter().find(|r| r.source == n.name && r.id == *id)?;
            replication_state(r, tick)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(path: &str, query: &str, tick: u64) -> Value {
        answer(path, query, tick)
            .unwrap_or_else(|| panic!("{path} has no answer"))
            .get("data")
            .cloned()
            .unwrap_or_else(|| panic!("{path}: no data"))
    }

    fn array(path: &str, query: &str, tick: u64) -> Vec<Value> {
        data(path, query, tick).as_array().cloned().expect("an array")
    }

    #[test]
    fn unknown_paths_and_offline_nodes_have_no_answer() {
        assert!(answer("/api2/json/nope", "", 0).is_none());
        assert!(answer("/version", "", 0).is_none(), "paths start with /api2/json");
        assert!(
            answer("/api2/json/nodes/pve3/status", "", 0).is_none(),
            "pve3 is offline"
        );
        assert!(answer("/api2/json/nodes/pve9/status", "", 0).is_none());
        assert!(
            answer("/api2/json/nodes/pve1/qemu/200/config", "", 0).is_none(),
            "200 is a container"
        );
        assert!(
            answer("/api2/json/nodes/pve2/qemu/100/config", "", 0).is_none(),
            "100 lives on pve1"
        );
        assert!(answer("/api2/json/nodes/localhost/status", "", 0).is_some());
    }

    #[test]
    fn cluster_status_has_a_quorate_cluster_a_local_node_and_an_offline_one() {
        let status = array("/api2/json/cluster/status", "", 3);
        assert_eq!(status[0]["type"], "cluster");
        assert_eq!(status[0]["name"], CLUSTER);
        assert_eq!(status[0]["quorate"], 1);
        let nodes: Vec<&Value> = status.iter().filter(|e| e["type"] == "node").collect();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes.iter().filter(|n| n["local"] == 1).count(), 1);
        assert_eq!(
            nodes.iter().find(|n| n["local"] == 1).expect("local")["name"],
            LOCAL_NODE
        );
        assert_eq!(nodes.iter().filter(|n| n["online"] == 0).count(), 1);
    }

    #[test]
    fn resources_have_every_case_the_exporter_meets() {
        let all = array("/api2/json/cluster/resources", "", 7);
        let by_id = |id: &str| all.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}"));
        // The offline node has no figures; its guest is unknown without figures.
        let pve3 = by_id("node/pve3");
        assert_eq!(pve3["status"], "offline");
        assert!(pve3.get("cpu").is_none() && pve3.get("mem").is_none());
        assert_eq!(by_id("qemu/103")["status"], "unknown");
        assert!(by_id("qemu/103").get("cpu").is_none());
        // A template, tags present and absent, HA state and locks.
        assert_eq!(by_id("qemu/9000")["template"], 1);
        assert_eq!(by_id("qemu/100")["template"], 0);
        assert!(by_id("qemu/101").get("tags").is_none());
        assert_eq!(by_id("qemu/100")["tags"], "prod;web");
        assert_eq!(by_id("qemu/100")["hastate"], "started");
        assert!(by_id("qemu/101").get("hastate").is_none());
        assert_eq!(by_id("qemu/101")["lock"], "backup");
        // Storage: unsorted content, shared, unavailable without figures.
        let local = by_id("storage/pve1/local");
        assert_eq!(local["content"], "vztmpl,iso,backup");
        assert_eq!(by_id("storage/pve1/nfs-backup")["shared"], 1);
        let gone = by_id("storage/pve2/nfs-backup");
        assert_eq!(gone["status"], "unknown");
        assert!(gone.get("disk").is_none());
        // sdn and pool entries.
        assert!(all.iter().any(|r| r["type"] == "sdn"));
        assert!(all.iter().any(|r| r["type"] == "pool"));
        // Every id is unique.
        let mut ids: Vec<&str> = all.iter().filter_map(|r| r["id"].as_str()).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }

    #[test]
    fn the_type_filter_keeps_what_proxmox_keeps() {
        let vm = array("/api2/json/cluster/resources", "type=vm", 0);
        assert_eq!(vm.len(), GUESTS.len());
        assert!(vm.iter().all(|r| r["type"] == "qemu" || r["type"] == "lxc"));
        let storage = array("/api2/json/cluster/resources", "type=storage", 0);
        assert_eq!(storage.len(), STORAGE.len());
        assert!(storage.iter().all(|r| r["type"] == "storage"));
        let nodes = array("/api2/json/cluster/resources", "foo=1&type=node", 0);
        assert_eq!(nodes.len(), 3);
    }

    #[test]
    fn one_guest_is_not_backed_up_and_the_backup_job_covers_the_rest() {
        let nb = array("/api2/json/cluster/backup-info/not-backed-up", "", 0);
        assert_eq!(nb, vec![json!({"type": "lxc", "vmid": 201, "name": "scratch"})]);
        let jobs = array("/api2/json/cluster/backup", "", 0);
        let vmids = jobs[0]["vmid"].as_str().expect("vmid list");
        assert!(!vmids.split(',').any(|v| v == "201"));
        assert!(vmids.split(',').any(|v| v == "100"));
    }

    #[test]
    fn figures_move_with_the_tick_and_are_exact_for_a_tick() {
        let at = |t| answer("/api2/json/cluster/resources", "", t);
        assert_eq!(at(5), at(5), "deterministic");
        assert_ne!(at(5), at(6), "alive");
        let cpu = |t| {
            array("/api2/json/cluster/resources", "", t)
                .iter()
                .find(|r| r["id"] == "qemu/100")
                .and_then(|r| r["cpu"].as_f64())
                .expect("cpu")
        };
        for t in [0, 10, 100, 10_000] {
            assert!((0.0..=1.0).contains(&cpu(t)), "cpu at {t}");
        }
        // Counters never go down.
        let netin = |t| {
            array("/api2/json/cluster/resources", "", t)
                .iter()
                .find(|r| r["id"] == "qemu/100")
                .and_then(|r| r["netin"].as_u64())
                .expect("netin")
        };
        assert!(netin(11) > netin(10));
        let up = |t| {
            data("/api2/json/nodes/pve1/status", "", t)["uptime"]
                .as_u64()
                .expect("uptime")
        };
        assert_eq!(up(1) - up(0), TICK_SECONDS);
    }

    #[test]
    fn per_node_calls_answer_for_online_nodes() {
        let qemu = array("/api2/json/nodes/pve1/qemu", "", 0);
        let vmids: Vec<u64> = qemu.iter().filter_map(|g| g["vmid"].as_u64()).collect();
        assert_eq!(vmids, vec![100, 101, 9000]);
        assert_eq!(data("/api2/json/nodes/pve1/qemu/100/config", "", 0)["onboot"], 1);
        assert!(
            data("/api2/json/nodes/pve1/qemu/9000/config", "", 0)
                .get("onboot")
                .is_none()
        );
        assert_eq!(data("/api2/json/nodes/pve1/lxc/200/config", "", 0)["onboot"], 1);
        assert_eq!(data("/api2/json/nodes/pve2/subscription", "", 0)["status"], "notfound");
        assert_eq!(data("/api2/json/nodes/pve1/subscription", "", 0)["level"], "c");
        assert_eq!(
            data("/api2/json/nodes/pve1/subscription", "", 0)["nextduedate"],
            "2027-06-30"
        );
        let reps = array("/api2/json/nodes/pve1/replication", "", 0);
        assert_eq!(reps.len(), 2);
        assert_eq!(
            data("/api2/json/nodes/pve1/replication/200-0/status", "", 0),
            reps[1],
            "the status call gives the list's entry"
        );
        assert_eq!(reps[1]["vmtype"], "lxc");
        assert!(array("/api2/json/nodes/pve2/replication", "", 0).is_empty());
        let storage = array("/api2/json/nodes/pve2/storage", "", 0);
        assert_eq!(storage.len(), 3);
        assert!(data("/api2/json/nodes/pve1/status", "", 0)["memory"]["total"].is_u64());
        assert_eq!(array("/api2/json/cluster/replication", "", 0).len(), 2);
        assert!(!array("/api2/json/cluster/ha/resources", "", 0).is_empty());
        assert!(!array("/api2/json/cluster/ha/status/current", "", 0).is_empty());
        assert!(!array("/api2/json/cluster/tasks", "", 0).is_empty());
        assert_eq!(data("/api2/json/cluster/config/qdevice", "", 0)["State"], "Connected");
        assert_eq!(array("/api2/json/nodes", "", 0).len(), 3);
        assert_eq!(data("/api2/json/version", "", 0)["release"], "8.3");
    }
}
