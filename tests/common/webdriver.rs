//! A small W3C WebDriver client over reqwest, enough to drive Debian's
//! headless Chromium through chromedriver: navigate, find, click, type,
//! read the page, take screenshots.
//!
//! Hand-written rather than `fantoccini` on purpose: the browser test needs
//! these few commands, which are a page of JSON over HTTP with the reqwest
//! and serde_json the build has already. fantoccini would add Mozilla's
//! `webdriver` protocol crate, `cookie`, and (by default) native-tls over
//! OpenSSL: a dependency tree of its own to compile on a 2-core CI runner,
//! for commands the tests never send. Worth revisiting if the browser tests
//! grow to need waits, frames, actions or cookies.
#![allow(dead_code)]

use super::free_port;
use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

pub struct Browser {
    http: reqwest::Client,
    base: String,
    driver: Child,
    pub shots: PathBuf,
}

/// Whether the browser is installed. Under CI (`CI=true`) a missing browser
/// fails the run instead of skipping.
pub fn available() -> bool {
    let ok = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !ok && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {CHROMIUM} or {CHROMEDRIVER} is missing: install Debian's chromium and chromium-driver");
    }
    if !ok {
        eprintln!("skipping browser test: {CHROMIUM} / {CHROMEDRIVER} not installed");
    }
    ok
}

impl Browser {
    pub async fn start(name: &str) -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let driver_url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{driver_url}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir").keep();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,1400",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }}});
        let resp: Value = http
            .post(format!("{driver_url}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session json");
        let id = resp["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {resp}"))
            .to_string();
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("screenshots")
            .join(name);
        let _ = std::fs::create_dir_all(&shots);
        Browser {
            http,
            base: format!("{driver_url}/session/{id}"),
            driver,
            shots,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req
            .send()
            .await
            .expect("webdriver call")
            .json()
            .await
            .expect("webdriver json");
        if v["value"].get("error").is_some() {
            panic!("webdriver {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    pub async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub async fn source(&self) -> String {
        self.call(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_string()
    }

    pub async fn click(&self, css: &str) {
        let e = self.element(css).await;
        self.call(reqwest::Method::POST, &format!("/element/{e}/click"), Some(json!({})))
            .await;
    }

    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.element(css).await;
        self.call(reqwest::Method::POST, &format!("/element/{e}/clear"), Some(json!({})))
            .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    pub async fn is_selected(&self, css: &str) -> bool {
        let e = self.element(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{e}/selected"), None)
            .await
            .as_bool()
            == Some(true)
    }

    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .expect("png");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Wait (without reloading) until the page contains `needle`, e.g. after
    /// a click that submits a form.
    pub async fn wait_source(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let src = self.source().await;
            if src.contains(needle) {
                return src;
            }
            if start.elapsed() > Duration::from_secs(10) {
                self.screenshot("timeout").await;
                panic!("{needle:?} never appeared on {}", self.url().await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reload `url` until the page source contains `needle`.
    pub async fn wait_for_text(&self, url: &str, needle: &str, within: Duration) {
        let start = Instant::now();
        loop {
            self.goto(url).await;
            if self.source().await.contains(needle) {
                return;
            }
            if start.elapsed() > within {
                self.screenshot("timeout").await;
                panic!("{needle:?} never appeared on {url}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub async fn close(mut self) {
        let _ = self.http.delete(&self.base).send().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
