//! HTTPS on the two listeners: certificate and key files (PEM) loaded into
//! a rustls server configuration, and reloaded while the server runs.
//!
//! Each listener's certificate lives in a [`CertStore`], the rustls
//! [`ResolvesServerCert`] of its configuration: every handshake asks it for
//! the current [`CertifiedKey`], which sits behind an `RwLock` and is swapped
//! whole on a reload. A connection keeps the certificate it was set up with,
//! so a reload drops nothing; the next handshake gets the new one. A reload
//! that fails (a file missing, half written, or a key that does not match)
//! keeps the old certificate and logs an ERROR naming the file.
//!
//! Reloads come from SIGHUP ([`TlsHandle::reload`]) and from watching the
//! files ([`watch`]): an ACME client rewrites them in place, often the key
//! a moment after the certificate, so a mismatch seen in between is logged
//! and the next look, once both are written, succeeds.
//!
//! The crypto provider is aws-lc-rs, the one reqwest's rustls is built with.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// How often [`watch`] looks at the certificate files.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(5);

/// The provider every TLS configuration here uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A certificate (chain) file and its private key file, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Which of the two files a [`TlsError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Cert,
    Key,
}

/// A certificate or key that cannot be used: the file and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", file.display())]
pub struct TlsError {
    pub role: Role,
    pub file: PathBuf,
    pub reason: String,
}

impl TlsError {
    fn new(role: Role, file: &Path, reason: impl Into<String>) -> Self {
        TlsError {
            role,
            file: file.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// A loaded certificate, ready to serve.
#[derive(Clone)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// SHA-256 of the leaf certificate, as [`fingerprint`] writes it.
    pub fingerprint: String,
}

/// SHA-256 of a DER certificate as browsers show it (`AB:CD:…`), the form
/// an instance's `tls_fingerprint` pins too.
pub fn fingerprint(der: &[u8]) -> String {
    crate::poll::tls::format_fingerprint(&crate::poll::tls::fingerprint_of(der))
}

fn read(role: Role, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::new(role, path, format!("cannot read the file: {e}")))
}

impl CertFiles {
    /// Read and check both files: the chain parses, the key parses, and the
    /// key belongs to the first certificate of the chain.
    pub fn load(&self) -> Result<Loaded, TlsError> {
        let cert_pem = read(Role::Cert, &self.cert)?;
        let key_pem = read(Role::Key, &self.key)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::new(Role::Cert, &self.cert, format!("not a PEM certificate file: {e}")))?;
        if chain.is_empty() {
            return Err(TlsError::new(
                Role::Cert,
                &self.cert,
                "holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks, the server's first)",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            TlsError::new(
                Role::Key,
                &self.key,
                format!("holds no usable private key (expected PEM \"BEGIN PRIVATE KEY\", \"BEGIN EC PRIVATE KEY\" or \"BEGIN RSA PRIVATE KEY\"): {e}"),
            )
        })?;
        let signing = provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::new(Role::Key, &self.key, format!("unsupported private key: {e}")))?;
        let leaf = fingerprint(chain[0].as_ref());
        let certified = CertifiedKey::new(chain, signing);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(TlsError::new(
                    Role::Key,
                    &self.key,
                    format!("does not match the certificate in {}", self.cert.display()),
                ));
            }
            Err(e) => {
                return Err(TlsError::new(
                    Role::Cert,
                    &self.cert,
                    format!("not a valid certificate: {e}"),
                ));
            }
        }
        Ok(Loaded {
            key: Arc::new(certified),
            fingerprint: leaf,
        })
    }

    /// A digest of both files as they are now (or of why they cannot be
    /// read), to notice a change without parsing.
    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for path in [&self.cert, &self.key] {
            match std::fs::read(path) {
                Ok(bytes) => {
                    h.update([1]);
                    h.update((bytes.len() as u64).to_le_bytes());
                    h.update(&bytes);
                }
                Err(e) => {
                    h.update([0]);
                    h.update(e.kind().to_string().as_bytes());
                }
            }
        }
        h.finalize().into()
    }
}

/// One listener's certificate, swapped whole on a reload.
pub struct CertStore {
    files: CertFiles,
    current: RwLock<Loaded>,
    /// The files' digest when last looked at, so a file that stays bad is
    /// reported once, not at every look.
    seen: Mutex<[u8; 32]>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl CertStore {
    /// Load the files; an error here refuses to start.
    pub fn open(files: CertFiles) -> Result<Arc<CertStore>, TlsError> {
        let seen = files.digest();
        let loaded = files.load()?;
        Ok(Arc::new(CertStore {
            files,
            current: RwLock::new(loaded),
            seen: Mutex::new(seen),
        }))
    }

    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// The SHA-256 fingerprint of the certificate new handshakes get.
    pub fn fingerprint(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fingerprint
            .clone()
    }

    /// Read the files again. On success new handshakes get the new
    /// certificate; on failure the old one stays and the error is logged.
    pub fn reload(&self) -> Result<(), TlsError> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = self.files.digest();
        match self.files.load() {
            Ok(loaded) => {
                let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
                if current.fingerprint != loaded.fingerprint {
                    tracing::info!(
                        file = %self.files.cert.display(),
                        fingerprint = %loaded.fingerprint,
                        "TLS certificate reloaded"
                    );
                }
                *current = loaded;
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    file = %e.file.display(),
                    reason = %e.reason,
                    "TLS certificate not reloaded; still serving the previous one"
                );
                Err(e)
            }
        }
    }

    /// [`CertStore::reload`] if either file changed since the last look.
    pub fn reload_if_changed(&self) {
        let now = self.files.digest();
        let changed = *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != now;
        if changed {
            let _ = self.reload();
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|e| e.into_inner()).key.clone())
    }
}

/// The rustls configuration of a listener serving `certs`: HTTP/1.1 only,
/// as the listeners serve.
pub fn server_config(certs: Arc<CertStore>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of both listeners (the same store twice when they
/// share the files).
#[derive(Debug, Clone, Default)]
pub struct TlsHandle {
    pub api: Option<Arc<CertStore>>,
    pub metrics: Option<Arc<CertStore>>,
}

impl TlsHandle {
    /// Open the certificates of each listener that has files; the metrics
    /// listener shares the UI's store when it names the same files.
    pub fn open(api: Option<CertFiles>, metrics: Option<CertFiles>) -> Result<TlsHandle, TlsError> {
        let api = api.map(CertStore::open).transpose()?;
        let metrics = match (metrics, &api) {
            (Some(m), Some(a)) if &m == a.files() => Some(a.clone()),
            (m, _) => m.map(CertStore::open).transpose()?,
        };
        Ok(TlsHandle { api, metrics })
    }

    /// Each distinct store once.
    fn stores(&self) -> Vec<Arc<CertStore>> {
        let mut out: Vec<Arc<CertStore>> = Vec::new();
        for s in self.api.iter().chain(self.metrics.iter()) {
            if !out.iter().any(|o| Arc::ptr_eq(o, s)) {
                out.push(s.clone());
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.api.is_none() && self.metrics.is_none()
    }

    /// What SIGHUP does: read every certificate again. Errors are logged
    /// (and the old certificates kept); the first is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let mut first = Ok(());
        for s in self.stores() {
            if let Err(e) = s.reload()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    fn reload_if_changed(&self) {
        for s in self.stores() {
            s.reload_if_changed();
        }
    }
}

/// Look at the certificate files every `every` and reload those that
/// changed, until the task is dropped.
pub async fn watch(tls: TlsHandle, every: Duration) {
    if tls.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let t = tls.clone();
        let _ = tokio::task::spawn_blocking(move || t.reload_if_changed()).await;
    }
}

/// `-----BEGIN LABEL-----` armour around DER, 64 columns.
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A fresh self-signed pair `NAME.crt` / `NAME.key` in `dir`, for tests.
#[cfg(test)]
pub(crate) fn write_pair(dir: &Path, name: &str) -> CertFiles {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let files = CertFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, pem("CERTIFICATE", cert.der())).expect("write");
    std::fs::write(&files.key, pem("PRIVATE KEY", &key.serialize_der())).expect("write");
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_the_key_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write_pair(dir.path(), "a");
        let b = write_pair(dir.path(), "b");
        let mixed = CertFiles {
            cert: a.cert.clone(),
            key: b.key.clone(),
        };
        let e = mixed.load().err().expect("mismatch");
        assert_eq!((e.role, e.file.clone()), (Role::Key, b.key.clone()));
        assert!(e.reason.contains("does not match"), "{e}");
        let missing = CertFiles {
            cert: dir.path().join("nope.crt"),
            key: a.key.clone(),
        };
        let e = missing.load().err().expect("missing");
        assert_eq!(e.role, Role::Cert);
        assert!(e.to_string().contains("nope.crt"), "{e}");
    }

    #[test]
    fn a_bad_file_keeps_the_old_certificate_until_a_good_one_arrives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write_pair(dir.path(), "a");
        let store = CertStore::open(a.clone()).expect("open");
        let before = store.fingerprint();
        std::fs::write(&a.cert, "garbage").expect("write");
        assert!(store.reload().is_err());
        assert_eq!(store.fingerprint(), before);
        let b = write_pair(dir.path(), "b");
        std::fs::copy(&b.cert, &a.cert).expect("copy");
        std::fs::copy(&b.key, &a.key).expect("copy");
        store.reload_if_changed();
        assert_ne!(store.fingerprint(), before);
        assert_eq!(store.fingerprint(), b.load().expect("b").fingerprint);
    }
}
