//! rill: a thread-per-core io_uring Durable Streams server.
//!
//! Layers point one way (see `docs/ARCHITECTURE.md`):
//! `shard` -> `http` -> `protocol` -> `stream`. `protocol` decides and `stream`
//! applies; both are pure and deterministic. Only `shard` touches sockets.

pub mod clock;
pub mod config;
pub mod datadir;
pub mod entropy;
pub mod health;
pub mod http;
pub mod log;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod protocol;
pub mod repair;
pub mod reshard;
pub mod shard;
pub mod stream;
