//! The `rill` binary: command line, startup, signal handling, shutdown.

use std::process::ExitCode;

/// mimalloc: the shards allocate and free many small buffers per request
/// (frames, records, acks) next to medium ones (bodies, batches); glibc's
/// allocator spent a fifth of an append-batch shard's time consolidating
/// its bins (perf/RESULTS.md, 2026-11-30).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill::config::{Config, SERVE_HELP};
use rill::datadir::DataDir;
use rill::notify;
use rill::shard::{self, mesh::MeshMsg};

const HELP: &str = "\
rill: a thread-per-core io_uring Durable Streams server

USAGE:
    rill serve [OPTIONS]    run the server (see rill serve --help)
    rill repair --data-dir DIR [--yes]
                            check the logs; truncate a damaged one (see rill repair --help)
    rill config check FILE  validate a config file and print the settings it gives
    rill config defaults    print every setting with its default, as a config file
    rill --help             print this help
    rill --version          print the version
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("rill {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("serve") if args[1..].iter().any(|a| a == "-h" || a == "--help") => {
            print!("{SERVE_HELP}");
            ExitCode::SUCCESS
        }
        Some("serve") => match Config::from_args(&args[1..]) {
            Ok(config) => serve(config),
            Err(message) => {
                eprintln!("rill: {message}");
                ExitCode::from(2)
            }
        },
        Some("repair") => rill::repair::main(&args[1..]),
        Some("config") => config_command(&args[1..]),
        Some(other) => {
            eprintln!("rill: unknown command {other:?}\n\n{HELP}");
            ExitCode::from(2)
        }
    }
}

/// `rill config check FILE` and `rill config defaults`.
fn config_command(args: &[String]) -> ExitCode {
    let printed = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["defaults"] => Ok(Config::default().to_toml()),
        ["check", file] => Config::read_file(file).map(|c| c.to_toml()),
        _ => Err("usage: rill config check FILE | rill config defaults".to_string()),
    };
    match printed {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("rill: {message}");
            ExitCode::from(2)
        }
    }
}

/// Signals an operator may send out of habit (a reload, a log reopen):
/// rill has neither, and their default action would kill it without a
/// drain or a log line. They are logged and ignored.
const IGNORED_SIGNALS: [i32; 3] = [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

/// Blocks SIGINT, SIGTERM and the `IGNORED_SIGNALS` in every thread
/// (shards inherit the mask), so only `wait_for_stop_signal` on the signal
/// thread receives them.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialized by sigemptyset before use;
    // pthread_sigmask only reads the set we pass.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        for signal in IGNORED_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_stop_signal(set: &libc::sigset_t) -> i32 {
    loop {
        let mut signal = 0;
        // SAFETY: `set` is a valid, initialized signal set; sigwait writes
        // the received signal number into our local.
        unsafe { libc::sigwait(set, &mut signal) };
        if !IGNORED_SIGNALS.contains(&signal) {
            return signal;
        }
        rill::warn!("signal {signal} ignored: rill has no reload; settings change with a restart");
    }
}

/// Receives the stop signal on a thread of its own. One that comes before
/// `started` is set (the data dir re-sharding, the shards recovering)
/// ends the process at once, as a kill would: both are crash-safe, and
/// the next start picks up where they stopped, where waiting could take
/// minutes. After, it goes to the returned channel: the graceful stop.
fn watch_stop_signals(set: libc::sigset_t, started: Arc<AtomicBool>) -> mpsc::Receiver<i32> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rill-signals".to_string())
        .spawn(move || {
            let signal = wait_for_stop_signal(&set);
            if !started.load(Ordering::SeqCst) {
                rill::info!("signal {signal} received while starting; exiting");
                std::process::exit(0);
            }
            let _ = tx.send(signal);
        })
        .expect("spawn the signal thread");
    rx
}

/// Opens (and locks) the data dir; re-shards it first when it was written
/// for another shard count.
fn open_data_dir(config: &Config) -> Result<DataDir, String> {
    let mut data = DataDir::open(&config.data_dir)?;
    match data.shards() {
        None => data.set_shards(config.cores)?,
        Some(n) if n != config.cores => rill::reshard::reshard(&mut data, config, n, config.cores)?,
        Some(_) => {}
    }
    Ok(data)
}

/// Opts this process out of transparent huge pages. With the kernel's THP
/// in `always` mode, each first touch of a fresh 2 MiB region of the heap
/// faults in and zeroes a whole huge page; the commit path's small buffers
/// made that ~4 % of a loaded shard's samples (`clear_page_erms`), ~0.2 %
/// without (perf/RESULTS.md, 2026-11-30 session 3). Best effort.
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's memory
    // map; the unused arguments must be zero.
    let result = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if result != 0 {
        let error = std::io::Error::last_os_error();
        rill::warn!("prctl(PR_SET_THP_DISABLE): {error}");
    }
}

/// Raises this process's soft limit on open files to its hard limit (at
/// most `fs.nr_open`): every client connection is a descriptor, and a
/// shell's default soft limit (often 1,024) would make accepts fail long
/// before `--max-connections`. Says so when even that is below what the
/// connection limit needs.
fn raise_open_file_limit(config: &Config) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit that we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<libc::rlim_t>().ok())
        .unwrap_or(1 << 20);
    let target = limit.rlim_max.min(nr_open);
    if limit.rlim_cur < target {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit that we own.
        match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } {
            0 => limit = raised,
            _ => rill::warn!("raising RLIMIT_NOFILE: {}", std::io::Error::last_os_error()),
        }
    }
    let wanted = config.max_connections.saturating_mul(config.cores as u64);
    if limit.rlim_cur < wanted {
        rill::warn!(
            "open files are limited to {} (RLIMIT_NOFILE): fewer than --max-connections {} \
             × {} shards; raise LimitNOFILE (systemd) or ulimit -Hn",
            limit.rlim_cur,
            config.max_connections,
            config.cores
        );
    }
}

fn serve(config: Config) -> ExitCode {
    // First: until the signals are blocked, a stop signal ends the process
    // by its default action (exit by the signal, not status 0).
    let started = Arc::new(AtomicBool::new(false));
    let signals = watch_stop_signals(block_stop_signals(), started.clone());
    disable_transparent_huge_pages();
    raise_open_file_limit(&config);
    let data = match open_data_dir(&config) {
        Ok(data) => data,
        Err(message) => {
            rill::error!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let config = Arc::new(config);
    notify::notify_or_log("STATUS=recovering the log");
    let (handles, senders) = match shard::start(config.clone(), &data) {
        Ok(started) => started,
        Err(message) => {
            rill::error!("startup failed: {message}");
            return ExitCode::FAILURE;
        }
    };
    started.store(true, Ordering::SeqCst);
    rill::health::mark_ready();
    // Every shard has recovered: requests now see everything acknowledged
    // before the last stop, so systemd may now start what depends on rill.
    let serving = format!("serving on {} with {} shards", config.listen, config.cores);
    notify::notify_or_log(&format!("READY=1\nSTATUS={serving}"));
    rill::info!(
        "listening on {} shards={} data_dir={}",
        config.listen,
        config.cores,
        config.data_dir.display()
    );
    let producers = config.producer_limits().max_per_stream;
    if producers < config.max_producers_per_stream {
        rill::warn!(
            "--max-producers-per-stream {} lowered to {producers}: a stream's metadata, \
             which lists its producers, must fit half of --segment-bytes",
            config.max_producers_per_stream
        );
    }
    let signal = signals.recv().expect("the signal thread sends or exits");
    rill::info!("signal {signal} received, stopping");
    notify::notify_or_log("STOPPING=1\nSTATUS=stopping");
    for sender in &senders {
        let _ = sender.send(MeshMsg::Shutdown);
    }
    stop(handles, Duration::from_millis(config.shutdown_timeout_ms))
}

/// Waits up to `bound` for the shard threads (they end live responses,
/// close connections, write and sync what is queued). Exit status 0 only
/// when every shard finished and its final sync succeeded; otherwise 1,
/// without waiting further (see docs/OPERATIONS.md "Shutdown and restarts").
fn stop(handles: Vec<JoinHandle<()>>, bound: Duration) -> ExitCode {
    let deadline = Instant::now() + bound;
    while handles.iter().any(|h| !h.is_finished()) {
        if Instant::now() >= deadline {
            let left = handles.iter().filter(|h| !h.is_finished()).count();
            rill::error!(
                "{left} shard(s) did not stop within {} ms; exiting anyway",
                bound.as_millis()
            );
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let joined = handles.into_iter().all(|h| h.join().is_ok());
    if !joined || shard::writer::final_sync_failed() {
        rill::error!("stopped with errors");
        return ExitCode::FAILURE;
    }
    rill::info!("stopped");
    ExitCode::SUCCESS
}
