//! The Prometheus text format (0.0.4), written straight into chunks: the
//! per-task families of a scrape are too many to build as metric families
//! first (100,000 tasks are about 200 MB of text and more again of label
//! pairs), so they are written sample by sample into a buffer that is
//! handed on every [`CHUNK`] bytes.
//!
//! The output is byte for byte what the prometheus crate's `TextEncoder`
//! writes for the same family: the same escaping (`\\`, `\n` and, in label
//! values, `"`), the same number format (Rust's `Display` of `f64`) and a
//! family's `# HELP` and `# TYPE` lines only when it has a sample (the
//! registry leaves empty families out).

use prometheus::proto::MetricFamily;
use prometheus::{Encoder, TextEncoder};
use std::io::Write;

/// A chunk is handed on once it holds this many bytes.
pub const CHUNK: usize = 64 * 1024;

/// A family's kind, as its `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A family being written: its header goes out before its first sample.
pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    started: bool,
}

impl Family {
    pub fn new(name: &'static str, help: &'static str, kind: Kind) -> Family {
        Family {
            name,
            help,
            kind,
            started: false,
        }
    }
}

/// A sample's value: counts are written as integers, which is what
/// `Display` of the same `f64` gives below 2^53.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Float(f64),
    Count(u64),
}

/// Where the chunks go: `false` when nobody wants more (the client left),
/// and the writer then stops.
pub trait ChunkSink {
    fn chunk(&mut self, chunk: Vec<u8>) -> bool;
}

/// Writes samples into a buffer and hands it to `sink` every [`CHUNK`]
/// bytes.
pub struct Writer<S: ChunkSink> {
    buf: Vec<u8>,
    sink: S,
    open: bool,
    /// A histogram's label pairs, escaped once for all its lines.
    scratch: Vec<u8>,
}

impl<S: ChunkSink> Writer<S> {
    pub fn new(sink: S) -> Writer<S> {
        Writer {
            buf: Vec::with_capacity(CHUNK + 4096),
            sink,
            open: true,
            scratch: Vec::new(),
        }
    }

    /// Whether the sink still takes chunks.
    pub fn is_open(&self) -> bool {
        self.open
    }

    fn maybe_flush(&mut self) {
        if self.buf.len() >= CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.buf.is_empty() || !self.open {
            self.buf.clear();
            return;
        }
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + 4096));
        self.open = self.sink.chunk(full);
    }

    /// Hands on what is left and gives the sink back.
    pub fn finish(mut self) -> S {
        self.flush();
        self.sink
    }

    /// Families the prometheus crate gathered, through its own encoder.
    pub fn encoded(&mut self, families: &[MetricFamily]) {
        // Encoding into a Vec does not fail; a family the encoder refuses
        // (none of ours) is left out as the registry's render left it.
        let _ = TextEncoder::new().encode(families, &mut self.buf);
        self.maybe_flush();
    }

    /// The family's `# HELP` and `# TYPE` lines, before its first sample.
    fn start(&mut self, family: &mut Family) {
        if family.started {
            return;
        }
        family.started = true;
        self.buf.extend_from_slice(b"# HELP ");
        self.buf.extend_from_slice(family.name.as_bytes());
        self.buf.push(b' ');
        escape_into(&mut self.buf, family.help, false);
        self.buf.extend_from_slice(b"\n# TYPE ");
        self.buf.extend_from_slice(family.name.as_bytes());
        self.buf.push(b' ');
        self.buf.extend_from_slice(family.kind.as_str().as_bytes());
        self.buf.push(b'\n');
    }

    /// One sample of `family`: `labels` in the order given, then `extra`
    /// (a histogram's `le`), then the value.
    pub fn sample(
        &mut self,
        family: &mut Family,
        suffix: &str,
        labels: &[(&str, &str)],
        extra: Option<(&str, &str)>,
        value: Value,
    ) {
        if !self.open {
            return;
        }
        self.start(family);
        self.buf.extend_from_slice(family.name.as_bytes());
        self.buf.extend_from_slice(suffix.as_bytes());
        let mut sep = b'{';
        for (name, value) in labels.iter().chain(extra.as_ref()) {
            self.buf.push(sep);
            self.buf.extend_from_slice(name.as_bytes());
            self.buf.extend_from_slice(b"=\"");
            escape_into(&mut self.buf, value, true);
            self.buf.push(b'"');
            sep = b',';
        }
        if sep == b',' {
            self.buf.push(b'}');
        }
        self.buf.push(b' ');
        write_value(&mut self.buf, value);
        self.buf.push(b'\n');
        self.maybe_flush();
    }

    /// A histogram's samples: cumulative `_bucket`s at `bounds` (the
    /// `le` values as the encoder writes them) and `+Inf`, `_sum` and
    /// `_count`. `buckets` are not cumulative; the last one is above every
    /// bound. The labels are escaped once for the fourteen lines.
    pub fn histogram(
        &mut self,
        family: &mut Family,
        labels: &[(&str, &str)],
        bounds: &[String],
        buckets: &[u64],
        sum: f64,
    ) {
        if !self.open {
            return;
        }
        let count: u64 = buckets.iter().sum();
        self.start(family);
        let mut pairs = std::mem::take(&mut self.scratch);
        pairs.clear();
        for (i, (name, value)) in labels.iter().enumerate() {
            if i > 0 {
                pairs.push(b',');
            }
            pairs.extend_from_slice(name.as_bytes());
            pairs.extend_from_slice(b"=\"");
            escape_into(&mut pairs, value, true);
            pairs.push(b'"');
        }
        let name = family.name.as_bytes();
        let mut cumulative = 0;
        for (le, n) in bounds.iter().zip(buckets) {
            cumulative += n;
            bucket_line(&mut self.buf, name, &pairs, le, cumulative);
        }
        bucket_line(&mut self.buf, name, &pairs, "+Inf", count);
        for (suffix, value) in [("_sum", Value::Float(sum)), ("_count", Value::Count(count))] {
            self.buf.extend_from_slice(name);
            self.buf.extend_from_slice(suffix.as_bytes());
            if !pairs.is_empty() {
                self.buf.push(b'{');
                self.buf.extend_from_slice(&pairs);
                self.buf.push(b'}');
            }
            self.buf.push(b' ');
            write_value(&mut self.buf, value);
            self.buf.push(b'\n');
        }
        self.scratch = pairs;
        self.maybe_flush();
    }
}

/// `NAME_bucket{PAIRS,le="LE"} N`.
fn bucket_line(buf: &mut Vec<u8>, name: &[u8], pairs: &[u8], le: &str, n: u64) {
    buf.extend_from_slice(name);
    buf.extend_from_slice(b"_bucket{");
    buf.extend_from_slice(pairs);
    if !pairs.is_empty() {
        buf.push(b',');
    }
    buf.extend_from_slice(b"le=\"");
    // A bound as `Display` writes a number, or `+Inf`: nothing to escape.
    buf.extend_from_slice(le.as_bytes());
    buf.extend_from_slice(b"\"} ");
    write_count(buf, n);
    buf.push(b'\n');
}

/// `n` in decimal, as `Display` writes it.
fn write_count(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

fn write_value(buf: &mut Vec<u8>, value: Value) {
    match value {
        // Writing into a Vec does not fail.
        Value::Float(v) => {
            let _ = write!(buf, "{v}");
        }
        Value::Count(n) => write_count(buf, n),
    }
}

/// `s` escaped as the text format wants it: `\` and newline always, `"`
/// in label values.
pub fn escape_into(buf: &mut Vec<u8>, s: &str, quote: bool) {
    // A fold without an early exit: the compiler vectorizes it, and label
    // values are short and almost never need escaping.
    let special = s.bytes().fold(false, |any, b| {
        any | (b == b'\\') | (b == b'\n') | (quote & (b == b'"'))
    });
    if !special {
        buf.extend_from_slice(s.as_bytes());
        return;
    }
    for b in s.bytes() {
        match b {
            b'\\' => buf.extend_from_slice(b"\\\\"),
            b'\n' => buf.extend_from_slice(b"\\n"),
            b'"' if quote => buf.extend_from_slice(b"\\\""),
            _ => buf.push(b),
        }
    }
}

/// Collects every chunk into one buffer (a render to a string).
#[derive(Default)]
pub struct Collect(pub Vec<u8>);

impl ChunkSink for Collect {
    fn chunk(&mut self, chunk: Vec<u8>) -> bool {
        if self.0.is_empty() {
            self.0 = chunk;
        } else {
            self.0.extend_from_slice(&chunk);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &str, quote: bool) -> String {
        let mut buf = Vec::new();
        escape_into(&mut buf, s, quote);
        String::from_utf8(buf).expect("utf-8 in, utf-8 out")
    }

    #[test]
    fn escaping_is_the_text_formats() {
        assert_eq!(escaped("plain ünïcode", true), "plain ünïcode");
        assert_eq!(escaped(r"a\b", true), r"a\\b");
        assert_eq!(escaped("a\nb", true), r"a\nb");
        assert_eq!(escaped(r#"say "hi""#, true), r#"say \"hi\""#);
        // In HELP text a quote stays as it is.
        assert_eq!(escaped(r#"say "hi"\"#, false), r#"say "hi"\\"#);
        assert_eq!(escaped("\\\n\"", true), r#"\\\n\""#);
    }

    #[test]
    fn a_sample_is_written_as_the_prometheus_encoder_writes_it() {
        let odd = "we\"ird\\na\nme ✓";
        let g = prometheus::GaugeVec::new(
            prometheus::Opts::new("t_gauge", "Help with \\ and\nnewline \"q\"."),
            &["a", "b"],
        )
        .expect("gauge");
        for (v, x) in [
            (0.1, "x"),
            (1e21, odd),
            (-0.0, ""),
            (f64::NAN, "n"),
            (f64::INFINITY, "i"),
            (3.0, "3"),
        ] {
            g.with_label_values(&[x, "b"]).set(v);
        }
        let registry = prometheus::Registry::new();
        registry.register(Box::new(g)).expect("register");
        let mut expected = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut expected)
            .expect("encode");
        let mut w = Writer::new(Collect::default());
        let mut fam = Family::new("t_gauge", "Help with \\ and\nnewline \"q\".", Kind::Gauge);
        let mut rows: Vec<(f64, &str)> = vec![
            (0.1, "x"),
            (1e21, odd),
            (-0.0, ""),
            (f64::NAN, "n"),
            (f64::INFINITY, "i"),
            (3.0, "3"),
        ];
        rows.sort_by(|a, b| a.1.cmp(b.1));
        for (v, x) in rows {
            w.sample(&mut fam, "", &[("a", x), ("b", "b")], None, Value::Float(v));
        }
        assert_eq!(String::from_utf8(w.finish().0), String::from_utf8(expected));
    }

    #[test]
    fn counts_are_written_as_display_writes_them() {
        for n in [0, 7, 10, 99, 1_000_000, 9_007_199_254_740_993, u64::MAX] {
            let mut buf = Vec::new();
            write_count(&mut buf, n);
            assert_eq!(String::from_utf8(buf).expect("digits"), n.to_string());
        }
    }

    #[test]
    fn a_histogram_is_written_as_the_prometheus_encoder_writes_it() {
        let bounds = [0.01, 0.25, 1.0, 2.5];
        let registry = prometheus::Registry::new();
        let labelled = prometheus::HistogramVec::new(
            prometheus::HistogramOpts::new("t_seconds", "Help.").buckets(bounds.to_vec()),
            &["a", "b"],
        )
        .expect("histogram");
        let bare = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new("u_seconds", "Help \\ too.").buckets(bounds.to_vec()),
        )
        .expect("histogram");
        registry.register(Box::new(labelled.clone())).expect("register");
        registry.register(Box::new(bare.clone())).expect("register");
        let observed = [0.01, 0.3, 0.3, 7.0, 2.5, 0.0];
        for v in observed {
            labelled.with_label_values(&["x\"y", "b"]).observe(v);
            bare.observe(v);
        }
        labelled.with_label_values(&["z", "b"]);
        let mut expected = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut expected)
            .expect("encode");

        let le: Vec<String> = bounds.iter().map(|b| b.to_string()).collect();
        let mut buckets = [0u64; 5];
        for v in observed {
            buckets[bounds.partition_point(|b| *b < v)] += 1;
        }
        let sum: f64 = observed.iter().sum();
        let mut w = Writer::new(Collect::default());
        let mut t = Family::new("t_seconds", "Help.", Kind::Histogram);
        w.histogram(&mut t, &[("a", "x\"y"), ("b", "b")], &le, &buckets, sum);
        w.histogram(&mut t, &[("a", "z"), ("b", "b")], &le, &[0; 5], 0.0);
        let mut u = Family::new("u_seconds", "Help \\ too.", Kind::Histogram);
        w.histogram(&mut u, &[], &le, &buckets, sum);
        assert_eq!(String::from_utf8(w.finish().0), String::from_utf8(expected));
    }

    #[test]
    fn large_output_comes_in_chunks_of_about_chunk_bytes_and_stops_when_refused() {
        struct Chunks(Vec<usize>, usize);
        impl ChunkSink for Chunks {
            fn chunk(&mut self, chunk: Vec<u8>) -> bool {
                self.0.push(chunk.len());
                self.0.len() < self.1
            }
        }
        let write = |limit| {
            let mut w = Writer::new(Chunks(Vec::new(), limit));
            let mut fam = Family::new("n", "h", Kind::Counter);
            for i in 0..20_000u64 {
                if !w.is_open() {
                    break;
                }
                w.sample(
                    &mut fam,
                    "_total",
                    &[("instance", "some-instance-name")],
                    None,
                    Value::Count(i),
                );
            }
            w.finish().0
        };
        let all = write(usize::MAX);
        assert!(all.len() > 3, "{all:?}");
        assert!(
            all[..all.len() - 1].iter().all(|n| (CHUNK..CHUNK + 200).contains(n)),
            "{all:?}"
        );
        assert_eq!(write(2).len(), 2, "no chunk after the sink refused one");
    }
}
