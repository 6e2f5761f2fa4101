//! The dashboard and the health API are two views of one snapshot: with more
//! open breakers and dead-letter entries than the dashboard has rows, it
//! shows the first rows of the health API's lists, in the same order.

use crate::common;

use common::*;
use pollster::fleet::Behaviour;
use std::time::Duration;

/// Failing instances: more than the 25 rows a dashboard list shows.
const FAILING: usize = 32;
const ROWS: usize = 25;
const PASSWORD: &str = "a-good-password";

/// Log in through `/setup` and fetch the dashboard's panels.
async fn dashboard_panels(app: &TestApp) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let code = std::fs::read_to_string(app.data_dir.path().join("setup-code")).expect("the setup code file");
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("setup_code", code.trim()),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ])
        .finish();
    let r = http
        .post(app.url("/setup"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("setup");
    assert_eq!(r.status().as_u16(), 303, "setup creates the admin and logs in");
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|p| p.starts_with("pollster_session="))
        .expect("a session cookie")
        .to_string();
    let r = http
        .get(app.url("/?fragment=panels"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("dashboard");
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.expect("dashboard body")
}

/// The part of the page between `start` and the end of its section.
fn section<'a>(html: &'a str, start: &str) -> &'a str {
    let from = html.find(start).unwrap_or_else(|| panic!("{start:?} in the dashboard"));
    let rest = &html[from..];
    &rest[..rest.find("</section>").unwrap_or(rest.len())]
}

/// `instance/group` of each row of a dashboard table: a row's first cell
/// is `<a href="/instances/NAME">NAME</a><span class="muted">/group</span>`.
fn task_rows(section: &str) -> Vec<String> {
    section
        .split("<tr><td>")
        .skip(1)
        .chain(section.split("<tr>\n      <td>").skip(1))
        .map(|row| {
            let (instance, rest) = row.split_once("<span class=\"muted\">/").expect("instance cell");
            let group = rest.split('<').next().unwrap_or_default();
            let name = instance
                .split_once('>')
                .and_then(|(link, rest)| link.starts_with("<a href=\"/instances/").then_some(rest))
                .and_then(|rest| rest.strip_suffix("</a>"))
                .unwrap_or_else(|| panic!("the instance links to its page: {instance}"));
            format!("{}/{}", name.trim(), group)
        })
        .collect()
}

fn api_rows(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            format!(
                "{}/{}",
                v["instance"].as_str().unwrap_or(""),
                v["group"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_health_api_show_the_same_breakers_and_dead_letter_entries() {
    // Names whose order of creation is not their sorted order.
    let names: Vec<String> = (0..FAILING).map(|i| format!("node-{:02}", (i * 7) % FAILING)).collect();
    let members = names.iter().map(|n| (n.as_str(), Behaviour::ServerError)).collect();
    let app = TestApp::spawn_with(members, &Default::default(), |c| {
        // Once in the queue, nothing changes between the two reads.
        c.monitoring_file.failure.dead_letter_recheck = Duration::from_secs(3600);
    })
    .await;
    let health = app
        .wait_health(Duration::from_secs(30), "every instance dead-lettered", |h| {
            h["deadLetter"]["count"] == FAILING && h["breakers"].as_array().is_some_and(|b| b.len() == FAILING)
        })
        .await;
    let html = dashboard_panels(&app).await;
    // Read the health API again after the page: the test is about the
    // views, not about a change between two reads.
    assert_eq!(api_rows(&app.health().await["breakers"]), api_rows(&health["breakers"]));

    let api_breakers = api_rows(&health["breakers"]);
    let mut sorted = api_breakers.clone();
    sorted.sort();
    assert_eq!(api_breakers, sorted, "breakers are listed in task-key order");
    let page_breakers = task_rows(section(&html, "<h2>Circuit breakers</h2>"));
    assert_eq!(page_breakers.len(), ROWS, "{html}");
    assert_eq!(
        page_breakers,
        api_breakers[..ROWS],
        "the dashboard shows the API's first breakers"
    );
    assert!(html.contains(&format!("Showing {ROWS} of {FAILING}.")));

    let api_dead = api_rows(&health["deadLetter"]["tasks"]);
    assert_eq!(api_dead.len(), ROWS, "deadLetter.tasks holds the 25 most recent");
    let since: Vec<&str> = health["deadLetter"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["since"].as_str().expect("since"))
        .collect();
    assert!(since.windows(2).all(|w| w[0] >= w[1]), "most recent first: {since:?}");
    let page_dead = task_rows(section(&html, "<h2>Dead-letter queue</h2>"));
    assert_eq!(page_dead, api_dead, "the dashboard shows the API's dead-letter entries");
    assert!(html.contains(&format!("Showing the {ROWS} most recent of {FAILING}")));
    app.stop().await;
}
