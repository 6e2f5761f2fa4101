//! The browser side over plain HTTP: every page needs a login, setup closes
//! once an admin exists, CSRF and origin checks, login throttling, session
//! cookies and their survival across a restart, static assets.

use crate::common;

use common::*;
use pollster::fleet::Behaviour;
use pollster::web::pages::PROTECTED;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PASSWORD: &str = "a-good-password";

/// A browser-like client: keeps the session cookie, never follows redirects.
struct Visitor {
    http: reqwest::Client,
    base: String,
    cookie: Option<String>,
    /// The last `Set-Cookie` of the session cookie, attributes included.
    set_cookie: String,
    setup_code: std::path::PathBuf,
}

impl Visitor {
    fn new(app: &TestApp) -> Visitor {
        Visitor {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: app.url(""),
            cookie: None,
            set_cookie: String::new(),
            setup_code: app.data_dir.path().join("setup-code"),
        }
    }

    fn keep(&mut self, r: &reqwest::Response) {
        for v in r.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap_or_default();
            if let Some(pair) = v.split(';').next()
                && pair.starts_with("pollster_session=")
            {
                self.cookie = Some(pair.to_string());
                self.set_cookie = v.to_string();
            }
        }
    }

    async fn get(&mut self, path: &str) -> (u16, String, String) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        let r = req.send().await.expect("get");
        self.keep(&r);
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        (status, location, r.text().await.unwrap_or_default())
    }

    async fn csrf(&mut self, path: &str) -> String {
        let (_, _, body) = self.get(path).await;
        body.split("name=\"_csrf\" value=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_default()
            .to_string()
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> (u16, String, String) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.expect("post");
        self.keep(&r);
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        (status, location, r.text().await.unwrap_or_default())
    }

    async fn setup(&mut self) {
        let code = std::fs::read_to_string(&self.setup_code).expect("the setup code file exists before setup");
        let (s, loc, body) = self
            .post(
                "/setup",
                &[
                    ("setup_code", code.trim()),
                    ("password", PASSWORD),
                    ("confirm", PASSWORD),
                ],
                &[],
            )
            .await;
        assert_eq!((s, loc.as_str()), (303, "/"), "{body}");
        assert!(!self.setup_code.exists(), "the setup code file is deleted after setup");
    }

    async fn login(&mut self, password: &str) -> (u16, String, String) {
        self.post("/login", &[("username", "admin"), ("password", password)], &[])
            .await
    }
}

fn concrete(path: &str) -> String {
    path.replace("{instance}", "x")
        .replace("{group}", "probe")
        .replace("{name}", "x")
        .replace("{id}", "abcd1234")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_needs_a_login() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    assert!(PROTECTED.len() >= 15, "route table: {PROTECTED:?}");
    let mut v = Visitor::new(&app);
    // Before an admin exists, pages lead to /setup …
    for (method, path) in PROTECTED {
        let p = concrete(path);
        let (s, loc, _) = if *method == "get" {
            v.get(&p).await
        } else {
            v.post(&p, &[], &[]).await
        };
        assert_eq!((s, loc.as_str()), (303, "/setup"), "{method} {path}");
    }
    let (s, loc, _) = v.get("/login").await;
    assert_eq!((s, loc.as_str()), (303, "/setup"));
    // … and after, to /login.
    v.setup().await;
    let mut anon = Visitor::new(&app);
    for (method, path) in PROTECTED {
        let p = concrete(path);
        let (s, loc, _) = if *method == "get" {
            anon.get(&p).await
        } else {
            anon.post(&p, &[], &[]).await
        };
        assert_eq!((s, loc.as_str()), (303, "/login"), "{method} {path}");
    }
    let (s, loc, _) = anon.get("/no/such/page").await;
    assert_eq!((s, loc.as_str()), (303, "/login"), "unknown pages too");
    // Open to anyone: health, readiness, login, assets.
    for p in ["/healthz", "/readyz", "/login", "/static/style.css", "/static/app.js"] {
        assert_eq!(anon.get(p).await.0, 200, "{p}");
    }
    // /setup is closed: it leads to /login, and a POST cannot reset the password.
    assert_eq!(anon.get("/setup").await.1, "/login");
    let (_, loc, _) = anon
        .post(
            "/setup",
            &[
                ("setup_code", "whatever"),
                ("password", "hijacked-pass"),
                ("confirm", "hijacked-pass"),
            ],
            &[],
        )
        .await;
    assert_eq!(loc, "/login");
    assert_eq!(anon.login("hijacked-pass").await.0, 401);
    assert_eq!(anon.login(PASSWORD).await.1, "/");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_need_the_csrf_token_and_the_same_origin() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let csrf = v.csrf("/settings/system/monitoring").await;
    assert_eq!(csrf.len(), 64);
    let form = [("adaptive.base_interval", "300ms")];
    let (s, _, _) = v.post("/settings/system/monitoring", &form, &[]).await;
    assert_eq!(s, 403, "no token");
    let (s, _, _) = v
        .post(
            "/settings/system/monitoring",
            &[("_csrf", "0".repeat(64).as_str())],
            &[],
        )
        .await;
    assert_eq!(s, 403, "wrong token");
    let host = app.addr.to_string();
    let (s, _, _) = v
        .post(
            "/logout",
            &[("_csrf", csrf.as_str())],
            &[("origin", "http://evil.example"), ("host", host.as_str())],
        )
        .await;
    assert_eq!(s, 403, "cross-origin");
    let (s, _, _) = v
        .post(
            "/logout",
            &[("_csrf", csrf.as_str())],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(s, 403, "cross-site");

    // The API with a session cookie: changes need the X-CSRF-Token header.
    let cookie = v.cookie.clone().unwrap_or_default();
    let put = |token: Option<&str>| {
        let mut r = v
            .http
            .put(app.url("/api/settings/monitoring"))
            .header("cookie", &cookie)
            .json(&serde_json::json!({"adaptive": {"enabled": false}}));
        if let Some(t) = token {
            r = r.header("x-csrf-token", t);
        }
        r
    };
    assert_eq!(put(None).send().await.expect("put").status().as_u16(), 403);
    assert_eq!(put(Some(&csrf)).send().await.expect("put").status().as_u16(), 200);
    let r = v
        .http
        .get(app.url("/api/monitoring/scheduler/health"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200, "reads need only the session");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_login_failures_lock_the_address_out() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let mut other = Visitor::new(&app);
    for i in 0..4 {
        let (s, _, body) = other.login("wrong-password").await;
        assert_eq!(s, 401, "attempt {i}");
        assert!(body.contains("Wrong user or password"));
    }
    let (s, _, body) = other.login("wrong-password").await;
    assert_eq!(s, 429);
    assert!(body.contains("Too many failed logins"), "{body}");
    let (s, _, _) = other.login(PASSWORD).await;
    assert_eq!(s, 429, "even the right password waits out the lockout");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_cycled_at_login_and_survive_a_restart() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let csrf = v.csrf("/").await;
    let (s, _, _) = v.post("/logout", &[("_csrf", csrf.as_str())], &[]).await;
    assert_eq!(s, 303);
    let before = v.cookie.clone();
    let (s, loc, _) = v.login(PASSWORD).await;
    assert_eq!((s, loc.as_str()), (303, "/"));
    assert_ne!(v.cookie, before, "a new session id at login");
    let set = v.set_cookie.clone();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP without a trusted proxy");

    let app = app.restart().await;
    v.base = app.url("");
    let (s, _, body) = v.get("/").await;
    assert_eq!(s, 200, "the login survived the restart");
    assert!(body.contains("Scheduler health"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_cookies_behind_a_trusted_https_proxy_and_the_admin_password_from_env() {
    let env = BTreeMap::from([
        ("POLLSTER_TRUST_PROXY".to_string(), "true".to_string()),
        (
            "POLLSTER_ADMIN_PASSWORD".to_string(),
            "from-the-environment".to_string(),
        ),
    ]);
    let app = TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &env, |_| {}).await;
    let mut v = Visitor::new(&app);
    let (s, _, _) = v
        .post(
            "/login",
            &[("username", "admin"), ("password", "from-the-environment")],
            &[("x-forwarded-proto", "https")],
        )
        .await;
    assert_eq!(s, 303);
    assert!(v.set_cookie.ends_with("; Secure"), "{}", v.set_cookie);
    assert!(
        !app.data_dir.path().join("setup-code").exists(),
        "no setup code when the variable creates the admin"
    );
    let mut v = Visitor::new(&app);
    assert_eq!(v.get("/setup").await.1, "/login", "the variable created the admin");
    assert_eq!(v.login("from-the-environment").await.1, "/");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_assets_have_etags() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let http = reqwest::Client::new();
    let r = http.get(app.url("/static/style.css")).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/css"))
    );
    assert!(r.headers().get("cache-control").is_some());
    let etag = r
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .expect("etag")
        .to_string();
    let r = http
        .get(app.url("/static/style.css"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 304);
    let r = http.get(app.url("/static/nope.css")).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 404);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_pages_validate_inline_and_keep_provisioned_read_only() {
    let app = TestApp::spawn(vec![("from-file", Behaviour::Healthy), ("spare", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let csrf = v.csrf("/instances/new").await;
    let (s, _, body) = v
        .post(
            "/instances",
            &[
                ("_csrf", &csrf),
                ("name", "bad name"),
                ("type", "fast"),
                ("url", "http://x/"),
                ("timeout", "1s"),
                ("max_response_bytes", "1000"),
            ],
            &[],
        )
        .await;
    assert_eq!(s, 422);
    assert!(
        body.contains("field-error") && body.contains("must be 1-64 characters"),
        "inline message"
    );
    let (s, _, body) = v
        .post(
            "/instances",
            &[
                ("_csrf", &csrf),
                ("name", "from-file"),
                ("type", "fast"),
                ("url", "http://x/"),
                ("timeout", "1s"),
                ("max_response_bytes", "1000"),
            ],
            &[],
        )
        .await;
    assert_eq!(s, 409, "duplicate");
    assert!(body.contains("already exists"));
    let (_, _, body) = v.get("/instances/from-file/edit").await;
    assert!(body.contains("defined in the config file"), "provisioned read-only");
    assert!(body.contains("<fieldset disabled"));
    let (_, _, body) = v.get("/instances?q=from&state=&type=fast").await;
    assert!(
        body.contains("1 of 2 instances") && body.contains(">from-file</a>"),
        "search"
    );
    let (_, _, body) = v.get("/instances?state=dead_letter").await;
    assert!(!body.contains(">from-file</a>"), "filtered out");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instances_list_pages_and_searches_a_fleet_larger_than_a_page() {
    let names: Vec<String> = (0..120).map(|i| format!("n-{i:03}")).collect();
    let behaviour = |n: &str| {
        if n == "n-003" {
            Behaviour::Unauthorized
        } else {
            Behaviour::Healthy
        }
    };
    let app = TestApp::spawn(names.iter().map(|n| (n.as_str(), behaviour(n))).collect()).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    // The instances a page lists, in its order.
    let shown = |body: &str| -> Vec<String> {
        let mut at: Vec<(usize, String)> = names
            .iter()
            .filter_map(|n| body.find(&format!(">{n}</a>")).map(|i| (i, n.clone())))
            .collect();
        at.sort();
        at.into_iter().map(|(_, n)| n).collect()
    };
    let (_, _, first) = v.get("/instances").await;
    assert!(first.contains("120 of 120 instances · page 1 of 3"), "{first}");
    assert_eq!(shown(&first), names[..50].to_vec(), "the first 50 by name");
    let (_, _, last) = v.get("/instances?page=3").await;
    assert_eq!(shown(&last), names[100..].to_vec());
    let (_, _, beyond) = v.get("/instances?page=9").await;
    assert!(beyond.contains("page 3 of 3"), "a page beyond the last is the last");
    // Search ignores case, and its pages keep the query.
    let (_, _, found) = v.get("/instances?q=N-11").await;
    assert!(found.contains("10 of 120 instances"), "{found}");
    assert_eq!(shown(&found), names[110..120].to_vec());
    let (_, _, found) = v.get("/instances?q=n-0").await;
    assert!(found.contains("100 of 120 instances · page 1 of 2"));
    let next = found
        .split("rel=\"next\"")
        .next()
        .and_then(|s| s.rsplit("href=").next())
        .unwrap_or_default();
    assert!(
        next.contains("q=n-0") && next.contains("page=2"),
        "next page link: {next}"
    );
    // The page's states (read for its rows only) agree with the states the
    // filter and the sort read for every instance.
    let mut polled = false;
    for _ in 0..100 {
        let (_, _, first) = v.get("/instances").await;
        if first.matches("badge ok\"").count() == 49 && !first.contains("badge pending") {
            polled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(polled, "every instance but n-003 ok on the first page");
    let (_, _, ok) = v.get("/instances?state=ok").await;
    assert!(ok.contains("119 of 120 instances"), "{ok}");
    let (_, _, worst) = v.get("/instances?sort=state").await;
    assert_eq!(shown(&worst).first().map(String::as_str), Some("n-003"), "worst first");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_page_hides_secrets_validates_and_turns_the_sink_on_and_off() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let (s, _, page) = v.get("/settings/system/sink").await;
    assert_eq!(s, 200);
    assert!(
        page.contains("Event sink") && page.contains("badge disabled"),
        "off by default"
    );
    let csrf = v.csrf("/settings/system/sink").await;
    let form = |url: &str, headers: &str, batch: &str| {
        vec![
            ("_csrf".to_string(), csrf.clone()),
            ("url".to_string(), url.to_string()),
            ("batch_size".to_string(), batch.to_string()),
            ("buffering".to_string(), "2s".to_string()),
            ("retry_limit".to_string(), "10m".to_string()),
            ("queue_limit".to_string(), "1000".to_string()),
            ("headers".to_string(), headers.to_string()),
        ]
    };
    // Invalid: shown inline, nothing saved.
    let bad = form("ftp://nowhere", "", "100");
    let bad: Vec<(&str, &str)> = bad.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (s, _, page) = v.post("/settings/system/sink", &bad, &[]).await;
    assert_eq!(s, 422);
    assert!(page.contains("Nothing was saved") && page.contains("url"), "{page}");
    // Valid: saved, the header value is never shown again.
    let good = form("http://127.0.0.1:9/ingest", "X-Api-Key: topsecret-value", "100");
    let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (s, loc, _) = v.post("/settings/system/sink", &good, &[]).await;
    assert_eq!((s, loc.as_str()), (303, "/settings/system/sink"));
    let (_, _, page) = v.get("/settings/system/sink").await;
    assert!(page.contains("X-Api-Key: (hidden)"), "{page}");
    assert!(!page.contains("topsecret-value"));
    let api = app.get_json("/api/settings/sink").await;
    assert_eq!(api["sink"]["url"], "http://127.0.0.1:9/ingest");
    // Turned off.
    let off = [("_csrf", csrf.as_str()), ("turn_off", "1")];
    let (s, _, _) = v.post("/settings/system/sink", &off, &[]).await;
    assert_eq!(s, 303);
    assert_eq!(
        app.get_json("/api/settings/sink").await["sink"],
        serde_json::Value::Null
    );
    app.stop().await;
}

/// GET `path` until its body contains `needle`; panic with the last body
/// after `within`.
async fn wait_page(v: &mut Visitor, path: &str, needle: &str, within: Duration) -> String {
    let start = Instant::now();
    loop {
        let (s, _, body) = v.get(path).await;
        if s == 200 && body.contains(needle) {
            return body;
        }
        assert!(
            start.elapsed() < within,
            "{path} never showed {needle:?}; last ({s}):\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rows of the first table with `class` in `html`, as the text of their cells.
fn table_rows(html: &str, class: &str) -> Vec<Vec<String>> {
    let Some(start) = html.find(&format!("<table class=\"{class}\"")) else {
        return vec![];
    };
    let table = &html[start..];
    let table = &table[..table.find("</table>").unwrap_or(table.len())];
    let body = table.split("<tbody>").nth(1).unwrap_or("");
    body.split("<tr")
        .skip(1)
        .map(|row| {
            let mut cells = Vec::new();
            let mut rest = row;
            while let Some(at) = ["<td", "<th"].iter().filter_map(|t| rest.find(t)).min() {
                let after = &rest[at + 3..];
                let open_end = after.find('>').map_or(after.len(), |e| e + 1);
                let inner = &after[open_end..];
                let close = ["</td>", "</th>"]
                    .iter()
                    .filter_map(|t| inner.find(t))
                    .min()
                    .unwrap_or(inner.len());
                // Drop the tags inside the cell, keep their text.
                let mut text = String::new();
                let mut in_tag = false;
                for ch in inner[..close].chars() {
                    match ch {
                        '<' => in_tag = true,
                        '>' => in_tag = false,
                        c if !in_tag => text.push(c),
                        _ => {}
                    }
                }
                cells.push(text.replace("&#34;", "\"").replace("&quot;", "\"").trim().to_string());
                rest = &inner[close..];
            }
            cells
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_page_shows_tasks_values_the_body_and_rate_limited_tasks() {
    let app = TestApp::spawn_with(
        vec![
            ("a", Behaviour::Healthy),
            (
                "limited",
                Behaviour::RateLimited {
                    per_second: 0,
                    retry_after_secs: 5,
                },
            ),
        ],
        &BTreeMap::new(),
        |c| {
            c.types.push(valued_type());
            c.instances[0].type_name = "valued".into();
        },
    )
    .await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let within = Duration::from_secs(15);

    // A task that only ever got 429s says so, not "queued" as if all were well.
    let page = wait_page(&mut v, "/instances/limited", "badge rate_limited", within).await;
    let tasks = table_rows(&page, "tasks");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(tasks[0][0].starts_with("probe"), "{tasks:?}");
    assert_eq!(tasks[0][1], "rate_limited", "{tasks:?}");
    assert_eq!(tasks[0][5], "never", "no success: {tasks:?}");
    assert!(tasks[0][6].contains("HTTP 429"), "the last error: {tasks:?}");
    assert_eq!(
        (tasks[0][7].as_str(), tasks[0][8].as_str()),
        ("closed", "0"),
        "a 429 is no failure"
    );
    assert!(page.contains("no value rules"), "the fast type has none");

    // Values with their exact metric, labels and number, and the kept body.
    let page = wait_page(&mut v, "/instances/a", "<td class=\"metric\">fleet_up</td>", within).await;
    let tasks = table_rows(&page, "tasks");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(
        ["queued", "in flight"].contains(&tasks[0][1].as_str()),
        "a healthy task: {tasks:?}"
    );
    assert_eq!(tasks[0][3], "0.1s", "planned interval: the floor");
    assert_ne!(tasks[0][5], "never", "polled: {tasks:?}");
    assert_eq!(tasks[0][6], "", "no error: {tasks:?}");
    let values = table_rows(&page, "values");
    assert_eq!(
        values.len(),
        1,
        "only fleet_up (the counter's field is missing): {values:?}"
    );
    assert_eq!(values[0][..3], ["fleet_up", "{name=\"a\"}", "1"], "{values:?}");
    assert!(page.contains("badge ok\">fresh"), "fresh values");
    let link = "/api/instances/a/data/probe/body";
    assert!(page.contains(&format!("href=\"{link}\"")), "the body link");
    let (s, _, body) = v.get(link).await;
    assert_eq!(s, 200, "the session reads the body");
    assert!(body.contains("\"status\":\"ok\""), "{body}");

    // Without script, Test posts and the page comes back with the results.
    let csrf = v.csrf("/instances/a").await;
    let (s, _, page) = v
        .post(
            "/instances/a/test",
            &[("_csrf", csrf.as_str()), ("show", "instance")],
            &[],
        )
        .await;
    assert_eq!(s, 200);
    let result = page.split("class=\"test-result\"").nth(1).expect("a test result");
    assert!(result.contains("OK, HTTP 200"), "{result}");
    assert!(
        result.contains("fleet_up") && result.contains("fleet_requests_total: missing × 1"),
        "{result}"
    );

    // The list links here and says rate_limited too; an unknown instance
    // is a 404 page.
    let (_, _, list) = v.get("/instances").await;
    assert!(list.contains("<a href=\"/instances/a\">a</a>"), "linked from the list");
    let (_, _, list) = v.get("/instances?state=rate_limited").await;
    assert!(
        list.contains("1 of 2 instances") && list.contains("<span class=\"badge rate_limited\">rate_limited</span>"),
        "{list}"
    );
    let (s, _, page) = v.get("/instances/nope").await;
    assert_eq!(s, 404);
    assert!(page.contains("No such instance") && page.contains("nope"), "{page}");
    app.stop().await;
}

/// The hour labels along a chart's time axis, in minutes of the day.
fn axis_minutes(html: &str) -> Vec<u32> {
    let svg = html.split("<svg class=\"chart\"").nth(1).expect("a chart");
    let svg = svg.split("</svg>").next().unwrap_or("");
    svg.split(" UTC</text>")
        .filter_map(|s| s.rsplit('>').next())
        .filter_map(|t| {
            let (h, m) = t.split_once(':')?;
            Some(h.parse::<u32>().ok()? * 60 + m.parse::<u32>().ok()?)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_charts_cover_the_last_hour_or_the_last_day() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let step = |mins: &[u32]| -> Vec<u32> { mins.windows(2).map(|w| (w[1] + 1440 - w[0]) % 1440).collect() };

    let (s, _, page) = v.get("/").await;
    assert_eq!(s, 200);
    assert!(
        page.contains("<h2 id=\"charts-title\">Last hour</h2>"),
        "the hour by default"
    );
    assert!(
        page.contains("<a href=\"/?range=1h\" aria-current=\"true\">"),
        "marked as chosen"
    );
    let mins = axis_minutes(&page);
    assert_eq!(mins.len(), 5, "{mins:?}");
    assert_eq!(step(&mins), [15; 4], "an hour in quarters: {mins:?}");

    let (s, _, page) = v.get("/?range=24h").await;
    assert_eq!(s, 200);
    assert!(page.contains("<h2 id=\"charts-title\">Last 24 hours</h2>"));
    assert!(page.contains("<a href=\"/?range=24h\" aria-current=\"true\">"));
    assert!(
        page.contains("data-refresh=\"/?fragment=panels&amp;range=24h\""),
        "the refresh keeps the range"
    );
    let mins = axis_minutes(&page);
    assert_eq!(step(&mins), [360; 4], "a day in quarters: {mins:?}");
    assert_eq!(mins[0], mins[4], "from and to are a day apart");
    let (s, _, frag) = v.get("/?fragment=panels&range=24h").await;
    assert_eq!(s, 200);
    assert!(frag.contains("Last 24 hours"));

    let (s, _, body) = v.get("/?range=7d").await;
    assert_eq!(s, 400);
    assert!(body.contains("range=1h") && body.contains("range=24h"), "{body}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maintenance_page_makes_a_window_names_a_bad_field_and_ends_it() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mut v = Visitor::new(&app);
    v.setup().await;
    let (_, _, body) = v.get("/").await;
    assert!(body.contains("<a href=\"/maintenance\""), "in the navigation");
    let csrf = v.csrf("/maintenance").await;
    let (s, _, body) = v
        .post(
            "/maintenance",
            &[
                ("_csrf", &csrf),
                ("instances", "x"),
                ("kind", "weekly"),
                ("days", "mon"),
                ("days", "thu"),
                ("at", "02:30"),
                ("timezone", "Atlantis/Lost"),
                ("duration", "2h"),
            ],
            &[],
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert!(body.contains("data-field=\"timezone\""), "the field is named");
    assert!(
        body.contains("value=\"Atlantis/Lost\""),
        "the form keeps what was typed"
    );
    let (s, loc, body) = v
        .post(
            "/maintenance",
            &[
                ("_csrf", &csrf),
                ("instances", "x"),
                ("kind", "once"),
                ("duration", "1h"),
                ("reason", "new disks"),
            ],
            &[],
        )
        .await;
    assert_eq!((s, loc.as_str()), (303, "/maintenance"), "{body}");
    let (_, _, body) = v.get("/maintenance").await;
    assert!(body.contains("new disks") && body.contains(">open</span>"), "{body}");
    let list = app.get_json("/api/maintenance").await;
    let id = list["windows"][0]["id"].as_str().expect("a window").to_string();
    let (s, loc, _) = v
        .post(&format!("/maintenance/{id}/end"), &[("_csrf", &csrf)], &[])
        .await;
    assert_eq!((s, loc.as_str()), (303, "/maintenance"));
    let (_, _, body) = v.get("/maintenance").await;
    assert!(body.contains("No maintenance windows."), "{body}");
    assert!(body.contains(&format!("Maintenance window {id} ended.")), "{body}");
    app.stop().await;
}
