//! Re-sharding at startup (issue 3 "Restarting with a different --cores"):
//! a data dir written with N shards holds each stream in the log of
//! `shard_of(key, N)`. Started with M shards, rill first copies every
//! stream whose owner changes into its new owner's log (RELOCATE records of
//! all its bytes, then an IMAGE of its metadata) and every bucket into
//! every new log, syncs them, records M in `rill.meta`, and removes the
//! shard dirs past M. Each shard then drops, at its own startup, the
//! streams it recovered that it no longer owns.
//!
//! A crash before M is recorded leaves the old layout authoritative (the
//! extra copies are dropped as foreign); after it, the new one is: never
//! silent loss. The cost is one copy of the moved data.

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::config::Config;
use crate::datadir::DataDir;
use crate::log::appender::Appender;
use crate::log::format;
use crate::log::recovery;
use crate::log::storage::DirectStorage;
use crate::shard::blobs;
use crate::shard::placement::shard_of;
use crate::shard::store::Segments;
use crate::stream::Table;
use crate::stream::codec::{self, Entry};
use crate::stream::rebuild::{Rebuild, image_of, replay_record, ring_budget};

/// One shard log, recovered.
struct Log {
    table: Table,
    registry: BTreeMap<String, u64>,
    storage: Rc<DirectStorage>,
    appender: Option<Appender<DirectStorage>>,
    next_seq: u64,
    /// Framed records not yet written.
    pending: Vec<u8>,
    last_record: Option<usize>,
}

impl Log {
    fn push(&mut self, entry: &Entry) {
        let mut payload = Vec::new();
        let kind = codec::encode(entry, &mut payload);
        self.push_encoded(kind, &payload);
    }

    fn push_encoded(&mut self, kind: u8, payload: &[u8]) {
        self.last_record = Some(self.pending.len());
        format::encode(kind, self.next_seq, payload, &mut self.pending);
        self.next_seq += 1;
    }

    /// `push` within batches of about `batch_bytes`: what is pending is
    /// written first when this record would take it past them, and the
    /// batch once it reaches them. (A batch must fit a segment: pushing
    /// a large record onto almost half a segment made one that did not.)
    async fn push_batched(&mut self, entry: &Entry, batch_bytes: usize) -> Result<(), String> {
        let mut payload = Vec::new();
        let kind = codec::encode(entry, &mut payload);
        if self.pending.len() + format::framed_len(payload.len()) > batch_bytes {
            self.flush().await?;
        }
        self.push_encoded(kind, &payload);
        if self.pending.len() >= batch_bytes {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes pending records as one batch and syncs.
    async fn flush(&mut self) -> Result<(), String> {
        let Some(last) = self.last_record.take() else {
            return Ok(());
        };
        format::set_flags(&mut self.pending[last..], format::FLAG_BATCH_END);
        let appender = self
            .appender
            .as_mut()
            .expect("only target logs are written");
        appender
            .append(&self.pending, true)
            .await
            .map_err(|e| format!("writing the log: {e}"))?;
        self.pending.clear();
        Ok(())
    }
}

async fn recover(
    data: &DataDir,
    config: &Config,
    index: usize,
    target: bool,
) -> Result<Log, String> {
    let dir = data.shard_dir(index);
    let storage =
        Rc::new(DirectStorage::new(dir.clone()).map_err(|e| format!("{}: {e}", dir.display()))?);
    let mut rebuild = Rebuild::default();
    if !crate::datadir::access_logged(&dir) {
        rebuild.legacy_access();
    }
    let recovered = recovery::recover(&*storage, config.segment_bytes, |kind, payload, at| {
        replay_record(&mut rebuild, kind, payload, (at.segment, at.pos))
    })
    .await
    .map_err(|e| e.to_string())?;
    let (table, registry) = rebuild.finish(u64::MAX, crate::clock::now_ms())?;
    let appender = match target {
        true => Some(
            Appender::open(
                storage.clone(),
                config.segment_bytes,
                recovered.end,
                recovered.tail,
                recovered.scrub_to,
            )
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?,
        ),
        false => None,
    };
    let next_seq = recovered.next_seq;
    Ok(Log {
        table,
        registry,
        storage,
        appender,
        next_seq,
        pending: Vec::new(),
        last_record: None,
    })
}

/// Copies the streams of `source` that `to` shards place elsewhere, in
/// batches of half a segment.
async fn move_streams(
    logs: &mut [Log],
    source: usize,
    to: usize,
    segment_bytes: u64,
) -> Result<usize, String> {
    let batch_bytes = (segment_bytes / 2) as usize;
    let segments = Segments::new(logs[source].storage.clone());
    let moving: Vec<(String, usize)> = logs[source]
        .table
        .iter()
        .map(|(key, _)| (key.clone(), shard_of(key, to)))
        .filter(|&(_, owner)| owner != source)
        .collect();
    for (key, owner) in &moving {
        let stream = logs[source].table.get(key).expect("listed above").clone();
        for extent in stream.data.extents_in(0, stream.head_tail()) {
            let mut bytes = Vec::with_capacity(extent.len as usize);
            segments
                .read_range(extent.segment, extent.pos, extent.len, &mut bytes)
                .await
                .map_err(|e| format!("reading {key}: {e}"))?;
            let entry = Entry::Relocate {
                key: key.clone(),
                stream_id: stream.id,
                start: extent.start,
                data: bytes,
            };
            logs[*owner].push_batched(&entry, batch_bytes).await?;
        }
        if let Some(snapshot) = &stream.snapshot {
            move_blob(logs, (source, *owner), stream.id, snapshot.offset)?;
        }
        let ring_budget = ring_budget(segment_bytes);
        let image = Entry::Image(Box::new(image_of(key, &stream, ring_budget)));
        logs[*owner].push_batched(&image, batch_bytes).await?;
    }
    Ok(moving.len())
}

/// Gives the moved stream's snapshot blob to its new owner (the blob
/// lives beside a shard's log, `shard::blobs`); the old shard's copy goes
/// with its dir, or the next sweep there. A failure stops the re-sharding
/// before the new layout is recorded (the old one stays, a restart tries
/// again), except a blob already missing, which no retry brings back.
fn move_blob(
    logs: &[Log],
    (source, owner): (usize, usize),
    stream_id: u64,
    offset: u64,
) -> Result<(), String> {
    let dir_of = |index: usize| logs[index].storage.dir().join("snapshots");
    let from = blobs::path(&dir_of(source), stream_id, offset);
    match blobs::share(&from, &dir_of(owner), stream_id, offset) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from.exists() => {
            crate::warn!("the snapshot blob {} is missing", from.display());
            Ok(())
        }
        Err(e) => Err(format!("moving the snapshot blob {}: {e}", from.display())),
        Ok(()) => Ok(()),
    }
}

/// Moves streams from `from` shards to `to` shards (see the module doc).
pub fn reshard(data: &mut DataDir, config: &Config, from: usize, to: usize) -> Result<(), String> {
    crate::info!("the data dir was written with {from} shards; moving streams to {to} shards");
    let started = std::time::Instant::now();
    let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| format!("cannot start io_uring runtime: {e}"))?;
    let moved = runtime.block_on(async {
        let mut logs = Vec::new();
        for index in 0..from.max(to) {
            logs.push(recover(data, config, index, index < to).await?);
        }
        let mut moved = 0;
        for source in 0..from {
            moved += move_streams(&mut logs, source, to, config.segment_bytes).await?;
        }
        let buckets: BTreeMap<String, u64> = logs.iter().flat_map(|l| l.registry.clone()).collect();
        for log in logs.iter_mut().take(to) {
            for (bucket, &created_at_ms) in &buckets {
                if !log.registry.contains_key(bucket) {
                    log.push(&Entry::BucketCreate {
                        bucket: bucket.clone(),
                        created_at_ms,
                    });
                }
            }
            log.flush().await?;
        }
        // A new shard dir holds only moved streams, whose images carry
        // access times recovery may trust (a legacy source's as of now).
        for index in from..to {
            crate::datadir::mark_access_logged(&data.shard_dir(index))
                .map_err(|e| format!("shard {index}: {e}"))?;
        }
        Ok::<usize, String>(moved)
    })?;
    data.set_shards(to)?;
    crate::info!(
        "moved {moved} streams to {to} shards in {} ms",
        started.elapsed().as_millis()
    );
    Ok(())
}
