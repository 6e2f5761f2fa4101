//! Cluster members as real processes (`[cluster]`, gossip over sealed
//! UDP): three `pollster serve` on loopback share one fleet (a pool of
//! instances of the simulated Meraki organization, and instances of the
//! simulated Proxmox VE cluster without a pool), each unit
//! polled by one of them, and say so on `GET /api/cluster` and the Cluster
//! page; a reload keeps each share; a dead-letter retry asked of a member
//! that does not poll the task is carried out by the one that does; a
//! member killed with SIGKILL has its units and its dead-letter entries
//! taken over within 30 s; the budget pool never sees more than its budget
//! over any 10 s window (its requests counted at the target, whichever
//! member sent them); the member comes back and takes its units again,
//! asking each instance at its floor and never sooner, and each member's
//! /metrics carries only what it polls. A member with
//! another key never joins (the others count its datagrams as rejected),
//! and one with another config owns nothing. In network namespaces, a
//! member cut off from the two others by a real partition stops, the two
//! take its units, and the three settle again once the cut heals.

use pollster::fleet::sim::SimApi;
use pollster::fleet::{Behaviour, BodyFormat, Fleet, Member as FleetMember};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::port::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_pollster");
/// The pool's budget (rps).
const ORG_RPS: f64 = 4.0;
const ADMIN_PASSWORD: &str = "a long cluster admin passphrase";
const TAKEOVER: Duration = Duration::from_secs(30);

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

struct Member {
    name: String,
    config: PathBuf,
    api: String,
    metrics: String,
    token: String,
    /// The network namespace it runs in (the partition test).
    netns: Option<String>,
    child: Option<Child>,
}

/// Where a member listens and whom it joins through.
struct Net {
    /// Its API and metrics listeners' address.
    host: IpAddr,
    gossip: SocketAddr,
    seeds: Vec<SocketAddr>,
    netns: Option<String>,
}

impl Member {
    /// Writes the member's config: `[server]` and `[cluster]` of its own,
    /// then `shared`, on loopback. Makes a token in its data directory.
    fn new(dir: &Path, name: &str, gossip: u16, seeds: &[u16], key: &Path, shared: &str) -> Member {
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let net = Net {
            host: at(0).ip(),
            gossip: at(gossip),
            seeds: seeds.iter().map(|&p| at(p)).collect(),
            netns: None,
        };
        Member::placed(dir, name, &net, key, shared)
    }

    /// [`Member::new`] on the addresses and in the namespace of `net`.
    fn placed(dir: &Path, name: &str, net: &Net, key: &Path, shared: &str) -> Member {
        let (api, metrics) = (free_port(), free_port());
        let host = net.host;
        let data = dir.join(name);
        let seeds: Vec<String> = net.seeds.iter().map(|a| format!("\"{a}\"")).collect();
        let text = format!(
            "[server]\nlisten = \"{host}:{api}\"\nmetrics_listen = \"{host}:{metrics}\"\ndata_dir = \"{}\"\n\n\
             [cluster]\nname = \"it\"\nmember = \"{name}\"\nlisten = \"{}\"\nseeds = [{}]\nkey_file = \"{}\"\nmin_members = 2\n\n{shared}",
            data.display(),
            net.gossip,
            seeds.join(", "),
            key.display(),
        );
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).expect("config");
        let out = Command::new(BIN)
            .args([
                "admin",
                "create-token",
                "--config",
                &config.to_string_lossy(),
                "--name",
                "it",
            ])
            .output()
            .expect("create-token");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Member {
            name: name.into(),
            config,
            api: format!("http://{host}:{api}"),
            metrics: format!("http://{host}:{metrics}/metrics"),
            token: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            netns: net.netns.clone(),
            child: None,
        }
    }

    fn start(&mut self) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.config.with_extension("log"))
            .expect("log file");
        let config = self.config.to_string_lossy().to_string();
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        // `ip netns exec` execs the server: the child is the server.
        let child = command
            .args(["serve", "--config", &config])
            .env("RUST_LOG", "info")
            .env("POLLSTER_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("serve");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> Option<Value> {
        let r = client
            .get(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    async fn cluster(&self, client: &reqwest::Client) -> Option<Value> {
        self.get(client, "/api/cluster").await
    }

    /// The units this member says it polls.
    async fn units(&self, client: &reqwest::Client) -> BTreeSet<String> {
        let Some(c) = self.cluster(client).await else {
            return BTreeSet::new();
        };
        c["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == self.name.as_str())
            .map(|m| {
                m["units"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn dead_letters(&self, client: &reqwest::Client) -> Vec<String> {
        let Some(h) = self.get(client, "/api/monitoring/scheduler/health").await else {
            return Vec::new();
        };
        h["deadLetter"]["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["instance"].as_str().map(str::to_string))
            .collect()
    }

    async fn metric(&self, client: &reqwest::Client, name: &str) -> Option<f64> {
        let text = client.get(&self.metrics).send().await.ok()?.text().await.ok()?;
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// A page, logged in as the admin.
    async fn page(&self, path: &str) -> String {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let r = http
            .post(format!("{}/login", self.api))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                form_urlencoded::Serializer::new(String::new())
                    .extend_pairs([("username", "admin"), ("password", ADMIN_PASSWORD)])
                    .finish(),
            )
            .send()
            .await
            .expect("login");
        let cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok()?.split(';').next())
            .find(|p| p.starts_with("pollster_session="))
            .expect("a session cookie after login")
            .to_string();
        let r = http
            .get(format!("{}{path}", self.api))
            .header("cookie", cookie)
            .send()
            .await
            .expect("page");
        assert_eq!(r.status().as_u16(), 200, "GET {path}");
        r.text().await.expect("body")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Every running member's units, by member.
async fn split_of(client: &reqwest::Client, members: &[Member]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for m in members.iter().filter(|m| m.child.is_some()) {
        out.insert(m.name.clone(), m.units(client).await);
    }
    out
}

/// Evaluates `$cond` every 200 ms until it holds or `$limit` passes: the
/// time it took, or `None`.
macro_rules! within {
    ($limit:expr, $cond:expr) => {{
        let start = Instant::now();
        let mut took = None;
        while start.elapsed() < $limit {
            if $cond {
                took = Some(start.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        took
    }};
}

/// Every running member's view has them all live and ready and names, for
/// each unit, the member that polls it in `split`.
async fn settled_views(
    client: &reqwest::Client,
    members: &[Member],
    split: &BTreeMap<String, BTreeSet<String>>,
) -> bool {
    let polled_by: BTreeMap<&str, &str> = split
        .iter()
        .flat_map(|(m, units)| units.iter().map(move |u| (u.as_str(), m.as_str())))
        .collect();
    for m in members.iter().filter(|m| m.child.is_some()) {
        let Some(c) = m.cluster(client).await else {
            return false;
        };
        let all_ready = c["members"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|x| x["ready"] == true);
        if !all_ready || c["members"].as_array().map(Vec::len) != Some(split.len()) {
            return false;
        }
        // The last change of each unit names its owner in this view.
        let mut owner: BTreeMap<String, Option<String>> = BTreeMap::new();
        for ch in c["changes"].as_array().into_iter().flatten() {
            let unit = ch["unit"].as_str().unwrap_or_default();
            let plain = unit.split_once(':').map_or(unit, |(_, n)| n).to_string();
            owner.insert(plain, ch["to"].as_str().map(str::to_string));
        }
        let agrees = polled_by
            .iter()
            .all(|(u, by)| owner.get(*u).cloned().flatten().as_deref() == Some(*by));
        if !agrees {
            return false;
        }
    }
    true
}

/// Waits up to 40 s until each of `units` is polled by exactly one member,
/// the one every member's view names ([`settled_views`]): how long it
/// took, and the last split seen.
async fn settle(
    client: &reqwest::Client,
    members: &[Member],
    units: &BTreeSet<String>,
) -> (Option<Duration>, BTreeMap<String, BTreeSet<String>>) {
    let mut split = BTreeMap::new();
    let took = within!(Duration::from_secs(40), {
        split = split_of(client, members).await;
        split_once(&split, units) && settled_views(client, members, &split).await
    });
    (took, split)
}

/// Each unit of `split` once, and all of `units`.
fn split_once(split: &BTreeMap<String, BTreeSet<String>>, units: &BTreeSet<String>) -> bool {
    let mut seen = BTreeSet::new();
    split.values().flatten().all(|u| seen.insert(u.clone())) && seen == *units
}

/// The org pool's instances answer as the simulated Meraki organization,
/// the instances without a pool as the simulated Proxmox VE cluster.
fn simulated(org: &[String], lone: &[String]) -> Vec<FleetMember> {
    let sim = |name: &String, api| FleetMember::simulating(name.clone(), Behaviour::Healthy, api);
    org.iter()
        .map(|n| sim(n, SimApi::Meraki))
        .chain(lone.iter().map(|n| sim(n, SimApi::Pve)))
        .collect()
}

fn shared_config(fleet: &Fleet, org: &[String], lone: &[String], dead: &str) -> String {
    let group = |ty: &str, path: &str| {
        format!(
            "[[types]]\nname = \"{ty}\"\n[[types.groups]]\nname = \"probe\"\npath = \"{path}\"\npriority = 1\nfloor = \"3s\"\n\n"
        )
    };
    let mut cfg = format!(
        "[adaptive]\nenabled = false\n\n[failure]\nbackoff_initial = \"60s\"\nbackoff_jitter = 0.0\nbreaker_threshold = 1\ndead_letter_after = 1\n\n\
         [[budgets]]\nname = \"org\"\nrequests_per_second = {ORG_RPS}\n\n\
         [[budgets]]\nname = \"broken\"\nrequests_per_second = 5.0\n\n{}{}{}",
        group("meraki_org", "/api/v1/organizations"),
        group("pve_version", "/api2/json/version"),
        group("every3s", ""),
    );
    for name in org {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"meraki_org\"\nurl = \"{}\"\ntimeout = \"1s\"\nbudget = \"org\"\n\n",
            fleet.url(name)
        ));
    }
    for name in lone {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"pve_version\"\nurl = \"{}\"\ntimeout = \"1s\"\n\n",
            fleet.url(name)
        ));
    }
    cfg.push_str(&format!(
        "[[instances]]\nname = \"{dead}\"\ntype = \"every3s\"\nurl = \"{}\"\ntimeout = \"1s\"\nbudget = \"broken\"\n\n",
        fleet.url(dead)
    ));
    cfg
}

fn write_key(dir: &Path, name: &str, byte: u8) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, pollster::secrets::DataKey::from_bytes([byte; 32]).to_file_text()).expect("key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_the_fleet_take_over_a_killed_one_and_refuse_a_wrong_key_or_config() {
    let org: Vec<String> = (0..8).map(|i| format!("org-{i}")).collect();
    let lone: Vec<String> = (0..4).map(|i| format!("pve-{i}")).collect();
    let dead = "tripped".to_string();
    let mut members = simulated(&org, &lone);
    members.push(FleetMember::new(dead.clone(), Behaviour::Unauthorized));
    let fleet = Fleet::start_members("127.0.0.1:0".parse().expect("addr"), members, BodyFormat::Json)
        .await
        .expect("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = write_key(dir.path(), "cluster.key", 7);
    let shared = shared_config(&fleet, &org, &lone, &dead);
    let gossip: Vec<u16> = (0..3).map(|_| free_udp_port()).collect();
    let mut members: Vec<Member> = (0..3)
        .map(|i| Member::new(dir.path(), &format!("m{i}"), gossip[i], &gossip, &key, &shared))
        .collect();
    for m in &mut members {
        m.start();
    }
    let client = reqwest::Client::new();
    let all_units: BTreeSet<String> = std::iter::once("org".to_string())
        .chain(std::iter::once("broken".to_string()))
        .chain(lone.iter().cloned())
        .collect();

    // Settled: every unit polled by exactly one member, the one each
    // member's view names as its owner, with all three ready.
    let (settled, split) = settle(&client, &members, &all_units).await;
    assert!(
        settled.is_some(),
        "the units were not split once over the members: {split:?}\n{}",
        members[0].log()
    );
    let c = members[0].cluster(&client).await.expect("cluster");
    assert_eq!(c["members"].as_array().map(Vec::len), Some(3), "{c}");
    assert!(
        c["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["state"] == "live" && m["ready"] == true),
        "{c}\n{}",
        members[0].log()
    );

    // The pages say which member this is, and show what each polls.
    let page = members[1].page("/cluster").await;
    assert!(page.contains("member 2 of 3"), "{page}");
    for (name, units) in &split {
        assert!(
            page.contains(&format!("<th scope=\"row\">{name}")),
            "{name} on the page: {page}"
        );
        if let Some(u) = units.iter().next() {
            assert!(page.contains(u.as_str()), "{u} on the page");
        }
    }
    assert!(members[0].page("/").await.contains("member 1 of 3"));

    // A reload keeps the member's share; a changed [cluster] key is named
    // as needing a restart, and nothing moves.
    let text = std::fs::read_to_string(&members[2].config).expect("config");
    std::fs::write(&members[2].config, text.replace("min_members = 2", "min_members = 3")).expect("config");
    let r: Value = client
        .post(format!("{}/api/admin/reload", members[2].api))
        .bearer_auth(&members[2].token)
        .send()
        .await
        .expect("reload")
        .json()
        .await
        .expect("reload report");
    assert_eq!(r["restartNeeded"], serde_json::json!(["cluster.min_members"]), "{r}");
    assert_eq!(
        r["instancesAdded"],
        serde_json::json!([]),
        "the file's instances are not new: {r}"
    );
    assert_eq!(
        members[2].units(&client).await,
        split["m2"],
        "the reload kept m2's share"
    );
    std::fs::write(&members[2].config, text).expect("config");

    // The member that polls the broken pool has its dead-letter entry.
    let victim = split
        .iter()
        .find(|(_, u)| u.contains("broken"))
        .map(|(n, _)| n.clone())
        .unwrap();
    let vi = members.iter().position(|m| m.name == victim).unwrap();
    assert!(
        within!(
            Duration::from_secs(20),
            members[vi].dead_letters(&client).await.contains(&dead)
        )
        .is_some(),
        "no dead-letter entry on {victim}"
    );
    // Asked of another member, a retry is carried out by the one that
    // polls the task.
    let other = (vi + 1) % members.len();
    let r = client
        .post(format!(
            "{}/api/monitoring/scheduler/dead-letter/{dead}/probe/retry",
            members[other].api
        ))
        .bearer_auth(&members[other].token)
        .send()
        .await
        .expect("retry");
    assert_eq!(r.status().as_u16(), 202, "a retry asked of {}", members[other].name);
    let body: Value = r.json().await.expect("task state");
    assert_eq!(body["instance"], dead.as_str(), "{body}");
    assert!(
        members[vi]
            .log()
            .contains("carrying out a forwarded dead-letter action")
    );
    let victim_units = split[&victim].clone();

    // The org pool's requests every 250 ms from here on, to check every
    // 10 s window.
    let fleet = Arc::new(fleet);
    let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let sampler = {
        let (fleet, samples, org) = (fleet.clone(), samples.clone(), org.clone());
        tokio::spawn(async move {
            loop {
                let n = org.iter().map(|n| fleet.hits(n)).sum::<u64>();
                samples.lock().expect("samples").push((Instant::now(), n));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    // SIGKILL the member with the dead-letter entry.
    members[vi].kill9();
    let killed = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != vi).collect();
    let took = within!(TAKEOVER, {
        let held: BTreeSet<String> = split_of(&client, &members).await.into_values().flatten().collect();
        victim_units.is_subset(&held)
    });
    assert!(
        took.is_some(),
        "{victim}'s units {victim_units:?} were not taken over in 30 s"
    );
    eprintln!("takeover after SIGKILL: {:?}", killed.elapsed());
    // Its instances are polled again, and its dead-letter entry is on the
    // new owner of the broken pool.
    let mut new_owner = None;
    for &i in &others {
        if members[i].units(&client).await.contains("broken") {
            new_owner = Some(i);
        }
    }
    let new_owner = new_owner.expect("an owner of the broken pool");
    assert!(
        members[new_owner].dead_letters(&client).await.contains(&dead),
        "the dead-letter entry of the killed member is not on the new owner"
    );
    let lone_hits: Vec<u64> = lone.iter().map(|n| fleet.hits(n)).collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (n, before) in lone.iter().zip(&lone_hits) {
        assert!(fleet.hits(n) > *before, "{n} is not polled after the takeover");
    }
    let c = members[others[0]].cluster(&client).await.expect("cluster");
    assert!(
        c["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == victim.as_str() && m["state"] == "down"),
        "{c}"
    );
    assert!(
        c["changes"]
            .as_array()
            .is_some_and(|ch| ch.iter().any(|x| x["from"] == victim.as_str())),
        "{c}"
    );

    // It comes back: its units go back to it within 30 s, with no burst:
    // each of their instances is asked at its 3 s floor, never sooner (the
    // member letting a unit go publishes when each task is next due, and
    // the one taking it keeps that). 2.5 s allows for the 100 ms samples
    // and a previous poll dispatched late; the rule before this one left
    // gaps of 2.0-2.5 s here, and a second at once.
    let moved: Vec<String> = victim_units
        .iter()
        .flat_map(|u| match u.as_str() {
            "org" => org.clone(),
            "broken" => Vec::new(),
            lone => vec![lone.to_string()],
        })
        .collect();
    // Every 100 ms: when, and each moved instance's requests so far.
    type Asked = Vec<(Instant, Vec<u64>)>;
    let asked: Arc<Mutex<Asked>> = Arc::default();
    let watcher = {
        let (fleet, asked, moved) = (fleet.clone(), asked.clone(), moved.clone());
        tokio::spawn(async move {
            loop {
                let hits = moved.iter().map(|n| fleet.hits(n)).collect();
                asked.lock().expect("asked").push((Instant::now(), hits));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    members[vi].start();
    let back = within!(TAKEOVER, {
        let split = split_of(&client, &members).await;
        split.get(&victim).is_some_and(|u| !u.is_empty()) && split_once(&split, &all_units)
    });
    assert!(back.is_some(), "{victim} did not get units back in 30 s");
    tokio::time::sleep(Duration::from_secs(10)).await;
    sampler.abort();
    watcher.abort();
    let asked = asked.lock().expect("asked").clone();
    // The shortest time between two requests to one moved instance.
    let mut shortest: Option<(Duration, &str)> = None;
    for (i, name) in moved.iter().enumerate() {
        let mut last: Option<Instant> = None;
        for w in asked.windows(2) {
            let (n0, (t1, n1)) = (w[0].1[i], (w[1].0, w[1].1[i]));
            let gap = match n1 - n0 {
                0 => continue,
                1 => last.map(|t| t1.duration_since(t)),
                _ => Some(Duration::ZERO),
            };
            if let Some(gap) = gap
                && shortest.is_none_or(|(s, _)| gap < s)
            {
                shortest = Some((gap, name));
            }
            last = Some(t1);
        }
        assert!(last.is_some(), "{name} was not asked across the hand-back");
    }
    let (gap, name) = shortest.expect("a moved instance asked twice");
    assert!(
        gap > Duration::from_millis(2500),
        "{name} asked again {gap:?} after the last time, across the hand-back (floor 3 s)"
    );

    // The org pool never saw more than its budget over any 10 s window
    // (plus its burst of one, and a tenth for AIMD's probe), through the
    // kill, the takeover and the hand-back.
    let samples = samples.lock().expect("samples").clone();
    let mut windows = 0;
    for (i, &(t0, n0)) in samples.iter().enumerate() {
        let Some(&(t1, n1)) = samples[i..]
            .iter()
            .find(|(t, _)| t.duration_since(t0) >= Duration::from_secs(10))
        else {
            break;
        };
        let (secs, n) = (t1.duration_since(t0).as_secs_f64(), n1 - n0);
        windows += 1;
        assert!(
            n as f64 <= ORG_RPS * secs * 1.1 + 1.0,
            "{n} org requests in {secs:.1} s against a budget of {ORG_RPS} rps"
        );
    }
    assert!(windows > 50, "only {windows} windows sampled");

    // Each member's /metrics carries the polls of the instances it polls
    // now, and of no other: scraping all of them gives each series once.
    let split = split_of(&client, &members).await;
    let pools: BTreeMap<&str, &[String]> =
        BTreeMap::from([("org", org.as_slice()), ("broken", std::slice::from_ref(&dead))]);
    let mut seen_polls = BTreeSet::new();
    for m in &members {
        let expected: BTreeSet<String> = split[&m.name]
            .iter()
            .flat_map(|u| pools.get(u.as_str()).map_or_else(|| vec![u.clone()], |i| i.to_vec()))
            .collect();
        let text = client
            .get(&m.metrics)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics");
        let shown: BTreeSet<String> = text
            .lines()
            .filter(|l| l.starts_with("pollster_monitor_poll_total{"))
            .filter_map(|l| l.split("instance=\"").nth(1)?.split('"').next().map(str::to_string))
            .collect();
        // The dead-lettered task is not polled by a new owner until it is
        // due for a recheck.
        let mut polled = expected.clone();
        polled.remove(&dead);
        assert!(
            polled.is_subset(&shown) && shown.is_subset(&expected),
            "{}'s /metrics shows {shown:?}; it polls {expected:?}",
            m.name
        );
        assert!(seen_polls.is_disjoint(&shown), "a series on two members: {shown:?}");
        seen_polls.extend(shown);
    }

    // A member with another key never joins; the others reject its gossip.
    let wrong_key = write_key(dir.path(), "other.key", 9);
    let mut stranger = Member::new(dir.path(), "stranger", free_udp_port(), &gossip, &wrong_key, &shared);
    stranger.start();
    let rejected = within!(
        Duration::from_secs(20),
        members[others[0]]
            .metric(&client, "pollster_cluster_packets_rejected_total")
            .await
            .is_some_and(|v| v > 0.0)
    );
    assert!(rejected.is_some(), "the others did not count the stranger's datagrams");
    let c = members[others[0]].cluster(&client).await.expect("cluster");
    assert!(
        !c["members"].as_array().unwrap().iter().any(|m| m["name"] == "stranger"),
        "{c}"
    );
    let sc = stranger.cluster(&client).await.expect("the stranger's cluster view");
    assert_eq!(
        sc["pollingPaused"], true,
        "alone under min_members = 2 it polls nothing: {sc}"
    );
    assert!(stranger.units(&client).await.is_empty());
    stranger.kill9();

    // A member with another config owns nothing and says so.
    let mut other_shared = shared.clone();
    other_shared.push_str("[[instances]]\nname = \"extra\"\nurl = \"http://127.0.0.1:9/\"\n\n");
    let mut odd = Member::new(dir.path(), "odd", free_udp_port(), &gossip, &key, &other_shared);
    odd.start();
    let mismatch = within!(
        Duration::from_secs(30),
        odd.metric(&client, "pollster_cluster_config_mismatch").await == Some(1.0)
    );
    assert!(mismatch.is_some(), "the odd member shows no mismatch\n{}", odd.log());
    assert!(odd.units(&client).await.is_empty());
    assert!(odd.log().contains("config differs from the majority"));
    // The three keep their split.
    let mut seen = BTreeSet::new();
    for m in &members {
        seen.extend(m.units(&client).await);
    }
    assert_eq!(seen, all_units);
    drop(odd);
    drop(members);
    if let Ok(fleet) = Arc::try_unwrap(fleet) {
        fleet.stop().await;
    }
}

/// `ip` with `args`; its stderr when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Network namespaces for members that can be cut off from each other but
/// not from the targets: a hub namespace with two bridges, `service` (the
/// targets and this test, reached over a veth from the root namespace at
/// `10.213.71.1`) and `gossip`; each member in a namespace of its own, on
/// both bridges (`10.213.71.1x` and `10.213.72.1x`). Cutting a member takes
/// its gossip link down in the hub. Removed on drop. The bridges live in
/// the hub, whose empty firewall passes everything.
struct Partition {
    prefix: String,
    members: usize,
}

impl Partition {
    const SERVICE: [u8; 3] = [10, 213, 71];
    const GOSSIP: [u8; 3] = [10, 213, 72];

    fn create(members: usize) -> Result<Partition, String> {
        let prefix = format!("pz{}", std::process::id() % 100_000);
        let p = Partition { prefix, members };
        let hub = p.hub();
        ip(&["netns", "add", &hub])?;
        for (br, _) in [("bs", 0), ("bg", 1)] {
            ip(&["-n", &hub, "link", "add", br, "type", "bridge"])?;
            ip(&["-n", &hub, "link", "set", br, "up"])?;
        }
        // The root namespace's leg on the service bridge.
        let root = format!("{}r", p.prefix);
        ip(&[
            "link", "add", &root, "type", "veth", "peer", "name", "rh", "netns", &hub,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", Self::addr(Self::SERVICE, 1)),
            "dev",
            &root,
        ])?;
        ip(&["link", "set", &root, "up"])?;
        ip(&["-n", &hub, "link", "set", "rh", "master", "bs", "up"])?;
        for i in 0..members {
            let ns = p.ns(i);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for (leg, br, net, inner) in [("s", "bs", Self::SERVICE, "es"), ("g", "bg", Self::GOSSIP, "eg")] {
                let outer = format!("{leg}{i}");
                ip(&[
                    "-n", &hub, "link", "add", &outer, "type", "veth", "peer", "name", inner, "netns", &ns,
                ])?;
                ip(&["-n", &hub, "link", "set", &outer, "master", br, "up"])?;
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", Self::addr(net, 10 + i as u8)),
                    "dev",
                    inner,
                ])?;
                ip(&["-n", &ns, "link", "set", inner, "up"])?;
            }
        }
        Ok(p)
    }

    fn addr(net: [u8; 3], host: u8) -> IpAddr {
        IpAddr::from([net[0], net[1], net[2], host])
    }

    fn hub(&self) -> String {
        format!("{}h", self.prefix)
    }

    fn ns(&self, i: usize) -> String {
        format!("{}m{i}", self.prefix)
    }

    /// Where member `i` runs, listens and joins.
    fn net(&self, i: usize, gossip_port: u16) -> Net {
        let gossip = |j: usize| SocketAddr::new(Self::addr(Self::GOSSIP, 10 + j as u8), gossip_port);
        Net {
            host: Self::addr(Self::SERVICE, 10 + i as u8),
            gossip: gossip(i),
            seeds: (0..self.members).map(gossip).collect(),
            netns: Some(self.ns(i)),
        }
    }

    /// Member `i` hears no gossip and is heard by none; it still reaches
    /// the targets.
    fn cut(&self, i: usize) {
        ip(&["-n", &self.hub(), "link", "set", &format!("g{i}"), "down"]).expect("cut");
    }

    fn heal(&self, i: usize) {
        ip(&["-n", &self.hub(), "link", "set", &format!("g{i}"), "up"]).expect("heal");
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for i in 0..self.members {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["netns", "del", &self.hub()]);
    }
}

/// The sum of a counter family's series on a member's /metrics.
async fn counter_sum(client: &reqwest::Client, m: &Member, family: &str) -> Option<f64> {
    let text = client.get(&m.metrics).send().await.ok()?.text().await.ok()?;
    let prefix = format!("{family}{{");
    Some(
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_by_a_real_partition_stops_and_the_majority_takes_its_units() {
    let partition = match Partition::create(3) {
        Ok(p) => p,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("network namespaces are needed for the partition test under CI=true: {e}")
        }
        Err(e) => {
            eprintln!(
                "SKIPPED a_member_cut_off_by_a_real_partition…: cannot make network namespaces here ({e}); run as root with iproute2 (CI=true makes this a failure)"
            );
            return;
        }
    };
    let org: Vec<String> = (0..8).map(|i| format!("org-{i}")).collect();
    let lone: Vec<String> = (0..4).map(|i| format!("pve-{i}")).collect();
    let fleet = Fleet::start_members(
        SocketAddr::new(Partition::addr(Partition::SERVICE, 1), 0),
        simulated(&org, &lone),
        BodyFormat::Json,
    )
    .await
    .expect("fleet on the service network");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = write_key(dir.path(), "cluster.key", 9);
    let mut shared = shared_config(&fleet, &org, &lone, "unused");
    // No broken pool here: drop the last instance the shared config adds.
    shared.truncate(shared.rfind("[[instances]]").expect("an instance"));
    let gossip_port = 17_946;
    let mut members: Vec<Member> = (0..3)
        .map(|i| {
            Member::placed(
                dir.path(),
                &format!("m{i}"),
                &partition.net(i, gossip_port),
                &key,
                &shared,
            )
        })
        .collect();
    for m in &mut members {
        m.start();
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let all_units: BTreeSet<String> = std::iter::once("org".to_string()).chain(lone.iter().cloned()).collect();
    let (settled, mut split) = settle(&client, &members, &all_units).await;
    assert!(
        settled.is_some(),
        "not settled across the namespaces: {split:?}\n{}",
        members[0].log()
    );

    // Cut off the member that polls the most.
    let (cut_name, cut_units) = split
        .iter()
        .max_by_key(|(_, u)| u.len())
        .map(|(n, u)| (n.clone(), u.clone()))
        .unwrap();
    let ci = members.iter().position(|m| m.name == cut_name).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != ci).collect();
    partition.cut(ci);
    let cut_at = Instant::now();
    // The lone member stops polling; the two others take its units.
    let stopped = within!(TAKEOVER, {
        members[ci]
            .cluster(&client)
            .await
            .is_some_and(|c| c["pollingPaused"] == true)
            && members[ci].units(&client).await.is_empty()
    });
    assert!(
        stopped.is_some(),
        "{cut_name}, cut off, did not stop\n{}",
        members[ci].log()
    );
    let taken = within!(TAKEOVER, {
        let mut held = BTreeSet::new();
        for &i in &others {
            held.extend(members[i].units(&client).await);
        }
        held == all_units
    });
    assert!(taken.is_some(), "the majority did not take {cut_units:?} within 30 s");
    eprintln!(
        "partition: {cut_name} stopped after {:?}, its units taken after {:?}",
        stopped.unwrap(),
        cut_at.elapsed()
    );
    assert!(
        members[ci]
            .log()
            .contains("fewer live members than cluster.min_members")
    );
    // It polls nothing from here on, and the org sees at most its budget.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let polls_before = counter_sum(&client, &members[ci], "pollster_monitor_poll_total")
        .await
        .expect("its metrics");
    let org_hits = |f: &Fleet| org.iter().map(|n| f.hits(n)).sum::<u64>();
    let (t0, h0) = (Instant::now(), org_hits(&fleet));
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (secs, n) = (t0.elapsed().as_secs_f64(), org_hits(&fleet) - h0);
    assert!(
        n as f64 <= ORG_RPS * secs * 1.1 + 1.0,
        "{n} org requests in {secs:.1} s after the cut against a budget of {ORG_RPS} rps"
    );
    assert!(n > 0, "the org is still polled, by the majority");
    let polls_after = counter_sum(&client, &members[ci], "pollster_monitor_poll_total")
        .await
        .expect("its metrics");
    assert_eq!(polls_before, polls_after, "{cut_name} polled while cut off");

    // Heal: the three settle again, each unit polled once, every instance
    // polled again.
    partition.heal(ci);
    let healed;
    (healed, split) = settle(&client, &members, &all_units).await;
    assert!(
        healed.is_some(),
        "not settled after the heal: {split:?}\n{}",
        members[ci].log()
    );
    eprintln!("partition healed: settled after {:?}", healed.unwrap());
    let before: Vec<u64> = org.iter().chain(&lone).map(|n| fleet.hits(n)).collect();
    tokio::time::sleep(Duration::from_secs(8)).await;
    for (name, was) in org.iter().chain(&lone).zip(before) {
        assert!(fleet.hits(name) > was, "{name} was not polled after the heal");
    }
    drop(members);
    fleet.stop().await;
    drop(partition);
}
