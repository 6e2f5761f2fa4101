//! HTTPS on both listeners and authenticated scrapes, against the running
//! appliance: a test CA signs the server's certificates, and every client
//! trusts that CA alone.

use crate::common;

use pollster::app::Application;
use pollster::store::TokenScope;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PASSWORD: &str = "correct horse battery";

/// A certificate authority made for one test.
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Pollster test CA");
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let key = rcgen::KeyPair::generate().expect("key");
        Ca {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).expect("CA"),
        }
    }

    fn der(&self) -> &[u8] {
        self.issuer.der().as_ref()
    }

    /// A server certificate for 127.0.0.1 written to `cert` and `key`
    /// (the chain: leaf, then the CA); returns the leaf's fingerprint.
    fn issue(&self, cert: &Path, key: &Path) -> String {
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
        let leaf = params.signed_by(&leaf_key, &self.issuer).expect("leaf");
        let chain = pollster::tls::pem("CERTIFICATE", leaf.der()) + &pollster::tls::pem("CERTIFICATE", self.der());
        std::fs::write(cert, chain).expect("write cert");
        std::fs::write(key, pollster::tls::pem("PRIVATE KEY", &leaf_key.serialize_der())).expect("write key");
        pollster::tls::fingerprint(leaf.der())
    }

    /// An HTTPS client that trusts this CA and nothing else.
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_der(self.der()).expect("CA cert")])
            .tls_info(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    }

    /// A raw TLS client that trusts this CA alone.
    fn rustls_client(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(self.der().to_vec()))
            .expect("root");
        let mut config = rustls::ClientConfig::builder_with_provider(pollster::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        // A resumed session reports the certificate of the session it
        // resumes; every connection here is to see a full handshake.
        config.resumption = rustls::client::Resumption::disabled();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// The appliance, in-process on loopback ports, with its TLS handle.
struct Server {
    api: SocketAddr,
    metrics: SocketAddr,
    tls: pollster::tls::TlsHandle,
    store: pollster::store::Store,
    _data: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    async fn start(tweak: impl FnOnce(&mut pollster::config::ServerConfig)) -> Server {
        let data = tempfile::tempdir().expect("tempdir");
        let env = BTreeMap::from([("POLLSTER_ADMIN_PASSWORD".to_string(), PASSWORD.to_string())]);
        let mut c = common::fast_config(&env);
        c.server.data_dir = data.path().to_path_buf();
        tweak(&mut c.server);
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let app = Application::build_with_listeners(c, api, metrics)
            .await
            .expect("app builds");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = Server {
            api: app.api_addr(),
            metrics: app.metrics_addr(),
            tls: app.tls(),
            store: app.store(),
            _data: data,
            stop: Some(tx),
            task: None,
        };
        let task = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        Server {
            task: Some(task),
            ..server
        }
    }

    fn token(&self, scope: TokenScope) -> String {
        self.store
            .create_token("scraper", scope, pollster::model::Timestamp::now())
            .expect("token")
            .0
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// A directory with a CA-issued `tls.crt` / `tls.key`.
struct Certs {
    dir: tempfile::TempDir,
    fingerprint: String,
}

impl Certs {
    fn new(ca: &Ca) -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        let fingerprint = ca.issue(&dir.path().join("tls.crt"), &dir.path().join("tls.key"));
        Certs { dir, fingerprint }
    }
    fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }
    fn key(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }
}

fn peer_fingerprint(resp: &reqwest::Response) -> String {
    let info = resp.extensions().get::<reqwest::tls::TlsInfo>().expect("TLS info");
    pollster::tls::fingerprint(info.peer_certificate().expect("peer certificate"))
}

#[tokio::test]
async fn both_listeners_serve_https_and_a_login_sets_a_secure_cookie_and_hsts() {
    let ca = Ca::new();
    let certs = Certs::new(&ca);
    let server = Server::start(|s| {
        s.tls_cert = Some(certs.cert());
        s.tls_key = Some(certs.key());
    })
    .await;
    let client = ca.client();

    let r = client
        .get(format!("https://127.0.0.1:{}/healthz", server.api.port()))
        .send()
        .await
        .expect("UI listener over HTTPS");
    assert_eq!(r.status(), 200);
    assert_eq!(peer_fingerprint(&r), certs.fingerprint);
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");

    // The metrics listener defaults to the same certificate.
    let r = client
        .get(format!("https://127.0.0.1:{}/metrics", server.metrics.port()))
        .send()
        .await
        .expect("metrics listener over HTTPS");
    assert_eq!(r.status(), 200);
    assert_eq!(peer_fingerprint(&r), certs.fingerprint);
    assert!(r.text().await.expect("body").contains("pollster_"));

    // Plain HTTP to the HTTPS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/healthz", server.api.port()))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    let r = client
        .post(format!("https://127.0.0.1:{}/login", server.api.port()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("username=admin&password={}", PASSWORD.replace(' ', "+")))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 303, "login redirects home");
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("pollster_session="))
        .expect("session cookie")
        .to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");
    server.stop().await;
}

#[tokio::test]
async fn a_reload_keeps_the_request_in_progress_and_a_bad_file_keeps_the_old_certificate() {
    let ca = Ca::new();
    let certs = Certs::new(&ca);
    let server = Server::start(|s| {
        s.tls_cert = Some(certs.cert());
        s.tls_key = Some(certs.key());
    })
    .await;
    let connector = ca.rustls_client();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(server.api).await.expect("connect");
        connector.connect(name.clone(), tcp).await.expect("handshake")
    };
    let fingerprint_of = |tls: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>| {
        let certs = tls.get_ref().1.peer_certificates().expect("peer certificates");
        pollster::tls::fingerprint(certs[0].as_ref())
    };

    // A request half sent when the certificate changes.
    let mut old = connect().await;
    assert_eq!(fingerprint_of(&old), certs.fingerprint);
    old.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("half a request");
    old.flush().await.expect("flush");

    let renewed = ca.issue(&certs.cert(), &certs.key());
    assert_ne!(renewed, certs.fingerprint);
    server.tls.reload().expect("the renewed pair loads");

    old.write_all(b"Connection: close\r\n\r\n")
        .await
        .expect("rest of the request");
    // Read to the end; the server closes after answering.
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = old.read(&mut buf).await {
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&bytes);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        fingerprint_of(&old),
        certs.fingerprint,
        "the old connection kept its certificate"
    );

    let new = connect().await;
    assert_eq!(
        fingerprint_of(&new),
        renewed,
        "a new handshake gets the new certificate"
    );
    drop(new);

    // A half-written renewal: refused, naming the file; the server goes on
    // with the certificate it has.
    std::fs::write(certs.cert(), "-----BEGIN CERTIFICATE-----\nnot base64\n").expect("write");
    let e = server.tls.reload().expect_err("a bad file is refused");
    assert_eq!(e.file, certs.cert());
    let after = connect().await;
    assert_eq!(fingerprint_of(&after), renewed);
    drop(after);
    server.stop().await;
}

#[tokio::test]
async fn scrapes_need_a_token_when_metrics_auth_is_token() {
    let server = Server::start(|s| s.metrics_auth = pollster::config::MetricsAuth::Token).await;
    let read = server.token(TokenScope::Read);
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{}{}", server.metrics, path);
    for path in ["/metrics", "/values"] {
        let r = client.get(url(path)).send().await.expect("scrape");
        assert_eq!(r.status(), 401, "{path} without a token");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: serde_json::Value = r.json().await.expect("JSON error");
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");

        let r = client
            .get(url(path))
            .bearer_auth("pst_not-a-token")
            .send()
            .await
            .expect("scrape");
        assert_eq!(r.status(), 401, "{path} with a bad token");

        let r = client.get(url(path)).bearer_auth(&read).send().await.expect("scrape");
        assert_eq!(r.status(), 200, "{path} with a read token");
    }
    let r = client.get(url("/healthz")).send().await.expect("health");
    assert_eq!(r.status(), 200, "/healthz stays open");
    server.stop().await;
}

fn run_pollster(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_pollster"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("POLLSTER_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run pollster")
}

#[test]
fn a_missing_or_mismatched_key_is_exit_2_naming_the_file() {
    let ca = Ca::new();
    let a = Certs::new(&ca);
    let b = Certs::new(&ca);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("pollster.toml");
    let write_config = |cert: &Path, key: &Path| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n",
            dir.path().join("data").display().to_string(),
            cert.display().to_string(),
            key.display().to_string(),
        );
        std::fs::write(&config, text).expect("config");
    };
    let config_arg = config.display().to_string();

    let missing = dir.path().join("missing.key");
    write_config(&a.cert(), &missing);
    let out = run_pollster(&["check-config", &config_arg], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("server.tls_key"), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");

    write_config(&a.cert(), &b.key());
    let out = run_pollster(&["serve", "--config", &config_arg], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&b.key().display().to_string()), "{stderr}");
    assert!(stderr.contains("does not match the certificate"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "refused before anything was created");

    write_config(&a.cert(), &a.key());
    let out = run_pollster(&["check-config", &config_arg], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn self_signed_writes_a_private_key_and_prints_the_certificates_fingerprint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_arg = data.display().to_string();
    let args = [
        "admin",
        "self-signed",
        "--hostname",
        "pollster.test",
        "--hostname",
        "192.0.2.7",
        "--data-dir",
        &data_arg,
    ];
    let out = run_pollster(&args, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data.join("tls.key"))
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let files = pollster::tls::CertFiles {
        cert: data.join("tls.crt"),
        key: data.join("tls.key"),
    };
    let loaded = files.load().expect("the pair is usable");
    assert!(
        stdout.contains(&format!("SHA-256 fingerprint: {}", loaded.fingerprint)),
        "{stdout}"
    );
    assert!(
        stdout.contains("tls_cert = \"") && stdout.contains("tls.crt\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("tls_key = \"") && stdout.contains("tls.key\""),
        "{stdout}"
    );

    let again = run_pollster(&args, &[]);
    assert_eq!(again.status.code(), Some(2), "refuses to overwrite");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let mut forced = args.to_vec();
    forced.push("--force");
    assert_eq!(run_pollster(&forced, &[]).status.code(), Some(0));
    assert_ne!(files.load().expect("new pair").fingerprint, loaded.fingerprint);
}
