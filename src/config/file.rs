//! Reading the TOML file: syntax, the document's shape, and turning serde's
//! complaints into one-line errors that name the key path, the value as
//! written, and the line.
//!
//! The text is parsed twice: once into a plain tree (syntax errors, and the
//! source of the values quoted in messages), once into typed sections through
//! `serde_path_to_error` (which key failed) on toml's own deserializer
//! (where in the text).

use super::{ClusterConfig, ConfigError, LogConfig, MetricsConfig, ServerConfig, SinkConfig};
use crate::model::{AdaptiveSettings, BudgetConfig, FailureSettings, InstanceConfig, SchedulerSettings, TypeDef};
use serde::Deserialize;

/// The file as written; every section is optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub adaptive: AdaptiveSettings,
    #[serde(default)]
    pub scheduler: SchedulerSettings,
    #[serde(default)]
    pub failure: FailureSettings,
    #[serde(default)]
    pub sink: Option<SinkConfig>,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    #[serde(default)]
    pub budgets: Vec<BudgetConfig>,
    #[serde(default)]
    pub types: Vec<TypeDef>,
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Parse `text` (the contents of `file`) into its sections.
pub(super) fn parse(file: &str, text: &str) -> Result<FileConfig, ConfigError> {
    let de = toml::de::Deserializer::parse(text).map_err(|e| syntax_error(file, text, &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        // The document as a tree only to name the bad key and value: a
        // file that reads cleanly is parsed once (at 100,000 instances
        // the second parse was half the start-up's config time).
        match text.parse::<toml::Table>() {
            Ok(tree) => shape_error(file, text, &tree, &e),
            Err(syntax) => syntax_error(file, text, &syntax),
        }
    })
}

fn syntax_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e
        .span()
        .map(|s| {
            let (line, col) = position(text, s.start);
            format!(" at line {line}, column {col}")
        })
        .unwrap_or_default();
    ConfigError::new(
        file,
        "",
        "",
        format!("TOML syntax error{at}: {}", one_line(e.message())),
    )
}

/// 1-based line and column of byte `offset`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn shape_error(
    file: &str,
    text: &str,
    tree: &toml::Table,
    e: &serde_path_to_error::Error<toml::de::Error>,
) -> ConfigError {
    let mut path: Vec<Seg> = e
        .path()
        .iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
            serde_path_to_error::Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect();
    let inner = e.inner();
    let raw = one_line(inner.message());
    let line = inner
        .span()
        .map(|s| format!(" (line {})", position(text, s.start).0))
        .unwrap_or_default();

    let message = if let Some(rest) = raw.strip_prefix("unknown field ") {
        let names = backticked(rest);
        let Some((unknown, expected)) = names.split_first() else {
            return ConfigError::new(file, key_string(&path), "", format!("{raw}{line}"));
        };
        // serde_path_to_error usually records the unknown key itself.
        if path.last() != Some(&Seg::Key(unknown.clone())) {
            path.push(Seg::Key(unknown.clone()));
        }
        let parent = key_string(&path[..path.len() - 1]);
        let qualify = |k: &str| {
            if parent.is_empty() {
                k.to_string()
            } else {
                format!("{parent}.{k}")
            }
        };
        match closest(unknown, expected) {
            Some(s) => format!("unknown key; did you mean {}?", qualify(s)),
            None if expected.is_empty() => "unknown key".to_string(),
            None => format!("unknown key; known keys here: {}", expected.join(", ")),
        }
    } else if let Some(rest) = raw.strip_prefix("unknown variant ") {
        let names = backticked(rest);
        match names.split_first() {
            Some((bad, expected)) => match closest(bad, expected) {
                Some(s) => format!("unknown value; did you mean {s:?}?"),
                None => format!("unknown value; expected one of {}", expected.join(", ")),
            },
            None => raw.clone(),
        }
    } else if let Some(rest) = raw.strip_prefix("missing field ") {
        if let Some(name) = backticked(rest).first()
            && path.last() != Some(&Seg::Key(name.clone()))
        {
            path.push(Seg::Key(name.clone()));
        }
        return ConfigError::new(file, key_string(&path), "", format!("required key is missing{line}"));
    } else {
        raw.clone()
    };

    let value = if is_secret(&path) {
        crate::model::HIDDEN.to_string()
    } else {
        lookup(tree, &path).map(render).unwrap_or_default()
    };
    ConfigError::new(file, key_string(&path), value, format!("{message}{line}"))
}

/// The names between backticks in a serde message, in order.
fn backticked(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The candidate closest to `name`, if it is close enough to be a typo.
pub(super) fn closest<'a>(name: &str, candidates: &'a [String]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(name, c), c.as_str()))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `instances[1].auth.token` style.
fn key_string(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

/// Credentials and sink headers are never echoed back, even in errors.
fn is_secret(path: &[Seg]) -> bool {
    let sensitive = path
        .iter()
        .any(|s| matches!(s, Seg::Key(k) if k == "auth" || k == "headers"));
    sensitive && path.last() != Some(&Seg::Key("kind".into()))
}

fn lookup<'a>(tree: &'a toml::Table, path: &[Seg]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let Seg::Key(k) = first else { return None };
    let mut v = tree.get(k)?;
    for seg in rest {
        v = match (seg, v) {
            (Seg::Key(k), toml::Value::Table(t)) => t.get(k)?,
            (Seg::Index(i), toml::Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

/// A value as written in TOML, on one line and at most 80 characters.
pub(super) fn render(v: &toml::Value) -> String {
    let s = render_inline(v);
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// A table key: bare when TOML allows, quoted otherwise.
fn render_key(k: &str) -> String {
    let bare = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        k.to_string()
    } else {
        toml::Value::String(k.to_string()).to_string()
    }
}

fn render_inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(render_inline).collect();
            format!("[{}]", items.join(", "))
        }
        toml::Value::Table(t) => {
            if t.is_empty() {
                return "{}".into();
            }
            let items: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{} = {}", render_key(k), render_inline(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        other => other.to_string(),
    }
}
