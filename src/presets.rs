//! The shipped API presets: one type per TOML file under `presets/` at the crate root,
//! embedded at build time. Each file holds a top-level `name` and `[[groups]]` tables
//! (see `TypeDef`); everything else in a file is `#` comments, because `TypeDef` and
//! `GroupDef` reject unknown fields.

use crate::model::TypeDef;

/// The preset files as shipped: (type name, TOML text). The name is the file's stem and
/// must equal the `name` inside the file.
pub const FILES: &[(&str, &str)] = &[
    ("pve", include_str!("../presets/pve.toml")),
    ("pbs", include_str!("../presets/pbs.toml")),
    ("pmg", include_str!("../presets/pmg.toml")),
    ("meraki", include_str!("../presets/meraki.toml")),
];

/// The shipped presets, parsed, in `FILES` order. A file that fails to
/// parse (impossible in a release: the tests check every file) is left out
/// and logged.
pub fn all() -> Vec<TypeDef> {
    FILES
        .iter()
        .filter_map(|(name, text)| match parse(name, text) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!(error = %e, "skipping a shipped preset");
                None
            }
        })
        .collect()
}

fn parse(file: &str, text: &str) -> Result<TypeDef, String> {
    let def: TypeDef = toml::from_str(text).map_err(|e| format!("preset {file}.toml: {e}"))?;
    if def.name != file {
        return Err(format!(
            "preset {file}.toml: name {:?} differs from the file name",
            def.name
        ));
    }
    Ok(def)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GroupDef;
    use std::collections::BTreeSet;

    #[test]
    fn all_returns_every_file() {
        assert_eq!(all().len(), FILES.len());
    }

    /// The type rules every type obeys ([`TypeDef::validate`]), plus the
    /// presets' own: every path absolute (or empty: the instance's URL
    /// itself), a priority-1 group, at most one ungated group.
    fn check(t: &TypeDef) -> Result<(), String> {
        t.validate(&t.name).map_err(|e| e.to_string())?;
        for g in &t.groups {
            if !g.path.is_empty() && !g.path.starts_with('/') {
                return Err(format!("{}.{}: path {:?} must start with '/'", t.name, g.name, g.path));
            }
        }
        if !t.groups.iter().any(|g| g.priority == 1) {
            return Err(format!("{}: no priority-1 group", t.name));
        }
        if t.groups.iter().filter(|g| !g.gated).count() > 1 {
            return Err(format!("{}: more than one ungated group", t.name));
        }
        Ok(())
    }

    fn parsed() -> Vec<TypeDef> {
        FILES
            .iter()
            .map(|(name, text)| parse(name, text).expect("shipped presets parse"))
            .collect()
    }

    #[test]
    fn every_file_parses_with_deny_unknown_fields() {
        for (name, text) in FILES {
            if let Err(e) = toml::from_str::<TypeDef>(text) {
                panic!("{name}.toml does not parse: {e}");
            }
        }
    }

    #[test]
    fn names_equal_file_names() {
        for (name, text) in FILES {
            let def: TypeDef = toml::from_str(text).unwrap();
            assert_eq!(def.name, *name, "{name}.toml");
        }
    }

    #[test]
    fn all_returns_the_four_presets() {
        let names: Vec<String> = parsed().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["pve", "pbs", "pmg", "meraki"]);
    }

    #[test]
    fn every_preset_passes_validation() {
        for t in parsed() {
            if let Err(e) = check(&t) {
                panic!("{e}");
            }
        }
    }

    #[test]
    fn references_resolve() {
        for t in parsed() {
            let shapes: BTreeSet<&str> = t
                .groups
                .iter()
                .filter(|g| g.shape_from.is_some())
                .map(|g| g.name.as_str())
                .collect();
            for g in &t.groups {
                for r in [&g.enabled_when, &g.fan_out].into_iter().flatten() {
                    assert!(shapes.contains(r.as_str()), "{}.{}: {r:?} unresolved", t.name, g.name);
                }
                if let Some(f) = &g.fan_out {
                    let src = t.groups.iter().find(|o| &o.name == f).unwrap();
                    assert!(
                        src.item_field.is_some() || !src.item_fields.is_empty(),
                        "{}.{}: {f:?} lacks item_field",
                        t.name,
                        g.name
                    );
                }
            }
        }
    }

    #[test]
    fn each_preset_has_a_priority_1_group_and_absolute_paths() {
        for t in parsed() {
            assert!(
                t.groups.iter().any(|g| g.priority == 1),
                "{} has no priority-1 group",
                t.name
            );
            for g in &t.groups {
                // "" is the instance's URL itself (meraki's getOrganization).
                assert!(
                    g.path.is_empty() || g.path.starts_with('/'),
                    "{}.{}: {:?}",
                    t.name,
                    g.name,
                    g.path
                );
            }
        }
    }

    #[test]
    fn group_counts_are_in_range() {
        for t in parsed() {
            assert!(
                (6..=48).contains(&t.groups.len()),
                "{}: {} groups",
                t.name,
                t.groups.len()
            );
        }
    }

    #[test]
    fn every_file_and_group_is_commented() {
        for (name, text) in FILES {
            assert!(text.starts_with('#'), "{name}.toml lacks its header comment");
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.trim() == "[[groups]]" {
                    let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
                    assert!(
                        before.is_some_and(|l| l.trim_start().starts_with('#')),
                        "{name}.toml line {}: [[groups]] without a comment above it",
                        i + 1
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let top = "name = \"x\"\ndescription = \"nope\"\n";
        assert!(toml::from_str::<TypeDef>(top).is_err());
        let group = "name = \"x\"\n[[groups]]\nname = \"g\"\npath = \"/a\"\ncomment = \"nope\"\n";
        assert!(toml::from_str::<TypeDef>(group).is_err());
    }

    #[test]
    fn defaults_apply_to_omitted_fields() {
        let t: TypeDef = toml::from_str("name = \"x\"\n[[groups]]\nname = \"g\"\npath = \"/a\"\n").unwrap();
        let g = &t.groups[0];
        assert_eq!(
            (g.priority, g.floor.as_secs(), g.cost, g.gated, g.forward),
            (3, 60, 1.0, true, false)
        );
    }

    #[test]
    fn check_rejects_broken_definitions() {
        let base = parsed().into_iter().find(|t| t.name == "pve").unwrap();
        fn grp<'a>(t: &'a mut TypeDef, name: &str) -> &'a mut GroupDef {
            t.groups.iter_mut().find(|g| g.name == name).unwrap()
        }
        fn table(key: &str) -> crate::values::Lookup {
            crate::values::Lookup {
                each: "/data".into(),
                key: key.into(),
                fields: [("name".to_string(), "/name".to_string())].into(),
                ..Default::default()
            }
        }
        type Spoil = fn(&mut TypeDef);
        // (what, the change, a part of the error that names the key)
        let broken: [(&str, Spoil, &str); 32] = [
            (
                "fan_out path without {item}",
                |t| grp(t, "node_status").path = "/api2/json/nodes".into(),
                "path",
            ),
            (
                "{item} without fan_out",
                |t| grp(t, "version").path = "/api2/json/{item}".into(),
                "only allowed with fan_out",
            ),
            (
                "{item.node} without fan_out",
                |t| grp(t, "version").path = "/api2/json/{item.node}".into(),
                "only allowed with fan_out",
            ),
            (
                "unknown fan_out",
                |t| grp(t, "node_status").fan_out = Some("nope".into()),
                "fan_out",
            ),
            (
                "enabled_when without shape",
                |t| grp(t, "ha_status").enabled_when = Some("version".into()),
                "enabled_when",
            ),
            (
                "item_field without shape",
                |t| grp(t, "version").item_field = Some("x".into()),
                "item_field",
            ),
            (
                "item_fields without shape",
                |t| grp(t, "version").item_fields = vec!["x".into()],
                "item_fields",
            ),
            (
                "item_field and item_fields",
                |t| grp(t, "resources").item_field = Some("id".into()),
                "not both",
            ),
            (
                "an item field named twice",
                |t| grp(t, "resources").item_fields = vec!["node".into(), "node".into()],
                "listed twice",
            ),
            (
                "{item} over items with fields",
                |t| grp(t, "guest_config").path = "/api2/json/nodes/{item}/config".into(),
                "{item.FIELD}",
            ),
            (
                "{item.FIELD} the items lack",
                |t| grp(t, "guest_config").path = "/api2/json/nodes/{item.name}/config".into(),
                "{item.name}",
            ),
            (
                "{item.FIELD} over one-field items",
                |t| grp(t, "node_status").path = "/api2/json/nodes/{item.node}/status".into(),
                "write {item}",
            ),
            (
                "@item.FIELD the items lack",
                |t| {
                    let g = grp(t, "guest_config");
                    g.values[0].labels.insert("node".into(), "@item.name".into());
                },
                "values[0].labels.node",
            ),
            (
                "@parent without nested",
                |t| {
                    let g = grp(t, "guest_config");
                    g.values[0].labels.insert("port".into(), "@parent/portId".into());
                },
                "values[0].labels.port",
            ),
            (
                "a sum of no field",
                |t| {
                    let g = grp(t, "guest_config");
                    g.values[0].value = Some(crate::values::ValueSpec::Sum(crate::values::SumSpec {
                        sum: Vec::new(),
                        over: vec!["/data/onboot".into()],
                    }));
                },
                "values[0].value.sum",
            ),
            (
                "nested without each",
                |t| {
                    let g = grp(t, "backup_info");
                    g.values[1].each = None;
                    g.values[1].nested = Some("/packets".into());
                },
                "values[1].nested",
            ),
            (
                "@item.FIELD without fan_out",
                |t| {
                    let g = grp(t, "backup_info");
                    g.values[1].labels.insert("x".into(), "@item.node".into());
                },
                "no fan_out",
            ),
            (
                "@fact.NAME no group gives",
                |t| {
                    let g = grp(t, "backup_info");
                    g.values[0].labels.insert("id".into(), "cluster/{@fact.name}".into());
                },
                "@fact.name",
            ),
            (
                "a fact two groups give",
                |t| {
                    grp(t, "version").facts.insert("cluster".into(), "/data/release".into());
                },
                "one group gives each fact",
            ),
            (
                "a fact from a fan-out",
                |t| {
                    grp(t, "node_status").facts.insert("x".into(), "/data".into());
                },
                "fan_out group cannot give facts",
            ),
            (
                "a fact with a bad pointer",
                |t| {
                    grp(t, "version").facts.insert("x".into(), "data".into());
                },
                "facts.x",
            ),
            (
                "a lookup table no group gives",
                |t| {
                    let g = grp(t, "backup_info");
                    g.values[0]
                        .labels
                        .insert("id".into(), "@lookup.guest[/vmid].name".into());
                },
                "@lookup.guest",
            ),
            (
                "a lookup field the table does not keep",
                |t| {
                    grp(t, "version").lookups.insert("guest".into(), table("/vmid"));
                    let g = grp(t, "backup_info");
                    g.values[0]
                        .labels
                        .insert("id".into(), "@lookup.guest[/vmid].model".into());
                },
                "table \"guest\"'s fields are name",
            ),
            (
                "a lookup table with a bad key",
                |t| {
                    grp(t, "version").lookups.insert("guest".into(), table("vmid"));
                },
                "lookups.guest.key",
            ),
            (
                "a lookup table reading the item outside a fan-out",
                |t| {
                    let mut guest = table("/vmid");
                    guest.fields.insert("node".into(), "@item".into());
                    grp(t, "version").lookups.insert("guest".into(), guest);
                },
                "lookups.guest.fields.node",
            ),
            (
                "a fan-out's lookup table reading an item field its items lack",
                |t| {
                    let mut guest = table("/vmid");
                    guest.fields.insert("node".into(), "@item.node".into());
                    grp(t, "node_status").lookups.insert("guest".into(), guest);
                },
                "lookups.guest.fields.node = @item.node: @item.node: group \"nodes\" names its items by one item_field",
            ),
            (
                "a lookup table two groups give",
                |t| {
                    grp(t, "version").lookups.insert("guest".into(), table("/vmid"));
                    grp(t, "resources").lookups.insert("guest".into(), table("/vmid"));
                },
                "one group gives each table",
            ),
            (
                "relative shape_from",
                |t| grp(t, "nodes").shape_from = Some("data".into()),
                "shape_from",
            ),
            (
                "duplicate name",
                |t| grp(t, "cluster_status").name = "version".into(),
                "duplicate group name",
            ),
            (
                "relative api_root",
                |t| grp(t, "node_status").api_root = Some("api2".into()),
                ".api_root",
            ),
            (
                "api_root with a trailing slash",
                |t| grp(t, "node_status").api_root = Some("/api2/".into()),
                ".api_root",
            ),
            (
                "api_root with a placeholder",
                |t| grp(t, "node_status").api_root = Some("/api2/{item}".into()),
                ".api_root",
            ),
        ];
        assert!(check(&base).is_ok());
        for (what, spoil, names) in broken {
            let mut t = base.clone();
            spoil(&mut t);
            match check(&t) {
                Ok(()) => panic!("check accepted: {what}"),
                Err(e) => assert!(e.contains(names), "{what}: {e:?} does not say {names:?}"),
            }
        }
        let mut t = base.clone();
        grp(&mut t, "version").priority = 5;
        assert!(check(&t).is_err(), "priority 5");
        grp(&mut t, "version").priority = 1;
        grp(&mut t, "version").cost = 0.0;
        assert!(check(&t).is_err(), "zero cost");
    }

    #[test]
    fn all_reports_a_name_mismatch() {
        let err = parse("pbs", "name = \"pve\"\n").unwrap_err();
        assert!(err.contains("pbs.toml"), "{err}");
    }
}
