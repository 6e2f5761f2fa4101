//! The server's end of `<data_dir>/control.sock`: the `admin` commands of a
//! running server. The socket is made after the data-directory lock is
//! taken (a stale one left by a killed server is removed first), mode 0600
//! in the 0700 data directory, and removed on a clean stop.
//!
//! Only the server's own uid and root may use it: the peer's uid comes from
//! the kernel (`SO_PEERCRED`), and anyone else is answered with a refusal,
//! logged as a warning, and hung up on. Each command runs through the same
//! services as the HTTP API, as the actor `cli:<uid>` in the audit trail.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::protocol::{MAX_REQUEST_BYTES, Reply, Request, SOCKET_FILE};
use super::text;
use crate::service::{Context, ServiceError};

/// How long a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const EXIT_FAILURE: u8 = 1;
const EXIT_CONFIG: u8 = 2;

/// The bound socket, until [`ControlSocket::serve`]. Dropping it removes
/// the socket file.
#[derive(Debug)]
pub struct ControlSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
}

/// What the commands work on besides the service context.
#[derive(Clone)]
pub struct Handlers {
    pub reloader: Arc<crate::service::reload::Reloader>,
    /// The data key's file (`rotate-key` rewrites it).
    pub key_file: PathBuf,
}

/// This process's effective uid.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

impl ControlSocket {
    /// Binds `<data_dir>/control.sock`, replacing a stale one. The caller
    /// holds the data-directory lock, so no live server owns that file.
    pub fn bind(data_dir: &Path) -> std::io::Result<ControlSocket> {
        let path = data_dir.join(SOCKET_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed a stale control socket"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&path)?;
        // The directory is 0700: nobody else reaches the socket before
        // its mode is narrowed.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        }
        Ok(ControlSocket {
            listener: Some(listener),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections until the task is aborted (dropping the
    /// connections in progress with it).
    pub async fn serve(mut self, cx: Context, handlers: Handlers) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        let own = own_uid();
        tracing::info!(path = %self.path.display(), uid = own, "control socket listening");
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(connection(stream, own, cx.clone(), handlers.clone()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "control socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The path of the socket a [`ControlSocket::serve`] task removes when it
/// ends; for the stop to remove it whatever the task's state.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

async fn send(stream: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).unwrap_or_default();
    line.push(b'\n');
    stream.write_all(&line).await
}

async fn connection(mut stream: UnixStream, own: u32, cx: Context, handlers: Handlers) {
    let uid = match stream.peer_cred() {
        Ok(c) => c.uid(),
        Err(e) => {
            tracing::warn!(error = %e, "control socket: cannot read the peer's credentials; refused");
            let _ = send(&mut stream, &Reply::failed(EXIT_FAILURE, "refused: unknown peer")).await;
            return;
        }
    };
    if uid != own && uid != 0 {
        tracing::warn!(
            peer_uid = uid,
            server_uid = own,
            "control socket: refused a connection from a uid that is neither the server's nor root"
        );
        let message = format!(
            "the server refused the command: uid {uid} may not use the control socket \
             (only the server's user, uid {own}, and root may)"
        );
        let _ = send(&mut stream, &Reply::failed(EXIT_FAILURE, message)).await;
        let _ = stream.shutdown().await;
        return;
    }
    let mut line = String::new();
    let got = {
        let mut reader = BufReader::new(&mut stream).take(MAX_REQUEST_BYTES);
        tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line)).await
    };
    let request = match got {
        Ok(Ok(n)) if n > 0 && line.ends_with('\n') => serde_json::from_str::<Request>(&line),
        _ => {
            let _ = send(&mut stream, &Reply::failed(EXIT_FAILURE, "no request line")).await;
            return;
        }
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            let _ = send(&mut stream, &Reply::failed(EXIT_FAILURE, format!("bad request: {e}"))).await;
            return;
        }
    };
    let actor = format!("cli:{uid}");
    tracing::info!(actor = %actor, command = request.name(), "control socket command");
    let (reply, attachment) = run(&cx, &handlers, request, &actor).await;
    if send(&mut stream, &reply).await.is_ok()
        && let Some(bytes) = attachment
    {
        let _ = stream.write_all(&bytes).await;
    }
    let _ = stream.shutdown().await;
}

fn service_failure(e: ServiceError) -> Reply {
    let code = match e {
        ServiceError::Invalid(_) | ServiceError::Unreadable { .. } | ServiceError::BadJson(_) => EXIT_CONFIG,
        _ => EXIT_FAILURE,
    };
    Reply::failed(code, e.to_string())
}

async fn run(cx: &Context, h: &Handlers, request: Request, actor: &str) -> (Reply, Option<Vec<u8>>) {
    let reply = match request {
        Request::CreateToken { name, scope } => match text::token_name(&name) {
            Err(message) => Reply::failed(EXIT_CONFIG, message),
            Ok(name) => match crate::service::tokens::create(cx, name, scope, actor).await {
                Ok((plain, info)) => Reply::output(text::token_created(&plain, &info)),
                Err(e) => service_failure(e),
            },
        },
        Request::RevokeToken { id } => match crate::service::tokens::revoke(cx, &id, actor).await {
            Ok(true) => Reply::output(text::token_revoked(&id)),
            Ok(false) => Reply::failed(EXIT_FAILURE, text::no_such_token(&id)),
            Err(e) => service_failure(e),
        },
        Request::ListTokens => match crate::service::tokens::list(cx).await {
            Ok(list) => Reply::output(text::token_list(&list)),
            Err(e) => service_failure(e),
        },
        Request::SetPassword { password } => set_password(cx, password, actor).await,
        Request::RotateKey => rotate_key(cx, h, actor).await,
        Request::Backup { passphrase, target } => {
            if let Err(e) = crate::secrets::backup::check_passphrase(&passphrase) {
                Reply::failed(EXIT_CONFIG, format!("the passphrase file: {e}"))
            } else {
                return match crate::service::backup::take(cx, passphrase, actor, &target).await {
                    Ok(bytes) => (
                        Reply {
                            attachment: Some(bytes.len() as u64),
                            ..Reply::default()
                        },
                        Some(bytes),
                    ),
                    Err(e) => (service_failure(e), None),
                };
            }
        }
        Request::Reload => match h.reloader.reload(cx, actor).await {
            Ok(report) => Reply::output(text::reload_report(&report)),
            Err(e) => service_failure(e),
        },
    };
    (reply, None)
}

/// The admin password, as the Security page changes it: the change event
/// with it, and every session of the account ended.
async fn set_password(cx: &Context, password: String, actor: &str) -> Reply {
    if let Err(e) = crate::accounts::check_password_rules(&password) {
        return Reply::failed(EXIT_CONFIG, e.to_string());
    }
    let now = cx.engine.now();
    let user = crate::accounts::ADMIN;
    let event = crate::sink::event::Event::operator(now, actor, "password.change", user);
    let events: Vec<_> = cx.sink.stage(&event).into_iter().collect();
    let store = cx.store.clone();
    let done = tokio::task::spawn_blocking(move || -> Result<usize, String> {
        crate::accounts::set_admin_password_with_events(&store, &password, now, &events).map_err(|e| e.to_string())?;
        // The admin exists now: the first-run setup code is void.
        let _ = std::fs::remove_file(store.path().with_file_name(crate::accounts::SETUP_CODE_FILE));
        store.delete_user_sessions(user, None).map_err(|e| e.to_string())
    })
    .await;
    match done {
        Ok(Ok(ended)) => {
            tracing::info!(
                actor,
                sessions_ended = ended,
                "admin password set through the control socket"
            );
            Reply::output(text::password_set())
        }
        Ok(Err(e)) => Reply::failed(EXIT_FAILURE, e),
        Err(e) => Reply::failed(EXIT_FAILURE, e.to_string()),
    }
}

/// The rotation inside the server: its store seals and opens with the new
/// key from the commit on. The freed pages are left to be reused (the
/// open database cannot be rewritten).
async fn rotate_key(cx: &Context, h: &Handlers, actor: &str) -> Reply {
    let event =
        crate::sink::event::Event::operator(cx.engine.now(), actor, "key.rotate", &h.key_file.display().to_string());
    let events: Vec<_> = cx.sink.stage(&event).into_iter().collect();
    let (store, key_file) = (cx.store.clone(), h.key_file.clone());
    let done = tokio::task::spawn_blocking(move || super::rotate::rotate_in_place(&store, &key_file, &events)).await;
    match done {
        Ok(Ok((n, old))) => {
            tracing::info!(actor, records = n, "data key rotated through the control socket");
            Reply {
                stdout: text::key_rotated(n, &h.key_file, &old),
                ..Reply::default()
            }
        }
        Ok(Err(message)) => Reply::failed(EXIT_FAILURE, message),
        Err(e) => Reply::failed(EXIT_FAILURE, e.to_string()),
    }
}
