//! What every load scenario takes besides its own shape: the server process
//! to report CPU for, a label, and where its JSON report goes.

use serde::Serialize;

use crate::client::Error;
use crate::stats;

#[derive(clap::Args, Debug)]
pub struct Output {
    /// Server process id, to report its CPU use from /proc/PID/stat.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Label for the table and the JSON (e.g. rill, reference, null).
    #[arg(long, default_value = "")]
    pub label: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

impl Output {
    /// The server's CPU seconds now, when a server pid was given.
    pub fn server_cpu(&self) -> Option<f64> {
        self.server_pid.and_then(stats::pid_cpu_seconds)
    }

    /// Writes `report` as pretty JSON to `--json`, if given.
    pub fn write_json(&self, report: &impl Serialize) -> Result<(), Error> {
        if let Some(path) = &self.json {
            std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")?;
        }
        Ok(())
    }
}
