//! `concord metrics`: every member's latest metrics as a node knows them
//! (`GET /cluster/metrics`), as a table or JSON.

use concord::cluster_metrics::ClusterMetricsJson;

/// The table of `concord metrics`: one row per member, smoothed values.
pub fn metrics_table(m: &ClusterMetricsJson) -> String {
    let header = [
        "NODE", "CPU", "PROC-CPU", "LOAD", "CORES", "RSS", "MEM-FREE", "LANE-Q", "BUFFERED",
        "MAILBOX", "ENTITIES", "CAPACITY",
    ];
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}%", v * 100.0));
    let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}MiB", v / 1_048_576.0));
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let rows: Vec<Vec<String>> = m
        .nodes
        .iter()
        .map(|n| {
            let s = |name: &str| n.metrics.get(name).map(|m| m.smoothed);
            vec![
                n.node.clone(),
                pct(s("cpu-combined")),
                pct(s("cpu-process")),
                num(s("system-load-average")),
                num(s("processors")),
                mib(s("memory-rss")),
                mib(s("memory-available")),
                num(s("lane-queue")),
                num(s("region-buffered")),
                num(s("mailbox-depth")),
                num(s("entities")),
                pct(n.capacity.get("mix").copied()),
            ]
        })
        .collect();
    crate::client::text_table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_smoothed_values_and_dashes_for_what_was_not_sampled() {
        let json = r#"{"nodes": [{"node": "concord://s@h:1", "uid": 1, "sequence": 3,
            "sampledAtMs": 5, "metrics": {"cpu-combined": {"value": 0.5, "smoothed": 0.25},
            "memory-rss": {"value": 2097152, "smoothed": 1048576}}, "capacity": {"mix": 0.75}}]}"#;
        let m: ClusterMetricsJson = serde_json::from_str(json).unwrap();
        let t = metrics_table(&m);
        let row = t.lines().nth(1).unwrap();
        assert!(row.starts_with("concord://s@h:1"), "{t}");
        assert!(
            row.contains("25%") && row.contains("1MiB") && row.contains("75%"),
            "{t}"
        );
        assert!(row.contains(" - "), "{t}");
    }
}
