//! The simulated Meraki Dashboard API v1, one organization: three networks
//! (Paris headquarters, a Lyon branch, a Lille warehouse) and twelve
//! devices — two MX appliances, an MG cellular gateway, three MS switches,
//! four MR access points and two MT sensors — online, alerting, offline
//! and dormant. Paths are below the organization's base URL
//! (`/organizations/{organizationId}`); bodies are bare JSON arrays and
//! objects as the Dashboard API answers them.
//!
//! The Lyon appliance goes from online to alerting (its second WAN link
//! failing) for a quarter of every 120 ticks; readings, utilization and
//! latency drift slowly with `tick`.

use super::{round, wave};

use serde_json::{Value, json};

/// A network of the organization: id, name, product types.
struct Network {
    id: &'static str,
    name: &'static str,
    products: &'static [&'static str],
    tz: &'static str,
}

const NETWORKS: [Network; 3] = [
    Network {
        id: "L_646829496481105433",
        name: "HQ Paris",
        products: &["appliance", "switch", "wireless", "sensor"],
        tz: "Europe/Paris",
    },
    Network {
        id: "L_646829496481105434",
        name: "Branch Lyon",
        products: &["appliance", "switch", "wireless"],
        tz: "Europe/Paris",
    },
    Network {
        id: "N_646829496481105435",
        name: "Warehouse Lille",
        products: &["cellularGateway", "wireless"],
        tz: "Europe/Paris",
    },
];

/// A device: serial, name, model, product type, network (index into
/// [`NETWORKS`]), firmware, and its status when nothing moves.
struct Device {
    serial: &'static str,
    name: &'static str,
    model: &'static str,
    product: &'static str,
    net: usize,
    firmware: &'static str,
    status: &'static str,
}

const DEVICES: [Device; 12] = [
    Device {
        serial: "Q2KN-5X8M-A1B2",
        name: "hq-mx",
        model: "MX68",
        product: "appliance",
        net: 0,
        firmware: "wired-18-211-2",
        status: "online",
    },
    Device {
        serial: "Q2PN-3QRT-C3D4",
        name: "lyon-mx",
        model: "MX67C",
        product: "appliance",
        net: 1,
        firmware: "wired-18-211-2",
        status: "online",
    },
    Device {
        serial: "Q2ZY-8HJK-E5F6",
        name: "lille-mg",
        model: "MG21",
        product: "cellularGateway",
        net: 2,
        firmware: "cellular-gateway-1-5-1",
        status: "online",
    },
    Device {
        serial: "Q2HP-2LMN-G7H8",
        name: "hq-core-sw",
        model: "MS225-48FP",
        product: "switch",
        net: 0,
        firmware: "switch-16-8",
        status: "online",
    },
    Device {
        serial: "Q2HP-4RST-J9K1",
        name: "hq-floor2-sw",
        model: "MS120-24P",
        product: "switch",
        net: 0,
        firmware: "switch-16-8",
        status: "alerting",
    },
    Device {
        serial: "Q2BX-6UVW-L2M3",
        name: "lyon-sw",
        model: "MS120-8FP",
        product: "switch",
        net: 1,
        firmware: "switch-16-8",
        status: "online",
    },
    Device {
        serial: "Q3AB-7XYZ-N4P5",
        name: "hq-ap-lobby",
        model: "MR36",
        product: "wireless",
        net: 0,
        firmware: "wireless-30-7",
        status: "online",
    },
    Device {
        serial: "Q3AB-9CDE-Q6R7",
        name: "hq-ap-floor2",
        model: "MR46",
        product: "wireless",
        net: 0,
        firmware: "wireless-30-7",
        status: "online",
    },
    Device {
        serial: "Q3AC-2FGH-S8T9",
        name: "lyon-ap",
        model: "MR36",
        product: "wireless",
        net: 1,
        firmware: "wireless-30-7",
        status: "offline",
    },
    Device {
        serial: "Q3AD-4JKL-U1V2",
        name: "lille-ap",
        model: "MR33",
        product: "wireless",
        net: 2,
        firmware: "wireless-29-7-1",
        status: "dormant",
    },
    Device {
        serial: "Q3CA-6MNP-W3X4",
        name: "hq-serverroom-temp",
        model: "MT10",
        product: "sensor",
        net: 0,
        firmware: "sensor-1-2",
        status: "online",
    },
    Device {
        serial: "Q3CB-8QRS-Y5Z6",
        name: "hq-serverroom-door",
        model: "MT20",
        product: "sensor",
        net: 0,
        firmware: "sensor-1-2",
        status: "online",
    },
];

/// Index of the Lyon appliance, the device whose status moves.
const LYON_MX: usize = 1;

/// The Lyon appliance alerts (its wan2 failed) for ticks 90..120 of every 120.
fn lyon_alerting(tick: u64) -> bool {
    tick % 120 >= 90
}

fn status(i: usize, tick: u64) -> &'static str {
    if i == LYON_MX && lyon_alerting(tick) {
        "alerting"
    } else {
        DEVICES[i].status
    }
}

/// A MAC address derived from the device's index.
fn mac(i: usize) -> String {
    format!("e0:55:3d:10:{:02x}:{:02x}", i * 7 % 256, 0x20 + i)
}

/// An ISO-8601 timestamp `tick` minutes after a fixed start.
fn ts(tick: u64) -> String {
    let minutes = tick % (24 * 60);
    format!("2026-12-01T{:02}:{:02}:00Z", minutes / 60, minutes % 60)
}

/// See [`super::answer`].
pub fn answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    Some(match path {
        "/devices/statuses/overview" => overview(tick),
        "/devices/availabilities" => availabilities(tick),
        "/devices" => devices(&product_types(query)),
        "/uplinks/statuses" => uplinks(tick),
        "/devices/uplinksLossAndLatency" => loss_latency(tick),
        "/wireless/devices/channelUtilization/byDevice" => channel_utilization(tick),
        "/sensor/readings/latest" => sensor_readings(tick),
        "/licenses/overview" => licenses(),
        "/networks" => networks(),
        "/firmware/upgrades" => firmware_upgrades(),
        _ => return None,
    })
}

/// The `productTypes[]` values of a query string (`[]` possibly
/// percent-encoded); empty when it has none.
fn product_types(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| {
            let k = k
                .replace("%5B", "[")
                .replace("%5b", "[")
                .replace("%5D", "]")
                .replace("%5d", "]");
            k == "productTypes[]" || k == "productTypes"
        })
        .map(|(_, v)| v.to_string())
        .collect()
}

/// getOrganizationDevicesStatusesOverview.
fn overview(tick: u64) -> Value {
    let count = |s: &str| (0..DEVICES.len()).filter(|&i| status(i, tick) == s).count();
    json!({
        "counts": {
            "byStatus": {
                "online": count("online"),
                "alerting": count("alerting"),
                "offline": count("offline"),
                "dormant": count("dormant"),
            }
        }
    })
}

/// getOrganizationDevicesAvailabilities.
fn availabilities(tick: u64) -> Value {
    DEVICES
        .iter()
        .enumerate()
        .map(|(i, d)| {
            json!({
                "mac": mac(i),
                "name": d.name,
                "network": { "id": NETWORKS[d.net].id },
                "productType": d.product,
                "serial": d.serial,
                "status": status(i, tick),
                "tags": if d.net == 0 { json!(["hq"]) } else { json!([]) },
            })
        })
        .collect()
}

/// getOrganizationDevices, filtered by product types when the query names some.
fn devices(products: &[String]) -> Value {
    DEVICES
        .iter()
        .enumerate()
        .filter(|(_, d)| products.is_empty() || products.iter().any(|p| p == d.product))
        .map(|(i, d)| {
            json!({
                "name": d.name,
                "lat": 48.8566 - d.net as f64 * 1.1,
                "lng": 2.3522 + d.net as f64 * 0.9,
                "address": "",
                "notes": "",
                "tags": [],
                "networkId": NETWORKS[d.net].id,
                "serial": d.serial,
                "model": d.model,
                "mac": mac(i),
                "lanIp": format!("10.{}.0.{}", d.net + 1, 10 + i),
                "firmware": d.firmware,
                "productType": d.product,
                "details": [],
            })
        })
        .collect()
}

/// getOrganizationUplinksStatuses: every MX, Z and MG with its uplinks.
fn uplinks(tick: u64) -> Value {
    let lyon_wan2 = if lyon_alerting(tick) { "failed" } else { "ready" };
    json!([
        {
            "networkId": NETWORKS[0].id,
            "serial": DEVICES[0].serial,
            "model": DEVICES[0].model,
            "highAvailability": { "enabled": false, "role": "primary" },
            "lastReportedAt": ts(tick),
            "uplinks": [
                {
                    "interface": "wan1", "status": "active", "ip": "192.0.2.10",
                    "gateway": "192.0.2.1", "publicIp": "203.0.113.10",
                    "primaryDns": "192.0.2.1", "secondaryDns": "9.9.9.9", "ipAssignedBy": "static"
                },
                {
                    "interface": "wan2", "status": "ready", "ip": "198.51.100.20",
                    "gateway": "198.51.100.1", "publicIp": "198.51.100.20",
                    "primaryDns": "198.51.100.1", "secondaryDns": "9.9.9.9", "ipAssignedBy": "dhcp"
                }
            ]
        },
        {
            "networkId": NETWORKS[1].id,
            "serial": DEVICES[1].serial,
            "model": DEVICES[1].model,
            "highAvailability": { "enabled": false, "role": "primary" },
            "lastReportedAt": ts(tick),
            "uplinks": [
                {
                    "interface": "wan1", "status": "active", "ip": "192.0.2.50",
                    "gateway": "192.0.2.49", "publicIp": "203.0.113.50",
                    "primaryDns": "192.0.2.49", "secondaryDns": "9.9.9.9", "ipAssignedBy": "dhcp"
                },
                {
                    "interface": "wan2", "status": lyon_wan2, "ip": "198.51.100.60",
                    "gateway": "198.51.100.57", "publicIp": "198.51.100.60",
                    "primaryDns": "198.51.100.57", "secondaryDns": "9.9.9.9", "ipAssignedBy": "dhcp"
                },
                {
                    "interface": "cellular", "status": "not connected", "ip": null,
                    "provider": null, "publicIp": null, "signalType": null
                }
            ]
        },
        {
            "networkId": NETWORKS[2].id,
            "serial": DEVICES[2].serial,
            "model": DEVICES[2].model,
            "highAvailability": { "enabled": false, "role": "primary" },
            "lastReportedAt": ts(tick),
            "uplinks": [
                {
                    "interface": "cellular", "status": "active", "ip": "100.64.12.7",
                    "provider": "Orange F", "publicIp": "203.0.113.77", "model": "integrated",
                    "signalStat": { "rsrp": "-95", "rsrq": "-11" },
                    "connectionType": "lte", "apn": "orange.fr", "gateway": "100.64.12.1",
                    "dns1": "80.10.246.2", "dns2": "81.253.149.6",
                    "signalType": "4G", "iccid": "8933150319000001234"
                }
            ]
        }
    ])
}

/// getOrganizationDevicesUplinksLossAndLatency: the last five minutes of
/// each MX WAN uplink, one point a minute.
fn loss_latency(tick: u64) -> Value {
    let mut out = Vec::new();
    for (dev, uplink, base) in [(0, "wan1", 12.0), (0, "wan2", 31.0), (1, "wan1", 18.0)] {
        let d = &DEVICES[dev];
        let series: Vec<Value> = (0..5u64)
            .map(|m| {
                let t = tick + m;
                json!({
                    "ts": ts(t),
                    "lossPercent": round(wave(t, 40, 1.2), 1),
                    "latencyMs": round(base + wave(t, 30, 6.0), 1),
                })
            })
            .collect();
        out.push(json!({
            "networkId": NETWORKS[d.net].id,
            "serial": d.serial,
            "uplink": uplink,
            "ip": "8.8.8.8",
            "timeSeries": series,
        }));
    }
    Value::Array(out)
}

/// getOrganizationWirelessDevicesChannelUtilizationByDevice.
fn channel_utilization(tick: u64) -> Value {
    DEVICES
        .iter()
        .enumerate()
        .filter(|(_, d)| d.product == "wireless")
        .map(|(i, d)| {
            let band = |name: &str, base: f64| {
                let wifi = round(base + wave(tick + i as u64 * 7, 60, 12.0), 1);
                let non_wifi = round(2.0 + wave(tick + i as u64 * 3, 45, 3.0), 1);
                json!({
                    "band": name,
                    "wifi": { "percentage": wifi },
                    "nonWifi": { "percentage": non_wifi },
                    "total": { "percentage": round(wifi + non_wifi, 1) },
                })
            };
            json!({
                "serial": d.serial,
                "mac": mac(i),
                "network": { "id": NETWORKS[d.net].id },
                "byBand": [band("2.4", 18.0), band("5", 6.0)],
            })
        })
        .collect()
}

/// getOrganizationSensorReadingsLatest: the MT10's temperature, humidity
/// and battery; the MT20's door and battery.
fn sensor_readings(tick: u64) -> Value {
    let at = ts(tick);
    let celsius = round(21.5 + wave(tick, 240, 3.0), 1);
    let door_open = tick % 200 >= 190;
    let net = &NETWORKS[0];
    json!([
        {
            "serial": DEVICES[10].serial,
            "network": { "id": net.id, "name": net.name },
            "readings": [
                { "ts": at, "metric": "temperature",
                  "temperature": { "fahrenheit": round(celsius * 9.0 / 5.0 + 32.0, 1), "celsius": celsius } },
                { "ts": at, "metric": "humidity",
                  "humidity": { "relativePercentage": 38 + (tick / 30 % 5) } },
                { "ts": at, "metric": "battery", "battery": { "percentage": 97 - (tick / 1000 % 10) } }
            ]
        },
        {
            "serial": DEVICES[11].serial,
            "network": { "id": net.id, "name": net.name },
            "readings": [
                { "ts": at, "metric": "door", "door": { "open": door_open } },
                { "ts": at, "metric": "battery", "battery": { "percentage": 88 } }
            ]
        }
    ])
}

/// getOrganizationLicensesOverview (co-termination licensing).
fn licenses() -> Value {
    let mut counts = serde_json::Map::new();
    for d in &DEVICES {
        let n = counts.get(d.model).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(d.model.to_string(), json!(n + 1));
    }
    json!({
        "status": "OK",
        "expirationDate": "Mar 31, 2027 UTC",
        "licensedDeviceCounts": counts,
    })
}

/// getOrganizationNetworks.
fn networks() -> Value {
    NETWORKS
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "organizationId": "549236",
                "name": n.name,
                "productTypes": n.products,
                "timeZone": n.tz,
                "tags": [],
                "enrollmentString": null,
                "url": format!("https://n1.meraki.com/{}/manage/usage/list", n.name.replace(' ', "-")),
                "notes": "",
                "isBoundToConfigTemplate": false,
            })
        })
        .collect()
}

/// getOrganizationFirmwareUpgrades: one completed, one scheduled.
fn firmware_upgrades() -> Value {
    json!([
        {
            "upgradeId": "1284392014819",
            "upgradeBatchId": "1284392014820",
            "network": { "id": NETWORKS[0].id, "name": NETWORKS[0].name },
            "status": "Completed",
            "time": "2026-11-20T02:00:00Z",
            "completedAt": "2026-11-20T02:21:07Z",
            "productTypes": "switch",
            "toVersion": { "id": "2412", "shortName": "MS 16.8" },
            "fromVersion": { "id": "2298", "shortName": "MS 16.7.1" }
        },
        {
            "upgradeId": "1284392014857",
            "upgradeBatchId": "1284392014858",
            "network": { "id": NETWORKS[2].id, "name": NETWORKS[2].name },
            "status": "Scheduled",
            "time": "2026-12-08T02:00:00Z",
            "completedAt": null,
            "productTypes": "wireless",
            "toVersion": { "id": "2433", "shortName": "MR 30.7" },
            "fromVersion": { "id": "2311", "shortName": "MR 29.7.1" }
        }
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [&str; 10] = [
        "/devices/statuses/overview",
        "/devices/availabilities",
        "/devices",
        "/uplinks/statuses",
        "/devices/uplinksLossAndLatency",
        "/wireless/devices/channelUtilization/byDevice",
        "/sensor/readings/latest",
        "/licenses/overview",
        "/networks",
        "/firmware/upgrades",
    ];

    #[test]
    fn every_preset_path_answers_and_others_do_not() {
        for t in crate::presets::all().into_iter().filter(|t| t.name == "meraki") {
            for g in &t.groups {
                let (path, query) = g.path.split_once('?').unwrap_or((&g.path, ""));
                assert!(answer(path, query, 7).is_some(), "{} has no body", g.path);
            }
        }
        for p in ALL {
            assert!(answer(p, "", 0).is_some(), "{p}");
        }
        assert_eq!(answer("/devices/statuses", "", 0), None);
        assert_eq!(answer("/organizations", "", 0), None);
    }

    #[test]
    fn bodies_are_deterministic_per_tick_and_move_slowly() {
        for p in ALL {
            assert_eq!(answer(p, "", 42), answer(p, "", 42), "{p}");
        }
        let a = answer("/sensor/readings/latest", "", 0).unwrap();
        let b = answer("/sensor/readings/latest", "", 60).unwrap();
        let c = |v: &Value| v[0]["readings"][0]["temperature"]["celsius"].as_f64().unwrap();
        assert_ne!(c(&a), c(&b));
        assert!((c(&a) - c(&b)).abs() < 2.0, "moves slowly");
    }

    #[test]
    fn overview_counts_agree_with_the_availabilities() {
        for tick in [0, 95] {
            let av = availabilities(tick);
            let by = &overview(tick)["counts"]["byStatus"];
            let mut total = 0;
            for s in ["online", "alerting", "offline", "dormant"] {
                let n = av.as_array().unwrap().iter().filter(|d| d["status"] == s).count();
                assert_eq!(by[s].as_u64().unwrap() as usize, n, "{s} at {tick}");
                total += n;
            }
            assert_eq!(total, 12);
        }
        assert_eq!(overview(0)["counts"]["byStatus"]["alerting"], 1);
        assert_eq!(overview(95)["counts"]["byStatus"]["alerting"], 2);
        assert_eq!(overview(95)["counts"]["byStatus"]["online"], 8);
    }

    #[test]
    fn product_type_queries_filter_the_inventory_as_the_shapes_need() {
        let n = |q: &str| answer("/devices", q, 0).unwrap().as_array().unwrap().len();
        assert_eq!(n("productTypes[]=appliance&productTypes[]=cellularGateway"), 3);
        assert_eq!(n("productTypes%5B%5D=wireless"), 4);
        assert_eq!(n("productTypes[]=sensor&perPage=1000"), 2);
        assert_eq!(n("productTypes[]=camera"), 0);
        assert_eq!(n(""), 12);
        let d = &answer("/devices", "productTypes[]=sensor", 0).unwrap()[0];
        for f in ["serial", "name", "model", "networkId", "firmware", "productType"] {
            assert!(d[f].is_string(), "{f}");
        }
    }

    #[test]
    fn uplinks_have_interfaces_and_statuses() {
        let u = uplinks(0);
        let list = u.as_array().unwrap();
        assert_eq!(list.len(), 3);
        let ifaces: Vec<usize> = list.iter().map(|d| d["uplinks"].as_array().unwrap().len()).collect();
        assert_eq!(ifaces, [2, 3, 1]);
        assert_eq!(u[1]["uplinks"][1]["status"], "ready");
        assert_eq!(uplinks(100)[1]["uplinks"][1]["status"], "failed");
        for d in list {
            assert!(d["serial"].is_string() && d["model"].is_string() && d["networkId"].is_string());
        }
    }
}
