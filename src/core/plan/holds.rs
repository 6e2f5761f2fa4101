//! Whether a group of an instance may run now, and whether the plan counts
//! its demand: the profile, `enabled_when` and a fan-out's items decide.

use super::{Shapes, execution_cost, fan_out_items, shape_count};
use crate::core::task::Hold;
use crate::model::{GroupDef, InstanceConfig, Profile, TypeDef};

/// A `shape_from` group another group of its type depends on (through
/// `enabled_when` or `fan_out`): it learns the shape, so it runs whatever
/// the profile.
pub fn learns_for_others(ty: &TypeDef, g: &GroupDef) -> bool {
    g.shape_from.is_some()
        && ty.groups.iter().any(|o| {
            o.name != g.name && (o.enabled_when.as_deref() == Some(&g.name) || o.fan_out.as_deref() == Some(&g.name))
        })
}

/// Does the plan count this group of this instance (its demand), and may it
/// run now? `None` = it runs; `Some(hold)` = it is held.
pub fn hold_of(
    ty: &TypeDef,
    inst: &InstanceConfig,
    shapes: &Shapes,
    g: &GroupDef,
    profile: Option<Profile>,
) -> Option<Hold> {
    if let Some(p) = profile
        && g.priority > p.max_priority()
        && !learns_for_others(ty, g)
    {
        return Some(Hold::Profile);
    }
    if let Some(w) = &g.enabled_when
        && shape_count(inst, shapes, w).unwrap_or(0) == 0
    {
        return Some(Hold::Shape);
    }
    if g.fan_out.is_some() && fan_out_items(inst, shapes, g).is_empty() {
        return Some(Hold::Shape);
    }
    None
}

/// Counted in the plan's demand: in the profile, `enabled_when` satisfied,
/// and for a fan-out, a known (learned or configured) item count.
pub(super) fn counted(
    ty: &TypeDef,
    inst: &InstanceConfig,
    shapes: &Shapes,
    g: &GroupDef,
    profile: Option<Profile>,
) -> bool {
    match hold_of(ty, inst, shapes, g, profile) {
        None => true,
        Some(Hold::Shape) => {
            let when_ok = g
                .enabled_when
                .as_ref()
                .is_none_or(|w| shape_count(inst, shapes, w).unwrap_or(0) > 0);
            when_ok && execution_cost(inst, shapes, g) > 0.0
        }
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{catalog, cluster};
    use super::*;
    use crate::model::ShapeUpdate;

    #[test]
    fn holds_follow_the_profile_and_the_shape() {
        let cat = catalog(&[("a", None, true)]);
        let inst = &cat.instances["a"].config;
        let ty = cluster();
        let none = Shapes::new();
        let [nodes, per_node, ha] = [&ty.groups[0], &ty.groups[1], &ty.groups[2]];
        assert_eq!(hold_of(&ty, inst, &none, nodes, None), None);
        assert_eq!(
            hold_of(&ty, inst, &none, per_node, None),
            Some(Hold::Shape),
            "no items yet"
        );
        assert_eq!(
            hold_of(&ty, inst, &none, ha, None),
            Some(Hold::Shape),
            "enabled_when unknown"
        );
        assert_eq!(
            hold_of(&ty, inst, &none, ha, Some(Profile::Availability)),
            Some(Hold::Profile)
        );
        let mut shapes = Shapes::new();
        shapes.entry("a".into()).or_default().insert(
            "nodes".into(),
            ShapeUpdate {
                count: 1,
                items: vec!["n1".into()],
            },
        );
        assert_eq!(hold_of(&ty, inst, &shapes, per_node, None), None);
        assert_eq!(hold_of(&ty, inst, &shapes, ha, None), None);
        assert_eq!(
            hold_of(&ty, inst, &shapes, per_node, Some(Profile::Availability)),
            Some(Hold::Profile)
        );
    }

    #[test]
    fn a_profile_keeps_the_groups_that_learn_shapes_for_others() {
        let meraki = crate::presets::all()
            .into_iter()
            .find(|t| t.name == "meraki")
            .expect("meraki preset");
        let inst = InstanceConfig::new("org", "meraki", "https://api.example/org/1");
        let g = |name: &str| meraki.groups.iter().find(|g| g.name == name).expect(name).clone();
        let standard = Some(Profile::Standard);
        let none = Shapes::new();
        // Priority 4, but channel_utilization is enabled by its count.
        assert_eq!(hold_of(&meraki, &inst, &none, &g("wireless_devices"), standard), None);
        assert_eq!(
            hold_of(&meraki, &inst, &none, &g("licenses"), standard),
            Some(Hold::Profile)
        );
    }
}
