//! `concord node --sample` processes that keep their data directory across a restart (on
//! the same ports, so with the same address).

use super::Node;

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
