//! The running appliance attacked from outside, the way an intruder on the
//! same network would: parallel password guesses, credentials led to another
//! host, sessions in backups, forged `X-Forwarded-For`, a first comer at
//! `/setup`, anonymous session rows, half-sent requests, stale sessions
//! after a password change, missing security headers, passwords in URLs,
//! open file modes, a password variable that undoes a change, and tokens
//! that may do more than they need.

use crate::common;

use common::*;
use pollster::fleet::Behaviour;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PASSWORD: &str = "a-good-password";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A client whose requests leave from `ip` (any 127.0.0.0/8 address).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(ip.parse::<std::net::IpAddr>().expect("ip"))
        .build()
        .expect("client")
}

fn session_cookie(r: &reqwest::Response) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("pollster_session="))
        .and_then(|v| v.split(';').next())
        .map(str::to_string)
}

async fn post_form(
    http: &reqwest::Client,
    url: String,
    form: &[(&str, &str)],
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let mut req = http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.expect("post")
}

fn setup_code(app: &TestApp) -> String {
    std::fs::read_to_string(app.data_dir.path().join("setup-code"))
        .expect("setup code file")
        .trim()
        .to_string()
}

/// Create the admin through `/setup`; returns the session cookie.
async fn setup(app: &TestApp) -> String {
    let code = setup_code(app);
    let r = post_form(
        &client(),
        app.url("/setup"),
        &[("setup_code", &code), ("password", PASSWORD), ("confirm", PASSWORD)],
        &[],
    )
    .await;
    assert_eq!(r.status().as_u16(), 303);
    session_cookie(&r).expect("a session after setup")
}

async fn login(http: &reqwest::Client, app: &TestApp, password: &str) -> (u16, Option<String>, reqwest::Response) {
    let r = post_form(
        http,
        app.url("/login"),
        &[("username", "admin"), ("password", password)],
        &[],
    )
    .await;
    (r.status().as_u16(), session_cookie(&r), r)
}

/// The value of one series in a scrape.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

async fn login_checks(app: &TestApp, result: &str) -> f64 {
    metric(
        &app.metrics().await,
        &format!("pollster_login_attempts_total{{result=\"{result}\"}}"),
    )
}

/// The page's CSRF token, read with a session cookie.
async fn csrf(app: &TestApp, cookie: &str, path: &str) -> String {
    let body = client()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    body.split("name=\"_csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a csrf token on the page")
        .to_string()
}

/// A token named `grafana` made on the Security page (with the session
/// `cookie` and the page's CSRF token): the token and the page shown.
async fn token_on_page(app: &TestApp, cookie: &str, csrf: &str, scope: &str) -> (String, String) {
    let page = post_form(
        &client(),
        app.url("/settings/security/tokens"),
        &[("_csrf", csrf), ("name", "grafana"), ("scope", scope)],
        &[("cookie", cookie)],
    )
    .await
    .text()
    .await
    .expect("body");
    let token = page
        .split("id=\"new-token\" readonly value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the new token is shown")
        .to_string();
    (token, page)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_guesses_are_checked_one_at_a_time_and_bounded_server_wide() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    setup(&app).await;

    // 60 wrong passwords at once from one address: at most five are checked.
    let http = client();
    let guesses = (0..60).map(|i| {
        let http = http.clone();
        let url = app.url("/login");
        async move {
            let pw = format!("wrong-{i}");
            post_form(&http, url, &[("username", "admin"), ("password", &pw)], &[])
                .await
                .status()
                .as_u16()
        }
    });
    let statuses = futures_join_all(guesses).await;
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    let checked = login_checks(&app, "failure").await + login_checks(&app, "success").await;
    assert!(
        checked <= 5.0,
        "{checked} of 60 parallel guesses from one address were checked"
    );
    // More bursts until five guesses were checked; then the right password
    // is refused without being checked.
    for _ in 0..50 {
        if login_checks(&app, "failure").await >= 5.0 {
            break;
        }
        let burst = (0..10).map(|_| {
            let http = http.clone();
            let url = app.url("/login");
            async move { post_form(&http, url, &[("username", "admin"), ("password", "wrong")], &[]).await }
        });
        futures_join_all(burst).await;
    }
    assert_eq!(login_checks(&app, "failure").await, 5.0);
    let (s, cookie, r) = login(&http, &app, PASSWORD).await;
    assert_eq!(s, 429);
    assert!(r.headers().contains_key("retry-after"));
    assert!(cookie.is_none(), "no session");

    // 40 addresses at once: no more than a few checks run together; the
    // rest are told to come back.
    let tries = (0..40).map(|i| {
        let url = app.url("/login");
        async move {
            let http = client_from(&format!("127.0.0.{}", 10 + i));
            let r = post_form(&http, url, &[("username", "admin"), ("password", "nope-nope")], &[]).await;
            (r.status().as_u16(), r.headers().contains_key("retry-after"))
        }
    });
    let results = futures_join_all(tries).await;
    let busy = results.iter().filter(|(s, retry)| *s == 429 && *retry).count();
    assert!(busy > 0, "40 parallel checks all ran: {results:?}");
    assert!(login_checks(&app, "busy").await >= busy as f64);
    app.stop().await;
}

/// Run futures concurrently (the tests have no futures crate).
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// A loopback server that answers 200 `{}` and records the `Authorization`
/// header of every request.
async fn recorder() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut b).await {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let auth = text
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("authorization: ")
                            .or_else(|| l.strip_prefix("Authorization: "))
                    })
                    .map(str::to_string);
                s.lock().expect("lock").push(auth);
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    .await;
            });
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_credentials_are_never_sent_to_a_new_host() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let (s, _) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({
                "name": "secretive", "type": "fast", "url": app.fleet.url("x"), "enabled": false,
                "auth": {"kind": "bearer", "token": "top-secret-token"}
            })),
        )
        .await;
    assert_eq!(s, 201);
    let (attacker, seen) = recorder().await;

    // Only the URL, to a host of the attacker's: refused, naming the field.
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/instances/secretive",
            Some(json!({"type": "fast", "url": attacker, "enabled": false})),
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert_eq!(body["error"]["field"], "auth.token", "{body}");
    let (s, _) = app
        .send(reqwest::Method::POST, "/api/instances/secretive/test", None)
        .await;
    assert_eq!(s, 200);
    assert!(
        seen.lock().expect("lock").is_empty(),
        "nothing was sent to the new host"
    );

    // The same host, another path: the stored token is kept.
    let same_host = format!("{}other", app.fleet.url("x"));
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/instances/secretive",
            Some(json!({"type": "fast", "url": same_host, "enabled": false})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["auth"]["kind"], "bearer");

    // Moved with no authentication: allowed, and Test sends no token.
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/instances/secretive",
            Some(json!({"type": "fast", "url": attacker, "enabled": false, "auth": {"kind": "none"}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (s, _) = app
        .send(reqwest::Method::POST, "/api/instances/secretive/test", None)
        .await;
    assert_eq!(s, 200);
    let got = seen.lock().expect("lock").clone();
    assert!(!got.is_empty(), "the test poll reached the new host");
    assert!(got.iter().all(Option::is_none), "{got:?}");

    // The sink: header values sent back as (hidden) with a new host.
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": app.fleet.url("x"), "headers": {"Authorization": "Bearer sink-secret"}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": attacker, "headers": {"Authorization": "(hidden)"}})),
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert_eq!(body["error"]["field"], "headers.Authorization", "{body}");
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": attacker})),
        )
        .await;
    assert_eq!(
        s, 422,
        "an omitted header is kept, so it needs giving again too: {body}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_hold_no_sessions_and_sessions_are_stored_hashed() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cookie = setup(&app).await;
    let id = cookie.trim_start_matches("pollster_session=").to_string();
    assert_eq!(app.store().session_count().expect("count"), 1);
    assert!(
        app.store().get_session(&id).expect("get").is_none(),
        "not stored under its id"
    );

    let backup = app
        .client
        .post(app.url("/api/admin/backup"))
        .bearer_auth(&app.token)
        .json(&serde_json::json!({"passphrase": "a long enough passphrase"}))
        .send()
        .await
        .expect("backup");
    assert_eq!(backup.status().as_u16(), 200);
    let file = backup.bytes().await.expect("backup");
    let bytes = pollster::secrets::backup::decrypt(&file, "a long enough passphrase").expect("decrypts");
    assert!(
        !bytes.windows(id.len()).any(|w| w == id.as_bytes()),
        "the session id is in the backup"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pollster.redb"), &bytes).expect("write");
    let copy = pollster::store::Store::open(dir.path()).expect("the backup opens");
    assert_eq!(copy.session_count().expect("count"), 0, "the backup holds sessions");
    assert_eq!(copy.user_count().expect("users"), 1, "but it is a backup");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_is_believed_only_from_a_trusted_proxy_and_only_its_last_hop() {
    let app = TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &BTreeMap::new(), |c| {
        c.server.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    setup(&app).await;
    let proxy = client_from("127.0.0.1");
    // The client picks a new left-most entry each time; the proxy appends
    // the real one.
    let mut statuses = Vec::new();
    for i in 0..6 {
        let xff = format!("203.0.113.{i}, 198.51.100.7");
        let r = post_form(
            &proxy,
            app.url("/login"),
            &[("username", "admin"), ("password", "wrong-password")],
            &[("x-forwarded-for", &xff)],
        )
        .await;
        statuses.push(r.status().as_u16());
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 429, 429],
        "locked out by the real address"
    );
    // From a peer that is no proxy, the header is ignored: it is its own address.
    let direct = client_from("127.0.0.2");
    let r = post_form(
        &direct,
        app.url("/login"),
        &[("username", "admin"), ("password", PASSWORD)],
        &[("x-forwarded-for", "198.51.100.7")],
    )
    .await;
    assert_eq!(r.status().as_u16(), 303, "not locked out by the address it claims");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_needs_the_one_time_code_from_the_data_directory() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let file = app.data_dir.path().join("setup-code");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("code file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let page = client()
        .get(app.url("/setup"))
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    assert!(page.contains("name=\"setup_code\""), "{page}");
    // A DNS-rebinding page looks same-origin; it still lacks the code.
    let r = post_form(
        &client(),
        app.url("/setup"),
        &[
            ("setup_code", "0123456789abcdef01234567"),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ],
        &[
            ("origin", "http://rebound.example:7655"),
            ("host", "rebound.example:7655"),
        ],
    )
    .await;
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        login_checks(&app, "failure").await,
        1.0,
        "a wrong code is a failed login"
    );
    assert_eq!(app.store().user_count().expect("users"), 0);
    setup(&app).await;
    assert!(!file.exists(), "the code is deleted once setup is done");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_visitors_leave_no_session_behind() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    for _ in 0..50 {
        let r = client().get(app.url("/setup")).send().await.expect("get");
        assert_eq!(r.status().as_u16(), 200);
        assert!(session_cookie(&r).is_none());
    }
    setup(&app).await;
    for path in ["/login", "/", "/instances", "/no/such/page"] {
        for _ in 0..50 {
            let r = client().get(app.url(path)).send().await.expect("get");
            assert!(session_cookie(&r).is_none(), "{path}");
        }
    }
    assert_eq!(app.store().session_count().expect("count"), 1, "only the admin's");
    // The login form is protected by the origin check alone.
    let r = post_form(
        &client(),
        app.url("/login"),
        &[("username", "admin"), ("password", PASSWORD)],
        &[("origin", "http://evil.example"), ("host", &app.addr.to_string())],
    )
    .await;
    assert_eq!(r.status().as_u16(), 403);
    let (s, cookie, _) = login(&client(), &app, PASSWORD).await;
    assert_eq!((s, cookie.is_some()), (303, true));
    app.stop().await;
}

/// Read until the server closes the connection; `true` if it did within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_cut_off_and_connections_are_capped() {
    let app = TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &BTreeMap::new(), |c| {
        c.server.max_connections = 8;
    })
    .await;
    let addr: SocketAddr = app.addr;
    // The cap: eight connections that never finish their request hold every
    // slot, and a ninth is refused (closed at once: see tests/hostile).
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    assert!(
        quick.get(app.url("/healthz")).send().await.is_err(),
        "a ninth connection was served while eight were held"
    );
    // The head timeout ends them all, and service comes back.
    for s in &mut slow {
        assert!(
            closed_within(s, pollster::web::serve::HEADER_TIMEOUT + Duration::from_secs(3)).await,
            "a half-sent request held its connection"
        );
    }
    let r = quick.get(app.url("/healthz")).send().await.expect("served again");
    assert_eq!(r.status().as_u16(), 200);

    // The metrics listener has a timeout of its own.
    let mut s = TcpStream::connect(app.metrics_addr).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\n").await.expect("write");
    assert!(closed_within(&mut s, pollster::web::serve::HEADER_TIMEOUT + Duration::from_secs(3)).await);

    // A JSON body over the limit is 413.
    let big = format!("{{\"x\": \"{}\"}}", "a".repeat(2 * 1024 * 1024));
    let r = app
        .client
        .put(app.url("/api/settings/monitoring"))
        .bearer_auth(&app.token)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .expect("put");
    assert_eq!(r.status().as_u16(), 413);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_ends_the_other_sessions_and_cycles_the_id() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let mine = setup(&app).await;
    let (_, other, _) = login(&client(), &app, PASSWORD).await;
    let other = other.expect("a second session");
    let token = csrf(&app, &mine, "/settings/security").await;
    let r = post_form(
        &client(),
        app.url("/settings/security/password"),
        &[
            ("_csrf", &token),
            ("current", PASSWORD),
            ("password", "a-better-password"),
            ("confirm", "a-better-password"),
        ],
        &[("cookie", &mine)],
    )
    .await;
    assert_eq!(r.status().as_u16(), 303);
    let renewed = session_cookie(&r).expect("a new session id");
    assert_ne!(renewed, mine);
    for (who, cookie, expect) in [
        ("other", &other, 303),
        ("old id", &mine, 303),
        ("renewed", &renewed, 200),
    ] {
        let r = client()
            .get(app.url("/"))
            .header("cookie", cookie)
            .send()
            .await
            .expect("get");
        assert_eq!(r.status().as_u16(), expect, "{who}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_the_security_headers() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cookie = setup(&app).await;
    let pages = ["/", "/status", "/instances", "/settings/security", "/login"];
    for path in pages
        .iter()
        .copied()
        .chain(["/api/monitoring/scheduler/health", "/static/style.css"])
    {
        let r = client()
            .get(app.url(path))
            .header("cookie", &cookie)
            .bearer_auth(&app.token)
            .send()
            .await
            .expect("get");
        let h = r.headers().clone();
        let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let csp = get("content-security-policy");
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(get("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(get("referrer-policy"), "no-referrer", "{path}");
        if !path.starts_with("/static/") {
            assert_eq!(get("cache-control"), "no-store", "{path}");
            let body = r.text().await.expect("body");
            // No inline script or style for the policy to block.
            for bad in ["<script>", "style=\"", " onclick=", " onsubmit="] {
                assert!(!body.contains(bad), "{path} has {bad}");
            }
        }
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_a_url_is_never_shown() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cookie = setup(&app).await;
    let with_pw = app.fleet.url("x").replace("http://", "http://probe:pa55w0rd@");
    let (s, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "userinfo", "type": "fast", "url": with_pw, "enabled": false})),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    assert!(!body.to_string().contains("pa55w0rd"), "{body}");
    let one = app.get_json("/api/instances/userinfo").await;
    assert_eq!(one["url"], with_pw.replace("pa55w0rd", "(hidden)"));
    let all = app.get_json("/api/instances").await;
    assert!(!all.to_string().contains("pa55w0rd"));
    let (_, found) = app.send(reqwest::Method::GET, "/api/instances?q=pa55", None).await;
    assert!(
        !found.to_string().contains("userinfo"),
        "the search is no oracle: {found}"
    );
    for page in ["/instances/userinfo/edit", "/instances/userinfo"] {
        let html = client()
            .get(app.url(page))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("get")
            .text()
            .await
            .expect("body");
        assert!(!html.contains("pa55w0rd") && html.contains("(hidden)"), "{page}");
    }
    // Sent back as shown, the stored password stays.
    let mut back = one.clone();
    for k in ["provisioned", "auth"] {
        back.as_object_mut().expect("object").remove(k);
    }
    let (s, body) = app
        .send(reqwest::Method::PUT, "/api/instances/userinfo", Some(back))
        .await;
    assert_eq!(s, 200, "{body}");
    let stored = app.store().list_instances().expect("instances");
    let stored = stored.iter().find(|i| i.name == "userinfo").expect("stored");
    assert_eq!(stored.url, with_pw, "the password was kept");

    // The sink's URL and its settings event.
    let (recv_url, _) = recorder().await;
    let sink_url = recv_url.replace("http://", "http://ship:s1nkpw@");
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": sink_url})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(!body.to_string().contains("s1nkpw"), "{body}");
    let got = app.get_json("/api/settings/sink").await;
    assert!(!got.to_string().contains("s1nkpw"), "{got}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_data_directory_and_database_are_private() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("fresh").join("data");
    let app = TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &BTreeMap::new(), |c| {
        c.server.data_dir = dir.clone();
    })
    .await;
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("pollster.redb")), 0o600);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_variable_creates_the_admin_and_never_undoes_a_change() {
    let env = BTreeMap::from([(
        "POLLSTER_ADMIN_PASSWORD".to_string(),
        "from-the-environment".to_string(),
    )]);
    let app = TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &env, |_| {}).await;
    let (s, cookie, _) = login(&client(), &app, "from-the-environment").await;
    assert_eq!(s, 303);
    let cookie = cookie.expect("session");
    let token = csrf(&app, &cookie, "/settings/security").await;
    let r = post_form(
        &client(),
        app.url("/settings/security/password"),
        &[
            ("_csrf", &token),
            ("current", "from-the-environment"),
            ("password", "changed-in-the-ui"),
            ("confirm", "changed-in-the-ui"),
        ],
        &[("cookie", &cookie)],
    )
    .await;
    assert_eq!(r.status().as_u16(), 303);
    let app = app.restart().await;
    assert_eq!(login(&client(), &app, "changed-in-the-ui").await.0, 303);
    assert_eq!(login(&client(), &app, "from-the-environment").await.0, 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_everything_but_the_backup_and_changes_nothing() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cookie = setup(&app).await;
    // Made on the Security page, which shows its scope.
    let token = csrf(&app, &cookie, "/settings/security").await;
    let (read, page) = token_on_page(&app, &cookie, &token, "read").await;
    assert!(page.contains("<td>read</td>"), "the list shows the scope");
    let info = app.store().verify_token(&read).expect("verify").expect("stored");
    assert_eq!(info.scope, pollster::store::TokenScope::Read);

    let http = client();
    let call = |m: reqwest::Method, p: &str, body: Option<Value>| {
        let mut r = http.request(m, app.url(p)).bearer_auth(&read);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send()
    };
    for p in [
        "/api/monitoring/scheduler/health",
        "/api/instances",
        "/api/budgets",
        "/api/settings/monitoring",
        "/api/monitoring/scheduler/dead-letter",
        "/status?format=json",
    ] {
        assert_eq!(
            call(reqwest::Method::GET, p, None)
                .await
                .expect("get")
                .status()
                .as_u16(),
            200,
            "{p}"
        );
    }
    assert_eq!(
        call(
            reqwest::Method::POST,
            "/api/admin/backup",
            Some(json!({"passphrase": "a long enough passphrase"}))
        )
        .await
        .expect("get")
        .status()
        .as_u16(),
        403
    );
    let changes = [
        (
            reqwest::Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"adaptive": {"enabled": false}})),
        ),
        (
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "n", "type": "fast", "url": "http://127.0.0.1:1/"})),
        ),
        (reqwest::Method::DELETE, "/api/instances/x", None),
        (reqwest::Method::POST, "/api/instances/x/test", None),
    ];
    for (m, p, body) in changes {
        let r = call(m.clone(), p, body).await.expect("call");
        assert_eq!(r.status().as_u16(), 403, "{m} {p}");
    }
    assert!(app.get_json("/api/instances/x").await["name"] == "x", "nothing changed");
    // The admin token of the tests may take the backup (a POST now).
    let (status, _) = app
        .send(
            reqwest::Method::POST,
            "/api/admin/backup",
            Some(json!({"passphrase": "a long enough passphrase"})),
        )
        .await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_action_is_audited_with_who_from_where_and_the_fields_but_no_value() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cookie = setup(&app).await;
    // Logins, failed and not.
    let (status, _, _) = login(&client(), &app, "not-the-password").await;
    assert_eq!(status, 401);
    let (status, session, _) = login(&client(), &app, PASSWORD).await;
    assert_eq!(status, 303);
    let session = session.expect("a session");
    // A token made and revoked on the Security page.
    let token = csrf(&app, &session, "/settings/security").await;
    let (read, _) = token_on_page(&app, &session, &token, "read").await;
    let id = app.store().verify_token(&read).expect("verify").expect("stored").id;
    let r = post_form(
        &client(),
        app.url(&format!("/settings/security/tokens/{id}/revoke")),
        &[("_csrf", &token)],
        &[("cookie", &session)],
    )
    .await;
    assert!(r.status().is_redirection() || r.status().is_success(), "{}", r.status());
    // A settings change, an instance added with a credential and changed,
    // then removed (through the API, with the admin token).
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"workers": 8}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let secret = "hunter2-never-in-the-audit";
    let (s, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "audited", "type": "fast", "url": app.fleet.url("x"),
                "auth": {"kind": "bearer", "token": secret}})),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/instances/audited",
            Some(
                json!({"name": "audited", "type": "fast", "url": app.fleet.url("x"), "timeout": "3s",
                "auth": {"kind": "bearer", "token": "another-secret-value"}}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (s, _) = app.send(reqwest::Method::DELETE, "/api/instances/audited", None).await;
    assert_eq!(s, 204);

    let r = app.get("/api/admin/audit?limit=50").await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("body");
    assert!(
        !text.contains(secret) && !text.contains("another-secret-value"),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&text).expect("json");
    let entries = doc["entries"].as_array().expect("entries");
    let find = |action: &str| -> &Value {
        entries
            .iter()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {text}"))
    };
    assert_eq!(find("login.failed")["actor"], "user:admin");
    assert_eq!(find("login")["source"], "127.0.0.1");
    assert_eq!(find("token.create")["actor"], "user:admin");
    assert_eq!(find("token.revoke")["target"], id.as_str());
    let settings = find("settings.monitoring");
    assert_eq!(settings["fields"], json!(["scheduler"]));
    assert!(
        settings["actor"]
            .as_str()
            .unwrap_or_default()
            .starts_with("token:tests(")
    );
    let created = find("instance.create");
    assert_eq!(created["target"], "audited");
    let fields: Vec<&str> = created["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(fields.contains(&"auth.token") && fields.contains(&"url"), "{fields:?}");
    assert_eq!(find("instance.update")["fields"], json!(["auth.token", "timeout"]));
    assert_eq!(find("instance.delete")["source"], "127.0.0.1");
    // Newest first, and paged.
    let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
    let page = app.get_json("/api/admin/audit?limit=2").await;
    let next = page["next"].as_u64().expect("a next page");
    let older = app.get_json(&format!("/api/admin/audit?limit=2&before={next}")).await;
    assert!(older["entries"][0]["seq"].as_u64().expect("seq") < next);
    let (s, body) = app.send(reqwest::Method::GET, "/api/admin/audit?limit=0", None).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("limit")));
    let (s, body) = app
        .send(
            reqwest::Method::GET,
            "/api/admin/audit?before=9223372036854775808",
            None,
        )
        .await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("before")));
    // Admin scope only.
    let (reader, _) = app
        .store()
        .create_token(
            "r",
            pollster::store::TokenScope::Read,
            pollster::model::Timestamp::now(),
        )
        .expect("token");
    let r = client()
        .get(app.url("/api/admin/audit"))
        .bearer_auth(&reader)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 403);
    // The Security page lists the protections and the trail.
    let page = client()
        .get(app.url("/settings/security"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains("Metrics authentication") && page.contains("metrics_auth = &#34;token&#34;"),
        "{page}"
    );
    assert!(
        page.contains("<td>instance.update</td>") && page.contains("auth.token, timeout"),
        "{page}"
    );
    assert!(!page.contains(secret));
    app.stop().await;
}

/// A loopback event receiver: answers 204 and keeps every line posted.
async fn event_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/events", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n");
                    if let Some(end) = head_end {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                            let mut seen = s.lock().expect("lock");
                            seen.extend(body.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()));
                            break;
                        }
                    }
                    match stream.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, seen)
}

/// The whole audit trail, newest first, through the API.
async fn audit_entries(app: &TestApp) -> Vec<Value> {
    app.get_json("/api/admin/audit?limit=1000").await["entries"]
        .as_array()
        .expect("entries")
        .clone()
}

/// Poll the trail until `pred` holds for it (counts of failures are
/// written within a second); after 10 s, the trail as it is (the caller's
/// assertions then say what is missing).
async fn wait_audit(app: &TestApp, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = std::time::Instant::now();
    loop {
        let entries = audit_entries(app).await;
        if pred(&entries) {
            return entries;
        }
        if start.elapsed() > Duration::from_secs(10) {
            eprintln!("waited 10 s for {what} in vain");
            return entries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_failed_logins_never_pushes_an_operator_action_out_of_the_trail() {
    let (sink_url, events) = event_receiver().await;
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    // The trail is capped small, so a flood fits in a test: 6 operator
    // entries, 4 failure entries (the appliance keeps 100,000 and 10,000).
    app.store().set_audit_caps(6, 4).expect("caps");
    setup(&app).await;
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": sink_url})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    // The operator action the flood must not wipe.
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"workers": 7}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");

    // Three wrong passwords from one address: one entry, with a count.
    let one = client_from("127.0.9.1");
    for _ in 0..3 {
        assert_eq!(login(&one, &app, "wrong-password").await.0, 401);
    }
    let entries = wait_audit(&app, "a count of 3", |e| {
        e.iter()
            .any(|e| e["action"] == "login.failed" && e["source"] == "127.0.9.1" && e["count"] == 3)
    })
    .await;
    assert_eq!(
        entries.iter().filter(|e| e["source"] == "127.0.9.1").count(),
        1,
        "{entries:#?}"
    );
    // The flood: wrong passwords from 8 rotating addresses, each an entry
    // of its own, more than both caps (one at a time: each is checked).
    for n in 0..8 {
        let http = client_from(&format!("127.0.10.{}", n + 1));
        assert_eq!(login(&http, &app, "guess").await.0, 401, "{n}");
    }
    let entries = audit_entries(&app).await;
    let failed = entries.iter().filter(|e| e["action"] == "login.failed").count();
    assert!(failed <= 4, "failures keep to their share: {entries:#?}");
    let kept = entries
        .iter()
        .find(|e| e["action"] == "settings.monitoring")
        .unwrap_or_else(|| panic!("the operator action was pushed out: {entries:#?}"));
    assert_eq!(kept["fields"], json!(["scheduler"]));
    assert!(entries.iter().any(|e| e["action"] == "account.create"), "{entries:#?}");
    // The sink gets one event per address and window, with its count, when
    // the window closes (here: at shutdown), not one per failure: what it
    // received, and what waits in the outbox for it.
    let dir = app.keep_data_dir().await;
    let mut events = events.lock().expect("lock").clone();
    let store = pollster::store::Store::open(dir.path()).expect("open");
    for (_, row) in store.outbox_page(0, 1000).expect("outbox") {
        events.push(serde_json::from_str(&row.expect("row").line).expect("json"));
    }
    // A receiver de-duplicates change events by id.
    let by_id: BTreeMap<String, Value> = events
        .into_iter()
        .filter(|e| e["action"] == "login.failed")
        .map(|e| (e["id"].as_str().unwrap_or_default().to_string(), e))
        .collect();
    let failed: Vec<&Value> = by_id.values().collect();
    let from_one: Vec<&&Value> = failed.iter().filter(|e| e["source"] == "127.0.9.1").collect();
    assert_eq!(from_one.len(), 1, "{failed:#?}");
    assert_eq!(from_one[0]["count"], 3);
    assert!(from_one[0]["id"].as_str().is_some_and(|id| id.len() == 26));
    assert_eq!(failed.len(), 9, "one per address: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_gets_403_on_the_security_page_and_no_request_with_a_token_gets_a_session() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    setup(&app).await;
    let (read, _) = app
        .store()
        .create_token(
            "reader",
            pollster::store::TokenScope::Read,
            pollster::model::Timestamp::now(),
        )
        .expect("token");
    let http = client();
    let r = http
        .get(app.url("/settings/security"))
        .bearer_auth(&read)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 403);
    assert!(session_cookie(&r).is_none());
    let body = r.text().await.expect("body");
    assert!(!body.contains("reader") && !body.contains("Audit trail"), "{body}");
    // An admin token sees the page, with the trail and the tokens.
    let r = http
        .get(app.url("/settings/security"))
        .bearer_auth(&app.token)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert!(session_cookie(&r).is_none(), "no cookie for a token");
    let page = r.text().await.expect("body");
    assert!(
        page.contains("Audit trail") && page.contains("<td>reader</td>"),
        "{page}"
    );

    // No page or API answer to a token sets a cookie, and no session row
    // is written.
    let sessions = app.store().session_count().expect("count");
    for token in [&read, &app.token] {
        for path in [
            "/",
            "/instances",
            "/instances/x",
            "/status",
            "/status?format=json",
            "/settings",
            "/settings/system/monitoring",
            "/settings/system/sink",
            "/settings/security",
            "/api/instances",
            "/api/monitoring/scheduler/health",
        ] {
            let r = http.get(app.url(path)).bearer_auth(token).send().await.expect("get");
            assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
            assert!(r.headers().get("set-cookie").is_none(), "{path}: {:?}", r.headers());
        }
    }
    assert_eq!(app.store().session_count().expect("count"), sessions);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_sink_changes_and_bad_tokens_are_audited() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    setup(&app).await;
    // The sink turned on, then off (through the API, with the admin token).
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": "http://127.0.0.1:9/events", "headers": {"Authorization": "Bearer sink-secret"}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    // Three wrong tokens from one address, on the API and on a page.
    let bad = "pst_0000000000000000000000000000000000000000";
    let from = client_from("127.0.11.1");
    for path in ["/api/instances", "/api/budgets", "/status"] {
        let r = from.get(app.url(path)).bearer_auth(bad).send().await.expect("get");
        assert_eq!(r.status().as_u16(), 401, "{path}");
    }
    let entries = wait_audit(&app, "three failed tokens", |e| {
        e.iter().any(|e| e["action"] == "token.failed" && e["count"] == 3)
    })
    .await;
    let text = serde_json::to_string(&entries).expect("json");
    assert!(!text.contains(bad) && !text.contains("sink-secret"), "{text}");
    let missing: Vec<&str> = ["token.failed", "account.create", "settings.sink"]
        .into_iter()
        .filter(|a| !entries.iter().any(|e| e["action"] == *a))
        .collect();
    assert!(missing.is_empty(), "not audited: {missing:?} in {text}");
    let find = |action: &str| -> &Value {
        entries
            .iter()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {text}"))
    };
    let failed = find("token.failed");
    assert_eq!(failed["source"], "127.0.11.1");
    assert_eq!(failed["target"], "pst_");
    let created = find("account.create");
    assert_eq!(
        (&created["actor"], &created["target"]),
        (&json!("setup"), &json!("admin"))
    );
    assert_eq!(created["source"], "127.0.0.1");
    let sink: Vec<&Value> = entries.iter().filter(|e| e["action"] == "settings.sink").collect();
    assert_eq!(sink.len(), 2, "on and off: {text}");
    assert!(
        sink.iter()
            .all(|e| e["actor"].as_str().is_some_and(|a| a.starts_with("token:tests(")))
    );
    assert!(
        sink[1]["fields"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "url")),
        "{text}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_takes_as_long_for_an_unknown_name_as_for_the_admin() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    setup(&app).await;
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    // Alternated, each from an address of its own (no lockout interferes).
    for n in 0..3 {
        for (name, times) in [("admin", &mut known), ("nobody-by-this-name", &mut unknown)] {
            let http = client_from(&format!(
                "127.0.12.{}",
                times.len() + 1 + if name == "admin" { 0 } else { 50 }
            ));
            let start = std::time::Instant::now();
            let r = post_form(
                &http,
                app.url("/login"),
                &[("username", name), ("password", "not-the-password")],
                &[],
            )
            .await;
            times.push(start.elapsed());
            assert_eq!(r.status().as_u16(), 401, "{name} {n}");
        }
    }
    let (k, u) = (median(known), median(unknown));
    let ratio = k.as_secs_f64().max(u.as_secs_f64()) / k.as_secs_f64().min(u.as_secs_f64());
    eprintln!("login medians: known {k:?}, unknown {u:?}, ratio {ratio:.2}");
    assert!(ratio < 3.0, "known {k:?}, unknown {u:?}");
    app.stop().await;
}
