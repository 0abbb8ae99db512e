//! The demo's live table: every member with its status and, per entity type, the shards
//! and entities its region holds (from `GET /cluster/members` and
//! `GET /cluster/shards/{counter,log}` of one running node).

use std::collections::BTreeMap;

use crate::client::ManagementClient;
use concord::sharding::ShardRegionsJson;

/// One snapshot of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Snapshot {
    /// Address → (status, counter shards, counter entities, log shards, log entities).
    pub(crate) rows: BTreeMap<String, (String, usize, u64, usize, u64)>,
    pub(crate) unreachable: Vec<String>,
}

fn per_region(r: &ShardRegionsJson) -> BTreeMap<String, (usize, u64)> {
    r.regions
        .iter()
        .map(|x| {
            (
                x.shard_region.clone(),
                (
                    x.shards.len(),
                    x.shards.iter().map(|s| u64::from(s.num_entities)).sum(),
                ),
            )
        })
        .collect()
}

impl Snapshot {
    /// Reads a snapshot through `client`; `None` if the node does not answer.
    pub(crate) async fn read(client: &ManagementClient) -> Option<Snapshot> {
        let members = client.members().await.ok()?;
        let counters = client.shards("counter").await.ok()?;
        let logs = client.shards("log").await.ok()?;
        let (c, l) = (per_region(&counters), per_region(&logs));
        let rows = members
            .members
            .iter()
            .map(|m| {
                let (cs, ce) = c.get(&m.node).copied().unwrap_or_default();
                let (ls, le) = l.get(&m.node).copied().unwrap_or_default();
                (m.node.clone(), (m.status.clone(), cs, ce, ls, le))
            })
            .collect();
        Some(Snapshot {
            rows,
            unreachable: members.unreachable.iter().map(|u| u.node.clone()).collect(),
        })
    }

    /// Shards of both types held by the region at `address`.
    pub(crate) fn shards_of(&self, address: &str) -> usize {
        self.rows
            .get(address)
            .map_or(0, |(_, cs, _, ls, _)| cs + ls)
    }

    /// All shards of both types.
    pub(crate) fn total_shards(&self) -> usize {
        self.rows.values().map(|(_, cs, _, ls, _)| cs + ls).sum()
    }

    /// The table, indented for the narration.
    pub(crate) fn render(&self) -> String {
        let header = [
            "NODE",
            "STATUS",
            "COUNTER SHARDS",
            "ENTITIES",
            "LOG SHARDS",
            "ENTITIES",
        ];
        let rows: Vec<[String; 6]> = self
            .rows
            .iter()
            .map(|(a, (st, cs, ce, ls, le))| {
                let status = if self.unreachable.contains(a) {
                    format!("{st} UNREACHABLE")
                } else {
                    st.clone()
                };
                [
                    a.clone(),
                    status,
                    cs.to_string(),
                    ce.to_string(),
                    ls.to_string(),
                    le.to_string(),
                ]
            })
            .collect();
        let mut w = header.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let line = |c: [&str; 6]| {
            format!(
                "    {:w0$}  {:w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {:>w5$}\n",
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4],
                w5 = w[5]
            )
        };
        let mut out = line(header);
        for r in &rows {
            out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
        }
        out
    }
}
