//! `pollster admin self-signed`: a key and a self-signed certificate in the
//! data directory for a first install, so the UI is on HTTPS before a real
//! certificate exists. The operator compares the printed fingerprint with
//! the one the browser shows on its warning page.

use super::{DataDirArgs, EXIT_CONFIG, Failure, fail, load_config};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file names written into the data directory.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// How long the certificate is valid.
const VALID_DAYS: i64 = 825;

#[derive(Debug, Args)]
pub struct SelfSignedArgs {
    #[command(flatten)]
    pub dir: DataDirArgs,
    /// A name (or IP address) browsers will reach the server by; repeat for
    /// several.
    #[arg(long = "hostname", value_name = "NAME", required = true)]
    pub hostnames: Vec<String>,
    /// Replace tls.crt and tls.key if they exist.
    #[arg(long)]
    pub force: bool,
}

/// What was written.
#[derive(Debug)]
pub struct Written {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub fingerprint: String,
}

pub fn run(args: SelfSignedArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let data_dir = match &args.dir.data_dir {
        Some(d) => d.clone(),
        None => load_config(args.dir.config.as_deref())?.server.data_dir,
    };
    let w = write(&data_dir, &args.hostnames, args.force)?;
    let text = format!(
        "wrote {cert} and {key} (0600)\n\
         SHA-256 fingerprint: {fp}\n\
         \n\
         To serve HTTPS, add to [server] in the config file:\n\
         tls_cert = {cert_q}\n\
         tls_key = {key_q}\n",
        cert = w.cert.display(),
        key = w.key.display(),
        fp = w.fingerprint,
        cert_q = toml_string(&w.cert),
        key_q = toml_string(&w.key),
    );
    out.write_all(text.as_bytes()).map_err(|e| fail(e.to_string()))
}

fn toml_string(p: &Path) -> String {
    toml::Value::String(p.display().to_string()).to_string()
}

/// Generate the key and certificate for `hostnames` and write them into
/// `data_dir` (created if missing).
pub fn write(data_dir: &Path, hostnames: &[String], force: bool) -> Result<Written, Failure> {
    let usage = |message: String| Failure {
        code: EXIT_CONFIG,
        message,
    };
    let names: Vec<String> = hostnames.iter().map(|h| h.trim().to_string()).collect();
    if let Some(bad) = names.iter().find(|h| h.is_empty() || h.contains(char::is_whitespace)) {
        return Err(usage(format!("--hostname {bad:?}: not a host name or address")));
    }
    // A data directory made here is private, as the server makes it.
    let mut dir = std::fs::DirBuilder::new();
    dir.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        dir.mode(0o700);
    }
    dir.create(data_dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", data_dir.display())))?;
    // An absolute path, so the printed config lines work from anywhere.
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let cert_path = data_dir.join(CERT_FILE);
    let key_path = data_dir.join(KEY_FILE);
    if !force {
        for p in [&cert_path, &key_path] {
            if p.exists() {
                return Err(usage(format!("{} exists; pass --force to replace it", p.display())));
            }
        }
    }

    let key = rcgen::KeyPair::generate().map_err(|e| fail(format!("generating a key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(names.clone()).map_err(|e| usage(format!("--hostname: {e}")))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, names[0].clone());
    dn.push(rcgen::DnType::OrganizationName, "Pollster (self-signed)");
    params.distinguished_name = dn;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(VALID_DAYS);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .self_signed(&key)
        .map_err(|e| fail(format!("signing the certificate: {e}")))?;

    write_file(&key_path, &crate::tls::pem("PRIVATE KEY", &key.serialize_der()), 0o600)?;
    write_file(&cert_path, &crate::tls::pem("CERTIFICATE", cert.der()), 0o644)?;
    Ok(Written {
        cert: cert_path,
        key: key_path,
        fingerprint: crate::tls::fingerprint(cert.der()),
    })
}

/// Replace `path` with `text`, created with `mode` (never briefly wider).
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), Failure> {
    let err = |e: std::io::Error| fail(format!("cannot write {}: {e}", path.display()));
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_to_overwrite_without_force_and_the_pair_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = write(dir.path(), &["pollster.lan".into(), "192.0.2.7".into()], false).expect("write");
        let loaded = crate::tls::CertFiles {
            cert: w.cert.clone(),
            key: w.key.clone(),
        }
        .load()
        .expect("the pair loads");
        assert_eq!(loaded.fingerprint, w.fingerprint);
        let again = write(dir.path(), &["pollster.lan".into()], false).expect_err("refused");
        assert_eq!(again.code, EXIT_CONFIG);
        assert!(again.message.contains("--force"), "{}", again.message);
        let forced = write(dir.path(), &["pollster.lan".into()], true).expect("forced");
        assert_ne!(forced.fingerprint, w.fingerprint);
    }
}
