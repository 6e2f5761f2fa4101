//! The CLI's end of `<data_dir>/control.sock`: reaches the running server,
//! or says there is none (no socket, nobody listening on it, or the data
//! directory's lock free), so the command opens the database itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::lock::DataDirLock;
use super::protocol::{Reply, Request, SOCKET_FILE};

/// How long a command may take on the server (a backup of a large
/// database, a password hash, a re-seal).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A server holds the directory but its socket cannot be reached.
    #[error("a server (PID {pid}) is running on {dir}, but its control socket {socket} cannot be used: {source}")]
    Unreachable {
        dir: PathBuf,
        socket: PathBuf,
        pid: String,
        source: std::io::Error,
    },
    #[error("the control socket {socket}: {source}")]
    Io { socket: PathBuf, source: std::io::Error },
    #[error("the control socket {socket} answered what is not a reply: {reason}")]
    Protocol { socket: PathBuf, reason: String },
}

/// A connection to the running server.
#[derive(Debug)]
pub struct Connection {
    stream: BufReader<UnixStream>,
    socket: PathBuf,
}

/// The running server's control socket, or `None` when no server runs on
/// `data_dir`.
pub fn connect(data_dir: &Path) -> Result<Option<Connection>, ClientError> {
    let socket = data_dir.join(SOCKET_FILE);
    match UnixStream::connect(&socket) {
        Ok(stream) => Ok(Some(Connection {
            stream: BufReader::new(stream),
            socket,
        })),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        // Whatever else stands in the way matters only if a server runs.
        Err(source) => match DataDirLock::holder(data_dir) {
            Ok(None) => Ok(None),
            Ok(Some(pid)) => Err(ClientError::Unreachable {
                dir: data_dir.to_path_buf(),
                socket,
                pid,
                source,
            }),
            Err(_) => Err(ClientError::Io { socket, source }),
        },
    }
}

impl Connection {
    /// Sends `request` and reads the reply line. A reply with an
    /// attachment leaves its bytes to [`Connection::attachment`].
    pub fn send(&mut self, request: &Request) -> Result<Reply, ClientError> {
        let io = |socket: &Path| {
            let socket = socket.to_path_buf();
            move |source| ClientError::Io { socket, source }
        };
        let stream = self.stream.get_mut();
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io(&self.socket))?;
        let mut line = serde_json::to_vec(request).map_err(|e| ClientError::Protocol {
            socket: self.socket.clone(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        // A server that refuses the caller answers before reading, and
        // hangs up: its answer is still there to read.
        let written = stream.write_all(&line);
        let mut answer = String::new();
        let read = self.stream.read_line(&mut answer);
        if answer.is_empty() {
            written.map_err(io(&self.socket))?;
        }
        read.map_err(io(&self.socket))?;
        serde_json::from_str(&answer).map_err(|e| ClientError::Protocol {
            socket: self.socket.clone(),
            reason: if answer.is_empty() {
                "it closed the connection".into()
            } else {
                e.to_string()
            },
        })
    }

    /// The `len` bytes that follow a reply, copied into `out`.
    pub fn attachment(&mut self, len: u64, out: &mut dyn Write) -> Result<(), ClientError> {
        let copied = std::io::copy(&mut (&mut self.stream).take(len), out).map_err(|source| ClientError::Io {
            socket: self.socket.clone(),
            source,
        })?;
        if copied != len {
            return Err(ClientError::Protocol {
                socket: self.socket.clone(),
                reason: format!("the backup ended after {copied} of {len} bytes"),
            });
        }
        Ok(())
    }
}
