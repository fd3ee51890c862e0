//! Configuration: every setting and limit, from command-line flags and an
//! optional TOML file (`--config FILE`, flags win), validated once at
//! startup; `rill config check|defaults` print the result (issue 7).

use crate::stream::budget::ProducerLimits;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Segments are at most 4 GiB: the index keeps a file position in 32 bits
/// (`stream::data`).
pub const MAX_SEGMENT_BYTES: u64 = 1 << 32;

/// When an acknowledged write is on disk (issue 3 "Group commit").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Every acknowledgement follows the durable write that covers it
    /// (segments are opened `O_DSYNC`: the write completes once its data
    /// is on stable storage, no separate fdatasync).
    Always,
    /// Acknowledge once written; sync at least every MS milliseconds. A
    /// crash may lose the writes of the last MS milliseconds.
    Interval(u64),
}

impl std::fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsyncPolicy::Always => write!(f, "always"),
            FsyncPolicy::Interval(ms) => write!(f, "interval:{ms}"),
        }
    }
}

impl std::str::FromStr for FsyncPolicy {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        match text.split_once(':') {
            None if text == "always" => Ok(FsyncPolicy::Always),
            Some(("interval", ms)) => ms
                .parse()
                .ok()
                .filter(|&ms| ms > 0)
                .map(FsyncPolicy::Interval)
                .ok_or(()),
            _ => Err(()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub cores: usize,
    pub long_poll_timeout_ms: u64,
    /// How long a producer append that finds a sequence gap waits for the
    /// appends before it (sent on other connections) before its 409.
    pub producer_gap_wait_ms: u64,
    /// SSE responses end after about this long so CDNs can collapse (§8.2).
    pub sse_cycle_ms: u64,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: u64,
    /// A connection idle this long between requests is closed; a request
    /// whose head or body stalls this long gets 408.
    pub idle_timeout_ms: u64,
    /// A request body must keep arriving at this many bytes a second on
    /// average (after an `idle_timeout_ms` grace), or it gets 408; 0 turns
    /// the floor off. Slow senders cannot hold a connection for ever.
    pub min_request_rate: u64,
    pub fsync: FsyncPolicy,
    /// Size of each log segment file; a record never spans two.
    pub segment_bytes: u64,
    /// Stream bytes kept in memory, over all shards; older data is read
    /// from the segments.
    pub cache_bytes: u64,
    /// How often the cleaner looks for segments to reclaim.
    pub clean_interval_ms: u64,
    /// Bytes of log records a shard may queue for its writer; writes
    /// beyond get 503 with Retry-After instead of growing memory.
    pub max_commit_queue_bytes: usize,
    /// Largest snapshot blob (extensions §2.2); larger gets 413.
    pub max_snapshot_bytes: usize,
    /// Open client connections a shard serves; more are answered 503 and
    /// closed.
    pub max_connections: u64,
    /// How long shutdown may take after SIGTERM/SIGINT before the process
    /// gives up waiting for its shards and exits with status 1.
    pub shutdown_timeout_ms: u64,
    /// One log line per answered request (issue 7 "Logs").
    pub access_log: bool,
    /// Keep a segment's worth of disk per shard back for deletes and the
    /// cleaner once the disk fills (`shard::reserve`).
    pub disk_reserve: bool,
    /// Memory for message ends, log locations and streams over all shards;
    /// creates and writes of new messages beyond get 503 until retention or
    /// deletes free some.
    pub max_index_bytes: u64,
    /// Bytes of large replies held in memory until their clients read
    /// them, over all shards; more get 503 (`shard/replies.rs`).
    pub max_reply_bytes: u64,
    /// Bytes of large request bodies held in memory while they arrive and
    /// are handled, over all shards; more get 503 (`shard/replies.rs`).
    pub max_request_bytes: u64,
    /// Longest `Producer-Id`; longer ones get 431.
    pub max_producer_id_bytes: usize,
    /// Producer ids one stream remembers; appends of a new one beyond get 429.
    pub max_producers_per_stream: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 4437)),
            data_dir: PathBuf::from("./data"),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            long_poll_timeout_ms: 30_000,
            producer_gap_wait_ms: 200,
            sse_cycle_ms: 60_000,
            // Room for a full-size (16 KiB) Stream-Attrs header besides the
            // usual ones (extensions §5.1): a larger attribute document gets
            // the 400 the spec names rather than 431.
            max_head_bytes: 32 << 10,
            max_headers: 100,
            max_body_bytes: 32 << 20,
            idle_timeout_ms: 60_000,
            min_request_rate: 1024,
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            cache_bytes: 256 << 20,
            clean_interval_ms: 10_000,
            max_commit_queue_bytes: 256 << 20,
            max_snapshot_bytes: 32 << 20,
            max_connections: 50_000,
            shutdown_timeout_ms: 10_000,
            access_log: false,
            disk_reserve: true,
            // Each shard gets budget ÷ cores: a few bytes an append once
            // packed (docs/OPERATIONS.md), over a billion retained appends.
            max_index_bytes: 4 << 30,
            // 256 catch-up windows (4 MiB) in flight per shard of 2: room
            // for many fast readers at once, yet a bound on stalled ones.
            max_reply_bytes: 2 << 30,
            max_request_bytes: 1 << 30,
            max_producer_id_bytes: ProducerLimits::default().max_id_bytes,
            max_producers_per_stream: ProducerLimits::default().max_per_stream,
        }
    }
}

/// The longest timeout or interval a setting may name.
const MAX_TIMEOUT_MS: u64 = 86_400_000;

pub const SERVE_HELP: &str = "\
rill serve: run the Durable Streams server

USAGE:
    rill serve [OPTIONS]

OPTIONS:
    --config FILE               read settings from a TOML file (keys as below with `_`
                                for `-`, e.g. long_poll_timeout_ms = 1500); flags override it
    --listen ADDR               address to listen on [default: 127.0.0.1:4437]
    --data-dir DIR              data directory [default: ./data]
    --cores N                   shards (pinned threads), one per core [default: the CPUs rill may
                                run on, within its cgroup CPU quota]
    --long-poll-timeout-ms MS   how long a long-poll waits for data [default: 30000]
    --producer-gap-wait-ms MS   how long a producer append that is ahead of its sequence
                                waits for the next of the ones before it (pipelined on other
                                connections, they may arrive later) before its 409; each that
                                lands starts the wait again, up to 50 waits in all; 0: none
                                [default: 200]
    --sse-cycle-ms MS           SSE responses end after this long, clients reconnect [default: 60000]
    --max-body-bytes N          largest request body; larger gets 413; at most 1 GiB less room
                                for its head (one log record) [default: 33554432]
    --max-head-bytes N          largest request head, and trailer section of a chunked body;
                                larger gets 431 (414 when the request line alone is longer)
                                [default: 32768]
    --max-headers N             most request headers; more gets 431 [default: 100]
    --idle-timeout-ms MS        idle keep-alive connections close; a request head must arrive
                                whole within it and a stalled body gets 408 [default: 60000]
    --min-request-rate N        bytes a second a request body must average after the idle
                                timeout's grace, or it gets 408; 0: no floor [default: 1024]
    --fsync POLICY              always: acknowledge once the write is durable (O_DSYNC
                                segments); interval:MS: acknowledge after the write and
                                fdatasync every MS (may lose MS of writes on a crash)
                                [default: always]
    --segment-bytes N           log segment size, a multiple of 4096, at least --max-body-bytes
                                + 64 KiB (+ --max-head-bytes + 16 KiB when more), at most 4 GiB
                                [default: 67108864]
    --cache-bytes N             stream bytes cached in memory over all shards; older data is
                                read from the log [default: 268435456]
    --clean-interval-ms MS      how often the cleaner reclaims segments of deleted data
                                [default: 10000]
    --max-commit-queue-bytes N  log bytes a shard may queue for the disk; more writes get 503
                                with Retry-After [default: 268435456]
    --max-snapshot-bytes N      largest snapshot blob; larger gets 413 [default: 33554432]
    --max-connections N         open client connections per shard; more are answered 503
                                and closed [default: 50000]
    --shutdown-timeout-ms MS    after SIGTERM/SIGINT, how long live responses may take to end
                                and the log to be synced; past it rill exits with status 1
                                [default: 10000]
    --max-index-bytes N         memory for message ends, log locations and streams over all
                                shards (8 B per retained message, 24 B per append, a few
                                once bit-packed in full chunks, 1 KiB per stream plus its
                                key and attributes); creates and new
                                messages beyond get 503 until retention or deletes free some
                                [default: 4294967296]
    --max-reply-bytes N         bytes of large replies (catch-up windows, snapshot blobs) held
                                until their clients read them, over all shards; more get 503
                                with Retry-After [default: 2147483648]
    --max-request-bytes N       bytes of large request bodies (64 KiB or more) held while
                                they arrive and are handled, over all shards; more get 503
                                with Retry-After [default: 1073741824]
    --max-producer-id-bytes N   longest Producer-Id; longer ones get 431 [default: 256]
    --max-producers-per-stream N
                                producer ids a stream remembers (counted in the index
                                budget as ~1.1 KB each; at most as many as fit half a segment
                                at the longest id); an append of a new one beyond gets 429
                                [default: 10000]
    --access-log BOOL           true: log one line per answered request (method, path,
                                status, microseconds) [default: false]
    --disk-reserve BOOL         true: each shard keeps a segment's size of disk back; once
                                the disk fills, writes that add data get 507 and deletes,
                                retention and the cleaner go on in that room [default: true]
    -h, --help                  print this help
";

/// One setting: its flag name (`--name`), which is also its config-file
/// key (with `_` for `-`), how to set it from text, and its value as a TOML
/// literal. Flags and the file go through the same parser.
pub struct Setting {
    pub name: &'static str,
    set: fn(&mut Config, &str) -> Result<(), String>,
    get: fn(&Config) -> String,
}

macro_rules! setting {
    ($name:literal, $field:ident) => {
        Setting {
            name: $name,
            set: |c, v| {
                c.$field = parse($name, v)?;
                Ok(())
            },
            get: |c| c.$field.to_string(),
        }
    };
    ($name:literal, $field:ident, quoted) => {
        Setting {
            name: $name,
            set: |c, v| {
                c.$field = parse($name, v)?;
                Ok(())
            },
            get: |c| toml_string(&c.$field.to_string()),
        }
    };
}

/// Every setting, in the order `rill config defaults` prints them.
pub const SETTINGS: &[Setting] = &[
    setting!("listen", listen, quoted),
    Setting {
        name: "data-dir",
        set: |c, v| {
            c.data_dir = PathBuf::from(v);
            Ok(())
        },
        get: |c| toml_string(&c.data_dir.display().to_string()),
    },
    setting!("cores", cores),
    setting!("long-poll-timeout-ms", long_poll_timeout_ms),
    setting!("producer-gap-wait-ms", producer_gap_wait_ms),
    setting!("sse-cycle-ms", sse_cycle_ms),
    setting!("max-body-bytes", max_body_bytes),
    setting!("max-head-bytes", max_head_bytes),
    setting!("max-headers", max_headers),
    setting!("idle-timeout-ms", idle_timeout_ms),
    setting!("min-request-rate", min_request_rate),
    setting!("fsync", fsync, quoted),
    setting!("segment-bytes", segment_bytes),
    setting!("cache-bytes", cache_bytes),
    setting!("clean-interval-ms", clean_interval_ms),
    setting!("max-commit-queue-bytes", max_commit_queue_bytes),
    setting!("max-snapshot-bytes", max_snapshot_bytes),
    setting!("max-connections", max_connections),
    setting!("shutdown-timeout-ms", shutdown_timeout_ms),
    setting!("access-log", access_log),
    setting!("disk-reserve", disk_reserve),
    setting!("max-index-bytes", max_index_bytes),
    setting!("max-reply-bytes", max_reply_bytes),
    setting!("max-request-bytes", max_request_bytes),
    setting!("max-producer-id-bytes", max_producer_id_bytes),
    setting!("max-producers-per-stream", max_producers_per_stream),
];

fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

impl Config {
    /// Parses `serve` flags over the defaults, or over the file `--config
    /// FILE` names (flags win). `Err` carries the message for the user.
    pub fn from_args(args: &[String]) -> Result<Config, String> {
        let flags = split_flags(args)?;
        let mut config = match flags.iter().find(|(name, _)| name == "config") {
            Some((_, file)) => Config::read_file(file)?,
            None => Config::default(),
        };
        for (name, value) in flags.iter().filter(|(name, _)| name != "config") {
            let setting = setting(name).expect("split_flags refuses unknown options");
            (setting.set)(&mut config, value)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// The configuration a TOML file gives (unset keys keep their default),
    /// validated.
    pub fn read_file(path: &str) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {path}: {e}"))?;
        Config::from_toml(&text).map_err(|e| format!("config file {path}: {e}"))
    }

    /// Applies a TOML document of `key = value` settings to the defaults.
    /// Unknown keys and values of the wrong kind are errors naming the key.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let mut config = Config::default();
        let mut seen = std::collections::HashSet::new();
        for (key, value) in &table {
            let name = key.replace('_', "-");
            let setting = setting(&name).ok_or_else(|| format!("unknown key {key:?}"))?;
            // Both spellings of one setting: which one would hold is not
            // what the file's order says (the table is sorted).
            if !seen.insert(setting.name) {
                return Err(format!("key {key:?}: {name} is given twice"));
            }
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(format!(
                        "key {key:?}: expected a string, an integer or a boolean, found a {}",
                        other.type_str()
                    ));
                }
            };
            (setting.set)(&mut config, &text).map_err(|e| format!("key {key:?}: {e}"))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// This configuration as a TOML document `from_toml` reads back.
    pub fn to_toml(&self) -> String {
        SETTINGS
            .iter()
            .map(|s| format!("{} = {}\n", s.name.replace('-', "_"), (s.get)(self)))
            .collect()
    }

    fn validate(&self) -> Result<(), String> {
        if self.cores == 0 || self.cores > 256 {
            return Err("--cores must be between 1 and 256".into());
        }
        // An empty path would put the data in whatever directory rill
        // happens to start in.
        if self.data_dir.as_os_str().is_empty() {
            return Err("--data-dir must not be empty".into());
        }
        if self.long_poll_timeout_ms == 0
            || self.sse_cycle_ms == 0
            || self.idle_timeout_ms == 0
            || self.clean_interval_ms == 0
            || self.shutdown_timeout_ms == 0
        {
            return Err("timeouts must be positive".into());
        }
        // The runtime's timers reach about two years; a day is past any use.
        let timeouts = [
            self.long_poll_timeout_ms,
            self.producer_gap_wait_ms,
            self.sse_cycle_ms,
            self.idle_timeout_ms,
            self.clean_interval_ms,
            self.shutdown_timeout_ms,
        ];
        if timeouts.iter().any(|&ms| ms > MAX_TIMEOUT_MS) {
            return Err(format!(
                "timeouts must be at most {MAX_TIMEOUT_MS} ms (a day)"
            ));
        }
        // Room for the largest record: a body with its head's strings (key,
        // content type, attributes, Stream-Seq) and the entry's own fields.
        let head_room = (64 << 10).max(self.max_head_bytes as u64 + (16 << 10));
        let largest_record = self.max_body_bytes + head_room;
        if largest_record > crate::log::format::MAX_PAYLOAD_BYTES as u64 {
            return Err(format!(
                "--max-body-bytes plus --max-head-bytes (+ 16 KiB) must fit a log record's {} bytes",
                crate::log::format::MAX_PAYLOAD_BYTES
            ));
        }
        if !self.segment_bytes.is_multiple_of(4096)
            || self.segment_bytes < largest_record
            || self.segment_bytes > MAX_SEGMENT_BYTES
        {
            return Err(
                "--segment-bytes must be a multiple of 4096, at least --max-body-bytes + \
                 64 KiB (or + --max-head-bytes + 16 KiB when that is more) and at most 4 GiB"
                    .into(),
            );
        }
        if self.max_head_bytes < 1024 || self.max_headers < 8 {
            return Err("--max-head-bytes must be >= 1024 and --max-headers >= 8".into());
        }
        // A zero budget would refuse every request of its kind while the
        // server reports itself ready.
        let budgets = [
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-connections", self.max_connections),
            (
                "--max-commit-queue-bytes",
                self.max_commit_queue_bytes as u64,
            ),
            ("--max-snapshot-bytes", self.max_snapshot_bytes as u64),
            ("--max-index-bytes", self.max_index_bytes),
            ("--max-reply-bytes", self.max_reply_bytes),
            ("--max-request-bytes", self.max_request_bytes),
        ];
        if let Some((flag, _)) = budgets.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be positive"));
        }
        // These are shared out among the shards: each needs a share.
        let shared = [
            ("--max-index-bytes", self.max_index_bytes),
            ("--max-reply-bytes", self.max_reply_bytes),
            ("--max-request-bytes", self.max_request_bytes),
        ];
        if let Some((flag, _)) = shared.iter().find(|(_, v)| *v < self.cores as u64) {
            return Err(format!(
                "{flag} must be at least --cores (a share per shard)"
            ));
        }
        if self.max_producer_id_bytes == 0 || self.max_producers_per_stream == 0 {
            return Err(
                "--max-producer-id-bytes and --max-producers-per-stream must be positive".into(),
            );
        }
        Ok(())
    }

    /// The producer bounds the shards apply: as set, but no more producers
    /// per stream than half a segment holds in one IMAGE record (a stream's
    /// metadata lists every producer; `stream/codec_image.rs`).
    pub fn producer_limits(&self) -> ProducerLimits {
        // Id length, epoch and sequence as encoded, with room to spare.
        let per_producer = self.max_producer_id_bytes as u64 + 32;
        let fit = (self.segment_bytes / 2 / per_producer).max(1);
        ProducerLimits {
            max_id_bytes: self.max_producer_id_bytes,
            max_per_stream: self
                .max_producers_per_stream
                .min(usize::try_from(fit).unwrap_or(usize::MAX)),
        }
    }

    pub fn http_limits(&self) -> crate::http::parse::Limits {
        crate::http::parse::Limits {
            max_head_bytes: self.max_head_bytes,
            max_headers: self.max_headers,
            max_body_bytes: self.max_body_bytes,
        }
    }
}

fn parse<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("invalid value for {name}: {text:?}"))
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `--name value` or `--name=value` pairs, names without the dashes.
fn split_flags(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut flags = Vec::new();
    let mut iter = args.iter();
    while let Some(flag) = iter.next() {
        let Some(flag) = flag.strip_prefix("--") else {
            return Err(format!(
                "unexpected argument {flag:?}; see rill serve --help"
            ));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag, None),
        };
        // Known before its value is taken: `--bogus --cores 1` names the
        // unknown option, not a stray "1".
        if name != "config" && setting(name).is_none() {
            return Err(format!("unknown option --{name}; see rill serve --help"));
        }
        let value = match inline {
            Some(value) => value,
            None => iter.next().ok_or(format!("--{flag} needs a value"))?,
        };
        flags.push((name.to_string(), value.to_string()));
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_override_defaults() {
        let c = Config::from_args(&args(&[
            "--listen",
            "0.0.0.0:9000",
            "--cores=2",
            "--long-poll-timeout-ms",
            "1500",
        ]))
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.cores, 2);
        assert_eq!(c.long_poll_timeout_ms, 1500);
        let defaults = Config::from_args(&[]).unwrap();
        assert_eq!(defaults.listen.port(), 4437);
        assert_eq!(defaults.shutdown_timeout_ms, 10_000);
        let c = Config::from_args(&args(&["--shutdown-timeout-ms=2500"])).unwrap();
        assert_eq!(c.shutdown_timeout_ms, 2500);
    }

    #[test]
    fn the_file_round_trips_and_flags_override_it() {
        let c = Config {
            cores: 3,
            fsync: FsyncPolicy::Interval(200),
            data_dir: PathBuf::from("/var/lib/rill"),
            ..Config::default()
        };
        let text = c.to_toml();
        let back = Config::from_toml(&text).unwrap();
        assert_eq!(back.to_toml(), text);
        let dir = std::env::temp_dir().join(format!("rill-config-{}", std::process::id()));
        std::fs::write(&dir, "cores = 3\nlisten = \"0.0.0.0:9000\"\n").unwrap();
        let path = dir.display().to_string();
        let c = Config::from_args(&args(&["--config", &path, "--cores", "2"])).unwrap();
        assert_eq!((c.cores, c.listen.port()), (2, 9000));
        std::fs::remove_file(dir).unwrap();
    }

    #[test]
    fn file_errors_name_the_key() {
        let unknown = Config::from_toml("bogus = 1").unwrap_err();
        assert!(unknown.contains("bogus"), "{unknown}");
        let bad = Config::from_toml("cores = \"many\"").unwrap_err();
        assert!(bad.contains("cores"), "{bad}");
        let kind = Config::from_toml("cache_bytes = true").unwrap_err();
        assert!(kind.contains("cache_bytes"), "{kind}");
        assert!(Config::from_toml("cores = 0").is_err());
        assert!(Config::from_toml("not toml").is_err());
        let twice = Config::from_toml("max-body-bytes = 2000\nmax_body_bytes = 1000").unwrap_err();
        assert!(twice.contains("max-body-bytes is given twice"), "{twice}");
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(Config::from_args(&args(&["--bogus"])).is_err());
        let stray = Config::from_args(&args(&["--bogus", "--cores", "1"])).unwrap_err();
        assert!(stray.starts_with("unknown option --bogus"), "{stray}");
        for flag in ["--max-connections", "--max-index-bytes", "--max-body-bytes"] {
            let zero = Config::from_args(&args(&[flag, "0"])).unwrap_err();
            assert!(zero.contains(flag), "{zero}");
        }
        let unshared = args(&["--max-request-bytes", "3", "--cores", "4"]);
        assert!(
            Config::from_args(&unshared)
                .unwrap_err()
                .contains("a share per shard")
        );
        assert!(Config::from_args(&args(&["--cores", "0"])).is_err());
        let nowhere = Config::from_args(&args(&["--data-dir", ""])).unwrap_err();
        assert!(nowhere.contains("--data-dir"), "{nowhere}");
        assert!(Config::from_toml("data_dir = \"\"").is_err());
        assert!(Config::from_args(&args(&["--cores"])).is_err());
        assert!(Config::from_args(&args(&["--listen", "nowhere"])).is_err());
        assert!(Config::from_args(&args(&["--shutdown-timeout-ms", "0"])).is_err());
        // Longer would panic the runtime's timers at the first wait.
        let day = MAX_TIMEOUT_MS.to_string();
        assert!(Config::from_args(&args(&["--idle-timeout-ms", &day])).is_ok());
        let huge = u64::MAX.to_string();
        assert!(Config::from_args(&args(&["--idle-timeout-ms", &huge])).is_err());
        assert!(Config::from_args(&args(&["--long-poll-timeout-ms", &huge])).is_err());
        // The index keeps file positions in 32 bits.
        let most = (1u64 << 32).to_string();
        assert!(Config::from_args(&args(&["--segment-bytes", &most])).is_ok());
        let over = ((1u64 << 32) + 4096).to_string();
        assert!(Config::from_args(&args(&["--segment-bytes", &over])).is_err());
    }

    #[test]
    fn a_segment_holds_the_largest_body_with_its_head() {
        let with = |extra: &[&str]| {
            let base = ["--max-body-bytes", "65536", "--segment-bytes", "131072"];
            Config::from_args(&args(&[&base[..], extra].concat()))
        };
        assert!(with(&[]).is_ok());
        assert!(with(&["--max-head-bytes", "49152"]).is_ok());
        assert!(with(&["--max-head-bytes", "53248"]).is_err());
        let huge = [
            "--max-body-bytes",
            "1073741824",
            "--segment-bytes",
            "2147483648",
        ];
        assert!(
            Config::from_args(&args(&huge)).is_err(),
            "a record is at most 1 GiB"
        );
    }
}

#[cfg(test)]
mod producer_tests {
    use super::*;

    #[test]
    fn producer_limits_fit_an_image_in_half_a_segment() {
        let defaults = Config::default().producer_limits();
        assert_eq!(
            defaults,
            ProducerLimits::default(),
            "64 MiB segments hold them all"
        );
        let small = Config {
            segment_bytes: 131_072,
            max_body_bytes: 65_536,
            ..Config::default()
        };
        let limits = small.producer_limits();
        assert_eq!(limits.max_per_stream, 65_536 / (256 + 32));
        assert_eq!(limits.max_id_bytes, 256);
        let zero = ["--max-producers-per-stream", "0"].map(String::from);
        assert!(Config::from_args(&zero).is_err());
    }
}
