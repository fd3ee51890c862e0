//! `rill repair` on damaged data dirs: it cuts a shard log back to its last
//! intact batch, reports what it dropped, and leaves healthy dirs untouched.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output};

use rill::log::appender::LogEnd;

mod log_scaffold;

use log_scaffold::*;

// ---------------------------------------------------------------------------
// `rill repair`.

/// A data dir laid out like the server's, with one shard.
fn data_dir(tag: &str) -> (TempDir, PathBuf) {
    let tmp = TempDir::new(tag);
    std::fs::write(tmp.0.join("rill.meta"), "format=1\nshards=1\n").unwrap();
    let shard = tmp.0.join("shard-00");
    std::fs::create_dir_all(&shard).unwrap();
    (tmp, shard)
}

fn rill(args: &[&str]) -> Output {
    Process::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every file under `dir` (but the lock file, which any opener creates)
/// with its length and a hash of its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, usize, u64)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != "LOCK" && !is_preallocation(&path) {
                let bytes = std::fs::read(&path).unwrap();
                let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
                files.push((path, bytes.len(), hash));
            }
        }
    }
    files.sort();
    files
}

/// A `*.seg.tmp` file is a segment being zero-filled ahead of need, not
/// part of the log (the next open removes a leftover one), so it is left
/// out of snapshots.
fn is_preallocation(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".seg.tmp")
}

/// A shard log over four segments with damage in the last batch of
/// segment 2; returns the batches, the damaged position and its batch.
fn damaged_shard(shard: &Path) -> (Vec<Vec<Rec>>, LogEnd, usize) {
    let batches: Vec<Vec<Rec>> = (0..20u64)
        .map(|i| recs_of_len(i * 2 + 1..i * 2 + 3, 5000))
        .collect();
    let framed: Vec<Vec<u8>> = batches.iter().map(|b| frame(b)).collect();
    let spans = append(shard, SMALL, OpenAt::EMPTY, &framed);
    assert!(spans.last().unwrap().1.segment >= 4);
    let first_in_2 = spans.iter().position(|(s, _)| s.segment == 2).unwrap();
    // The second record of the second batch of segment 2.
    let batch = first_in_2 + 1;
    let damaged = plus(spans[batch].0, batches[batch][0].framed_len());
    damage_payload(shard, damaged);
    (batches, damaged, batch)
}

#[test]
fn repair_without_yes_reports_and_changes_nothing() {
    let (tmp, shard) = data_dir("repair-dry");
    let (batches, damaged, batch) = damaged_shard(&shard);
    let before = snapshot(&tmp.0);
    let dir = tmp.0.to_str().unwrap();

    let out = rill(&["repair", "--data-dir", dir]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seg = seg_path(&shard, 2);
    assert!(
        stdout.contains(&format!("{} at byte {}", seg.display(), damaged.pos)),
        "{all}"
    );
    assert!(stdout.contains("checksum mismatch"), "{all}");
    // What truncating would lose: every batch after the damaged one (whose
    // damaged record is its last).
    let lost_batches = batches.len() - batch - 1;
    let lost_records = lost_batches * 2;
    assert!(
        stdout.contains(&format!(
            "{lost_records} valid records in {lost_batches} complete batches"
        )),
        "{all}"
    );
    assert!(
        stdout.contains(&format!("the log keeps {} records", batch * 2)),
        "{all}"
    );
    assert!(stdout.contains("--yes"), "{all}");
    assert_eq!(snapshot(&tmp.0), before, "a dry run changes nothing");
}

#[test]
fn repair_with_yes_truncates_at_the_damage_and_the_log_recovers() {
    let (tmp, shard) = data_dir("repair-yes");
    let (batches, damaged, batch) = damaged_shard(&shard);
    let dir = tmp.0.to_str().unwrap();
    let segments = seg_count(&shard) as u64;
    let marker = shard.join("access-logged");
    std::fs::write(&marker, b"").unwrap();

    let out = rill(&["repair", "--data-dir", dir, "--yes"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    // The cut may take access records: the mark that vouched for them goes.
    assert!(!marker.exists(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seg = seg_path(&shard, 2);
    assert!(
        stdout.contains(&format!(
            "zeroed {} from byte {}",
            seg.display(),
            damaged.pos
        )),
        "{all}"
    );
    for index in 3..=segments {
        let path = seg_path(&shard, index);
        assert!(
            stdout.contains(&format!("removed {}", path.display())),
            "{all}"
        );
        assert!(!path.exists());
    }
    assert_eq!(seg_count(&shard), 2);

    // The next start recovers up to the damaged point: the intact record
    // of the damaged batch is a torn tail.
    let (recovered, got) = recover_ok(&shard, SMALL);
    let kept: Vec<&[Rec]> = batches[..batch].iter().map(Vec::as_slice).collect();
    assert_eq!(got, replayed(&kept));
    assert_eq!(recovered.next_seq, batch as u64 * 2 + 1);
    assert_eq!(recovered.report.torn.map(|(_, n)| n), Some(1));

    // Now the data dir is clean for repair too.
    let out = rill(&["repair", "--data-dir", dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // And the server starts on it.
    let out = Process::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "serve",
            "--data-dir",
            dir,
            "--cores",
            "1",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = out.id();
    let mut child = out;
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let done = line.contains("listening on");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
    .join()
    .unwrap();
    // SAFETY: kill(2) on the pid of the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l.contains("listening on")),
        "server did not start: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("recovered {} records", batch * 2))),
        "{lines:?}"
    );
}

#[test]
fn repair_on_a_clean_data_dir_exits_zero() {
    let (tmp, shard) = data_dir("repair-clean");
    let a = recs(1..6);
    append(&shard, BIG, OpenAt::EMPTY, &[frame(&a)]);
    let before = snapshot(&tmp.0);
    for args in [
        &["repair", "--data-dir"][..],
        &["repair", "--yes", "--data-dir"][..],
    ] {
        let mut args = args.to_vec();
        args.push(tmp.0.to_str().unwrap());
        let out = rill(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("clean"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(snapshot(&tmp.0), before);
}

#[test]
fn repair_refuses_a_data_dir_in_use() {
    let (tmp, shard) = data_dir("repair-locked");
    damaged_shard(&shard);
    let before = snapshot(&tmp.0);
    let held = rill::datadir::DataDir::open(&tmp.0).unwrap();
    let out = rill(&["repair", "--data-dir", tmp.0.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        text(&out)
    );
    drop(held);
    assert_eq!(snapshot(&tmp.0), before);
}

#[test]
fn repair_usage() {
    let out = rill(&["repair", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("rill repair --data-dir DIR [--yes]"),
        "{help}"
    );
    let out = rill(&["--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("rill repair"));
    let out = rill(&["repair"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rill(&[
        "repair",
        "--data-dir",
        "/nonexistent/rill-data",
        "--frobnicate",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let missing = TempDir::new("repair-no-meta");
    let out = rill(&["repair", "--data-dir", missing.0.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rill.meta"),
        "{}",
        text(&out)
    );
}
