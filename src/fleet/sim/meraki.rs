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

/// The simulated organization's id.
pub const ORG_ID: &str = "549236";
/// Its name.
pub const ORG_NAME: &str = "Pollster Lab";

/// See [`super::answer`]. Two kinds of path answer: the API v1 paths
/// below the dashboard's base (`/api/v1/organizations`,
/// `/api/v1/organizations/{id}/…`, `/api/v1/networks/{id}/…`,
/// `/api/v1/devices/{serial}/…`, as the Meraki dashboard exporter calls
/// them), and the organization's own paths below
/// `/api/v1/organizations/{id}` (as the shipped preset's instance URL is
/// that organization's base).
pub fn answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    let Some(api) = path.strip_prefix("/api/v1") else {
        return org_answer(path, query, tick);
    };
    if api == "/organizations" {
        return Some(json!([organization()]));
    }
    if let Some(rest) = api.strip_prefix("/organizations/") {
        let (id, below) = rest.split_once('/').map_or((rest, ""), |(id, b)| (id, b));
        if id != ORG_ID {
            return None;
        }
        if below.is_empty() {
            return Some(organization());
        }
        return org_answer(&format!("/{below}"), query, tick);
    }
    if let Some(rest) = api.strip_prefix("/networks/") {
        let (id, below) = rest.split_once('/').unwrap_or((rest, ""));
        let net = NETWORKS.iter().position(|n| n.id == id)?;
        return network_answer(net, below, query, tick);
    }
    if let Some(rest) = api.strip_prefix("/devices/") {
        let (serial, below) = rest.split_once('/').unwrap_or((rest, ""));
        let dev = DEVICES.iter().position(|d| d.serial == serial)?;
        return device_answer(dev, below, tick);
    }
    None
}

/// The organization's own paths (below `/organizations/{id}`).
fn org_answer(path: &str, query: &str, tick: u64) -> Option<Value> {
    Some(match path {
        "" | "/" => organization(),
        "/devices/statuses/overview" => overview(tick),
        "/devices/availabilities" => availabilities(tick),
        "/devices" => devices_filtered(query),
        "/devices/overview/byModel" => devices_by_model(),
        "/devices/packetCapture/captures" => packet_captures(),
        "/devices/system/memory/usage/history/byInterval" => memory_usage(tick),
        "/licenses" => json!([]),
        "/inventoryDevices" => inventory(),
        "/loginSecurity" => login_security(),
        "/clients/overview" => clients_overview(tick),
        "/configurationChanges" => configuration_changes(),
        "/summary/top/applications/categories/byUsage" => top_application_categories(tick),
        "/summary/top/ssids/byUsage" => top_ssids(tick),
        "/switch/ports/overview" => switch_ports_overview(tick),
        "/wireless/clients/overview/byDevice" => wireless_clients_by_device(tick),
        "/wireless/devices/ethernet/statuses" => wireless_ethernet_statuses(),
        "/wireless/devices/packetLoss/byDevice" => packet_loss_by_device(tick),
        "/wireless/devices/packetLoss/byNetwork" => packet_loss_by_network(tick),
        "/wireless/devices/system/cpu/load/history" => cpu_load_history(query, tick),
        "/wireless/ssids/statuses/byDevice" => ssid_statuses_by_device(),
        "/assurance/alerts" => assurance_alerts(),
        "/apiRequests/overview" => api_requests_overview(tick),
        "/uplinks/statuses" => uplinks(tick),
        "/devices/uplinksLossAndLatency" => loss_latency(tick),
        "/wireless/devices/channelUtilization/byDevice" => channel_utilization(tick),
        "/sensor/readings/latest" => sensor_readings_filtered(query, tick),
        "/licenses/overview" => licenses(),
        "/networks" => networks(query),
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

/// getOrganizationNetworks, with its `productTypes[]` filter (a network
/// with any of them).
fn networks(query: &str) -> Value {
    let wanted = product_types(query);
    NETWORKS
        .iter()
        .filter(|n| wanted.is_empty() || n.products.iter().any(|p| wanted.iter().any(|w| w == p)))
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

// ------------------------------------------------------------ API v1 paths

/// getOrganization / one of getOrganizations.
fn organization() -> Value {
    json!({
        "id": ORG_ID,
        "name": ORG_NAME,
        "url": format!("https://n1.meraki.com/o/{ORG_ID}/manage/organization/overview"),
        "api": { "enabled": true },
        "licensing": { "model": "co-term" },
        "cloud": { "region": { "name": "Europe", "host": { "name": "Europe" } } },
        "management": { "details": [] },
    })
}

/// The values of a query parameter `key` or `key[]` (`[]` possibly
/// percent-encoded), in order; empty when it has none.
fn query_values(query: &str, key: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| {
            let k = k
                .replace("%5B", "[")
                .replace("%5b", "[")
                .replace("%5D", "]")
                .replace("%5d", "]");
            k.strip_suffix("[]").unwrap_or(&k) == key
        })
        .map(|(_, v)| v.replace("%2C", ",").replace("%2c", ","))
        .collect()
}

/// getOrganizationDevices with its `productTypes[]`, `networkIds[]` and
/// `serials[]` filters.
fn devices_filtered(query: &str) -> Value {
    let products = product_types(query);
    let networks = query_values(query, "networkIds");
    let serials = query_values(query, "serials");
    let Value::Array(all) = devices(&products) else {
        return json!([]);
    };
    all.into_iter()
        .filter(|d| networks.is_empty() || networks.iter().any(|n| d["networkId"] == n.as_str()))
        .filter(|d| serials.is_empty() || serials.iter().any(|s| d["serial"] == s.as_str()))
        .collect()
}

/// getNetwork.
fn network(net: usize) -> Value {
    let Value::Array(list) = networks("") else {
        return Value::Null;
    };
    list[net].clone()
}

/// getDevice: one device of the inventory.
fn device(dev: usize) -> Value {
    let Value::Array(list) = devices(&[]) else {
        return Value::Null;
    };
    list[dev].clone()
}

/// The paths below `/networks/{id}`.
fn network_answer(net: usize, below: &str, query: &str, tick: u64) -> Option<Value> {
    let has = |p: &str| NETWORKS[net].products.contains(&p);
    Some(match below {
        "" => network(net),
        "devices" => devices_filtered(&format!("networkIds[]={}", NETWORKS[net].id)),
        "bluetoothClients" => bluetooth_clients(net, tick),
        "networkHealth/channelUtilization" if has("wireless") => network_channel_utilization(net, tick),
        "sensor/alerts/overview/byMetric" if has("sensor") => sensor_alerts_overview(tick),
        "sensor/alerts/overview/byMetric" => json!([]),
        "switch/stp" if has("switch") => switch_stp(net),
        "wireless/connectionStats" if has("wireless") => connection_stats(net, tick),
        "wireless/dataRateHistory" if has("wireless") => data_rate_history(net, query, tick),
        "wireless/ssids" if has("wireless") => ssids(net),
        _ => return None,
    })
}

/// The paths below `/devices/{serial}`.
fn device_answer(dev: usize, below: &str, tick: u64) -> Option<Value> {
    let product = DEVICES[dev].product;
    Some(match below {
        "" => device(dev),
        "switch/ports/statuses" if product == "switch" => port_statuses(dev, tick),
        "switch/ports/statuses/packets" if product == "switch" => port_packets(dev, tick),
        "wireless/status" if product == "wireless" => wireless_status(dev),
        "wireless/connectionStats" if product == "wireless" => device_connection_stats(dev, tick),
        _ => return None,
    })
}

/// Indices of the devices of a product type.
fn of_product(product: &str) -> impl Iterator<Item = usize> + '_ {
    (0..DEVICES.len()).filter(move |&i| DEVICES[i].product == product)
}

/// getOrganizationDevicesOverviewByModel.
fn devices_by_model() -> Value {
    let mut counts: Vec<(&str, u64)> = Vec::new();
    for d in &DEVICES {
        match counts.iter_mut().find(|(m, _)| *m == d.model) {
            Some((_, n)) => *n += 1,
            None => counts.push((d.model, 1)),
        }
    }
    json!({
        "counts": counts.iter().map(|(m, n)| json!({ "model": m, "total": n })).collect::<Vec<_>>()
    })
}

/// getOrganizationDevicesPacketCaptureCaptures (`perPage=3`): the first
/// page and the count of the rest.
fn packet_captures() -> Value {
    let capture = |id: &str, serial: &str, name: &str, at: &str| {
        json!({
            "captureId": id,
            "name": name,
            "network": { "id": NETWORKS[0].id, "name": NETWORKS[0].name },
            "serial": serial,
            "status": "completed",
            "file": { "size": 48213 },
            "duration": 60,
            "request": { "ts": at, "user": { "email": "noc@example.com", "name": "NOC" } },
        })
    };
    json!({
        "items": [
            capture("431", DEVICES[3].serial, "uplink loop", "2026-11-28T09:12:00Z"),
            capture("432", DEVICES[0].serial, "wan1 drops", "2026-11-29T14:03:00Z"),
            capture("433", DEVICES[6].serial, "lobby roaming", "2026-11-30T08:41:00Z"),
        ],
        "meta": { "counts": { "items": { "total": 5, "remaining": 2 } } }
    })
}

/// Provisioned memory of a model, in kB.
fn memory_kb(model: &str) -> u64 {
    match model {
        m if m.starts_with("MX") => 2_097_152,
        m if m.starts_with("MS") => 1_048_576,
        m if m.starts_with("MR") => 524_288,
        _ => 262_144,
    }
}

/// getOrganizationDevicesSystemMemoryUsageHistoryByInterval: one 5-minute
/// interval per online or alerting MX, MS and MR.
fn memory_usage(tick: u64) -> Value {
    let items: Vec<Value> = (0..DEVICES.len())
        .filter(|&i| matches!(DEVICES[i].product, "appliance" | "switch" | "wireless"))
        .filter(|&i| matches!(status(i, tick), "online" | "alerting"))
        .map(|i| {
            let d = &DEVICES[i];
            let total = memory_kb(d.model);
            let pct = round(35.0 + (i as f64 * 4.0) + wave(tick + i as u64, 90, 8.0), 1);
            let used = (total as f64 * pct / 100.0).round() as u64;
            json!({
                "serial": d.serial,
                "model": d.model,
                "network": { "id": NETWORKS[d.net].id, "name": NETWORKS[d.net].name, "tags": [] },
                "tags": [],
                "provisioned": total,
                "intervals": [{
                    "startTs": ts(tick.saturating_sub(5)),
                    "endTs": ts(tick),
                    "memory": {
                        "used": {
                            "minimum": used.saturating_sub(2048),
                            "maximum": used,
                            "median": used.saturating_sub(1024),
                            "percentages": { "maximum": pct }
                        },
                        "free": {
                            "minimum": total - used,
                            "maximum": total - used + 2048,
                            "median": total - used + 1024
                        }
                    }
                }]
            })
        })
        .collect();
    let n = items.len();
    json!({ "items": items, "meta": { "counts": { "items": { "total": n, "remaining": 0 } } } })
}

/// getOrganizationLoginSecurity.
fn login_security() -> Value {
    json!({
        "enforcePasswordExpiration": true,
        "passwordExpirationDays": 90,
        "enforceDifferentPasswords": true,
        "numDifferentPasswords": 3,
        "enforceStrongPasswords": true,
        "enforceAccountLockout": true,
        "accountLockoutAttempts": 5,
        "enforceIdleTimeout": true,
        "idleTimeoutMinutes": 30,
        "enforceTwoFactorAuth": true,
        "enforceLoginIpRanges": false,
        "loginIpRanges": [],
        "apiAuthentication": { "ipRestrictionsForKeys": { "enabled": false, "ranges": [] } },
        "minimumPasswordLength": 12
    })
}

/// Wireless clients per access point, online ones only.
fn ap_clients(i: usize, tick: u64) -> u64 {
    if !matches!(status(i, tick), "online" | "alerting") {
        return 0;
    }
    8 + (i as u64 * 5) % 17 + (tick / 10 % 6)
}

/// getOrganizationClientsOverview (`timespan=3600`), usages in kB.
fn clients_overview(tick: u64) -> Value {
    let total: u64 = of_product("wireless").map(|i| ap_clients(i, tick)).sum::<u64>() + 23;
    let down = 1_850_000 + tick * 1_337 % 400_000;
    let up = 420_000 + tick * 733 % 90_000;
    json!({
        "counts": { "total": total },
        "usage": {
            "average": (down + up) / total,
            "overall": { "total": down + up, "downstream": down, "upstream": up }
        }
    })
}

/// getOrganizationConfigurationChanges (`timespan=86400`).
fn configuration_changes() -> Value {
    json!([
        {
            "ts": "2026-12-01T08:14:00Z", "adminName": "NOC", "adminEmail": "noc@example.com",
            "adminId": "212406", "networkName": NETWORKS[0].name, "networkId": NETWORKS[0].id,
            "networkUrl": "", "ssidName": null, "ssidNumber": null,
            "page": "via API", "label": "PUT /api/v1/devices/Q2HP-2LMN-G7H8/switch/ports/12",
            "oldValue": "{\"vlan\":10}", "newValue": "{\"vlan\":20}"
        },
        {
            "ts": "2026-12-01T09:02:00Z", "adminName": "NOC", "adminEmail": "noc@example.com",
            "adminId": "212406", "networkName": NETWORKS[1].name, "networkId": NETWORKS[1].id,
            "networkUrl": "", "ssidName": "Lab-Guest", "ssidNumber": 1,
            "page": "Wireless > Access control", "label": "Splash page",
            "oldValue": "None", "newValue": "Click-through"
        },
        {
            "ts": "2026-12-01T11:47:00Z", "adminName": "Ops", "adminEmail": "ops@example.com",
            "adminId": "212407", "networkName": null, "networkId": null,
            "networkUrl": null, "ssidName": null, "ssidNumber": null,
            "page": "Organization > Settings", "label": "Login IP ranges",
            "oldValue": "", "newValue": ""
        }
    ])
}

/// getOrganizationSummaryTopApplicationsCategoriesByUsage, in MB.
fn top_application_categories(tick: u64) -> Value {
    let cats = [
        ("Video & music", 3100.0),
        ("Productivity", 1400.0),
        ("Cloud services", 880.0),
        ("Social web", 310.0),
    ];
    let total: f64 = cats.iter().map(|c| c.1).sum::<f64>() + (tick % 50) as f64;
    cats.iter()
        .enumerate()
        .map(|(k, (name, mb))| {
            let t = if k == 0 { mb + (tick % 50) as f64 } else { *mb };
            json!({
                "category": name,
                "total": round(t, 1),
                "downstream": round(t * 0.82, 1),
                "upstream": round(t * 0.18, 1),
                "percentage": round(t / total * 100.0, 2)
            })
        })
        .collect()
}

/// SSIDs of the organization: name and number.
const SSIDS: [(&str, u64); 2] = [("Lab-Corp", 0), ("Lab-Guest", 1)];

/// getOrganizationSummaryTopSsidsByUsage, in MB.
fn top_ssids(tick: u64) -> Value {
    let corp = 2_400.0 + (tick % 40) as f64;
    let guest = 610.0;
    let total = corp + guest;
    let clients: u64 = of_product("wireless").map(|i| ap_clients(i, tick)).sum();
    [
        (SSIDS[0].0, corp, clients - clients / 4),
        (SSIDS[1].0, guest, clients / 4),
    ]
    .iter()
    .map(|(name, mb, n)| {
        json!({
            "name": name,
            "usage": {
                "total": round(*mb, 1),
                "downstream": round(mb * 0.8, 1),
                "upstream": round(mb * 0.2, 1),
                "percentage": round(mb / total * 100.0, 2)
            },
            "clients": { "counts": { "total": n } }
        })
    })
    .collect()
}

/// Access ports (copper) and SFP uplinks of a switch model.
fn switch_ports(model: &str) -> (u32, u32) {
    match model {
        "MS225-48FP" => (48, 4),
        "MS120-24P" => (24, 4),
        _ => (8, 2),
    }
}

/// The state of one switch port at `tick`: connected, its speed in Mbps
/// (0 when down), and whether it draws PoE.
fn port_state(dev: usize, port: u32, tick: u64) -> (bool, u64, bool) {
    let (copper, _) = switch_ports(DEVICES[dev].model);
    if !matches!(status(dev, tick), "online" | "alerting") {
        return (false, 0, false);
    }
    if port > copper {
        // The first SFP uplink is up at 10 G.
        return (port == copper + 1, if port == copper + 1 { 10_000 } else { 0 }, false);
    }
    let seed = (dev as u32 * 31 + port * 7) % 10;
    let connected = seed < 6 || (seed == 6 && tick % 60 < 40);
    let speed = if !connected {
        0
    } else if seed < 4 {
        1000
    } else {
        100
    };
    (
        connected,
        speed,
        connected && seed % 2 == 0 && DEVICES[dev].model.contains('P'),
    )
}

/// getDeviceSwitchPortsStatuses (`timespan=3600`).
fn port_statuses(dev: usize, tick: u64) -> Value {
    let (copper, sfp) = switch_ports(DEVICES[dev].model);
    (1..=copper + sfp)
        .map(|p| {
            let (connected, speed, poe) = port_state(dev, p, tick);
            let k = u64::from(p) + dev as u64 * 100;
            let recv = if connected {
                1_200 + k * 37 % 900 + tick % 100
            } else {
                0
            };
            let sent = if connected { 800 + k * 53 % 700 + tick % 70 } else { 0 };
            let speed_text = match speed {
                0 => "",
                10_000 => "10 Gbps",
                1000 => "1 Gbps",
                _ => "100 Mbps",
            };
            let mut port = json!({
                "portId": p.to_string(),
                "enabled": true,
                "status": if connected { "Connected" } else { "Disconnected" },
                "spanningTree": { "statuses": if connected { json!(["Forwarding"]) } else { json!([]) } },
                "isUplink": p > copper,
                "errors": if connected { json!([]) } else { json!(["Port disconnected"]) },
                "warnings": [],
                "speed": speed_text,
                "duplex": if connected { "full" } else { "" },
                "usageInKb": { "total": (recv + sent) * 3600 / 8, "sent": sent * 3600 / 8, "recv": recv * 3600 / 8 },
                "clientCount": if connected && p <= copper { 1 + k % 3 } else { 0 },
                "powerUsageInWh": if poe { round(4.5 + (k % 9) as f64 * 1.3, 1) } else { 0.0 },
                "trafficInKbps": { "total": (recv + sent) as f64, "sent": sent as f64, "recv": recv as f64 },
                "securePort": { "enabled": false, "active": false, "authenticationStatus": "Disabled" },
            });
            if poe {
                port["poe"] = json!({ "isAllocated": true });
            }
            if connected && p <= copper {
                port["lldp"] = json!({ "systemName": format!("host-{k}"), "portId": "eth0" });
            }
            port
        })
        .collect()
}

/// getDeviceSwitchPortsStatusesPackets (`timespan=300`).
fn port_packets(dev: usize, tick: u64) -> Value {
    let (copper, sfp) = switch_ports(DEVICES[dev].model);
    (1..=copper + sfp)
        .map(|p| {
            let (connected, _, _) = port_state(dev, p, tick);
            let k = u64::from(p) + dev as u64 * 100;
            let counter = |desc: &str, base: u64| {
                let n = if connected { base + k * 13 % (base / 4 + 1) + tick % 17 } else { 0 };
                let (sent, recv) = (n / 2, n - n / 2);
                json!({
                    "desc": desc, "total": n, "sent": sent, "recv": recv,
                    "ratePerSec": { "total": round(n as f64 / 300.0, 1), "sent": round(sent as f64 / 300.0, 1), "recv": round(recv as f64 / 300.0, 1) }
                })
            };
            json!({
                "portId": p.to_string(),
                "packets": [
                    counter("Total", 120_000),
                    counter("Broadcast", 3_000),
                    counter("Multicast", 6_000),
                    counter("CRC align errors", 0),
                    counter("Fragments", 0),
                    counter("Collisions", 0),
                    counter("Topology changes", 0),
                ]
            })
        })
        .collect()
}

/// getOrganizationSwitchPortsOverview (`timespan=43200`).
fn switch_ports_overview(tick: u64) -> Value {
    let (mut rj45, mut sfp) = ([0u64; 3], 0u64); // 100 M, 1 G active; inactive
    let (mut rj45_down, mut sfp_up, mut sfp_down) = (0u64, 0u64, 0u64);
    for dev in of_product("switch") {
        let (copper, uplinks) = switch_ports(DEVICES[dev].model);
        for p in 1..=copper + uplinks {
            let (connected, speed, _) = port_state(dev, p, tick);
            match (p > copper, connected) {
                (false, true) if speed == 1000 => rj45[1] += 1,
                (false, true) => rj45[0] += 1,
                (false, false) => rj45_down += 1,
                (true, true) => sfp_up += 1,
                (true, false) => sfp_down += 1,
            }
        }
    }
    rj45[2] = rj45[0] + rj45[1];
    sfp += sfp_up;
    json!({
        "counts": {
            "total": rj45[2] + rj45_down + sfp + sfp_down,
            "byStatus": {
                "active": {
                    "total": rj45[2] + sfp,
                    "byMediaAndLinkSpeed": {
                        "rj45": { "10": 0, "100": rj45[0], "1000": rj45[1], "2500": 0, "5000": 0, "10000": 0, "total": rj45[2] },
                        "sfp": { "100": 0, "1000": 0, "10000": sfp, "25000": 0, "40000": 0, "50000": 0, "100000": 0, "total": sfp }
                    }
                },
                "inactive": {
                    "total": rj45_down + sfp_down,
                    "byMedia": { "rj45": { "total": rj45_down }, "sfp": { "total": sfp_down } }
                }
            }
        }
    })
}

/// getOrganizationWirelessClientsOverviewByDevice.
fn wireless_clients_by_device(tick: u64) -> Value {
    let items: Vec<Value> = of_product("wireless")
        .map(|i| {
            json!({
                "serial": DEVICES[i].serial,
                "network": { "id": NETWORKS[DEVICES[i].net].id },
                "counts": { "byStatus": { "online": ap_clients(i, tick) } }
            })
        })
        .collect();
    let n = items.len();
    json!({ "items": items, "meta": { "counts": { "items": { "total": n, "remaining": 0 } } } })
}

/// getOrganizationWirelessDevicesEthernetStatuses.
fn wireless_ethernet_statuses() -> Value {
    of_product("wireless")
        .map(|i| {
            let d = &DEVICES[i];
            let speed = if d.model == "MR46" { 2500 } else { 1000 };
            json!({
                "serial": d.serial,
                "name": d.name,
                "network": { "id": NETWORKS[d.net].id },
                "power": {
                    "mode": "full",
                    "ac": { "isConnected": false },
                    "poe": { "isConnected": true }
                },
                "ports": [{
                    "name": "Ethernet 0",
                    "poe": { "standard": if d.model == "MR46" { "802.3at" } else { "802.3af" } },
                    "linkNegotiation": { "duplex": "full", "speed": speed }
                }],
                "aggregation": { "enabled": false, "speed": speed }
            })
        })
        .collect()
}

/// (downstream, upstream), each (packets, lost).
type Packets = ((u64, u64), (u64, u64));

/// Downstream and upstream packets and losses of an access point over 5
/// minutes.
fn ap_packets(i: usize, tick: u64) -> Packets {
    let down = 40_000 + i as u64 * 3_100 + tick % 500;
    let up = 12_000 + i as u64 * 900 + tick % 200;
    ((down, down / 200 + i as u64), (up, up / 400 + 1))
}

fn loss_json(total: u64, lost: u64) -> Value {
    json!({ "total": total, "lost": lost, "lossPercentage": round(lost as f64 / total as f64 * 100.0, 2) })
}

/// getOrganizationWirelessDevicesPacketLossByDevice.
fn packet_loss_by_device(tick: u64) -> Value {
    of_product("wireless")
        .filter(|&i| matches!(status(i, tick), "online" | "alerting"))
        .map(|i| {
            let d = &DEVICES[i];
            let ((down, down_lost), (up, up_lost)) = ap_packets(i, tick);
            json!({
                "device": { "serial": d.serial, "name": d.name, "mac": mac(i) },
                "network": { "id": NETWORKS[d.net].id, "name": NETWORKS[d.net].name },
                "downstream": loss_json(down, down_lost),
                "upstream": loss_json(up, up_lost)
            })
        })
        .collect()
}

/// getOrganizationWirelessDevicesPacketLossByNetwork.
fn packet_loss_by_network(tick: u64) -> Value {
    (0..NETWORKS.len())
        .filter_map(|n| {
            let aps: Vec<usize> = of_product("wireless")
                .filter(|&i| DEVICES[i].net == n && matches!(status(i, tick), "online" | "alerting"))
                .collect();
            if aps.is_empty() {
                return None;
            }
            let sum = |f: fn(Packets) -> u64| aps.iter().map(|&i| f(ap_packets(i, tick))).sum::<u64>();
            Some(json!({
                "network": { "id": NETWORKS[n].id, "name": NETWORKS[n].name },
                "downstream": loss_json(sum(|p| p.0.0), sum(|p| p.0.1)),
                "upstream": loss_json(sum(|p| p.1.0), sum(|p| p.1.1))
            }))
        })
        .collect()
}

/// getOrganizationWirelessDevicesSystemCpuLoadHistory (`serials[]`).
fn cpu_load_history(query: &str, tick: u64) -> Value {
    let serials = query_values(query, "serials");
    let items: Vec<Value> = of_product("wireless")
        .filter(|&i| serials.is_empty() || serials.iter().any(|s| s == DEVICES[i].serial))
        .filter(|&i| matches!(status(i, tick), "online" | "alerting"))
        .map(|i| {
            let d = &DEVICES[i];
            json!({
                "serial": d.serial,
                "name": d.name,
                "model": d.model,
                "network": { "id": NETWORKS[d.net].id, "name": NETWORKS[d.net].name },
                "tags": [],
                "series": [{ "ts": ts(tick), "cpuLoad5": 120 + (i as u64 * 37 + tick) % 200 }]
            })
        })
        .collect();
    let n = items.len();
    json!({ "items": items, "meta": { "counts": { "items": { "total": n, "remaining": 0 } } } })
}

/// The radios of an access point: band, channel, width, power (dBm).
fn radios(i: usize) -> [(&'static str, u64, u64, u64); 2] {
    [
        ("2.4", [1, 6, 11][i % 3], 20, 14),
        ("5", [36, 52, 100, 149][i % 4], 40, 17),
    ]
}

/// A basic service set: SSID name and number, band, channel, width (MHz),
/// power (dBm), broadcasting.
type Bss = (&'static str, u64, &'static str, u64, u64, u64, bool);

/// The basic service sets of an access point, as getDeviceWirelessStatus
/// and getOrganizationWirelessSsidsStatusesByDevice list them.
fn basic_service_sets(i: usize) -> Vec<Bss> {
    let mut out = Vec::new();
    let on = matches!(DEVICES[i].status, "online" | "alerting");
    for (ssid, number) in SSIDS {
        for (band, channel, width, power) in radios(i) {
            out.push((ssid, number, band, channel, width, power, on));
        }
    }
    out
}

/// getDeviceWirelessStatus.
fn wireless_status(i: usize) -> Value {
    let sets: Vec<Value> = basic_service_sets(i)
        .into_iter()
        .map(|(ssid, number, band, channel, width, power, on)| {
            json!({
                "ssidName": ssid, "ssidNumber": number, "enabled": true,
                "band": format!("{band} GHz"), "bssid": format!("{}:{number}{}", &mac(i)[..14], if band == "5" { 5 } else { 2 }),
                "channel": channel, "channelWidth": format!("{width} MHz"), "power": format!("{power} dBm"),
                "visible": true, "broadcasting": on
            })
        })
        .collect();
    json!({ "basicServiceSets": sets })
}

/// getOrganizationWirelessSsidsStatusesByDevice.
fn ssid_statuses_by_device() -> Value {
    let items: Vec<Value> = of_product("wireless")
        .map(|i| {
            let d = &DEVICES[i];
            let sets: Vec<Value> = basic_service_sets(i)
                .into_iter()
                .map(|(ssid, number, band, channel, width, power, on)| {
                    json!({
                        "ssid": { "name": ssid, "number": number },
                        "bssid": format!("{}:{number}{}", &mac(i)[..14], if band == "5" { 5 } else { 2 }),
                        "radio": {
                            "band": band, "channel": channel, "channelWidth": width,
                            "power": power, "isBroadcasting": on, "index": if band == "5" { "1" } else { "0" }
                        }
                    })
                })
                .collect();
            json!({
                "serial": d.serial, "name": d.name,
                "network": { "id": NETWORKS[d.net].id, "name": NETWORKS[d.net].name },
                "basicServiceSets": sets
            })
        })
        .collect();
    let n = items.len();
    json!({ "items": items, "meta": { "counts": { "items": { "total": n, "remaining": 0 } } } })
}

/// getOrganizationAssuranceAlerts: the alerting switch and the offline AP.
fn assurance_alerts() -> Value {
    let alert = |id: &str, dev: usize, category: &str, ty: &str, severity: &str, title: &str| {
        let d = &DEVICES[dev];
        json!({
            "id": id, "categoryType": category, "type": ty, "alertType": ty, "severity": severity,
            "title": title, "description": title,
            "network": { "id": NETWORKS[d.net].id, "name": NETWORKS[d.net].name },
            "device": { "serial": d.serial, "name": d.name, "productType": d.product, "model": d.model },
            "deviceType": d.product,
            "startedAt": "2026-12-01T06:40:00Z", "occurredAt": "2026-12-01T06:40:00Z",
            "resolvedAt": null, "dismissedAt": null, "scope": { "devices": [{ "serial": d.serial }] }
        })
    };
    json!([
        alert(
            "0000000000000001",
            4,
            "connectivity",
            "Port errors",
            "warning",
            "CRC errors on port 7"
        ),
        alert(
            "0000000000000002",
            8,
            "connectivity",
            "Device offline",
            "critical",
            "Access point offline"
        ),
        alert(
            "0000000000000003",
            0,
            "device_health",
            "High memory usage",
            "informational",
            "Memory above 80 %"
        ),
    ])
}

/// getOrganizationApiRequestsOverview: response codes of the last hour.
fn api_requests_overview(tick: u64) -> Value {
    json!({ "responseCodeCounts": { "200": 3_400 + tick % 100, "201": 0, "400": 2, "404": 11, "429": 0 } })
}

/// getOrganizationSensorReadingsLatest with its `serials[]` filter.
fn sensor_readings_filtered(query: &str, tick: u64) -> Value {
    let serials = query_values(query, "serials");
    let Value::Array(all) = sensor_readings(tick) else {
        return json!([]);
    };
    all.into_iter()
        .filter(|s| serials.is_empty() || serials.iter().any(|x| s["serial"] == x.as_str()))
        .collect()
}

/// getNetworkBluetoothClients: beacons the access points heard.
fn bluetooth_clients(net: usize, tick: u64) -> Value {
    let n = if NETWORKS[net].products.contains(&"wireless") {
        2 + (net + tick as usize / 20) % 3
    } else {
        0
    };
    (0..n)
        .map(|k| {
            json!({
                "id": format!("k{net}{k}"), "mac": format!("00:1a:7d:da:71:{:02x}", net * 16 + k),
                "networkId": NETWORKS[net].id, "name": format!("beacon-{k}"), "deviceName": null,
                "manufacturer": "Kontakt", "lastSeen": 1_764_576_000 + tick * 60, "seenByDeviceMac": mac(6),
                "inSightAlert": false, "outOfSightAlert": false, "tags": [], "rssi": -70
            })
        })
        .collect()
}

/// Channel utilization of an AP per band (wifi, non-wifi, total %).
fn ap_utilization(i: usize, band: usize, tick: u64) -> (f64, f64, f64) {
    let base = if band == 0 { 18.0 } else { 6.0 };
    let wifi = round(base + wave(tick + i as u64 * 7, 60, 12.0), 1);
    let non_wifi = round(2.0 + wave(tick + i as u64 * 3, 45, 3.0), 1);
    (wifi, non_wifi, round(wifi + non_wifi, 1))
}

/// getNetworkNetworkHealthChannelUtilization: per AP of the network, the
/// last interval of each radio (wifi0 2.4 GHz, wifi1 5 GHz).
fn network_channel_utilization(net: usize, tick: u64) -> Value {
    of_product("wireless")
        .filter(|&i| DEVICES[i].net == net && matches!(status(i, tick), "online" | "alerting"))
        .map(|i| {
            let radio = |band: usize| {
                let (wifi, non_wifi, total) = ap_utilization(i, band, tick);
                json!([{ "start_ts": ts(tick.saturating_sub(10)), "end_ts": ts(tick), "utilization": total, "wifi": wifi, "non_wifi": non_wifi }])
            };
            json!({ "serial": DEVICES[i].serial, "model": DEVICES[i].model, "tags": [], "wifi0": radio(0), "wifi1": radio(1) })
        })
        .collect()
}

/// getNetworkSensorAlertsOverviewByMetric (`timespan=3600&interval=3600`).
fn sensor_alerts_overview(tick: u64) -> Value {
    json!([{
        "startTs": ts(tick.saturating_sub(60)), "endTs": ts(tick),
        "counts": {
            "apparentPower": 0, "co2": 0, "current": 0, "door": u64::from(tick % 200 >= 190), "frequency": 0,
            "humidity": 0, "indoorAirQuality": 0, "noise": { "ambient": 0 }, "pm25": 0, "powerFactor": 0,
            "realPower": 0, "temperature": u64::from(tick % 240 >= 200), "tvoc": 0, "upstreamPower": 0,
            "voltage": 0, "water": 0
        }
    }])
}

/// getNetworkSwitchStp.
fn switch_stp(net: usize) -> Value {
    let switches: Vec<&str> = of_product("switch")
        .filter(|&i| DEVICES[i].net == net)
        .map(|i| DEVICES[i].serial)
        .collect();
    let (core, rest) = switches.split_first().map_or((None, &[][..]), |(c, r)| (Some(*c), r));
    let mut prio = Vec::new();
    if let Some(core) = core {
        prio.push(json!({ "switches": [core], "stpPriority": 4096 }));
    }
    if !rest.is_empty() {
        prio.push(json!({ "switches": rest, "stpPriority": 32768 }));
    }
    json!({ "rstpEnabled": true, "stpBridgePriority": prio })
}

/// getNetworkWirelessConnectionStats (`timespan=1800`).
fn connection_stats(net: usize, tick: u64) -> Value {
    let n = net as u64;
    json!({
        "assoc": 2 + n, "auth": 5 + (tick / 15 + n) % 4, "dhcp": 1 + n % 2, "dns": 0,
        "success": 1_450 + n * 310 + tick % 90
    })
}

/// getNetworkWirelessDataRateHistory: the one interval of `resolution`.
fn data_rate_history(net: usize, _query: &str, tick: u64) -> Value {
    let n = net as u64;
    let down = 18_000 + n * 4_100 + (tick * 97) % 3_000;
    let up = 4_200 + n * 900 + (tick * 31) % 800;
    json!([{
        "startTs": ts(tick.saturating_sub(5)), "endTs": ts(tick),
        "averageKbps": down + up, "downloadKbps": down, "uploadKbps": up
    }])
}

/// getDeviceWirelessConnectionStats (`timespan=1800`).
fn device_connection_stats(dev: usize, tick: u64) -> Value {
    let on = matches!(status(dev, tick), "online" | "alerting");
    let k = dev as u64;
    json!({
        "serial": DEVICES[dev].serial,
        "connectionStats": if on {
            json!({ "assoc": k % 3, "auth": 1 + k % 2, "dhcp": k % 2, "dns": 0, "success": 380 + k * 41 + tick % 30 })
        } else {
            json!({ "assoc": 0, "auth": 0, "dhcp": 0, "dns": 0, "success": 0 })
        }
    })
}

/// getOrganizationInventoryDevices: every claimed device.
fn inventory() -> Value {
    DEVICES
        .iter()
        .enumerate()
        .map(|(i, d)| {
            json!({
                "mac": mac(i), "serial": d.serial, "name": d.name, "model": d.model,
                "networkId": NETWORKS[d.net].id, "orderNumber": format!("4C{:06}", 1207 + i),
                "claimedAt": "2025-03-14T09:30:00Z", "licenseExpirationDate": "2027-03-31T00:00:00Z",
                "tags": [], "productType": d.product, "countryCode": "FR", "details": []
            })
        })
        .collect()
}

/// getNetworkWirelessSsids: the 15 slots, two configured.
fn ssids(net: usize) -> Value {
    (0..15u64)
        .map(|k| match SSIDS.iter().find(|s| s.1 == k) {
            Some((name, number)) => json!({
                "number": number, "name": name, "enabled": true, "splashPage": if *number == 1 { "Click-through splash page" } else { "None" },
                "ssidAdminAccessible": false, "authMode": if *number == 1 { "open" } else { "psk" },
                "encryptionMode": "wpa", "wpaEncryptionMode": "WPA2 only", "ipAssignmentMode": "Bridge mode",
                "minBitrate": 12, "bandSelection": "Dual band operation", "perClientBandwidthLimitUp": 0,
                "perClientBandwidthLimitDown": 0, "visible": true, "availableOnAllAps": true, "availabilityTags": [],
                "networkId": NETWORKS[net].id
            }),
            None => json!({
                "number": k, "name": format!("Unconfigured SSID {}", k + 1), "enabled": false,
                "splashPage": "None", "ssidAdminAccessible": false, "authMode": "open", "ipAssignmentMode": "NAT mode",
                "minBitrate": 11, "bandSelection": "Dual band operation", "perClientBandwidthLimitUp": 0,
                "perClientBandwidthLimitDown": 0, "visible": true, "availableOnAllAps": true, "availabilityTags": []
            }),
        })
        .collect()
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
                match &g.api_root {
                    // Below the organization's base.
                    None => assert!(answer(path, query, 7).is_some(), "{} has no body", g.path),
                    // Below the API root, for one of the items it fans out
                    // over: a switch, an access point, a network.
                    Some(root) => {
                        let serial = if path.contains("/switch/") {
                            "Q2HP-2LMN-G7H8"
                        } else {
                            "Q3AB-7XYZ-N4P5"
                        };
                        let full = format!("{root}{path}")
                            .replace("{item.serial}", serial)
                            .replace("{item}", NETWORKS[0].id)
                            .replace("{item.id}", NETWORKS[0].id);
                        assert!(
                            super::super::answer(super::super::SimApi::Meraki, &full, query, 7).is_some(),
                            "{full} has no body"
                        );
                    }
                }
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
        let networks = |q: &str| answer("/networks", q, 0).unwrap().as_array().unwrap().len();
        assert_eq!(networks(""), 3);
        assert_eq!(networks("productTypes[]=wireless"), 3);
        assert_eq!(networks("productTypes%5B%5D=switch"), 2);
        assert_eq!(networks("productTypes[]=sensor&productTypes[]=camera"), 1);
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

    /// Every call meraki-dashboard-exporter 0.26.0 makes for this
    /// organization (its first collection of every tier, recorded against
    /// the parity test's server) has an answer of the shape it reads.
    #[test]
    fn the_dashboard_exporters_calls_answer() {
        let org = format!("/api/v1/organizations/{ORG_ID}");
        let mut calls = vec![
            "/api/v1/organizations".to_string(),
            org.clone(),
            format!("{org}/assurance/alerts"),
            format!("{org}/clients/overview?timespan=3600"),
            format!("{org}/configurationChanges?timespan=86400"),
            format!("{org}/devices"),
            format!("{org}/devices/availabilities"),
            format!("{org}/devices/overview/byModel"),
            format!("{org}/devices/packetCapture/captures?perPage=3"),
            format!("{org}/devices/system/memory/usage/history/byInterval?timespan=300&interval=300"),
            format!("{org}/inventoryDevices?perPage=1000"),
            format!("{org}/licenses"),
            format!("{org}/licenses/overview"),
            format!("{org}/loginSecurity"),
            format!("{org}/networks"),
            format!("{org}/summary/top/applications/categories/byUsage?quantity=1000"),
            format!("{org}/summary/top/ssids/byUsage"),
            format!("{org}/switch/ports/overview?timespan=43200"),
            format!("{org}/wireless/clients/overview/byDevice"),
            format!("{org}/wireless/devices/ethernet/statuses"),
            format!("{org}/wireless/devices/packetLoss/byDevice?timespan=600&perPage=1000"),
            format!("{org}/wireless/devices/packetLoss/byNetwork?timespan=300&perPage=1000"),
            format!("{org}/wireless/ssids/statuses/byDevice?perPage=500"),
            format!("{org}/apiRequests/overview"),
        ];
        for n in &NETWORKS {
            let net = format!("/api/v1/networks/{}", n.id);
            calls.push(net.clone());
            calls.push(format!("{net}/bluetoothClients?timespan=300&perPage=1000"));
            calls.push(format!(
                "{net}/sensor/alerts/overview/byMetric?timespan=3600&interval=3600"
            ));
            if n.products.contains(&"wireless") {
                calls.push(format!("{net}/networkHealth/channelUtilization"));
                calls.push(format!("{net}/wireless/connectionStats?timespan=1800"));
                calls.push(format!("{net}/wireless/dataRateHistory?timespan=300&resolution=300"));
                calls.push(format!("{net}/wireless/ssids"));
            }
            if n.products.contains(&"switch") {
                calls.push(format!("{net}/switch/stp"));
            }
        }
        for d in &DEVICES {
            let dev = format!("/api/v1/devices/{}", d.serial);
            calls.push(dev.clone());
            if d.product == "switch" {
                calls.push(format!("{dev}/switch/ports/statuses?timespan=3600"));
                calls.push(format!("{dev}/switch/ports/statuses/packets?timespan=300"));
            }
            if d.product == "wireless" {
                calls.push(format!("{dev}/wireless/status"));
                calls.push(format!("{dev}/wireless/connectionStats?timespan=1800"));
            }
        }
        for call in &calls {
            let (path, query) = call.split_once('?').unwrap_or((call, ""));
            assert!(answer(path, query, 95).is_some(), "{call} has no answer");
        }
        assert_eq!(answer("/api/v1/organizations/1", "", 0), None, "another organization");
        assert_eq!(answer("/api/v1/devices/NOPE", "", 0), None);
        assert_eq!(
            answer("/api/v1/devices/Q2KN-5X8M-A1B2/switch/ports/statuses", "", 0),
            None,
            "an MX has no switch ports"
        );
        // The filters the exporter uses.
        let n = |q: &str| {
            answer(&format!("{org}/devices"), q, 0)
                .unwrap()
                .as_array()
                .unwrap()
                .len()
        };
        assert_eq!(
            n(&format!(
                "networkIds%5B%5D={}&productTypes%5B%5D=wireless",
                NETWORKS[0].id
            )),
            2
        );
        assert_eq!(n("serials%5B%5D=Q3CA-6MNP-W3X4"), 1);
        let readings = answer(
            &format!("{org}/sensor/readings/latest"),
            "serials%5B%5D=Q3CB-8QRS-Y5Z6",
            0,
        )
        .unwrap();
        assert_eq!(readings.as_array().unwrap().len(), 1);
        // The org-relative paths (the preset's) and the API v1 ones agree.
        assert_eq!(answer("/networks", "", 3), answer(&format!("{org}/networks"), "", 3));
        assert_eq!(answer("", "", 3), answer(&org, "", 3));
    }

    #[test]
    fn switch_port_counts_agree_with_the_ports_overview() {
        for tick in [0, 95] {
            let mut active = 0;
            let mut all = 0;
            for dev in of_product("switch") {
                let ports = port_statuses(dev, tick);
                for p in ports.as_array().unwrap() {
                    all += 1;
                    active += usize::from(p["status"] == "Connected");
                }
                assert_eq!(
                    port_packets(dev, tick).as_array().unwrap().len(),
                    ports.as_array().unwrap().len()
                );
            }
            let o = switch_ports_overview(tick);
            assert_eq!(
                o["counts"]["byStatus"]["active"]["total"].as_u64().unwrap() as usize,
                active,
                "{tick}"
            );
            assert_eq!(o["counts"]["total"].as_u64().unwrap() as usize, all, "{tick}");
        }
    }
}
