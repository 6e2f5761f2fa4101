//! `pollster values`: one group's value rules run on a saved body, offline,
//! printing the samples as the Prometheus text format and the skipped ones
//! on stderr. Nothing is polled and no data directory is opened.

use super::{EXIT_CONFIG, EXIT_FAILURE, Failure, checked_config};
use crate::values::exposition::{write_head, write_sample};
use crate::values::{Context, Extraction, Extractor, Facts, Rule, Sample, SkipReason};
use clap::Args;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ValuesArgs {
    /// Config file; its types, the shipped presets and `http` are known.
    #[arg(long, short)]
    pub config: PathBuf,
    /// The type holding the group.
    #[arg(long = "type", value_name = "TYPE")]
    pub type_name: String,
    /// The group whose value rules run.
    #[arg(long)]
    pub group: String,
    /// A response body of that group, as JSON.
    #[arg(long, value_name = "FILE")]
    pub body: PathBuf,
    /// The fan-out item the body belongs to (what `@item` gives); for
    /// items made of fields, `node=pve1,type=qemu,vmid=100` (what
    /// `@item.node` … give).
    #[arg(long)]
    pub item: Option<String>,
    /// An instance fact the rules read as `@fact.NAME`, as NAME=VALUE
    /// (repeatable).
    #[arg(long = "fact", value_name = "NAME=VALUE")]
    pub facts: Vec<String>,
}

/// What `pollster values` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct ValuesOutput {
    /// The samples in the Prometheus text format (stdout).
    pub exposition: String,
    /// Config warnings, then one line per (metric, skip reason) with its
    /// count, and metrics that made no sample (stderr).
    pub notes: String,
}

fn config_error(message: String) -> Failure {
    Failure {
        code: EXIT_CONFIG,
        message,
    }
}

fn failure(message: String) -> Failure {
    Failure {
        code: EXIT_FAILURE,
        message,
    }
}

/// `pollster values`: loads the config as `check-config` does, finds the
/// type and group, and runs the group's rules on the body.
pub fn values(args: &ValuesArgs) -> Result<ValuesOutput, Failure> {
    let (config, catalog) = checked_config(&args.config)?;
    let Some(ty) = catalog.types.get(&args.type_name) else {
        let known: Vec<&str> = catalog.types.keys().map(String::as_str).collect();
        return Err(config_error(format!(
            "--type {:?}: no such type (known: {})",
            args.type_name,
            known.join(", ")
        )));
    };
    let Some((g, group)) = ty.groups.iter().enumerate().find(|(_, g)| g.name == args.group) else {
        let groups: Vec<&str> = ty.groups.iter().map(|g| g.name.as_str()).collect();
        return Err(config_error(format!(
            "--group {:?}: type {} has no such group (its groups: {})",
            args.group,
            ty.name,
            groups.join(", ")
        )));
    };
    if group.values.is_empty() {
        return Err(config_error(format!(
            "--group {:?}: type {}, group {} has no value rules ([[types.groups.values]])",
            args.group, ty.name, group.name
        )));
    }
    let field = match config.types.iter().position(|t| t.name == ty.name) {
        Some(t) => format!("types[{t}].groups[{g}]"),
        None => format!("{}.groups[{g}]", ty.name),
    };
    let rules = group
        .compile_values(&ty.name, &field)
        .map_err(|e| config_error(format!("{}: {e}", args.config.display())))?;

    let path = args.body.display();
    let bytes = std::fs::read(&args.body).map_err(|e| failure(format!("cannot read body file {path}: {e}")))?;
    let body: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| failure(format!("body file {path} is not JSON: {e}")))?;

    let mut facts = Facts::new();
    for f in &args.facts {
        let Some((name, value)) = f.split_once('=') else {
            return Err(config_error(format!("--fact {f:?}: write NAME=VALUE")));
        };
        facts.insert(name.to_string(), value.to_string());
    }
    let mut x = Extractor::new(group.max_series);
    x.feed_in(
        &rules,
        &body,
        Context {
            item: args.item.as_deref(),
            facts: Some(&facts),
            ..Context::default()
        },
    );
    let x = x.finish();
    let mut notes = String::new();
    for w in &config.warnings {
        let _ = writeln!(notes, "warning: {w}");
    }
    if x.waiting_for_facts {
        let _ = writeln!(
            notes,
            "note: some samples name a fact not given with --fact NAME=VALUE (skipped as missing)"
        );
    }
    notes.push_str(&skipped(&rules, &x));
    Ok(ValuesOutput {
        exposition: render(&rules, &x),
        notes,
    })
}

/// The first rule of each metric, in rule order: the order metrics are
/// written in, with the help and kind they are written with.
fn families(rules: &[Rule]) -> Vec<&Rule> {
    let mut out: Vec<&Rule> = Vec::new();
    for r in rules {
        if !out.iter().any(|f| f.metric == r.metric) {
            out.push(r);
        }
    }
    out
}

/// The samples by metric, each metric's in the order they were made.
fn by_metric(x: &Extraction) -> HashMap<&str, Vec<&Sample>> {
    let mut map: HashMap<&str, Vec<&Sample>> = HashMap::new();
    for s in &x.samples {
        map.entry(&*s.metric).or_default().push(s);
    }
    map
}

/// Samples as the Prometheus text format: `# HELP` and `# TYPE` once per
/// metric (from its first rule), metrics in first-rule order, each followed
/// by its samples. No `instance` label. A metric without samples is left
/// out.
pub fn render(rules: &[Rule], x: &Extraction) -> String {
    let samples = by_metric(x);
    let mut out = String::new();
    for f in families(rules) {
        let Some(list) = samples.get(&*f.metric) else { continue };
        write_head(&mut out, &f.metric, &f.help, f.kind);
        for s in list {
            write_sample(&mut out, &s.metric, None, &s.labels, s.value);
        }
    }
    out
}

/// One line per (metric, reason) with the count, `skipped: pve_up missing 2`,
/// metrics in first-rule order; then `no samples: METRIC` for a metric that
/// made none and skipped none (its `each` or `where` kept nothing).
fn skipped(rules: &[Rule], x: &Extraction) -> String {
    let samples = by_metric(x);
    let mut out = String::new();
    let mut empty = Vec::new();
    for f in families(rules) {
        let mut any = false;
        for reason in SkipReason::ALL {
            if let Some(n) = x.skipped.get(&(f.metric.clone(), reason)) {
                any = true;
                let _ = writeln!(out, "skipped: {} {} {n}", f.metric, reason.as_str());
            }
        }
        if !any && !samples.contains_key(&*f.metric) {
            empty.push(&f.metric);
        }
    }
    for m in empty {
        let _ = writeln!(out, "no samples: {m}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::{DEFAULT_MAX_SERIES, ValueRule, extract};
    use serde_json::json;

    fn rule(text: &str) -> Rule {
        let r: ValueRule = toml::from_str(text).expect("rule parses");
        r.compile().expect("rule compiles")
    }

    #[test]
    fn render_groups_by_metric_in_first_rule_order() {
        let rules = [
            rule("metric = \"b_up\"\nhelp = \"Up\"\neach = \"/nodes\"\nvalue = \"/up\"\nlabels = { id = \"/id\" }\n"),
            rule("metric = \"a_count\"\nhelp = \"Nodes\"\neach = \"/nodes\"\nvalue = \"@count\"\n"),
            rule("metric = \"b_up\"\nhelp = \"Up\"\nvalue = \"/self\"\nlabels = { id = \"@item\" }\n"),
            rule("metric = \"c_none\"\neach = \"/nodes\"\nwhere = { \"/id\" = \"z\" }\nvalue = \"/up\"\n"),
            rule("metric = \"d_bad\"\neach = \"/nodes\"\nvalue = \"/id\"\n"),
        ];
        let body = json!({"nodes": [{"id": "n1", "up": 1}, {"id": "n2", "up": false}], "self": 1});
        let x = extract(&rules, &body, Some("n0"), DEFAULT_MAX_SERIES);
        assert_eq!(
            render(&rules, &x),
            "# HELP b_up Up\n# TYPE b_up gauge\nb_up{id=\"n1\"} 1\nb_up{id=\"n2\"} 0\nb_up{id=\"n0\"} 1\n\
             # HELP a_count Nodes\n# TYPE a_count gauge\na_count 2\n"
        );
        assert_eq!(skipped(&rules, &x), "skipped: d_bad not_number 2\nno samples: c_none\n");
    }
}
