//! `concord services`: the partition table, pending handoffs and this node's instances
//! (`GET /cluster/services`), as tables or JSON.

use serde_json::Value;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The tables of `concord services`: paths with their instances, pending changes, then
/// instances per node and this node's local instances.
pub fn services_table(s: &Value) -> String {
    let mut out = String::new();
    let version = s["version"].as_u64().unwrap_or(0);
    let writer = s["writer"].as_str().unwrap_or("-");
    out.push_str(&format!(
        "partition table version {version} (written by {writer})\n"
    ));
    let rows: Vec<Vec<String>> = s["table"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|p| {
                    let nodes = strings(&p["instances"]);
                    vec![
                        p["path"].as_str().unwrap_or("?").to_string(),
                        nodes.len().to_string(),
                        nodes.join(", "),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&crate::client::text_table(
        &["PATH", "N", "INSTANCES"],
        &rows,
    ));
    let pending: Vec<Vec<String>> = s["pending"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|c| {
                    vec![
                        c["path"].as_str().unwrap_or("?").to_string(),
                        c["from"].as_str().unwrap_or("-").to_string(),
                        c["to"].as_str().unwrap_or("?").to_string(),
                        c["status"].as_str().unwrap_or("?").to_string(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if !pending.is_empty() {
        out.push_str("\npending changes\n");
        out.push_str(&crate::client::text_table(
            &["PATH", "FROM", "TO", "STATUS"],
            &pending,
        ));
    }
    let per_node: Vec<Vec<String>> = s["instances_per_node"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(n, c)| vec![n.clone(), c.to_string()])
                .collect()
        })
        .unwrap_or_default();
    if !per_node.is_empty() {
        out.push_str("\ninstances per node\n");
        out.push_str(&crate::client::text_table(
            &["NODE", "INSTANCES"],
            &per_node,
        ));
    }
    let local: Vec<Vec<String>> = s["local"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(p, h)| vec![p.clone(), h.as_str().unwrap_or("?").to_string()])
                .collect()
        })
        .unwrap_or_default();
    if !local.is_empty() {
        out.push_str("\nthis node\n");
        out.push_str(&crate::client::text_table(&["PATH", "HOSTING"], &local));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_paths_changes_and_local_instances() {
        let s = serde_json::json!({
            "version": 3, "writer": "n1",
            "table": [{"path": "echo", "instances": ["n1", "n2"]}],
            "pending": [{"path": "echo", "from": "n2", "to": "n3", "status": "awaiting"}],
            "instances_per_node": {"n1": 1, "n2": 1},
            "local": {"echo": "running"},
        });
        let t = services_table(&s);
        assert!(t.contains("version 3"), "{t}");
        assert!(t.contains("echo") && t.contains("n1, n2"), "{t}");
        assert!(t.contains("awaiting") && t.contains("n3"), "{t}");
        assert!(t.contains("running"), "{t}");
        // Nonsense JSON prints an empty table, no panic.
        let _ = services_table(&serde_json::json!({"table": 5}));
    }
}
