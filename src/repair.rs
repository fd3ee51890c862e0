//! `rill repair`: what to do when recovery refuses to start because a damaged
//! record lies before committed ones (`log::recovery`, row "damaged record,
//! and a complete batch after it").
//!
//! For every shard log of the data dir it runs the same scan as startup
//! (`recovery::recover` with an `apply` that only counts) through a
//! read-only storage. On `RecoveryError::Corrupt` it shows what truncating the
//! log at the damaged position would lose: the byte ranges of the damaged
//! segment and of every later one, and the valid records and complete
//! batches they hold (found by decoding at every 8-byte step). With `--yes`
//! it does it: removes the later segments (last first) and zeroes the
//! damaged segment from the damaged position to its end, so the next start
//! recovers everything before that position (the intact records of the
//! damaged batch are then an ordinary torn tail).
//!
//! It takes the data dir lock, so it never runs beside a server.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::datadir::DataDir;
use crate::log::aligned::{AlignedBuf, BLOCK};
use crate::log::format::{self, Decoded, FLAG_BATCH_END, RECORD_ALIGN};
use crate::log::recovery::{self, Recovered, RecoveryError};
use crate::log::storage::{SegmentFile, Storage};

pub const HELP: &str = "\
rill repair: check the shard logs of a data dir; truncate a damaged one

USAGE:
    rill repair --data-dir DIR [--yes]

Runs the scan the server runs at startup on every shard log. When a damaged
record lies before complete batches (the server then refuses to start), it
prints what truncating the log at the damaged record would lose: the segment
byte ranges and how many valid records and complete batches they hold.

With --yes it truncates there: removes the later segment files and zeroes
the damaged segment from the damaged record to its end. The next start then
recovers every record before the damage. Run it only while no server uses
the data dir (it takes the data dir lock).

OPTIONS:
    --data-dir DIR   the server's data directory (required)
    --yes            make the change; without it nothing is written
    -h, --help       print this help

EXIT STATUS:
    0  every log is clean (or was repaired with --yes)
    1  damage found, nothing changed (run again with --yes to repair)
    2  usage error, or the check itself failed (data dir in use, I/O error)
";

struct Args {
    data_dir: PathBuf,
    yes: bool,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut data_dir = None;
    let mut yes = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--yes" => yes = true,
            "--data-dir" => {
                let value = iter.next().ok_or("--data-dir needs a value")?;
                data_dir = Some(PathBuf::from(value));
            }
            other => match other.strip_prefix("--data-dir=") {
                Some(value) => data_dir = Some(PathBuf::from(value)),
                None => return Err(format!("unknown repair option {other:?}")),
            },
        }
    }
    let data_dir = data_dir.ok_or("repair needs --data-dir DIR")?;
    Ok(Some(Args { data_dir, yes }))
}

/// `rill repair ARGS` (the arguments after `repair`).
pub fn main(args: &[String]) -> ExitCode {
    let args = match parse(args) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("rill: {message}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build();
    let mut runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("rill: cannot start io_uring: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(repair(&args)) {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Damaged) => ExitCode::from(1),
        Err(message) => {
            eprintln!("rill: {message}");
            ExitCode::from(2)
        }
    }
}

enum Outcome {
    Clean,
    Damaged,
}

/// The shard count written in `rill.meta` (which must exist: repair never
/// creates a data dir).
fn shard_count(root: &Path) -> Result<usize, String> {
    let meta = root.join("rill.meta");
    let text = std::fs::read_to_string(&meta).map_err(|e| {
        format!(
            "cannot read {}: {e} (is {} a rill data dir?)",
            meta.display(),
            root.display()
        )
    })?;
    text.lines()
        .find_map(|l| l.strip_prefix("shards=")?.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("{} has no shards= line", meta.display()))
}

async fn repair(args: &Args) -> Result<Outcome, String> {
    let root = &args.data_dir;
    let shards = shard_count(root)?;
    // Holds the lock (and checks rill.meta) until repair ends.
    let data = DataDir::open(root)?;
    println!("rill repair: data dir {} ({shards} shards)", root.display());
    let mut outcome = Outcome::Clean;
    for index in 0..shards {
        let dir = data.shard_dir(index);
        let name = format!("shard-{index:02}");
        if !dir.is_dir() {
            println!("{name}: no log yet");
            continue;
        }
        let storage = ReadOnlyStorage { dir };
        match scan(&storage).await? {
            (Ok(recovered), records) => println!("{name}: clean: {}", summary(&recovered, records)),
            (Err(RecoveryError::Corrupt { path, pos, reason }), records) => {
                println!(
                    "{name}: corrupt record in {} at byte {pos}: {reason}",
                    path.display()
                );
                let plan = plan(&storage, &path, pos)?;
                print_plan(&plan, records);
                if args.yes {
                    // The cut may take TTL streams' access records: the
                    // next start begins their windows again rather than
                    // trusting what is left (`datadir::ACCESS_MARKER`).
                    crate::datadir::forget_access_logged(&storage.dir)
                        .map_err(|e| format!("{name}: {e}"))?;
                    apply(&storage, &plan)?;
                    match scan(&storage).await? {
                        (Ok(recovered), records) => {
                            println!("{name}: repaired: {}", summary(&recovered, records))
                        }
                        (Err(e), _) => return Err(format!("{name}: still damaged: {e}")),
                    }
                } else {
                    println!(
                        "  to truncate the log there: rill repair --data-dir {} --yes",
                        root.display()
                    );
                    outcome = Outcome::Damaged;
                }
            }
            (Err(e), _) => return Err(format!("{name}: {e}")),
        }
    }
    Ok(outcome)
}

/// What the next start would recover, in words.
fn summary(recovered: &Recovered, records: u64) -> String {
    let r = &recovered.report;
    let mut text = format!("{records} records in {} segments", r.segments);
    if r.duplicates > 0 {
        text += &format!(", {} duplicate records", r.duplicates);
    }
    if let Some((end, dropped)) = r.torn {
        text += &format!(
            "; torn tail at segment {} byte {} ({dropped} records of an unacknowledged batch \
             are dropped at the next start)",
            end.segment, end.pos
        );
    }
    text
}

/// Runs recovery's scan; also returns how many records it replayed.
async fn scan(
    storage: &ReadOnlyStorage,
) -> Result<(Result<Recovered, RecoveryError>, u64), String> {
    let segment_bytes = storage
        .largest_segment()
        .map_err(|e| format!("{}: {e}", storage.dir.display()))?;
    let mut records = 0u64;
    let result = recovery::recover(storage, segment_bytes, |_, _, _| {
        records += 1;
        Ok(())
    })
    .await;
    Ok((result, records))
}

/// Valid records found in a byte range.
#[derive(Default)]
struct Found {
    records: u64,
    batches: u64,
    seqs: Option<(u64, u64)>,
}

impl Found {
    fn add(&mut self, other: &Found) {
        self.records += other.records;
        self.batches += other.batches;
        self.seqs = match (self.seqs, other.seqs) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (a, b) => a.or(b),
        };
    }

    fn describe(&self) -> String {
        let mut text = format!(
            "{} valid records in {} complete batches",
            self.records, self.batches
        );
        if let Some((first, last)) = self.seqs {
            text += &format!(" (seqs {first}..={last})");
        }
        text
    }
}

/// Decodes `data` from `from` at every 8-byte step, skipping over each valid
/// record found.
fn valid_records(data: &[u8], from: usize) -> Found {
    let mut found = Found::default();
    let mut pos = from.next_multiple_of(RECORD_ALIGN);
    while pos + RECORD_ALIGN <= data.len() {
        match format::decode(&data[pos..]) {
            Decoded::Record { record, framed_len } => {
                found.records += 1;
                if record.flags & FLAG_BATCH_END != 0 {
                    found.batches += 1;
                }
                found.seqs = Some(match found.seqs {
                    Some((a, b)) => (a.min(record.seq), b.max(record.seq)),
                    None => (record.seq, record.seq),
                });
                pos += framed_len;
            }
            _ => pos += RECORD_ALIGN,
        }
    }
    found
}

/// One segment's part of a truncation.
struct Cut {
    path: PathBuf,
    /// Where the cut starts in this file (0: the whole file goes).
    from: u64,
    len: u64,
    found: Found,
}

/// The truncation at `pos` of segment `path`: the damaged segment first,
/// then every later segment.
fn plan(storage: &ReadOnlyStorage, path: &Path, pos: u64) -> Result<Vec<Cut>, String> {
    let fail = |p: &Path, e: io::Error| format!("{}: {e}", p.display());
    let segments = storage.list().map_err(|e| fail(&storage.dir, e))?;
    let damaged = segments
        .iter()
        .position(|&index| storage.path(index) == path)
        .ok_or_else(|| format!("{} is not a segment of the log", path.display()))?;
    let mut cuts = Vec::new();
    for (i, &index) in segments[damaged..].iter().enumerate() {
        let path = storage.path(index);
        let data = std::fs::read(&path).map_err(|e| fail(&path, e))?;
        let from = if i == 0 {
            pos.min(data.len() as u64)
        } else {
            0
        };
        cuts.push(Cut {
            found: valid_records(&data, from as usize),
            path,
            from,
            len: data.len() as u64,
        });
    }
    Ok(cuts)
}

fn print_plan(cuts: &[Cut], kept: u64) {
    println!("  truncating the log there would lose:");
    let mut total = Found::default();
    for (i, cut) in cuts.iter().enumerate() {
        if i == 0 {
            println!(
                "    {} bytes {}..{}: {}",
                cut.path.display(),
                cut.from,
                cut.len,
                cut.found.describe()
            );
        } else {
            println!(
                "    {} (the whole file, {} bytes): {}",
                cut.path.display(),
                cut.len,
                cut.found.describe()
            );
        }
        total.add(&cut.found);
    }
    println!("  in all: {}", total.describe());
    println!(
        "  the log keeps {kept} records (the batches before the damaged one; the intact records \
         of the damaged batch before it are dropped as a torn tail)"
    );
}

/// Makes the truncation: removes the later segments (last first), then zeroes
/// the damaged segment from the damaged position to its end.
fn apply(storage: &ReadOnlyStorage, cuts: &[Cut]) -> Result<(), String> {
    let fail = |p: &Path, e: io::Error| format!("{}: {e}", p.display());
    for cut in cuts[1..].iter().rev() {
        std::fs::remove_file(&cut.path).map_err(|e| fail(&cut.path, e))?;
        println!("  removed {}", cut.path.display());
    }
    std::fs::File::open(&storage.dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| fail(&storage.dir, e))?;
    let cut = &cuts[0];
    let zero = || -> io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(&cut.path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut pos = cut.from;
        while pos < cut.len {
            let n = zeros.len().min((cut.len - pos) as usize);
            file.write_all_at(&zeros[..n], pos)?;
            pos += n as u64;
        }
        file.sync_all()
    };
    zero().map_err(|e| fail(&cut.path, e))?;
    println!(
        "  zeroed {} from byte {} to {}",
        cut.path.display(),
        cut.from,
        cut.len
    );
    Ok(())
}

/// The segment directory of one shard, read through io_uring without
/// O_DIRECT and without ever writing: `list` leaves leftover `.seg.tmp`
/// files alone, and every write fails.
struct ReadOnlyStorage {
    dir: PathBuf,
}

struct ReadOnlyFile {
    file: monoio::fs::File,
}

fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "rill repair scans read-only",
    )
}

impl ReadOnlyStorage {
    /// Size of the largest segment file, rounded up to a block: how much
    /// `recover` must read of each (the server's `--segment-bytes` is not
    /// known here).
    fn largest_segment(&self) -> io::Result<u64> {
        let mut largest = BLOCK as u64;
        for index in self.list()? {
            let len = std::fs::metadata(self.path(index))?.len();
            largest = largest.max(len.next_multiple_of(BLOCK as u64));
        }
        Ok(largest)
    }
}

impl SegmentFile for ReadOnlyFile {
    async fn write_at(&self, buf: AlignedBuf, _pos: u64) -> (io::Result<usize>, AlignedBuf) {
        (Err(read_only()), buf)
    }

    async fn read_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        self.file.read_at(buf, pos).await
    }

    async fn sync_data(&self) -> io::Result<()> {
        Err(read_only())
    }
}

impl Storage for ReadOnlyStorage {
    type File = ReadOnlyFile;

    fn list(&self) -> io::Result<Vec<u64>> {
        let mut indexes = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(digits) = name.to_str().and_then(|n| n.strip_suffix(".seg")) else {
                continue;
            };
            if digits.len() == 20
                && digits.bytes().all(|b| b.is_ascii_digit())
                && let Ok(index) = digits.parse()
            {
                indexes.push(index);
            }
        }
        indexes.sort_unstable();
        Ok(indexes)
    }

    async fn open(&self, index: u64) -> io::Result<ReadOnlyFile> {
        let file = std::fs::File::open(self.path(index))?;
        Ok(ReadOnlyFile {
            file: monoio::fs::File::from_std(file)?,
        })
    }

    async fn create_tmp(&self, _index: u64) -> io::Result<ReadOnlyFile> {
        Err(read_only())
    }

    async fn publish_tmp(&self, _index: u64) -> io::Result<()> {
        Err(read_only())
    }

    async fn discard_tmp(&self, _index: u64) {}

    async fn remove(&self, _index: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{index:020}.seg"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arguments() {
        let args = |a: &[&str]| parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let got = args(&["--data-dir", "/d", "--yes"]).unwrap().unwrap();
        assert_eq!((got.data_dir, got.yes), (PathBuf::from("/d"), true));
        let got = args(&["--data-dir=/e"]).unwrap().unwrap();
        assert_eq!((got.data_dir, got.yes), (PathBuf::from("/e"), false));
        assert!(args(&["--yes", "--help"]).unwrap().is_none());
        assert!(args(&["--yes"]).is_err());
        assert!(args(&["--data-dir"]).is_err());
        assert!(args(&["--data-dir", "/d", "-y"]).is_err());
    }

    #[test]
    fn counts_valid_records_at_every_step() {
        let mut data = vec![0xAB; 24];
        let mut one = Vec::new();
        format::encode(1, 7, b"seven", &mut one);
        data.extend_from_slice(&one);
        let mut two = Vec::new();
        format::encode(2, 8, b"eight!", &mut two);
        format::set_flags(&mut two, FLAG_BATCH_END);
        data.extend_from_slice(&two);
        data.extend_from_slice(&[0; 64]);
        let found = valid_records(&data, 0);
        assert_eq!(
            (found.records, found.batches, found.seqs),
            (2, 1, Some((7, 8)))
        );
        let found = valid_records(&data, 24 + one.len());
        assert_eq!(
            (found.records, found.batches, found.seqs),
            (1, 1, Some((8, 8)))
        );
    }
}
