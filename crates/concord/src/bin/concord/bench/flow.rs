//! Gated message flows for paired measurements. A flow is a sender task that sends only
//! while its gate is open, and a counter of what arrived. `concord bench remote` opens one
//! flow at a time, round after round, so that every Concord window has a raw-TCP window
//! right beside it and a slow or noisy stretch of the machine falls on both (the ratio is
//! the median of the per-round ratios).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The open/closed switch of one flow, and the stop of its sender. A sender checks it
/// with one atomic load per send while open, and sleeps on a [`Notify`] while closed.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    open: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    changed: Arc<Notify>,
}

impl Gate {
    /// Waits while the gate is closed; `false` once the flow is stopped (the sender returns).
    pub async fn wait_open(&self) -> bool {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            if self.open.load(Ordering::Relaxed) {
                return true;
            }
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Re-read after registering, so a change in between is not missed.
            if self.stop.load(Ordering::Relaxed) || self.open.load(Ordering::Relaxed) {
                continue;
            }
            changed.await;
        }
    }

    fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// Stops the sender for good.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.changed.notify_waiters();
    }
}

/// A flow: its gate and the count of messages that arrived so far.
pub struct Flow {
    gate: Gate,
    received: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// Messages that arrived during a window, and the window's length.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// Messages counted.
    pub messages: u64,
    /// Measured time, s.
    pub seconds: f64,
}

impl Window {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.messages as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl Flow {
    /// A flow whose sender waits on `gate` and whose arrivals `received` counts.
    pub fn new(gate: Gate, received: impl Fn() -> u64 + Send + Sync + 'static) -> Flow {
        Flow {
            gate,
            received: Box::new(received),
        }
    }

    /// Opens the gate, lets the flow settle for `settle`, counts for `window`, closes the
    /// gate.
    pub async fn measure(&self, settle: Duration, window: Duration) -> Window {
        self.gate.set_open(true);
        tokio::time::sleep(settle).await;
        let (n0, t0) = ((self.received)(), Instant::now());
        tokio::time::sleep(window).await;
        let (n1, t1) = ((self.received)(), Instant::now());
        self.gate.set_open(false);
        Window {
            messages: n1.saturating_sub(n0),
            seconds: (t1 - t0).as_secs_f64(),
        }
    }

    /// Stops the flow's sender.
    pub fn stop(&self) {
        self.gate.stop();
    }
}

/// Messages per second over all `windows` together.
pub fn overall_rate(windows: &[Window]) -> f64 {
    let messages: u64 = windows.iter().map(|w| w.messages).sum();
    let seconds: f64 = windows.iter().map(|w| w.seconds).sum();
    Window { messages, seconds }.rate()
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[f64::NAN, 1.0]), 1.0);
    }

    #[test]
    fn overall_rate_weights_windows_by_time() {
        let w = [
            Window {
                messages: 100,
                seconds: 1.0,
            },
            Window {
                messages: 300,
                seconds: 1.0,
            },
        ];
        assert_eq!(overall_rate(&w), 200.0);
        assert_eq!(overall_rate(&[]), 0.0);
    }

    #[tokio::test]
    async fn a_flow_sends_only_while_measured() {
        let gate = Gate::default();
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (g, s) = (gate.clone(), sent.clone());
        let sender = tokio::spawn(async move {
            while g.wait_open().await {
                s.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        let counter = sent.clone();
        let flow = Flow::new(gate, move || counter.load(Ordering::Relaxed));
        let w = flow
            .measure(Duration::ZERO, Duration::from_millis(20))
            .await;
        assert!(w.messages > 0);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = sent.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Closed: at most the one send that was under way when the gate closed.
        assert!(sent.load(Ordering::Relaxed) <= before + 1);
        flow.stop();
        sender.await.unwrap();
    }
}
