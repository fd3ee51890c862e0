//! The deployment files: `deploy/rill.service` has the settings
//! docs/OPERATIONS.md promises and passes `systemd-analyze verify` (when
//! the tool is installed; CI machines need not have systemd), and
//! `scripts/install.sh --dry-run` prints its plan without changing
//! anything, while a real run refuses without root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn unit_text() -> String {
    std::fs::read_to_string(Path::new(REPO).join("deploy/rill.service")).expect("read the unit")
}

/// The value of `key=` in the unit (the last assignment wins, as in systemd).
fn setting(unit: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
}

fn temp_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("rill-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn unit_has_the_promised_settings() {
    let unit = unit_text();
    let expected = [
        ("Type", "notify"),
        ("Restart", "on-failure"),
        ("User", "rill"),
        ("StateDirectory", "rill"),
        ("LimitMEMLOCK", "infinity"),
        ("LimitNOFILE", "1048576"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
        (
            "ExecStart",
            "/usr/local/bin/rill serve --listen 127.0.0.1:4437 --data-dir /var/lib/rill",
        ),
    ];
    for (key, value) in expected {
        assert_eq!(setting(&unit, key).as_deref(), Some(value), "{key}=");
    }
    assert_eq!(
        setting(&unit, "SystemCallFilter"),
        None,
        "io_uring needs no filter"
    );
    // systemd must wait longer than rill's own shutdown bound (10 s).
    let stop = setting(&unit, "TimeoutStopSec").expect("TimeoutStopSec=");
    let secs: u64 = stop
        .trim_end_matches('s')
        .parse()
        .expect("TimeoutStopSec in seconds");
    let bound = rill::config::Config::default().shutdown_timeout_ms / 1000;
    assert!(secs > bound, "TimeoutStopSec={stop} <= {bound} s");
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    let probe = Command::new("systemd-analyze").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("note: systemd-analyze not installed; skipping the unit verification");
        return;
    }
    // verify checks that ExecStart's binary exists: point it at this build.
    let bin = env!("CARGO_BIN_EXE_rill");
    let unit = unit_text().replace(
        "ExecStart=/usr/local/bin/rill ",
        &format!("ExecStart={bin} "),
    );
    let dir = temp_dir("unit");
    let path = dir.join("rill.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let _ = std::fs::remove_dir_all(&dir);
    // Unknown keys are only warnings (exit 0): any output fails the test.
    assert!(out.status.success(), "verify failed: {}", text(&out));
    assert_eq!(text(&out), "", "verify warned");
}

/// What the dry run could change, as seen before and after it.
fn system_state(prefix: &Path) -> Vec<String> {
    let getent = |db: &str| {
        Command::new("getent")
            .args([db, "rill"])
            .output()
            .map(|o| text(&o))
            .unwrap_or_default()
    };
    let meta = |p: &str| format!("{p}: {:?}", std::fs::metadata(p).map(|m| m.modified().ok()));
    vec![
        getent("passwd"),
        getent("group"),
        meta("/etc/systemd/system/rill.service"),
        meta("/var/lib/rill"),
        format!("prefix exists: {}", prefix.exists()),
    ]
}

fn install_script() -> Command {
    let mut cmd = Command::new(Path::new(REPO).join("scripts/install.sh"));
    cmd.env("RILL_BIN", env!("CARGO_BIN_EXE_rill"));
    cmd
}

#[test]
fn install_dry_run_prints_the_plan_and_changes_nothing() {
    let dir = temp_dir("install");
    let prefix = dir.join("prefix");
    let before = system_state(&prefix);
    let out = install_script()
        .arg("--dry-run")
        .arg("--prefix")
        .arg(&prefix)
        .output()
        .expect("run install.sh");
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert_eq!(
        system_state(&prefix),
        before,
        "the dry run changed something"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let bin_dest = format!("{}/bin/rill", prefix.display());
    let steps = [
        "dry run: nothing is changed".to_string(),
        format!("==> install {} to {bin_dest}", env!("CARGO_BIN_EXE_rill")),
        "==> system group and user rill".to_string(),
        "==> state directory /var/lib/rill".to_string(),
        "==> systemd unit /etc/systemd/system/rill.service".to_string(),
        "==> reload systemd".to_string(),
        "systemctl enable --now rill".to_string(),
    ];
    let mut rest = printed.as_str();
    for step in &steps {
        let at = rest
            .find(step.as_str())
            .unwrap_or_else(|| panic!("{step:?} missing or out of order in:\n{printed}"));
        rest = &rest[at + step.len()..];
    }
    assert!(
        printed.contains("would run: install -D -m 0755"),
        "{printed}"
    );
}

#[test]
fn install_refuses_to_run_without_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        // Drop to nobody for this one run (util-linux's setpriv).
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        cmd.arg(Path::new(REPO).join("scripts/install.sh"));
        cmd
    } else {
        install_script()
    };
    let out = match cmd.arg("--prefix").arg("/nonexistent/rill-prefix").output() {
        Ok(out) => out,
        Err(e) if root => {
            println!("note: running as root without setpriv ({e}); skipping");
            return;
        }
        Err(e) => panic!("run install.sh: {e}"),
    };
    if root && out.status.code() == Some(127) {
        println!(
            "note: setpriv cannot drop privileges here; skipping: {}",
            text(&out)
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("must run as root"), "{}", text(&out));
    assert!(!Path::new("/nonexistent/rill-prefix").exists());
}

/// The prefix goes into the unit's `ExecStart=` unquoted: one that would
/// not survive it (`&`, a space) is refused before anything is done.
#[test]
fn install_refuses_a_prefix_the_unit_cannot_hold() {
    for prefix in ["/opt/r&d", "/opt/my rill", "/opt/a|b"] {
        let out = install_script()
            .args(["--dry-run", "--prefix", prefix])
            .output()
            .expect("run install.sh");
        let printed = text(&out);
        assert!(!out.status.success(), "{prefix}: {printed}");
        assert!(
            printed.contains("--prefix may hold only"),
            "{prefix}: {printed}"
        );
        assert!(!printed.contains("ExecStart"), "{prefix}: {printed}");
    }
}
