//! [`Sampler`]: reads this node's metrics — the machine's CPU, load average and memory and
//! this process's CPU and resident memory through `sysinfo`, and Concord's own queues from
//! the transport and the layers' [`LocalLoad`] gauges — as the values of one sample
//! (names in [`concord_core::cluster_metrics::names`]).

use std::collections::BTreeMap;

use concord_core::cluster_metrics::names;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use crate::load::LocalLoad;

/// What feeds a sample besides the operating system.
pub(crate) trait QueueProbe: Send + 'static {
    /// Frames waiting in this node's outbound lanes.
    fn lane_queue(&self) -> u64;
}

/// Reads one node's metrics; keeps the previous CPU counters so that each sample's CPU use
/// covers the time since the previous one.
pub(crate) struct Sampler {
    system: System,
    pid: Option<Pid>,
    processors: f64,
    local: LocalLoad,
    queues: Box<dyn QueueProbe>,
}

impl Sampler {
    /// A sampler of this process, its machine, `local`'s gauges and `queues`.
    pub(crate) fn new(local: LocalLoad, queues: Box<dyn QueueProbe>) -> Self {
        let processors = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as f64;
        let mut system = System::new();
        // The first CPU reading is a baseline: usage is a difference of two.
        system.refresh_cpu_usage();
        let pid = sysinfo::get_current_pid().ok();
        let mut s = Sampler {
            system,
            pid,
            processors,
            local,
            queues,
        };
        s.refresh_process();
        s
    }

    fn refresh_process(&mut self) {
        if let Some(pid) = self.pid {
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&[pid]),
                true,
                ProcessRefreshKind::nothing().with_cpu().with_memory(),
            );
        }
    }

    /// One sample: metric name → value.
    pub(crate) fn sample(&mut self) -> BTreeMap<String, f64> {
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.refresh_process();
        let mut out = BTreeMap::new();
        let mut put = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                out.insert(name.to_string(), v);
            }
        };
        // sysinfo gives percentages; Akka's cpu-combined is a fraction.
        put(
            names::CPU_COMBINED,
            (f64::from(self.system.global_cpu_usage()) / 100.0).clamp(0.0, 1.0),
        );
        let load = System::load_average();
        put(names::SYSTEM_LOAD_AVERAGE, load.one);
        put(names::PROCESSORS, self.processors);
        let total = self.system.total_memory();
        if total > 0 {
            put(names::MEMORY_TOTAL, total as f64);
            put(
                names::MEMORY_AVAILABLE,
                self.system.available_memory() as f64,
            );
        }
        if let Some(p) = self.pid.and_then(|pid| self.system.process(pid)) {
            put(names::MEMORY_RSS, p.memory() as f64);
            // A percentage of one core; as a fraction of all cores.
            put(
                names::CPU_PROCESS,
                (f64::from(p.cpu_usage()) / 100.0 / self.processors).clamp(0.0, 1.0),
            );
        }
        put(names::LANE_QUEUE, self.queues.lane_queue() as f64);
        for (name, v) in self.local.totals() {
            put(&name, v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);
    impl QueueProbe for Fixed {
        fn lane_queue(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_sample_has_the_machines_and_the_layers_metrics() {
        let local = LocalLoad::new();
        local.set(names::ENTITIES, "sharding/a", 7.0);
        let mut s = Sampler::new(local, Box::new(Fixed(3)));
        let v = s.sample();
        assert_eq!(v.get(names::ENTITIES), Some(&7.0));
        assert_eq!(v.get(names::LANE_QUEUE), Some(&3.0));
        assert!(v.get(names::PROCESSORS).is_some_and(|p| *p >= 1.0));
        let cpu = v.get(names::CPU_COMBINED).copied().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&cpu), "{cpu}");
        if cfg!(target_os = "linux") {
            assert!(v.get(names::MEMORY_RSS).is_some_and(|m| *m > 0.0), "{v:?}");
            assert!(
                v.get(names::MEMORY_TOTAL).is_some_and(|m| *m > 0.0),
                "{v:?}"
            );
        }
    }
}
