//! What goes over `<data_dir>/control.sock`: one JSON request line from the
//! CLI, one JSON reply line from the server (and, for a backup, the age
//! file's bytes after it, as many as the reply says).

use serde::{Deserialize, Serialize};

use crate::store::TokenScope;

/// The socket's file name inside the data directory.
pub const SOCKET_FILE: &str = "control.sock";

/// The longest request line the server reads.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// An `admin` command for the running server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    CreateToken {
        name: String,
        scope: TokenScope,
    },
    RevokeToken {
        id: String,
    },
    ListTokens,
    SetPassword {
        password: String,
    },
    RotateKey,
    /// `target` is where the CLI writes the file (for the audit trail).
    Backup {
        passphrase: String,
        target: String,
    },
    Reload,
}

impl Request {
    /// The command's name, as the CLI spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Request::CreateToken { .. } => "create-token",
            Request::RevokeToken { .. } => "revoke-token",
            Request::ListTokens => "list-tokens",
            Request::SetPassword { .. } => "set-password",
            Request::RotateKey => "rotate-key",
            Request::Backup { .. } => "backup",
            Request::Reload => "reload",
        }
    }
}

/// The server's answer: what the command prints, or why it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// For standard output.
    #[serde(default)]
    pub stdout: String,
    /// For standard error (notes beside the result).
    #[serde(default)]
    pub stderr: String,
    /// Set when the command failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ReplyError>,
    /// The number of bytes that follow the line (a backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<u64>,
}

/// A failed command: the CLI's exit code and message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyError {
    pub code: u8,
    pub message: String,
}

impl Reply {
    pub fn output(out: crate::control::text::Output) -> Reply {
        Reply {
            stdout: out.stdout,
            stderr: out.stderr,
            ..Reply::default()
        }
    }

    pub fn failed(code: u8, message: impl Into<String>) -> Reply {
        Reply {
            error: Some(ReplyError {
                code,
                message: message.into(),
            }),
            ..Reply::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_one_json_object_named_by_its_command() {
        let r = Request::CreateToken {
            name: "ci".into(),
            scope: TokenScope::Read,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(line, r#"{"command":"create-token","name":"ci","scope":"read"}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        let list: Request = serde_json::from_str(r#"{"command":"list-tokens"}"#).unwrap();
        assert_eq!(list, Request::ListTokens);
        assert!(serde_json::from_str::<Request>(r#"{"command":"drop-tables"}"#).is_err());
    }
}
