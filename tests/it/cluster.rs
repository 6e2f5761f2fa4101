//! Cluster members as real processes on loopback (`[cluster]`, gossip over
//! sealed UDP): three `pollster serve` share one fleet, each unit polled by
//! one of them; a member killed with SIGKILL has its units and its
//! dead-letter entries taken over within 30 s, the budget pool never sees
//! more than its budget; the member comes back and takes its units again.
//! A member with another key never joins (the others count its datagrams
//! as rejected), and one with another config owns nothing.

use pollster::fleet::{Behaviour, Fleet};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
    child: Option<Child>,
}

impl Member {
    /// Writes the member's config: `[server]` and `[cluster]` of its own,
    /// then `shared`. Makes a token in its data directory.
    fn new(dir: &Path, name: &str, gossip: u16, seeds: &[u16], key: &Path, shared: &str) -> Member {
        let (api, metrics) = (free_port(), free_port());
        let data = dir.join(name);
        let seeds: Vec<String> = seeds.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n\n\
             [cluster]\nname = \"it\"\nmember = \"{name}\"\nlisten = \"127.0.0.1:{gossip}\"\nseeds = [{}]\nkey_file = \"{}\"\nmin_members = 2\n\n{shared}",
            data.display(),
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
            api: format!("http://127.0.0.1:{api}"),
            metrics: format!("http://127.0.0.1:{metrics}/metrics"),
            token: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            child: None,
        }
    }

    fn start(&mut self) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.config.with_extension("log"))
            .expect("log file");
        let child = Command::new(BIN)
            .args(["serve", "--config", &self.config.to_string_lossy()])
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

/// Each unit of `split` once, and all of `units`.
fn split_once(split: &BTreeMap<String, BTreeSet<String>>, units: &BTreeSet<String>) -> bool {
    let mut seen = BTreeSet::new();
    split.values().flatten().all(|u| seen.insert(u.clone())) && seen == *units
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

fn shared_config(fleet: &Fleet, org: &[String], lone: &[String], dead: &str) -> String {
    let mut cfg = format!(
        "[adaptive]\nenabled = false\n\n[failure]\nbackoff_initial = \"60s\"\nbackoff_jitter = 0.0\nbreaker_threshold = 1\ndead_letter_after = 1\n\n\
         [[budgets]]\nname = \"org\"\nrequests_per_second = {ORG_RPS}\n\n\
         [[budgets]]\nname = \"broken\"\nrequests_per_second = 5.0\n\n\
         [[types]]\nname = \"every3s\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"3s\"\n\n"
    );
    for name in org {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"every3s\"\nurl = \"{}\"\ntimeout = \"1s\"\nbudget = \"org\"\n\n",
            fleet.url(name)
        ));
    }
    for name in lone {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"every3s\"\nurl = \"{}\"\ntimeout = \"1s\"\n\n",
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
    let mut instances: Vec<(String, Behaviour)> = org
        .iter()
        .chain(&lone)
        .map(|n| (n.clone(), Behaviour::Healthy))
        .collect();
    instances.push((dead.clone(), Behaviour::Unauthorized));
    let fleet = Fleet::start("127.0.0.1:0".parse().expect("addr"), instances)
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
    let mut split = BTreeMap::new();
    let settled = within!(Duration::from_secs(40), {
        split = split_of(&client, &members).await;
        split_once(&split, &all_units) && settled_views(&client, &members, &split).await
    });
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

    // The org pool's requests over time, to check every 10 s window.
    let org_hits = |f: &Fleet| org.iter().map(|n| f.hits(n)).sum::<u64>();
    let mut samples: Vec<(Instant, u64)> = vec![(Instant::now(), org_hits(&fleet))];

    // SIGKILL the member with the dead-letter entry.
    members[vi].kill9();
    let killed = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != vi).collect();
    let took = within!(TAKEOVER, {
        let held: BTreeSet<String> = split_of(&client, &members).await.into_values().flatten().collect();
        victim_units.is_subset(&held)
    });
    samples.push((Instant::now(), org_hits(&fleet)));
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
    samples.push((Instant::now(), org_hits(&fleet)));
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

    // It comes back: its units go back to it within 30 s.
    members[vi].start();
    let back = within!(TAKEOVER, {
        let split = split_of(&client, &members).await;
        split.get(&victim).is_some_and(|u| !u.is_empty()) && split_once(&split, &all_units)
    });
    samples.push((Instant::now(), org_hits(&fleet)));
    assert!(back.is_some(), "{victim} did not get units back in 30 s");

    // The org pool never saw more than its budget over any 10 s window
    // (plus its burst of one, and a tenth for AIMD's probe).
    for w in samples.windows(2) {
        let (secs, n) = (w[1].0.duration_since(w[0].0).as_secs_f64(), w[1].1 - w[0].1);
        if secs >= 10.0 {
            assert!(
                n as f64 <= ORG_RPS * secs * 1.1 + 1.0,
                "{n} org requests in {secs:.1} s against a budget of {ORG_RPS} rps"
            );
        }
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
    fleet.stop().await;
}
