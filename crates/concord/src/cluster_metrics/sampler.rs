//! [`Sampler`]: reads this node's metrics — the CPU of the cores this process may run on
//! (the whole machine's unless its CPU affinity mask is narrower), the machine's load
//! average and memory, this process's CPU and resident memory through `sysinfo`, and
//! Concord's own queues from the transport and the layers' [`LocalLoad`] gauges — as the
//! values of one sample (names in [`concord_core::cluster_metrics::names`]).
//!
//! **CPU affinity.** Nodes that share a machine see the same machine-wide CPU, so a node
//! pinned beside a busy process (`taskset`, a cpuset container, Kubernetes' static CPU
//! manager) would look as free as its neighbours. So at each sample the sampler reads this
//! process's CPU affinity mask (`sched_getaffinity(2)` of the process, through `rustix`;
//! Linux only). When the mask leaves out some of the machine's CPUs, `cpu-combined` is the
//! mean use of the CPUs in the mask (per-CPU counters of `/proc/stat` through `sysinfo`,
//! the same formula as the machine-wide figure), and `processors` and the fraction of
//! `cpu-process` count only those cores. That is also the right figure inside a cpuset
//! container, whose `/proc/stat` lists the host's CPUs. With a mask covering every CPU, or
//! where the mask cannot be read, the figures are the machine's, as before.

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
/// covers the time since the previous one. The CPU figures are over the cores of this
/// process's affinity mask when it is narrower than the machine (see the module docs).
pub(crate) struct Sampler {
    system: System,
    pid: Option<Pid>,
    /// Cores this process could use when the sampler started (`available_parallelism`:
    /// its affinity mask and cgroup CPU quota then).
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

    /// The CPU in use (0–1) and the cores this process may use, over the CPUs of its
    /// affinity mask when that leaves some out (read at every sample: a process may be
    /// pinned after it started); the machine's figure and the cores usable at start
    /// otherwise.
    fn cpu_and_processors(&self) -> (f64, f64) {
        // sysinfo gives percentages; Akka's cpu-combined is a fraction.
        let machine = f64::from(self.system.global_cpu_usage()) / 100.0;
        let per_cpu: Vec<(usize, f32)> = self
            .system
            .cpus()
            .iter()
            .filter_map(|c| Some((cpu_number(c.name())?, c.cpu_usage())))
            .collect();
        let narrowed = affinity_mask().and_then(|mask| {
            let usage = usage_in_mask(&per_cpu, &mask)?;
            Some((usage, self.processors.min(mask.len() as f64)))
        });
        narrowed.unwrap_or((machine, self.processors))
    }

    /// One sample: metric name → value.
    pub(crate) fn sample(&mut self) -> BTreeMap<String, f64> {
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.refresh_process();
        let (cpu, processors) = self.cpu_and_processors();
        let mut out = BTreeMap::new();
        let mut put = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                out.insert(name.to_string(), v);
            }
        };
        put(names::CPU_COMBINED, cpu.clamp(0.0, 1.0));
        let load = System::load_average();
        put(names::SYSTEM_LOAD_AVERAGE, load.one);
        put(names::PROCESSORS, processors);
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
            // A percentage of one core; as a fraction of the cores it may use.
            put(
                names::CPU_PROCESS,
                (f64::from(p.cpu_usage()) / 100.0 / processors).clamp(0.0, 1.0),
            );
        }
        put(names::LANE_QUEUE, self.queues.lane_queue() as f64);
        for (name, v) in self.local.totals() {
            put(&name, v);
        }
        out
    }
}

/// The number of a CPU from its `sysinfo` name (`cpu3` → 3, as in `/proc/stat`).
fn cpu_number(name: &str) -> Option<usize> {
    name.strip_prefix("cpu")?.parse().ok()
}

/// The mean use (0–1) of the CPUs of `mask` among `per_cpu` (CPU number, percent in use),
/// or `None` when the mask holds every CPU of `per_cpu` (the machine-wide figure applies)
/// or none of them (a mask that does not match `/proc/stat`: not trusted).
fn usage_in_mask(per_cpu: &[(usize, f32)], mask: &[usize]) -> Option<f64> {
    let inside: Vec<f64> = per_cpu
        .iter()
        .filter(|(n, _)| mask.contains(n))
        .map(|(_, u)| f64::from(*u) / 100.0)
        .collect();
    if inside.is_empty() || inside.len() == per_cpu.len() {
        return None;
    }
    Some(inside.iter().sum::<f64>() / inside.len() as f64)
}

/// The CPUs this process may run on (`sched_getaffinity(2)` of the process, i.e. of its
/// main thread, which the threads it starts inherit); `None` if it cannot be read.
#[cfg(target_os = "linux")]
fn affinity_mask() -> Option<Vec<usize>> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    let set = sched_getaffinity(Some(rustix::process::getpid())).ok()?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|c| set.is_set(*c)).collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Not read on this platform: the machine-wide figures apply.
#[cfg(not(target_os = "linux"))]
fn affinity_mask() -> Option<Vec<usize>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_use_is_over_the_affinity_mask_only_when_it_is_narrower() {
        let per_cpu = [(0, 100.0), (1, 20.0), (2, 40.0), (3, 0.0)];
        // Pinned to CPU 0 beside a busy process: its own core, not the machine's mean.
        assert_eq!(usage_in_mask(&per_cpu, &[0]), Some(1.0));
        let pair = usage_in_mask(&per_cpu, &[1, 2]).unwrap();
        assert!((pair - 0.3).abs() < 1e-6, "{pair}");
        // The whole machine (or more CPUs than /proc/stat lists): the machine-wide figure.
        assert_eq!(usage_in_mask(&per_cpu, &[0, 1, 2, 3]), None);
        assert_eq!(usage_in_mask(&per_cpu, &[0, 1, 2, 3, 4, 5]), None);
        // A mask naming no listed CPU is not trusted.
        assert_eq!(usage_in_mask(&per_cpu, &[9]), None);
        assert_eq!(cpu_number("cpu12"), Some(12));
        assert_eq!(cpu_number("cpu"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_affinity_mask_of_this_process_is_read() {
        let mask = affinity_mask().expect("sched_getaffinity works on Linux");
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        // The standard library's count honours the same mask (and a cgroup quota below it).
        assert!(parallelism <= mask.len(), "{mask:?} against {parallelism}");
    }

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
