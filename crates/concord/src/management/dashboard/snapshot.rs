//! The dashboard's JSON (`GET /dashboard/state`, and each `snapshot` event of
//! `GET /dashboard/events`): membership as this node sees it, the reachability matrix,
//! the split brain resolver's decisions, this node's traffic counters, and the layers'
//! panels.
//!
//! ```text
//! {"self", "system", "generatedAtMs" (unix ms), "uptimeMs", "leader"?, "oldest"?,
//!  "clusterId"?,
//!  "members": [{"node", "uid", "status", "roles", "appVersion", "upNumber", "self",
//!               "leader", "oldest", "reachable", "observedBy": [..], "seenForMs"}],
//!  "reachability": {"observers": [..], "subjects": [..],
//!                   "unreachable": [[observer index, subject index], ..]},
//!  "sbrDecisions": [{"atMs" (unix ms), "decision", "cause", "nodes": [..]}],
//!  "traffic": {"messagesIn", "messagesOut", "bytesIn", "bytesOut" (counts since start),
//!              "heartbeatRttMs", "gossipRounds", "sbrDecisions"},
//!  "panels": {"<layer>": {..}, ..}}
//! ```
//!
//! `seenForMs` is how long this node has seen the member (since it first saw it, or since
//! this node started): a member's own start time is not gossiped.

use std::collections::{BTreeMap, BTreeSet};

use concord_core::{Lane, MembershipView, UniqueAddress};
use serde_json::{json, Map, Value};

use super::super::state::ManagementState;

/// When this node first saw each member (node clock, ms); pruned to the current members.
#[derive(Debug, Default)]
pub(crate) struct FirstSeen(BTreeMap<UniqueAddress, u64>);

impl FirstSeen {
    /// Records `view`'s new members at `now_ms` and forgets removed ones; the map stays
    /// as large as the membership.
    pub(crate) fn update(&mut self, view: &MembershipView, now_ms: u64, started_ms: u64) {
        self.0.retain(|a, _| view.members.contains_key(a));
        let first = self.0.is_empty();
        for a in view.members.keys() {
            // Members already there when the dashboard first looks count from the start.
            self.0
                .entry(a.clone())
                .or_insert(if first { started_ms } else { now_ms });
        }
    }

    fn seen_for(&self, a: &UniqueAddress, now_ms: u64) -> u64 {
        self.0.get(a).map_or(0, |t| now_ms.saturating_sub(*t))
    }
}

/// The reachability matrix: the observers and subjects of the unreachability records
/// (sorted addresses) and the (observer, subject) pairs, as indexes into them.
pub(crate) fn reachability_json(view: &MembershipView) -> Value {
    let mut observers = BTreeSet::new();
    let mut subjects = BTreeSet::new();
    for (subject, obs) in &view.unreachable {
        subjects.insert(subject.address.to_string());
        for o in obs {
            observers.insert(o.address.to_string());
        }
    }
    let observers: Vec<String> = observers.into_iter().collect();
    let subjects: Vec<String> = subjects.into_iter().collect();
    let index = |list: &[String], a: &str| list.binary_search_by(|x| x.as_str().cmp(a)).ok();
    let mut pairs = Vec::new();
    for (subject, obs) in &view.unreachable {
        let s = index(&subjects, &subject.address.to_string());
        for o in obs {
            if let (Some(o), Some(s)) = (index(&observers, &o.address.to_string()), s) {
                pairs.push(json!([o, s]));
            }
        }
    }
    json!({"observers": observers, "subjects": subjects, "unreachable": pairs})
}

/// The members' rows, sorted by address.
pub(crate) fn members_json(
    me: &UniqueAddress,
    view: &MembershipView,
    first_seen: &FirstSeen,
    now_ms: u64,
) -> Vec<Value> {
    let oldest = view.oldest(None).map(|m| m.unique_address.clone());
    let mut rows: Vec<(String, Value)> = view
        .members
        .values()
        .map(|m| {
            let a = &m.unique_address;
            let mut observed_by: Vec<String> = view
                .unreachable
                .get(a)
                .map(|o| o.iter().map(|o| o.address.to_string()).collect())
                .unwrap_or_default();
            observed_by.sort();
            let node = a.address.to_string();
            let row = json!({
                "node": node,
                "uid": a.uid.to_string(),
                "status": m.status.to_string(),
                "roles": m.roles.iter().collect::<Vec<_>>(),
                "appVersion": m.app_version,
                "upNumber": (m.up_number != concord_core::member::UP_NUMBER_UNSET).then_some(m.up_number),
                "self": a == me,
                "leader": view.leader.as_ref() == Some(a),
                "oldest": oldest.as_ref() == Some(a),
                "reachable": observed_by.is_empty(),
                "observedBy": observed_by,
                "seenForMs": first_seen.seen_for(a, now_ms),
            });
            (node, row)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(_, v)| v).collect()
}

/// The dashboard's JSON without the panels (added by the caller, rendered concurrently).
pub(crate) fn core_json(s: &ManagementState, first_seen: &mut FirstSeen) -> Map<String, Value> {
    let now = s.clock.now_ms();
    let view = s.cluster.view();
    first_seen.update(&view, now, s.started_ms);
    let me = s.cluster.self_unique_address();
    let stats = s.cluster.core_stats();
    let decisions: Vec<Value> = s
        .cluster
        .recent_sbr_decisions()
        .iter()
        .map(|d| {
            json!({
                "atMs": d.at_ms,
                "decision": format!("{:?}", d.decision),
                "cause": d.cause.name(),
                "nodes": d.nodes.iter().map(|n| n.address.to_string()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let t = s.transport.stats();
    let (mut msgs_in, mut msgs_out, mut bytes_in, mut bytes_out) = (0u64, 0u64, 0u64, 0u64);
    for lane in [Lane::Control, Lane::Ordinary, Lane::Large] {
        let l = t.lane(lane);
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        msgs_in = msgs_in.saturating_add(load(&l.frames_in));
        msgs_out = msgs_out.saturating_add(load(&l.frames_out));
        bytes_in = bytes_in.saturating_add(load(&l.bytes_in));
        bytes_out = bytes_out.saturating_add(load(&l.bytes_out));
    }
    let (cluster_id, _) = super::super::island_json(&s.cluster.island_report());
    let mut m = Map::new();
    m.insert("self".into(), json!(me.address.to_string()));
    m.insert("system".into(), json!(me.address.system));
    m.insert("generatedAtMs".into(), json!(now));
    m.insert("uptimeMs".into(), json!(now.saturating_sub(s.started_ms)));
    m.insert(
        "leader".into(),
        json!(view.leader.as_ref().map(|l| l.address.to_string())),
    );
    m.insert(
        "oldest".into(),
        json!(view.oldest(None).map(|o| o.address().to_string())),
    );
    m.insert("clusterId".into(), json!(cluster_id));
    m.insert(
        "members".into(),
        Value::Array(members_json(me, &view, first_seen, now)),
    );
    m.insert("reachability".into(), reachability_json(&view));
    m.insert("sbrDecisions".into(), Value::Array(decisions));
    m.insert(
        "traffic".into(),
        json!({
            "messagesIn": msgs_in,
            "messagesOut": msgs_out,
            "bytesIn": bytes_in,
            "bytesOut": bytes_out,
            "heartbeatRttMs": s.cluster.last_heartbeat_rtt_ms(),
            "gossipRounds": stats.gossip_rounds,
            "sbrDecisions": stats.sbr_decisions,
        }),
    );
    m
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use concord_core::{Address, Gossip, Member, MembershipState};

    use super::*;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), u64::from(i))
    }

    /// Three Up members; 2 cannot hear 3, 1 cannot hear 3.
    fn view() -> MembershipView {
        let mut g = Gossip::empty();
        for i in 1..=3 {
            let roles: BTreeSet<String> = ["backend".to_string()].into();
            g.members.insert(
                n(i),
                Member::joining(n(i), roles, "1.4.0").with_up(u32::from(i)),
            );
        }
        g.overview.reachability = g
            .overview
            .reachability
            .unreachable(&n(2), &n(3))
            .unreachable(&n(1), &n(3));
        MembershipView::of(&MembershipState::new(g, n(1)), 1)
    }

    #[test]
    fn the_matrix_lists_each_observer_and_subject_once_with_index_pairs() {
        let r = reachability_json(&view());
        let a = |i: u16| n(i).address.to_string();
        assert_eq!(r["observers"], json!([a(1), a(2)]));
        assert_eq!(r["subjects"], json!([a(3)]));
        assert_eq!(r["unreachable"], json!([[0, 0], [1, 0]]));
        let mut healed = view();
        healed.unreachable.clear();
        let empty = reachability_json(&healed);
        assert_eq!(empty["unreachable"], json!([]));
    }

    #[test]
    fn member_rows_carry_status_roles_version_flags_and_observers() {
        let v = view();
        let mut seen = FirstSeen::default();
        seen.update(&v, 10_000, 4_000);
        let rows = members_json(&n(1), &v, &seen, 12_500);
        assert_eq!(rows.len(), 3);
        let third = &rows[2];
        assert_eq!(third["node"], n(3).address.to_string());
        assert_eq!(third["reachable"], false);
        assert_eq!(
            third["observedBy"],
            json!([n(1).address.to_string(), n(2).address.to_string()])
        );
        assert_eq!(rows[0]["self"], true);
        assert_eq!(rows[1]["self"], false);
        assert_eq!(rows[0]["appVersion"], "1.4.0");
        assert_eq!(rows[0]["roles"], json!(["backend"]));
        assert_eq!(rows[0]["upNumber"], 1);
        assert_eq!(rows[0]["oldest"], true);
        // Members there at the first look count from the node's start.
        assert_eq!(rows[0]["seenForMs"], 8_500);
    }

    #[test]
    fn first_seen_counts_from_when_a_member_appears_and_forgets_removed_ones() {
        let v = view();
        let mut seen = FirstSeen::default();
        seen.update(&v, 10_000, 0);
        let mut fewer = v.clone();
        fewer.members.remove(&n(3));
        seen.update(&fewer, 11_000, 0);
        assert_eq!(seen.0.len(), 2, "a removed member is forgotten");
        seen.update(&v, 12_000, 0);
        assert_eq!(seen.seen_for(&n(3), 15_000), 3_000, "back: counted anew");
        assert_eq!(seen.seen_for(&n(1), 15_000), 15_000);
    }
}
