//! `rill-bench`: a load generator for rill and any other Durable Streams
//! server, plus a trivial null server to measure the machine's ceiling with
//! the same client stack (tokio + hyper 1).

mod append;
mod batch;
mod bootstrap;
mod catchup;
mod client;
mod fanout;
mod limits;
mod live;
mod longpoll;
mod multipart;
mod null_server;
mod output;
mod sse;
mod sse_conn;
mod stats;
mod writer;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "rill-bench",
    version,
    about = "Load generator for Durable Streams servers"
)]
struct Cli {
    /// Runtime worker threads [default: available cores].
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `/v1/stream/bench-{run}-{i}`
    V1,
    /// `/{bucket}/bench-{i}` after `PUT /{bucket}`
    Bucket,
}

#[derive(Subcommand)]
enum Command {
    /// Closed-loop (or rate-limited) appends to N streams.
    Append(append::AppendArgs),
    /// Closed-loop append-batch requests (extensions §4) to N streams.
    Batch(batch::BatchArgs),
    /// Bootstrap (extensions §3) of a stream with a snapshot and M retained messages.
    Bootstrap(bootstrap::BootstrapArgs),
    /// Pre-fill one stream, then C clients read it from the start.
    Catchup(catchup::CatchupArgs),
    /// One writer at R events/s, S SSE subscribers: delivery latency, loss.
    Fanout(fanout::FanoutArgs),
    /// W long-poll waiters at the tail, one writer: wake-up latency, misses.
    Longpoll(longpoll::LongpollArgs),
    /// A keep-alive HTTP/1.1 server answering 204 to anything.
    NullServer(null_server::NullArgs),
}

fn main() {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = cli.threads {
        builder.worker_threads(threads.max(1));
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rill-bench: cannot start the runtime: {e}");
            std::process::exit(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Append(args) => append::run(args).await,
            Command::Batch(args) => batch::run(args).await,
            Command::Bootstrap(args) => bootstrap::run(args).await,
            Command::Catchup(args) => catchup::run(args).await,
            Command::Fanout(args) => fanout::run(args).await,
            Command::Longpoll(args) => longpoll::run(args).await,
            Command::NullServer(args) => null_server::run(args).await,
        }
    });
    if let Err(e) = result {
        eprintln!("rill-bench: {e}");
        std::process::exit(1);
    }
}
