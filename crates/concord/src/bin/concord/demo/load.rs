//! The demo's load generator and its verdict: workers send a steady stream of counter
//! increments and log appends to the sample's sharded entities through every running
//! node, recording what was acknowledged; at the end the entities are read back and
//! checked (no acknowledged increment lost; every log's values in each sending node's
//! order, none missing unless the node hosting the log crashed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use rand::Rng;

/// Counter entities the load spreads over.
pub(crate) const COUNTERS: usize = 40;
/// Log entities the load spreads over.
pub(crate) const LOGS: usize = 40;
/// Concurrent workers (each owns the logs `i, i + WORKERS, ...`, so one log's appends
/// through one node are sequential).
pub(crate) const WORKERS: usize = 8;

/// What the load knows of the nodes: (index, management port) of those it may use.
pub(crate) type Targets = Arc<Mutex<Vec<(usize, u16)>>>;

/// Everything recorded by the workers.
#[derive(Default)]
pub(crate) struct Record {
    /// Counter → increments acknowledged with 200.
    counters_acked: BTreeMap<usize, i64>,
    /// Counter → increments attempted.
    counters_sent: BTreeMap<usize, i64>,
    /// (log, origin node) → seqs acknowledged (202), in send order.
    logs_acked: BTreeMap<(usize, usize), Vec<u64>>,
    /// (log, origin node) → seqs attempted.
    logs_sent: BTreeMap<(usize, usize), BTreeSet<u64>>,
    /// (ms since the load started, latency µs) of every answered request.
    latencies_us: Vec<(u64, u64)>,
    /// When each failed request ended (ms since the load started), and why (see
    /// [`failure`]).
    failed_at_ms: Vec<(u64, String)>,
    /// Every request, for `CONCORD_LOAD_TRACE` ([`Load::stop`]): (ms since the load
    /// started when it ended, latency µs, route, node index, entity index, answered).
    trace: Vec<(u64, u64, &'static str, usize, usize, bool)>,
    ok: u64,
    failed: u64,
}

/// The running load.
pub(crate) struct Load {
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl Load {
    /// Starts the workers over `targets`.
    pub(crate) fn start(targets: Targets) -> Load {
        let record = Arc::new(Mutex::new(Record::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let http = concord::tls::http_client_builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("plain HTTP client");
        let started = Instant::now();
        let workers = (0..WORKERS)
            .map(|w| {
                let (record, stop, targets, http) =
                    (record.clone(), stop.clone(), targets.clone(), http.clone());
                tokio::spawn(worker(w, record, stop, targets, http, started))
            })
            .collect();
        Load {
            record,
            stop,
            workers,
            started,
        }
    }

    /// Requests answered so far.
    pub(crate) fn answered(&self) -> u64 {
        self.record.lock().map(|r| r.ok).unwrap_or(0)
    }

    /// Milliseconds since the load started (the clock of [`Finished::window`]).
    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Stops the workers (waiting for the requests in flight). With `CONCORD_LOAD_TRACE`
    /// set to a path, writes every request there as CSV (`end_ms,latency_us,route,node,
    /// entity,answered`; node and entity are indexes) — for finding where slow requests
    /// went.
    pub(crate) async fn stop(mut self) -> Finished {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.await;
        }
        let elapsed = self.started.elapsed();
        let record = std::mem::take(&mut *self.record.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(path) = std::env::var_os("CONCORD_LOAD_TRACE") {
            let mut csv = String::from("end_ms,latency_us,route,node,entity,answered\n");
            for (at, lat, route, node, entity, ok) in &record.trace {
                csv.push_str(&format!("{at},{lat},{route},{node},{entity},{ok}\n"));
            }
            if let Err(e) = std::fs::write(&path, csv) {
                eprintln!("could not write the load's trace to {path:?}: {e}");
            }
        }
        Finished { record, elapsed }
    }
}

async fn worker(
    w: usize,
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    targets: Targets,
    http: reqwest::Client,
    load_started: Instant,
) {
    let mut seqs: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let choice = {
            let t = targets.lock().unwrap_or_else(|p| p.into_inner());
            if t.is_empty() {
                None
            } else {
                let k = rand::rng().random_range(0..t.len());
                Some(t[k])
            }
        };
        let Some((node, port)) = choice else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        round += 1;
        let started = Instant::now();
        let mut what = ("counter", 0);
        let why = if round.is_multiple_of(2) {
            let c = rand::rng().random_range(0..COUNTERS);
            what.1 = c;
            if let Ok(mut r) = record.lock() {
                *r.counters_sent.entry(c).or_default() += 1;
            }
            let resp = http
                .post(format!("http://127.0.0.1:{port}/sample/counter/c{c}"))
                .form(&[("delta", "1")])
                .send()
                .await;
            let why = failure(resp, 200, "counter").await;
            if why.is_none() {
                if let Ok(mut r) = record.lock() {
                    *r.counters_acked.entry(c).or_default() += 1;
                }
            }
            why
        } else {
            // This worker's logs only: one log's appends through one node are sequential.
            let logs: Vec<usize> = (w..LOGS).step_by(WORKERS).collect();
            let l = logs[rand::rng().random_range(0..logs.len())];
            what = ("log", l);
            let seq = seqs.entry((l, node)).or_insert(0);
            let s = *seq;
            *seq += 1;
            if let Ok(mut r) = record.lock() {
                r.logs_sent.entry((l, node)).or_default().insert(s);
            }
            let resp = http
                .post(format!("http://127.0.0.1:{port}/sample/log/l{l}"))
                .form(&[("value", format!("{node}-{s}"))])
                .send()
                .await;
            let why = failure(resp, 202, "log").await;
            if why.is_none() {
                if let Ok(mut r) = record.lock() {
                    r.logs_acked.entry((l, node)).or_default().push(s);
                }
            }
            why
        };
        let ok = why.is_none();
        if let Ok(mut r) = record.lock() {
            let at = load_started.elapsed().as_millis() as u64;
            let lat = started.elapsed().as_micros() as u64;
            r.trace.push((at, lat, what.0, node, what.1, ok));
            if ok {
                r.ok += 1;
                r.latencies_us
                    .push((at, started.elapsed().as_micros() as u64));
            } else {
                r.failed += 1;
                r.failed_at_ms.push((at, why.unwrap_or_default()));
            }
        }
        if !ok {
            // A node going away: do not spin on it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The load after it stopped.
pub(crate) struct Finished {
    record: Record,
    elapsed: Duration,
}

/// What the verdict found.
pub(crate) struct Verdict {
    /// Lines to print.
    pub(crate) lines: Vec<String>,
}

impl Finished {
    /// Reads every entity back through `port` and checks it; `crashed` is the node killed
    /// (what it accepted is not required: its producer went with it).
    pub(crate) async fn verify(
        &self,
        port: u16,
        crashed: Option<usize>,
        story: &str,
    ) -> anyhow::Result<Verdict> {
        let http = concord::tls::http_client_builder()
            .timeout(Duration::from_secs(15))
            .build()?;
        let r = &self.record;
        let mut lines = Vec::new();
        // Counters: every acknowledged increment is there, nothing beyond what was sent.
        let mut acked_total = 0;
        for c in 0..COUNTERS {
            let acked = r.counters_acked.get(&c).copied().unwrap_or(0);
            let sent = r.counters_sent.get(&c).copied().unwrap_or(0);
            acked_total += acked;
            let v: serde_json::Value =
                get_json(&http, port, &format!("/sample/counter/c{c}")).await?;
            let value = v["value"].as_i64().unwrap_or(-1);
            if value < acked || value > sent {
                bail!("counter c{c} is {value}: {acked} increments were acknowledged, {sent} sent");
            }
        }
        lines.push(format!(
            "✓ counters: all {acked_total} acknowledged increments are there ({COUNTERS} counters, each within [acknowledged, sent]), {story}"
        ));
        // Logs: per sending node in order, once each; every value a surviving node accepted
        // there (delivery is asynchronous: a value accepted just before the load stopped
        // may still be on its way, so a log missing one is read again, for up to 60 s).
        let mut appended = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        for l in 0..LOGS {
            loop {
                // A log recovering on another node may answer 503 for a moment.
                let v: serde_json::Value =
                    match get_json(&http, port, &format!("/sample/log/l{l}")).await {
                        Ok(v) => v,
                        Err(_) if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                let values: Vec<String> = v["values"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut by_origin: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
                for x in &values {
                    let Some((o, s)) = x.split_once('-') else {
                        bail!("log l{l} holds a value it was never sent: {x}");
                    };
                    let (Ok(o), Ok(s)) = (o.parse::<usize>(), s.parse::<u64>()) else {
                        bail!("log l{l} holds a value it was never sent: {x}");
                    };
                    by_origin.entry(o).or_default().push(s);
                }
                for (o, seqs) in &by_origin {
                    if seqs.windows(2).any(|w| w[0] >= w[1]) {
                        bail!(
                            "log l{l}: the values from node {} are out of order or twice: {seqs:?}",
                            o + 1
                        );
                    }
                    let sent = r.logs_sent.get(&(l, *o));
                    if let Some(s) = seqs.iter().find(|s| !sent.is_some_and(|x| x.contains(s))) {
                        bail!("log l{l} holds {}-{s}, which was never sent", o + 1);
                    }
                }
                let mut missing = None;
                let mut accepted = 0;
                for ((_, o), acked) in r.logs_acked.range((l, 0)..=(l, usize::MAX)) {
                    if Some(*o) == crashed {
                        continue;
                    }
                    let got: BTreeSet<u64> = by_origin
                        .get(o)
                        .map(|v| v.iter().copied().collect())
                        .unwrap_or_default();
                    accepted += acked.len();
                    if let Some(m) = acked.iter().find(|s| !got.contains(s)) {
                        missing = Some((*o, *m));
                    }
                }
                match missing {
                    None => {
                        appended += accepted;
                        break;
                    }
                    Some((o, m)) if Instant::now() > deadline => bail!(
                        "log l{l}: value {o}-{m} was accepted by node {} but is missing",
                        o + 1
                    ),
                    Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
        lines.push(match crashed {
            Some(_) => format!(
                "✓ logs: every value in each sending node's order, none twice; all {LOGS} logs hold all {appended} appends the surviving nodes accepted — those on the crashed node too (event-sourced, fed by each node's reliable producer with a durable queue); what the crashed node itself accepted waits in its queue until it is started again"
            ),
            None => format!(
                "✓ logs: every value in each sending node's order, none twice; all {LOGS} logs hold all {appended} accepted appends, {story}"
            ),
        });
        let all = self.window(0, u64::MAX);
        let pct = |p: f64| all.percentile_ms(p);
        lines.push(format!(
            "✓ served {} requests in {:.1}s ({:.0} requests/s, {} refused while nodes left or crashed); latency p50 {:.1} ms, p99 {:.1} ms",
            r.ok,
            self.elapsed.as_secs_f64(),
            r.ok as f64 / self.elapsed.as_secs_f64().max(0.001),
            r.failed,
            pct(0.50),
            pct(0.99)
        ));
        Ok(Verdict { lines })
    }
}

/// The requests of a time window of the load.
pub(crate) struct Window {
    /// Latencies of the answered requests, µs, sorted.
    pub(crate) latencies_us: Vec<u64>,
    /// Requests that failed (an error or a status other than the acknowledgement).
    pub(crate) failed: u64,
    /// Why they failed ([`failure`]) → how many.
    pub(crate) causes: BTreeMap<String, u64>,
}

impl Window {
    /// The `p` quantile (0..=1) of the latencies, ms; 0 without requests.
    pub(crate) fn percentile_ms(&self, p: f64) -> f64 {
        let lat = &self.latencies_us;
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    }
}

impl Finished {
    /// The requests that ended in `[from_ms, to_ms)` (ms since the load started).
    pub(crate) fn window(&self, from_ms: u64, to_ms: u64) -> Window {
        let r = &self.record;
        let in_window = |t: u64| t >= from_ms && t < to_ms;
        let mut latencies_us: Vec<u64> = r
            .latencies_us
            .iter()
            .filter(|(t, _)| in_window(*t))
            .map(|(_, l)| *l)
            .collect();
        latencies_us.sort_unstable();
        let mut causes: BTreeMap<String, u64> = BTreeMap::new();
        for (_, why) in r.failed_at_ms.iter().filter(|(t, _)| in_window(*t)) {
            *causes.entry(why.clone()).or_default() += 1;
        }
        Window {
            latencies_us,
            failed: causes.values().sum(),
            causes,
        }
    }
}

/// Why a request to the sample's `route` failed — `None` if it was answered `expected`:
/// the status and the answer's first words (digits blanked, so that causes group), or the
/// client's error.
async fn failure(
    resp: Result<reqwest::Response, reqwest::Error>,
    expected: u16,
    route: &str,
) -> Option<String> {
    match resp {
        Ok(r) if r.status().as_u16() == expected => None,
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            Some(format!("{route} {status}: {}", gist(&body)))
        }
        Err(e) if e.is_timeout() => Some(format!("{route}: timed out")),
        Err(e) if e.is_connect() => Some(format!("{route}: could not connect")),
        Err(_) => Some(format!("{route}: connection failed")),
    }
}

/// The first 160 characters of `text`, with runs of digits replaced by `#` and runs of
/// white space by one space (one line).
fn gist(text: &str) -> String {
    let mut out = String::new();
    let mut digits = false;
    for c in text.chars().take(160) {
        if c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
            digits = false;
        } else if c.is_ascii_digit() {
            if !digits {
                out.push('#');
            }
            digits = true;
        } else {
            out.push(c);
            digits = false;
        }
    }
    out
}

/// `GET` a JSON answer from the node at `port`, retried while the entity moves.
pub(crate) async fn get_json(
    http: &reqwest::Client,
    port: u16,
    path: &str,
) -> anyhow::Result<serde_json::Value> {
    let mut last = String::new();
    for _ in 0..30 {
        match http
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => return Ok(r.json().await?),
            Ok(r) => last = format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("GET {path} on port {port} failed: {last}")
}

#[cfg(test)]
mod tests {
    use super::gist;

    #[test]
    fn a_gist_blanks_digits_and_keeps_one_line() {
        assert_eq!(
            gist("log|l12 at 127.0.0.1:4100\n  refused"),
            "log|l# at #.#.#.#:# refused"
        );
        assert_eq!(gist(&"é".repeat(400)).chars().count(), 160);
    }
}
