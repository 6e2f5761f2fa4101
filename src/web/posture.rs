//! The Security page's list of protections: each with its state and the
//! one line that turns it on. Built from what the server was started with
//! ([`Posture`]) and what the store holds (tokens, an admin).

use std::path::{Path, PathBuf};

/// What the server was started with, as far as the protections go.
#[derive(Debug, Clone, Default)]
pub struct Posture {
    /// The UI and API listener serves HTTPS itself: cookies are `Secure`
    /// and answers carry `Strict-Transport-Security`.
    pub ui_tls: bool,
    /// The metrics listener serves HTTPS.
    pub metrics_tls: bool,
    /// `/metrics` and `/values` need a token (`metrics_auth = "token"`).
    pub metrics_auth: bool,
    /// The key that seals stored credentials, if they are sealed.
    pub key_file: Option<PathBuf>,
    /// `trusted_proxies` as configured.
    pub trusted_proxies: Vec<String>,
}

/// How a protection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    On,
    Off,
    /// On, but weaker than it should be (a key file others can read).
    Warn,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::On => "on",
            State::Off => "off",
            State::Warn => "check",
        }
    }
}

/// One row of the list.
#[derive(Debug, Clone, PartialEq)]
pub struct Protection {
    pub name: &'static str,
    pub state: State,
    /// What it means now.
    pub detail: String,
    /// The one line (config or command) that turns it on; empty when on.
    pub how: String,
}

/// The permission bits of a file (`None` if it cannot be read).
#[cfg(unix)]
fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o777)
}

#[cfg(not(unix))]
fn mode_of(_path: &Path) -> Option<u32> {
    None
}

/// The protections, in the order the page lists them. `tokens`: (admin,
/// read) token counts; `admin`: first-run setup is done.
pub fn protections(p: &Posture, admin: bool, tokens: (usize, usize)) -> Vec<Protection> {
    let tls = |name, on: bool, key: &str, what: &str| Protection {
        name,
        state: if on { State::On } else { State::Off },
        detail: if on {
            format!("{what} is served over HTTPS")
        } else {
            format!("{what} is plain HTTP: passwords, cookies and tokens cross the network in clear")
        },
        how: if on {
            String::new()
        } else {
            format!(
                "[server] {key}_cert = \"/etc/pollster/tls.crt\" and {key}_key = \"/etc/pollster/tls.key\" (or: pollster admin self-signed --hostname NAME)"
            )
        },
    };
    let mut out = vec![
        tls("TLS: UI and API", p.ui_tls, "tls", "The UI and API listener"),
        tls(
            "TLS: metrics",
            p.metrics_tls,
            "metrics_tls",
            "The metrics listener (/metrics, /values)",
        ),
        Protection {
            name: "Metrics authentication",
            state: if p.metrics_auth { State::On } else { State::Off },
            detail: if p.metrics_auth {
                "/metrics and /values need a read or admin token".into()
            } else {
                "/metrics and /values answer anyone who can reach the metrics port; /values carries every instance's inventory".into()
            },
            how: if p.metrics_auth {
                String::new()
            } else {
                "[server] metrics_auth = \"token\"".into()
            },
        },
        Protection {
            name: "Setup",
            state: if admin { State::On } else { State::Off },
            detail: if admin {
                "An admin password is set".into()
            } else {
                "No admin yet: anyone with the setup code can claim this server".into()
            },
            how: if admin {
                String::new()
            } else {
                "open /setup with the code in <data_dir>/setup-code".into()
            },
        },
    ];
    out.push(match &p.key_file {
        None => Protection {
            name: "Credentials at rest",
            state: State::Off,
            detail: "Instance credentials and sink headers are stored unsealed in the database".into(),
            how: String::new(),
        },
        Some(path) => match mode_of(path) {
            Some(m) if m & 0o077 == 0 => Protection {
                name: "Credentials at rest",
                state: State::On,
                detail: format!("Sealed under {} (mode {m:04o})", path.display()),
                how: String::new(),
            },
            Some(m) => Protection {
                name: "Credentials at rest",
                state: State::Warn,
                detail: format!(
                    "Sealed, but {} is mode {m:04o}: others on this machine can read the key",
                    path.display()
                ),
                how: format!("chmod 600 {}", path.display()),
            },
            None => Protection {
                name: "Credentials at rest",
                state: State::Warn,
                detail: format!("Sealed under {}, whose permissions cannot be read", path.display()),
                how: format!("chmod 600 {}", path.display()),
            },
        },
    });
    let (admins, readers) = tokens;
    out.push(Protection {
        name: "API tokens",
        state: if admins > 0 && readers == 0 {
            State::Warn
        } else {
            State::On
        },
        detail: format!("{admins} admin, {readers} read"),
        how: if admins > 0 && readers == 0 {
            "give dashboards and scrapers read tokens: a read token changes nothing".into()
        } else {
            String::new()
        },
    });
    out.push(Protection {
        name: "Trusted proxies",
        state: State::On,
        detail: if p.trusted_proxies.is_empty() {
            "None: X-Forwarded-For and X-Forwarded-Proto are ignored, the peer address is the client".into()
        } else {
            format!("X-Forwarded-* believed from {}", p.trusted_proxies.join(", "))
        },
        how: if p.trusted_proxies.is_empty() {
            "behind a reverse proxy: [server] trusted_proxies = [\"10.0.0.1/32\"]".into()
        } else {
            String::new()
        },
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(rows: &'a [Protection], name: &str) -> &'a Protection {
        rows.iter().find(|r| r.name == name).expect(name)
    }

    #[test]
    fn each_protection_says_its_state_and_how_to_turn_it_on() {
        let rows = protections(&Posture::default(), false, (1, 0));
        assert_eq!(rows.len(), 7);
        let tls = row(&rows, "TLS: UI and API");
        assert_eq!(tls.state, State::Off);
        assert!(tls.how.contains("tls_cert"), "{}", tls.how);
        assert!(row(&rows, "TLS: metrics").how.contains("metrics_tls_cert"));
        assert_eq!(
            row(&rows, "Metrics authentication").how,
            "[server] metrics_auth = \"token\""
        );
        assert_eq!(row(&rows, "Setup").state, State::Off);
        assert_eq!(row(&rows, "API tokens").state, State::Warn, "only admin tokens");
        assert!(row(&rows, "Trusted proxies").how.contains("trusted_proxies"));

        let on = Posture {
            ui_tls: true,
            metrics_tls: true,
            metrics_auth: true,
            key_file: None,
            trusted_proxies: vec!["10.0.0.1/32".into()],
        };
        let rows = protections(&on, true, (1, 2));
        for name in [
            "TLS: UI and API",
            "TLS: metrics",
            "Metrics authentication",
            "Setup",
            "API tokens",
        ] {
            let r = row(&rows, name);
            assert_eq!((r.state, r.how.as_str()), (State::On, ""), "{name}");
        }
        assert_eq!(row(&rows, "API tokens").detail, "1 admin, 2 read");
        assert!(row(&rows, "Trusted proxies").detail.contains("10.0.0.1/32"));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_flagged() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("secret.key");
        std::fs::write(&key, [0u8; 32]).unwrap();
        let p = |mode| {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            let posture = Posture {
                key_file: Some(key.clone()),
                ..Posture::default()
            };
            protections(&posture, true, (0, 0))
                .into_iter()
                .find(|r| r.name == "Credentials at rest")
                .unwrap()
        };
        assert_eq!(p(0o600).state, State::On);
        let open = p(0o644);
        assert_eq!(open.state, State::Warn);
        assert!(open.how.starts_with("chmod 600 "), "{}", open.how);
    }
}
