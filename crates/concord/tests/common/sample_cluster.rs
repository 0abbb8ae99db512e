//! `concord node --sample` processes that keep their data directory across a restart (on
//! the same ports, so with the same address).

use std::time::Duration;

use super::{all_up, wait_until, Node};

/// The nodes' system name, environment and data directories (`<dir>/node-<i>`).
pub struct SampleCluster {
    pub system: &'static str,
    pub env: Vec<(String, String)>,
    pub dir: std::path::PathBuf,
}

impl SampleCluster {
    fn env(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn args(&self, i: usize) -> Vec<String> {
        let data = self.dir.join(format!("node-{i}")).display().to_string();
        vec!["--sample".into(), "--data-dir".into(), data]
    }

    /// Starts node `i` on ports it binds itself.
    pub fn start(&self, i: usize, seeds: &[u16]) -> Node {
        let args = self.args(i);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Node::start_bound_with_args(self.system, seeds, &self.env(), &args)
    }

    /// Starts node `i` again on `old`'s ports with its data.
    pub fn restart(&self, i: usize, old: &Node, seeds: &[u16]) -> Node {
        let args = self.args(i);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Node::start_with_args(
            "127.0.0.1",
            self.system,
            old.port,
            old.management_port,
            seeds,
            &self.env(),
            &args,
        )
    }
}

/// SIGKILLs `nodes[victim]` and waits until every other node sees only the others Up
/// (`addrs`: every node's address).
pub fn kill_and_wait_removed(
    rt: &tokio::runtime::Runtime,
    nodes: &mut [Node],
    victim: usize,
    addrs: &[String],
) {
    let addr = nodes[victim].address();
    nodes[victim].kill9();
    let survivors: Vec<String> = addrs.iter().filter(|a| **a != addr).cloned().collect();
    let refs: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, n)| n)
        .collect();
    wait_until(
        "the crashed node removed",
        Duration::from_secs(90),
        &refs,
        || all_up(rt, &refs, &survivors),
    );
}

impl SampleCluster {
    /// Starts `nodes[victim]` (node `victim + 1`) again with its data and waits until every
    /// node sees all of `addrs` Up.
    pub fn restart_and_wait_up(
        &self,
        rt: &tokio::runtime::Runtime,
        nodes: &mut [Node],
        victim: usize,
        addrs: &[String],
        seeds: &[u16],
    ) {
        nodes[victim] = self.restart(victim + 1, &nodes[victim], seeds);
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("all Up again", Duration::from_secs(90), &refs, || {
            all_up(rt, &refs, addrs)
        });
    }
}
