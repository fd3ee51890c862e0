//! The configuration file (issue 7 "Configuration"): `rill serve --config
//! FILE` applies it with flags overriding it; unknown keys and bad values
//! stop startup with a message naming the key; `rill config check` and
//! `rill config defaults` print validated settings that read back the same.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{Server, req, unique_name};

fn rill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .output()
        .expect("run rill")
}

fn config_file(text: &str) -> PathBuf {
    let path = std::env::temp_dir()
        .join(unique_name("rill-config"))
        .with_extension("toml");
    std::fs::write(&path, text).expect("write config file");
    path
}

#[test]
fn defaults_read_back_through_check() {
    let defaults = rill(&["config", "defaults"]);
    assert!(defaults.status.success());
    let text = String::from_utf8(defaults.stdout).unwrap();
    assert!(text.contains("fsync = \"always\"\n"), "{text}");
    let file = config_file(&text);
    let checked = rill(&["config", "check", file.to_str().unwrap()]);
    assert!(checked.status.success(), "{checked:?}");
    assert_eq!(String::from_utf8(checked.stdout).unwrap(), text);
    std::fs::remove_file(file).unwrap();
}

#[test]
fn bad_files_are_refused_naming_the_key() {
    for (text, key) in [
        ("max_body_bytes = 10\nbogus_limit = 3\n", "bogus_limit"),
        ("cache_bytes = \"lots\"\n", "cache_bytes"),
        ("fsync = \"sometimes\"\n", "fsync"),
        ("cores = [1, 2]\n", "cores"),
    ] {
        let file = config_file(text);
        let path = file.to_str().unwrap();
        for args in [
            vec!["config", "check", path],
            vec!["serve", "--config", path],
        ] {
            let out = rill(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?} with {text:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(key), "{args:?}: {stderr}");
        }
        std::fs::remove_file(file).unwrap();
    }
}

#[test]
fn the_server_applies_the_file_and_flags_override_it() {
    // The test harness passes its own --max-body-bytes, so the file sets a
    // limit it leaves alone: the request header count (431 above it).
    let file = config_file("max_headers = 10\n");
    let path = file.to_str().unwrap().to_string();
    let names: Vec<String> = (0..20).map(|i| format!("x-extra-{i}")).collect();
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let limited = Server::start(&["--cores", "1", "--config", &path]);
    assert_eq!(req(limited.addr, "GET", "/v1/health", &[], b"").status, 200);
    assert_eq!(
        req(limited.addr, "GET", "/v1/health", &headers, b"").status,
        431
    );
    drop(limited);
    let overridden = Server::start(&["--cores", "1", "--config", &path, "--max-headers", "50"]);
    assert_eq!(
        req(overridden.addr, "GET", "/v1/health", &headers, b"").status,
        200
    );
    std::fs::remove_file(file).unwrap();
}
