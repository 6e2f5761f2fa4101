//! The config loader (`pollster serve --config`, `pollster check-config`):
//! the text of a config file plus environment variables, parsed and
//! validated into a `Config`. Any text is a `Config` or a `ConfigError`,
//! never a panic. A config it accepts is valid by every rule the running
//! appliance applies to the same values later (the settings, every type,
//! budget and instance, the sink), and its file layer written back as TOML
//! loads again to the same values.
//!
//! Input: the file's text; lines after a line `#-- env` are `NAME=value`
//! environment variables instead.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pollster::config::{Config, ServerConfig, SinkConfig, load_str};
use pollster::model::{AdaptiveSettings, BudgetConfig, FailureSettings, InstanceConfig, SchedulerSettings, TypeDef};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const ENV_MARKER: &str = "\n#-- env\n";

fn presets() -> &'static [TypeDef] {
    static PRESETS: OnceLock<Vec<TypeDef>> = OnceLock::new();
    PRESETS.get_or_init(pollster::presets::all)
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    let (text, env_text) = input.split_once(ENV_MARKER).unwrap_or((input, ""));
    let env: BTreeMap<String, String> = env_text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let file = Path::new("fuzz.toml");
    let Ok(config) = load_str(file, text, &env, presets()) else {
        return;
    };
    revalidates(&config);
    reloads(file, &config);
});

/// The checks the running appliance makes of the same values later: saved
/// settings are layered and validated, budgets and instances edited over
/// the API are validated field by field.
fn revalidates(c: &Config) {
    if let Err(e) = c.monitoring_file.validate() {
        panic!("accepted file settings fail validation: {e:?}");
    }
    if let Err(e) = c.monitoring().validate() {
        panic!("accepted settings (with the environment) fail validation: {e:?}");
    }
    for (i, b) in c.budgets.iter().enumerate() {
        if let Err(e) = b.validate(&format!("budgets[{i}]")) {
            panic!("accepted budget fails validation: {e} ({b:?})");
        }
    }
    for (i, t) in c.types.iter().enumerate() {
        if let Err(e) = t.validate(&format!("types[{i}]")) {
            panic!("accepted type fails validation: {e} ({t:?})");
        }
    }
    for i in &c.instances {
        if let Err(e) = i.validate_fields() {
            panic!("accepted instance fails validation: {e} ({i:?})");
        }
    }
    for s in [&c.sink, &c.sink_file].into_iter().flatten() {
        if let Err(e) = s.validate() {
            panic!("accepted sink fails validation: {e} ({s:?})");
        }
    }
}

/// The file's sections as `pollster.toml` holds them.
#[derive(Serialize)]
struct FileOut<'a> {
    server: &'a ServerConfig,
    adaptive: &'a AdaptiveSettings,
    scheduler: &'a SchedulerSettings,
    failure: &'a FailureSettings,
    #[serde(skip_serializing_if = "Option::is_none")]
    sink: Option<&'a SinkConfig>,
    budgets: &'a [BudgetConfig],
    types: &'a [TypeDef],
    instances: &'a [InstanceConfig],
}

/// Written back as TOML (with the environment's `[server]` values), the
/// config loads, without the environment, to the same file layer.
fn reloads(file: &Path, c: &Config) {
    let m = &c.monitoring_file;
    let out = FileOut {
        server: &c.server,
        adaptive: &m.adaptive,
        scheduler: &m.scheduler,
        failure: &m.failure,
        sink: c.sink_file.as_ref(),
        budgets: &c.budgets,
        types: &c.types,
        instances: &c.instances,
    };
    let text = toml::to_string(&out).expect("an accepted config serializes as TOML");
    let again = match load_str(file, &text, &BTreeMap::new(), presets()) {
        Ok(again) => again,
        Err(e) => panic!("an accepted config, written back, is refused: {e}\n{text}"),
    };
    assert_eq!(again.server, c.server, "{text}");
    assert_eq!(again.monitoring_file, c.monitoring_file, "{text}");
    assert_eq!(again.sink_file, c.sink_file, "{text}");
    assert_eq!(again.budgets, c.budgets, "{text}");
    assert_eq!(again.types, c.types, "{text}");
    assert_eq!(again.instances, c.instances, "{text}");
}
