//! Fan-out items made of several fields (`item_fields`): one name that
//! carries each field, so a fan-out path (`{item.node}`) and a label
//! (`@item.vmid`) can read any of them without knowing where the item came
//! from.
//!
//! The name is `field=value` pairs joined by `,` in the order
//! `item_fields` lists them: `node=pve1,type=qemu,vmid=100`. In a value,
//! `%`, `,` and `=` are written `%25`, `%2C` and `%3D`, so every value
//! reads back exactly.

/// The item name of `fields` (name, value), in order.
pub fn compose(fields: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push('=');
        for c in value.chars() {
            match c {
                '%' => out.push_str("%25"),
                ',' => out.push_str("%2C"),
                '=' => out.push_str("%3D"),
                c => out.push(c),
            }
        }
    }
    out
}

/// The value of field `name` in item `item`, if the item has it. An item
/// made of one `item_field` has no fields.
pub fn field(item: &str, name: &str) -> Option<String> {
    item.split(',').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n == name).then(|| decode(v))
    })
}

fn decode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i..i + 3);
        match code {
            Some("%25") => out.push('%'),
            Some("%2C") => out.push(','),
            Some("%3D") => out.push('='),
            _ => {
                out.push('%');
                rest = &rest[i + 1..];
                continue;
            }
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fields_read_back_by_name() {
        let item = compose(&[("node", "pve1".into()), ("type", "qemu".into()), ("vmid", "100".into())]);
        assert_eq!(item, "node=pve1,type=qemu,vmid=100");
        assert_eq!(field(&item, "node").as_deref(), Some("pve1"));
        assert_eq!(field(&item, "vmid").as_deref(), Some("100"));
        assert_eq!(field(&item, "name"), None);
        assert_eq!(field("pve1", "node"), None, "a one-field item has no fields");
        let odd = compose(&[("a", "x=1,y=%2C".into()), ("b", String::new())]);
        assert_eq!(field(&odd, "a").as_deref(), Some("x=1,y=%2C"));
        assert_eq!(field(&odd, "b").as_deref(), Some(""));
    }

    proptest! {
        #[test]
        fn any_values_read_back(values in proptest::collection::vec("\\PC{0,12}", 1..5)) {
            let names = ["a", "b", "c", "d", "e"];
            let fields: Vec<(&str, String)> = names.iter().copied().zip(values.iter().cloned()).collect();
            let item = compose(&fields);
            for (n, v) in &fields {
                prop_assert_eq!(field(&item, n), Some(v.clone()));
            }
        }
    }
}
