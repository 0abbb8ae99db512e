//! `GET /cluster/domain-events`: cluster domain events as Server-Sent Events (Akka
//! Management's `ClusterHttpManagementRoutes` events stream). Each event is
//! `event: <Type>` with `data: {"type": "<Type>", ...}`; `?type=MemberUp&type=MemberRemoved`
//! (or `type=MemberUp,MemberRemoved`) keeps only those types.
//!
//! A client that reads too slowly is not silently left with a gap: it receives a
//! `CurrentClusterState` event (`{"type": "CurrentClusterState", "members": [...],
//! "leader": ...}`) with the whole current membership, then the events after it.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use concord_core::ClusterEvent;
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};

use super::members_json::member_json;
use super::message::message;
use super::state::ManagementState;
use crate::cluster::{Subscription, SubscriptionItem};

/// The event a lagging client receives instead of the events it missed.
pub const CURRENT_CLUSTER_STATE: &str = "CurrentClusterState";

/// Known event type names (Akka's, and `CurrentClusterState`).
pub const EVENT_TYPES: [&str; 14] = [
    CURRENT_CLUSTER_STATE,
    "MemberJoined",
    "MemberWeaklyUp",
    "MemberUp",
    "MemberLeft",
    "MemberExited",
    "MemberDowned",
    "MemberRemoved",
    "MemberPreparingForShutdown",
    "MemberReadyForShutdown",
    "UnreachableMember",
    "ReachableMember",
    "LeaderChanged",
    "RoleLeaderChanged",
];

/// The JSON of one event.
pub fn event_json(e: &ClusterEvent) -> Value {
    let t = e.type_name();
    match e {
        ClusterEvent::LeaderChanged(l) => {
            json!({"type": t, "address": l.as_ref().map(|a| a.to_string())})
        }
        ClusterEvent::RoleLeaderChanged { role, leader } => {
            json!({"type": t, "role": role, "address": leader.as_ref().map(|a| a.to_string())})
        }
        ClusterEvent::MemberRemoved {
            member,
            previous_status,
        } => json!({
            "type": t,
            "member": member_json(member),
            "previousStatus": previous_status.to_string(),
        }),
        other => match other.member() {
            Some(m) => json!({"type": t, "member": member_json(m)}),
            None => json!({"type": t}),
        },
    }
}

/// The `type` filter of the query string; `Err` names an unknown type.
fn type_filter(query: Option<&str>) -> Result<Option<BTreeSet<String>>, String> {
    let mut types = BTreeSet::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if k != "type" {
            continue;
        }
        for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if !EVENT_TYPES.contains(&t) {
                return Err(format!(
                    "unknown event type `{t}`; known: {}",
                    EVENT_TYPES.join(", ")
                ));
            }
            types.insert(t.to_string());
        }
    }
    Ok(if types.is_empty() { None } else { Some(types) })
}

fn events(
    sub: Subscription,
    filter: Option<BTreeSet<String>>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold((sub, filter, true), |(mut sub, filter, first)| async move {
        loop {
            let (name, data) = match sub.recv().await? {
                // The first view is not sent (Akka's stream starts with the events).
                SubscriptionItem::CurrentClusterState(_) if first => continue,
                SubscriptionItem::CurrentClusterState(v) => {
                    let members: Vec<_> = v.members.values().map(member_json).collect();
                    let leader = v.leader.as_ref().map(|l| l.address.to_string());
                    (
                        CURRENT_CLUSTER_STATE,
                        json!({"type": CURRENT_CLUSTER_STATE, "members": members, "leader": leader}),
                    )
                }
                SubscriptionItem::Event(e) => (e.type_name(), event_json(&e)),
            };
            if filter.as_ref().is_some_and(|f| !f.contains(name)) {
                continue;
            }
            let ev = Event::default().event(name).data(data.to_string());
            return Some((Ok(ev), (sub, filter, false)));
        }
    })
}

/// The route handler.
pub async fn domain_events(State(s): State<ManagementState>, RawQuery(q): RawQuery) -> Response {
    let filter = match type_filter(q.as_deref()) {
        Ok(f) => f,
        Err(e) => return message(axum::http::StatusCode::BAD_REQUEST, e),
    };
    Sse::new(events(s.cluster.subscribe(), filter))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_filter_accepts_repeated_and_comma_separated_types() {
        assert_eq!(type_filter(None).unwrap(), None);
        let f = type_filter(Some("type=MemberUp&type=MemberRemoved,LeaderChanged"))
            .unwrap()
            .unwrap();
        assert_eq!(f.len(), 3);
        assert!(type_filter(Some("type=Nope")).is_err());
    }
}
