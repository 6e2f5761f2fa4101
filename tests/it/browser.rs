//! The operator's path through the UI in a real browser (Debian's headless
//! Chromium via chromedriver): first-run setup, logout and login, switching
//! adaptive polling off, adding an instance, retrying a dead-letter entry,
//! reading the plan of a budget pool and changing its budget.
//! On failure, a screenshot of every page is saved under the target dir.

use crate::common;

use common::webdriver::{self, Browser};
use common::*;
use pollster::fleet::Behaviour;
use pollster::model::{BudgetConfig, GroupDef, TypeDef};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const PASSWORD: &str = "correct-horse-battery";

async fn flow(b: &Browser, app: &TestApp) {
    let base = app.url("");

    // First run: any page leads to /setup.
    b.goto(&format!("{base}/")).await;
    assert!(b.url().await.ends_with("/setup"), "{}", b.url().await);
    b.screenshot("setup").await;
    let code = std::fs::read_to_string(app.data_dir.path().join("setup-code")).expect("setup code file");
    b.fill("#setup_code", code.trim()).await;
    b.fill("#password", PASSWORD).await;
    b.fill("#confirm", PASSWORD).await;
    b.click("form[action='/setup'] button[type=submit]").await;
    b.wait_source("Scheduler health").await;
    assert!(b.url().await.ends_with('/'), "after setup: {}", b.url().await);

    // Setup is closed now.
    b.goto(&format!("{base}/setup")).await;
    assert!(
        !b.url().await.ends_with("/setup"),
        "setup is closed once an admin exists"
    );

    // Log out, then log in.
    b.goto(&format!("{base}/")).await;
    b.click("form.logout button").await;
    b.wait_source("Log in</h1>").await;
    assert!(b.url().await.ends_with("/login"));
    b.goto(&format!("{base}/instances")).await;
    assert!(b.url().await.ends_with("/login"), "pages need a login");
    b.fill("#password", "wrong-password").await;
    b.click("form[action='/login'] button[type=submit]").await;
    b.wait_source("Wrong user or password").await;
    b.screenshot("login").await;
    b.fill("#password", PASSWORD).await;
    b.click("form[action='/login'] button[type=submit]").await;
    b.wait_source("Scheduler health").await;

    // Settings → System → Monitoring: switch adaptive polling off.
    b.goto(&format!("{base}/settings/system/monitoring")).await;
    let src = b.source().await;
    assert!(
        src.contains(r#"<a href="/settings">Settings</a>"#)
            && src.contains(">System<")
            && src.contains(">Monitoring</li>")
    );
    assert!(b.is_selected("#adaptive-enabled").await);
    b.click("#adaptive-enabled").await;
    b.click("form.settings button[type=submit]").await;
    b.wait_source("Saved.").await;
    assert!(!b.is_selected("#adaptive-enabled").await);
    assert_eq!(
        app.health().await["enabled"],
        false,
        "health API follows the UI at once"
    );
    b.screenshot("monitoring").await;

    // An invalid value is refused inline and nothing is saved.
    b.fill("#adaptive-min_interval", "10m").await;
    b.click("form.settings button[type=submit]").await;
    let src = b.wait_source("Nothing was saved").await;
    assert!(src.contains("must not exceed base_interval"), "no inline error");
    assert_eq!(
        app.get_json("/api/settings/monitoring").await["adaptive"]["min_interval"],
        "100ms"
    );

    // Add an instance; it shows on the instances page and the dashboard.
    b.goto(&format!("{base}/instances/new")).await;
    b.fill("#name", "added-by-browser").await;
    b.click("#type option[value='fast']").await;
    b.fill("#url", &app.fleet.url("spare")).await;
    b.fill("#timeout", "1s").await;
    b.click("form.instance-form button[type=submit]").await;
    b.wait_source("Instance added-by-browser added").await;
    b.screenshot("instances").await;
    b.wait_for_text(&format!("{base}/"), "added-by-browser", WAIT).await;

    // A dead-letter entry whose target is fixed: Retry from the dashboard.
    app.wait_health(WAIT, "a dead-letter entry", |h| h["deadLetter"]["count"] == 1)
        .await;
    app.fleet.set("locked", Behaviour::Healthy);
    b.goto(&format!("{base}/")).await;
    b.screenshot("dashboard-before-retry").await;
    b.click("button[aria-label='Retry locked/probe']").await;
    b.wait_source("probing now").await;
    app.wait_health(WAIT, "the entry to leave the queue", |h| h["deadLetter"]["count"] == 0)
        .await;

    // The plan: the budget pool's card, the stretched group highlighted.
    b.goto(&format!("{base}/status")).await;
    let src = b.wait_source("Pool org").await;
    assert!(src.contains("data-group=\"org/inventory\""), "the group is listed");
    assert!(
        src.contains("class=\"stretched\" data-group=\"org/inventory\""),
        "the stretched group is highlighted"
    );
    let shot = b.screenshot("status").await;
    if let Ok(dir) = std::env::var("POLLSTER_SCREENSHOT_DIR") {
        let _ = std::fs::copy(&shot, std::path::Path::new(&dir).join("status.png"));
    }
    // Budget pools are edited on the monitoring page; the plan follows.
    b.goto(&format!("{base}/settings/system/monitoring#budgets")).await;
    b.fill(
        "form[action='/settings/system/budgets/org'] input[name=requests_per_second]",
        "10",
    )
    .await;
    b.click("form[action='/settings/system/budgets/org'] button").await;
    b.wait_source("Budget pool org saved").await;
    b.goto(&format!("{base}/status")).await;
    let src = b.wait_source("Pool org").await;
    assert!(
        !src.contains("class=\"stretched\""),
        "with 10 requests/s nothing needs stretching"
    );

    // Security page: create a token, shown once.
    b.goto(&format!("{base}/settings/security")).await;
    b.fill("#token-name", "from-browser").await;
    b.click("form[action='/settings/security/tokens'] button").await;
    b.wait_source("pst_").await;

    b.goto(&format!("{base}/")).await;
    let shot = b.screenshot("dashboard").await;
    if let Ok(dir) = std::env::var("POLLSTER_SCREENSHOT_DIR") {
        let _ = std::fs::copy(&shot, std::path::Path::new(&dir).join("dashboard.png"));
    }

    b.click("form.logout button").await;
    b.wait_source("Log in</h1>").await;
    b.goto(&format!("{base}/")).await;
    assert!(b.url().await.ends_with("/login"), "logged out for real");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_manages_pollster_in_the_browser() {
    if !webdriver::available() {
        return;
    }
    let app = Arc::new(
        TestApp::spawn_with(
            vec![
                ("healthy", Behaviour::Healthy),
                ("changing", Behaviour::Changing),
                ("locked", Behaviour::Unauthorized),
                ("spare", Behaviour::Healthy),
            ],
            &Default::default(),
            |c| {
                c.instances.retain(|i| i.name != "spare");
                // A budget pool whose plan stretches its priority-4 group:
                // 1 + 4/2 = 3 rps at the floors, above 3 × 0.7.
                let mut inventory = GroupDef::new("inventory", "/inventory", 4, Duration::from_secs(2));
                inventory.cost = 4.0;
                c.types.push(TypeDef {
                    name: "org".into(),
                    groups: vec![GroupDef::new("status", "/status", 1, Duration::from_secs(1)), inventory],
                });
                c.budgets.push(BudgetConfig {
                    name: "org".into(),
                    requests_per_second: 3.0,
                    shared_fraction: 1.0,
                    burst: 3,
                });
                let mut org = common::instance("org-1", "org", c.instances[0].url.clone());
                org.budget = Some("org".into());
                c.instances.push(org);
                c.monitoring_file.failure.dead_letter_recheck = Duration::from_secs(3600);
            },
        )
        .await,
    );
    let browser = Arc::new(Browser::start("operator").await);
    let (b, a) = (browser.clone(), app.clone());
    let outcome = tokio::spawn(async move { flow(&b, &a).await }).await;
    if let Err(e) = outcome {
        // Keep a picture of where it failed and of every page.
        let _ = browser.screenshot("failure").await;
        for (name, path) in [
            ("p-dashboard", "/"),
            ("p-instances", "/instances"),
            ("p-monitoring", "/settings/system/monitoring"),
            ("p-security", "/settings/security"),
        ] {
            browser.goto(&app.url(path)).await;
            let _ = browser.screenshot(name).await;
        }
        panic!(
            "browser flow failed ({}); screenshots in {}",
            e,
            browser.shots.display()
        );
    }
    if let Ok(b) = Arc::try_unwrap(browser) {
        b.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_page_tests_the_instance_and_shows_the_extracted_values() {
    if !webdriver::available() {
        return;
    }
    let app = TestApp::spawn_with(vec![("a", Behaviour::Healthy)], &Default::default(), |c| {
        // The fleet's healthy body `{"instance": "a", "status": "ok"}`
        // gives `fleet_up{name="a"} 1`; `/seq` is missing from it.
        let mut g = GroupDef::new("probe", "", 1, Duration::from_millis(100));
        for rule in [
            "metric = \"fleet_up\"\nvalue = \"/status\"\nmap = { ok = 1 }\nlabels = { name = \"/instance\" }",
            "metric = \"fleet_requests_total\"\nkind = \"counter\"\nvalue = \"/seq\"",
        ] {
            g.values.push(toml::from_str(rule).expect("rule"));
        }
        c.types.push(TypeDef {
            name: "valued".into(),
            groups: vec![g],
        });
        c.instances[0].type_name = "valued".into();
    })
    .await;
    let b = Browser::start("instance").await;
    let base = app.url("");
    b.goto(&format!("{base}/")).await;
    let code = std::fs::read_to_string(app.data_dir.path().join("setup-code")).expect("setup code file");
    b.fill("#setup_code", code.trim()).await;
    b.fill("#password", PASSWORD).await;
    b.fill("#confirm", PASSWORD).await;
    b.click("form[action='/setup'] button[type=submit]").await;
    b.wait_source("Scheduler health").await;

    b.goto(&format!("{base}/instances/a")).await;
    let src = b.wait_source("Instance a</h1>").await;
    assert!(!src.contains("class=\"test-result\""), "no result before a test");
    b.click("#test-button").await;
    let src = b.wait_source("<div class=\"test-result\" data-group=\"probe\">").await;
    let result = src.split("class=\"test-result\"").nth(1).unwrap_or_default();
    assert!(result.contains("OK, HTTP 200"), "{result}");
    assert!(
        result.contains(
            "<td class=\"metric\">fleet_up</td><td class=\"labels\">{name=\"a\"}</td><td class=\"num\">1</td>"
        ),
        "{result}"
    );
    assert!(result.contains("fleet_requests_total: missing × 1"), "{result}");
    assert!(
        b.url().await.ends_with("/instances/a"),
        "the script showed the results in place: {}",
        b.url().await
    );
    b.screenshot("instance").await;
    b.close().await;
    app.stop().await;
}
