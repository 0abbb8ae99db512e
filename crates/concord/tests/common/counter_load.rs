//! A load of sample-counter increments (`POST /sample/counter/c{n}`, delta 1) through the
//! management ports of some nodes, one thread each, counting per counter what was sent and
//! what was acknowledged (200) — so a test can check `acknowledged ≤ value ≤ sent`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Counts = Arc<Mutex<BTreeMap<usize, i64>>>;

/// The running load; [`CounterLoad::stop`] ends it.
pub struct CounterLoad {
    acked: Counts,
    sent: Counts,
    stop: Arc<AtomicBool>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl CounterLoad {
    /// Increments counters `c0 … c{counters−1}` in turn through each port in `ports`
    /// (each port's thread starts at a different counter). A failed request is retried
    /// after 50 ms (a node is leaving or its shard is moving: back off, not spin).
    pub fn start(ports: &[u16], counters: usize) -> CounterLoad {
        let (acked, sent): (Counts, Counts) = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let workers = ports
            .iter()
            .map(|&port| {
                let (acked, sent, stop) = (acked.clone(), sent.clone(), stop.clone());
                std::thread::spawn(move || {
                    let rt = super::runtime();
                    let http = reqwest::Client::new();
                    let mut k = port as usize;
                    while !stop.load(Ordering::Relaxed) {
                        let c = k % counters;
                        k += 1;
                        *sent.lock().unwrap().entry(c).or_default() += 1;
                        let ok = rt.block_on(async {
                            http.post(format!("http://127.0.0.1:{port}/sample/counter/c{c}"))
                                .form(&[("delta", "1")])
                                .timeout(Duration::from_secs(10))
                                .send()
                                .await
                                .is_ok_and(|r| r.status() == 200)
                        });
                        if ok {
                            *acked.lock().unwrap().entry(c).or_default() += 1;
                        } else {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                })
            })
            .collect();
        CounterLoad {
            acked,
            sent,
            stop,
            workers,
        }
    }

    /// Increments acknowledged so far, over all counters.
    pub fn acknowledged(&self) -> i64 {
        self.acked.lock().unwrap().values().sum()
    }

    /// Stops the load; per counter, (acknowledged, sent).
    pub fn stop(self) -> (BTreeMap<usize, i64>, BTreeMap<usize, i64>) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        let sent = self.sent.lock().unwrap().clone();
        (acked, sent)
    }
}
