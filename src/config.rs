//! Configuration: command-line flags and the limits every part obeys.

use std::net::SocketAddr;
use std::path::PathBuf;

/// When an acknowledged write is on disk (issue 3 "Group commit").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Every acknowledgement follows the fdatasync that covers it.
    Always,
    /// Acknowledge once written; sync at least every MS milliseconds. A
    /// crash may lose the writes of the last MS milliseconds.
    Interval(u64),
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
    /// SSE responses end after about this long so CDNs can collapse (§8.2).
    pub sse_cycle_ms: u64,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: u64,
    /// A connection idle this long between requests is closed; a request
    /// whose head or body stalls this long gets 408.
    pub idle_timeout_ms: u64,
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
    /// How long shutdown may take after SIGTERM/SIGINT before the process
    /// gives up waiting for its shards and exits with status 1.
    pub shutdown_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 4437)),
            data_dir: PathBuf::from("./data"),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            long_poll_timeout_ms: 30_000,
            sse_cycle_ms: 60_000,
            max_head_bytes: 16 << 10,
            max_headers: 100,
            max_body_bytes: 32 << 20,
            idle_timeout_ms: 60_000,
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            cache_bytes: 256 << 20,
            clean_interval_ms: 10_000,
            max_commit_queue_bytes: 256 << 20,
            max_snapshot_bytes: 32 << 20,
            shutdown_timeout_ms: 10_000,
        }
    }
}

pub const SERVE_HELP: &str = "\
rill serve: run the Durable Streams server

USAGE:
    rill serve [OPTIONS]

OPTIONS:
    --listen ADDR               address to listen on [default: 127.0.0.1:4437]
    --data-dir DIR              data directory [default: ./data]
    --cores N                   shards (pinned threads), one per core [default: all cores]
    --long-poll-timeout-ms MS   how long a long-poll waits for data [default: 30000]
    --sse-cycle-ms MS           SSE responses end after this long, clients reconnect [default: 60000]
    --max-body-bytes N          largest request body; larger gets 413 [default: 33554432]
    --max-head-bytes N          largest request head; larger gets 431 [default: 16384]
    --max-headers N             most request headers; more gets 431 [default: 100]
    --idle-timeout-ms MS        idle keep-alive connections close, stalled requests get 408 [default: 60000]
    --fsync POLICY              always: acknowledge after fdatasync; interval:MS: acknowledge
                                after the write and sync every MS (may lose MS of writes on a
                                crash) [default: always]
    --segment-bytes N           log segment size, a multiple of 4096 and at least
                                --max-body-bytes + 64 KiB [default: 67108864]
    --cache-bytes N             stream bytes cached in memory over all shards; older data is
                                read from the log [default: 268435456]
    --clean-interval-ms MS      how often the cleaner reclaims segments of deleted data
                                [default: 10000]
    --max-commit-queue-bytes N  log bytes a shard may queue for the disk; more writes get 503
                                with Retry-After [default: 268435456]
    --max-snapshot-bytes N      largest snapshot blob; larger gets 413 [default: 33554432]
    --shutdown-timeout-ms MS    after SIGTERM/SIGINT, how long live responses may take to end
                                and the log to be synced; past it rill exits with status 1
                                [default: 10000]
    -h, --help                  print this help
";

impl Config {
    /// Parses `serve` flags. `Err` carries the message for the user.
    pub fn from_args(args: &[String]) -> Result<Config, String> {
        let mut config = Config::default();
        let mut iter = args.iter();
        while let Some(flag) = iter.next() {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (flag.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| iter.next().cloned())
                    .ok_or(format!("{name} needs a value"))
            };
            match name {
                "--listen" => config.listen = parse(name, &value()?)?,
                "--data-dir" => config.data_dir = PathBuf::from(value()?),
                "--cores" => config.cores = parse(name, &value()?)?,
                "--long-poll-timeout-ms" => config.long_poll_timeout_ms = parse(name, &value()?)?,
                "--sse-cycle-ms" => config.sse_cycle_ms = parse(name, &value()?)?,
                "--max-body-bytes" => config.max_body_bytes = parse(name, &value()?)?,
                "--max-head-bytes" => config.max_head_bytes = parse(name, &value()?)?,
                "--max-headers" => config.max_headers = parse(name, &value()?)?,
                "--idle-timeout-ms" => config.idle_timeout_ms = parse(name, &value()?)?,
                "--fsync" => config.fsync = parse(name, &value()?)?,
                "--segment-bytes" => config.segment_bytes = parse(name, &value()?)?,
                "--cache-bytes" => config.cache_bytes = parse(name, &value()?)?,
                "--clean-interval-ms" => config.clean_interval_ms = parse(name, &value()?)?,
                "--max-commit-queue-bytes" => {
                    config.max_commit_queue_bytes = parse(name, &value()?)?
                }
                "--max-snapshot-bytes" => config.max_snapshot_bytes = parse(name, &value()?)?,
                "--shutdown-timeout-ms" => config.shutdown_timeout_ms = parse(name, &value()?)?,
                other => return Err(format!("unknown option {other}; see rill serve --help")),
            }
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        if self.cores == 0 || self.cores > 256 {
            return Err("--cores must be between 1 and 256".into());
        }
        if self.long_poll_timeout_ms == 0
            || self.sse_cycle_ms == 0
            || self.idle_timeout_ms == 0
            || self.clean_interval_ms == 0
            || self.shutdown_timeout_ms == 0
        {
            return Err("timeouts must be positive".into());
        }
        if !self.segment_bytes.is_multiple_of(4096)
            || self.segment_bytes < self.max_body_bytes + (64 << 10)
        {
            return Err(
                "--segment-bytes must be a multiple of 4096 and at least --max-body-bytes + 65536"
                    .into(),
            );
        }
        if self.max_head_bytes < 1024 || self.max_headers < 8 {
            return Err("--max-head-bytes must be >= 1024 and --max-headers >= 8".into());
        }
        Ok(())
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
    fn rejects_bad_flags() {
        assert!(Config::from_args(&args(&["--bogus"])).is_err());
        assert!(Config::from_args(&args(&["--cores", "0"])).is_err());
        assert!(Config::from_args(&args(&["--cores"])).is_err());
        assert!(Config::from_args(&args(&["--listen", "nowhere"])).is_err());
        assert!(Config::from_args(&args(&["--shutdown-timeout-ms", "0"])).is_err());
    }
}
