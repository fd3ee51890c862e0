//! The live scenarios' writer: open loop, on its own thread and runtime so
//! that the readers' work does not delay its timestamps. Event `seq` is
//! due at `start + seq × every`; it starts then on an idle keep-alive
//! connection of a small pool (opened as needed, at most `connections`), so
//! a slow acknowledgement does not lower the rate. Each POST carries
//! `seq,send_unix_nanos\n`, stamped just before it is sent. A failed
//! append is not retried: its sequence number is simply not acknowledged.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use tokio::sync::mpsc;

use crate::client::{Conn, Error, Target};
use crate::live::{self, Tracker};
use crate::stats;

/// What the writer did.
pub struct Written {
    /// Acknowledged appends.
    pub sent: u64,
    /// Their sequence numbers.
    pub acked: Tracker,
    pub errors: BTreeMap<String, u64>,
    /// Per append, request to acknowledgement.
    pub append_latency: hdrhistogram::Histogram<u64>,
    /// How late the latest POST started against its schedule, in µs
    /// (waiting for a free connection when all were busy).
    pub max_start_delay_us: u64,
    /// Connections the pool opened.
    pub connections: usize,
    /// From the first POST's start to the last acknowledgement.
    pub writer_s: f64,
}

impl Written {
    pub fn errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The pacing: one event every `every` for `duration`, on at most
/// `connections` connections at once.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub every: Duration,
    pub duration: Duration,
    pub connections: usize,
}

/// Runs the writer on a thread of its own and returns what it did.
pub async fn write_paced(target: Target, path: String, pace: Pace) -> Result<Written, Error> {
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run(target, path, pace))
    })
    .await?
}

/// One POST's result, with its connection back for the pool.
struct Outcome {
    seq: u64,
    result: Result<u64, String>,
    conn: Conn,
}

/// The pool and the accounting.
struct State {
    target: Target,
    idle: Vec<Conn>,
    in_flight: usize,
    done: mpsc::UnboundedReceiver<Outcome>,
    out: Written,
}

impl State {
    fn absorb(&mut self, o: Outcome) {
        self.in_flight -= 1;
        self.idle.push(o.conn);
        match o.result {
            Ok(us) => {
                self.out.sent += 1;
                self.out.acked.record(o.seq);
                self.out.append_latency.saturating_record(us.max(1));
            }
            Err(kind) => live::count(&mut self.out.errors, kind),
        }
    }

    /// An idle connection, a new one, or (all `max` busy) the next to finish.
    async fn take(&mut self, max: usize) -> Conn {
        if let Some(c) = self.idle.pop() {
            return c;
        }
        if self.out.connections < max {
            self.out.connections += 1;
            return Conn::new(self.target.clone());
        }
        let o = self.done.recv().await.expect("a POST is in flight");
        self.absorb(o);
        self.idle.pop().expect("just returned")
    }
}

async fn run(target: Target, path: String, pace: Pace) -> Result<Written, Error> {
    let (tx, done) = mpsc::unbounded_channel();
    let mut st = State {
        target,
        idle: Vec::new(),
        in_flight: 0,
        done,
        out: Written {
            sent: 0,
            acked: Tracker::default(),
            errors: BTreeMap::new(),
            append_latency: stats::histogram(),
            max_start_delay_us: 0,
            connections: 0,
            writer_s: 0.0,
        },
    };
    let path: std::sync::Arc<str> = path.into();
    let start = Instant::now();
    for seq in 0u64.. {
        let at = start + pace.every.mul_f64(seq as f64);
        if at >= start + pace.duration {
            break;
        }
        wait_until(&mut st, at).await;
        let conn = st.take(pace.connections.max(1)).await;
        let late = at.elapsed().as_micros() as u64;
        st.out.max_start_delay_us = st.out.max_start_delay_us.max(late);
        st.in_flight += 1;
        tokio::spawn(post(conn, path.clone(), seq, tx.clone()));
    }
    while st.in_flight > 0 {
        let o = st.done.recv().await.expect("a POST is in flight");
        st.absorb(o);
    }
    st.out.writer_s = start.elapsed().as_secs_f64();
    Ok(st.out)
}

/// Sleeps until `at`, taking finished POSTs back meanwhile.
async fn wait_until(st: &mut State, at: Instant) {
    loop {
        tokio::select! {
            biased;
            Some(o) = st.done.recv() => st.absorb(o),
            () = tokio::time::sleep_until(at.into()) => return,
        }
    }
}

async fn post(
    mut conn: Conn,
    path: std::sync::Arc<str>,
    seq: u64,
    done: mpsc::UnboundedSender<Outcome>,
) {
    let body = Bytes::from(live::event_line(seq, live::unix_nanos()));
    let sent = Instant::now();
    let result = match conn
        .send(Method::POST, &path, Some("text/plain"), body)
        .await
    {
        Ok(r) if r.status.is_success() => Ok(sent.elapsed().as_micros() as u64),
        Ok(r) => Err(format!("append: http {}", r.status.as_u16())),
        Err(e) => Err(format!("append: {e}")),
    };
    let _ = done.send(Outcome { seq, result, conn });
}
