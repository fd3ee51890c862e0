//! The Prometheus text exposition format 0.0.4 of every shard's snapshot:
//! one `# HELP` and `# TYPE` per family, then its samples for every shard
//! (a family's lines stay together), label values and help text escaped,
//! histograms as cumulative `_bucket{le=..}` lines ending in `+Inf`, then
//! `_sum` and `_count`.

use std::fmt::Write;

use super::{Counter, Gauge, HistogramSnapshot, Mode, Process, Snapshot};

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders the snapshots (one per shard, any order) and process values.
pub fn render(shards: &[Snapshot], process: &Process) -> String {
    let mut shards: Vec<&Snapshot> = shards.iter().collect();
    shards.sort_by_key(|s| s.shard);
    let mut out = Exposition::default();
    process_families(&mut out, process);
    out.family(
        "rill_http_requests_total",
        "counter",
        "HTTP responses by route and status.",
    );
    for s in &shards {
        for ((route, status), count) in &s.requests {
            let status = status.to_string();
            let labels = [
                shard_label(s),
                ("route", route.label().into()),
                ("status", status),
            ];
            out.sample("rill_http_requests_total", &labels, Value::Int(*count));
        }
    }
    for counter in Counter::ALL {
        let (name, help) = counter.describe();
        out.family(name, "counter", help);
        for s in &shards {
            out.sample(
                name,
                &[shard_label(s)],
                Value::Int(s.counters[counter as usize]),
            );
        }
    }
    for gauge in Gauge::ALL {
        let (name, help) = gauge.describe();
        out.family(name, "gauge", help);
        for s in &shards {
            out.sample(
                name,
                &[shard_label(s)],
                Value::Float(s.gauges[gauge as usize]),
            );
        }
    }
    subscribers(&mut out, &shards);
    let sync = "Duration of log data syncs (fdatasync through io_uring): those of --fsync interval:MS and after zeroing a failed write; an O_DSYNC write needs none.";
    histogram(&mut out, "rill_fdatasync_seconds", sync, &shards, |s| {
        &s.fdatasync
    });
    let batch = "Records per group commit (one log write).";
    let commit = "Time from a write's decision to its commit (queueing, write, sync): the floor of a durable write's latency.";
    histogram(&mut out, "rill_commit_seconds", commit, &shards, |s| {
        &s.commit_seconds
    });
    histogram(&mut out, "rill_commit_batch_records", batch, &shards, |s| {
        &s.commit_batch
    });
    out.text
}

fn process_families(out: &mut Exposition, process: &Process) {
    out.family(
        "rill_build_info",
        "gauge",
        "Always 1; the version label names the build.",
    );
    let version = env!("CARGO_PKG_VERSION").to_string();
    out.sample("rill_build_info", &[("version", version)], Value::Int(1));
    out.family(
        "rill_ready",
        "gauge",
        "1 once startup recovery finished on every shard, 0 while starting or stopping.",
    );
    out.sample("rill_ready", &[], Value::Int(u64::from(process.ready)));
    if let Some((available, total)) = process.disk {
        let help = "Bytes available to rill on the data dir's filesystem.";
        out.family("rill_disk_available_bytes", "gauge", help);
        out.sample("rill_disk_available_bytes", &[], Value::Int(available));
        out.family(
            "rill_disk_size_bytes",
            "gauge",
            "Size of the data dir's filesystem.",
        );
        out.sample("rill_disk_size_bytes", &[], Value::Int(total));
    }
}

fn subscribers(out: &mut Exposition, shards: &[&Snapshot]) {
    let name = "rill_live_subscribers";
    out.family(
        name,
        "gauge",
        "Live reads waiting on this shard, by mode (SSE, long-poll).",
    );
    for s in shards {
        for mode in [Mode::Sse, Mode::LongPoll] {
            let labels = [shard_label(s), ("mode", mode.label().into())];
            out.sample(name, &labels, Value::Int(s.subscribers[mode as usize]));
        }
    }
}

fn histogram(
    out: &mut Exposition,
    name: &str,
    help: &str,
    shards: &[&Snapshot],
    pick: impl Fn(&Snapshot) -> &HistogramSnapshot,
) {
    out.family(name, "histogram", help);
    let bucket = format!("{name}_bucket");
    for s in shards {
        let h = pick(s);
        assert_eq!(
            h.counts.len(),
            h.bounds.len() + 1,
            "one count per bound and +Inf"
        );
        let mut cumulative = 0;
        let bounds = h.bounds.iter().map(|b| format_float(*b));
        for (le, count) in bounds.chain(["+Inf".to_string()]).zip(&h.counts) {
            cumulative += count;
            out.sample(
                &bucket,
                &[shard_label(s), ("le", le)],
                Value::Int(cumulative),
            );
        }
        out.sample(
            &format!("{name}_sum"),
            &[shard_label(s)],
            Value::Float(h.sum),
        );
        out.sample(
            &format!("{name}_count"),
            &[shard_label(s)],
            Value::Int(cumulative),
        );
    }
}

fn shard_label(s: &Snapshot) -> (&'static str, String) {
    ("shard", s.shard.to_string())
}

/// A sample value: counters stay exact integers.
#[derive(Clone, Copy, Debug)]
enum Value {
    Int(u64),
    Float(f64),
}

#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        debug_assert!(valid_name(name), "metric name {name:?}");
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: Value) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                debug_assert!(valid_name(label), "label name {label:?}");
                let comma = if i > 0 { "," } else { "" };
                let _ = write!(self.text, "{comma}{label}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let value = match value {
            Value::Int(v) => v.to_string(),
            Value::Float(v) => format_float(v),
        };
        let _ = writeln!(self.text, " {value}");
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Label values: backslash, double quote and line feed are escaped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text: backslash and line feed are escaped.
pub fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Go-parsable floats: `+Inf`, `-Inf`, `NaN`, else Rust's shortest
/// round-trip decimal (never an exponent).
pub fn format_float(v: f64) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        f64::INFINITY => "+Inf".into(),
        f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Metrics, Route};

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("line\nnext"), "line\\nnext");
        assert_eq!(
            escape_help("back\\slash \"q\"\nx"),
            "back\\\\slash \"q\"\\nx"
        );
        let mut out = Exposition::default();
        out.sample("m", &[("l", "x\"\n\\".into())], Value::Int(1));
        assert_eq!(out.text, "m{l=\"x\\\"\\n\\\\\"} 1\n");
    }

    #[test]
    fn floats_parse_back() {
        for v in [0.0005, 1.0, 0.1 + 0.2, 1e-9, 123456789.0] {
            assert_eq!(format_float(v).parse::<f64>().unwrap(), v);
        }
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let m = Metrics::default();
        for records in [1.0, 1.0, 3.0, 5000.0] {
            m.commit_batch.observe(records);
        }
        let text = render(&[m.snapshot(0)], &Process::default());
        let buckets = lines_of(&text, "rill_commit_batch_records_bucket{shard=\"0\"");
        assert_eq!(buckets.len(), 12);
        assert_eq!(
            buckets[0],
            "rill_commit_batch_records_bucket{shard=\"0\",le=\"1\"} 2"
        );
        assert_eq!(
            buckets[1],
            "rill_commit_batch_records_bucket{shard=\"0\",le=\"2\"} 2"
        );
        assert_eq!(
            buckets[2],
            "rill_commit_batch_records_bucket{shard=\"0\",le=\"4\"} 3"
        );
        assert_eq!(
            buckets[10],
            "rill_commit_batch_records_bucket{shard=\"0\",le=\"1024\"} 3"
        );
        assert_eq!(
            buckets[11],
            "rill_commit_batch_records_bucket{shard=\"0\",le=\"+Inf\"} 4"
        );
        assert!(text.contains("rill_commit_batch_records_sum{shard=\"0\"} 5005\n"));
        assert!(text.contains("rill_commit_batch_records_count{shard=\"0\"} 4\n"));
    }

    #[test]
    fn families_are_grouped_and_sorted_by_shard() {
        let (a, b) = (Metrics::default(), Metrics::default());
        a.responding(1, 200);
        a.finish_request(1, Route::Stream);
        b.responding(1, 404);
        b.finish_request(1, Route::Other);
        let text = render(&[b.snapshot(1), a.snapshot(0)], &Process::default());
        let requests = lines_of(&text, "rill_http_requests_total{");
        assert_eq!(
            requests,
            [
                "rill_http_requests_total{shard=\"0\",route=\"stream\",status=\"200\"} 1",
                "rill_http_requests_total{shard=\"1\",route=\"other\",status=\"404\"} 1",
            ]
        );
        let mut seen = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| f.ends_with("_seconds") || f.ends_with("_records"))
                })
                .unwrap_or(name);
            if seen.last() != Some(&family) {
                assert!(!seen.contains(&family), "{family} is split");
                seen.push(family);
            }
        }
        let types = lines_of(&text, "# TYPE ").len();
        assert_eq!(types, lines_of(&text, "# HELP ").len());
        assert_eq!(
            types,
            seen.len(),
            "every family has a TYPE, even without samples"
        );
    }
}
