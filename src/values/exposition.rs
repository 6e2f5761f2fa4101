//! Samples in the Prometheus text format (version 0.0.4): `# HELP` and
//! `# TYPE` once per metric, then its samples.

use std::fmt::Write as _;
use std::sync::Arc;

use super::rule::MetricKind;

/// `# HELP` and `# TYPE` of one metric.
pub fn write_head(out: &mut String, name: &str, help: &str, kind: MetricKind) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind.exposition_type());
    out.push('\n');
}

/// One sample line. `instance`, when given, is written as the first label.
pub fn write_sample(out: &mut String, name: &str, instance: Option<&str>, labels: &[(Arc<str>, String)], value: f64) {
    out.push_str(name);
    let mut first = true;
    let mut label = |out: &mut String, k: &str, v: &str| {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_label_value(out, v);
        out.push('"');
    };
    if let Some(i) = instance {
        label(out, "instance", i);
    }
    for (k, v) in labels {
        label(out, k, v);
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    write_value(out, value);
    out.push('\n');
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A number as Prometheus writes it: `NaN`, `+Inf`, `-Inf`, integers
/// without a fraction, anything else in the shortest form that reads back
/// exactly.
pub fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_samples_and_escapes() {
        let mut out = String::new();
        write_head(
            &mut out,
            "pve_up",
            "Node/VM/CT-Status is online/running",
            MetricKind::Gauge,
        );
        write_sample(
            &mut out,
            "pve_up",
            Some("lab"),
            &[
                (Arc::from("id"), "qemu/100".into()),
                (Arc::from("note"), "a \"b\"\\\nc".into()),
            ],
            1.0,
        );
        write_sample(&mut out, "pve_x", None, &[], 0.25);
        assert_eq!(
            out,
            "# HELP pve_up Node/VM/CT-Status is online/running\n# TYPE pve_up gauge\n\
             pve_up{instance=\"lab\",id=\"qemu/100\",note=\"a \\\"b\\\"\\\\\\nc\"} 1\npve_x 0.25\n"
        );
        let mut h = String::new();
        write_head(&mut h, "x_info", "a\\b\nc", MetricKind::Info);
        assert_eq!(h, "# HELP x_info a\\\\b\\nc\n# TYPE x_info gauge\n");
    }

    #[test]
    fn values_read_back_exactly() {
        for v in [0.0, -3.0, 1e14, 1e15, 1e300, 0.1 + 0.2, -1.5e-7, 123456789.125] {
            let mut s = String::new();
            write_value(&mut s, v);
            assert_eq!(s.parse::<f64>().expect(&s), v, "{s}");
        }
        let text = |v: f64| {
            let mut s = String::new();
            write_value(&mut s, v);
            s
        };
        assert_eq!(text(f64::NAN), "NaN");
        assert_eq!(text(f64::INFINITY), "+Inf");
        assert_eq!(text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(text(42.0), "42");
    }
}
