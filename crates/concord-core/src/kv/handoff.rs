//! Handoff: a node sends the groups of keys it holds but does not own to their owners, and
//! removes its copies once every owner stored them (Dynamo §4.6 "hinted handoff"; Riak's
//! ownership and hinted handoff are the same mechanism, and so they are here).
//!
//! A group (segment, n) is **misplaced** here when this node is not in its preference list
//! for n: it stored hinted writes for an unreachable primary, or the ring changed (a node
//! joined and took the segment over, this node is leaving, ...). For each misplaced group —
//! `handoff-concurrency` at a time — the node waits until every owner is reachable, then
//! sends pages of up to `transfer-batch-size` of values to all of them; when all
//! acknowledged a page (each after merging it durably) it removes each key of the page
//! whose version has not changed since (a newer one goes in a later page). A leaving node
//! owns nothing, so it hands everything over; its coordinated shutdown waits for that in
//! `cluster-exiting`.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::kv::handoff_state::{Page, Session};
use crate::kv::object::Versioned;
use crate::kv::store::{Group, Update};
use crate::kv::{limits, KvMachine, KvMessage, KvStorage};

impl<S: KvStorage> KvMachine<S> {
    /// Starts and continues handoffs.
    pub(super) fn handoff_tick(&mut self, now_ms: u64) {
        if self.ring.is_empty() {
            return;
        }
        let misplaced: Vec<Group> = self
            .store
            .groups()
            .filter(|((s, n), _, c)| *c > 0 && !self.ring.owns(&self.self_node, *s, *n))
            .map(|(g, _, _)| g)
            .collect();
        // Sessions whose group is owned here now, or whose owners changed, end.
        let ring = &self.ring;
        let me = &self.self_node;
        self.handoffs.sessions.retain(|(s, n), session| {
            !ring.owns(me, *s, *n)
                && ring
                    .preference_list(*s, *n)
                    .into_iter()
                    .eq(session.targets.iter())
        });
        for g in misplaced {
            if self.handoffs.sessions.len() >= self.settings.handoff_concurrency.max(1) {
                break;
            }
            if !self.handoffs.sessions.contains_key(&g) {
                let targets = self
                    .ring
                    .preference_list(g.0, g.1)
                    .into_iter()
                    .cloned()
                    .collect();
                self.handoffs.sessions.insert(
                    g,
                    Session {
                        targets,
                        cursor: None,
                        page: None,
                    },
                );
            }
        }
        let groups: Vec<Group> = self.handoffs.sessions.keys().copied().collect();
        for g in groups {
            self.handoff_continue(now_ms, g);
        }
    }

    /// Sends the group's next page when none is in flight and every owner is reachable,
    /// or sends the page again to owners that have not acknowledged it in time.
    fn handoff_continue(&mut self, now_ms: u64, group: Group) {
        let Some(session) = self.handoffs.sessions.get(&group) else {
            return;
        };
        if !session.targets.iter().all(|t| self.is_reachable(t)) {
            return;
        }
        if let Some(page) = &session.page {
            if page
                .sent_ms
                .saturating_add(self.settings.request_timeout_ms)
                > now_ms
            {
                return;
            }
            let (id, objects) = (page.id, page.objects.clone());
            let missing: Vec<UniqueAddress> = session
                .targets
                .iter()
                .filter(|t| !page.acked.contains(*t))
                .cloned()
                .collect();
            for t in &missing {
                self.send(
                    t,
                    KvMessage::Handoff {
                        session: id,
                        objects: objects.clone(),
                    },
                );
            }
            if let Some(p) = self
                .handoffs
                .sessions
                .get_mut(&group)
                .and_then(|s| s.page.as_mut())
            {
                p.sent_ms = now_ms;
            }
            return;
        }
        let cursor = session.cursor.clone();
        let scanned = self.store.scan_segment(
            group.0,
            Some(group.1),
            cursor.as_deref(),
            limits::HANDOFF_PAGE_OBJECTS,
            self.settings.transfer_batch_bytes,
        );
        let (objects, next) = match scanned {
            Ok(x) => x,
            Err(e) => {
                self.storage_failed(&e);
                return;
            }
        };
        if objects.is_empty() {
            // Done (keys written meanwhile start a new session on a later tick).
            self.handoffs.sessions.remove(&group);
            return;
        }
        self.handoffs.next_page = self.handoffs.next_page.wrapping_add(1);
        let id = self.handoffs.next_page;
        let targets = session.targets.clone();
        self.stats.handoff_keys_sent += objects.len() as u64 * targets.len() as u64;
        for t in &targets {
            self.send(
                t,
                KvMessage::Handoff {
                    session: id,
                    objects: objects.clone(),
                },
            );
        }
        if let Some(s) = self.handoffs.sessions.get_mut(&group) {
            s.cursor = next.clone();
            s.page = Some(Page {
                id,
                objects,
                acked: BTreeSet::new(),
                sent_ms: now_ms,
                last: next.is_none(),
            });
        }
    }

    /// An owner stored (or refused) a page.
    pub(super) fn handoff_acked(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        page_id: u64,
        result: Result<(), String>,
    ) {
        let Some((&group, session)) = self
            .handoffs
            .sessions
            .iter_mut()
            .find(|(_, s)| s.page.as_ref().is_some_and(|p| p.id == page_id))
        else {
            return;
        };
        if let Err(why) = result {
            tracing::debug!(peer = %from.address, reason = %why, "key-value store: handoff page refused; it will be sent again");
            return;
        }
        let Some(page) = session.page.as_mut() else {
            return;
        };
        if session.targets.contains(from) {
            page.acked.insert(from.clone());
        }
        if !session.targets.iter().all(|t| page.acked.contains(t)) {
            return;
        }
        let Some(page) = session.page.take() else {
            return;
        };
        let last = page.last;
        if last {
            self.handoffs.sessions.remove(&group);
        }
        for (key, object) in &page.objects {
            match self
                .store
                .apply(key, Update::RemoveIfDigest(object.digest()))
            {
                Ok(a) if a.changed => self.stats.handoff_keys_removed += 1,
                Ok(_) => {}
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        if last {
            // The next misplaced group starts at once.
            self.handoff_tick(now_ms);
        } else {
            self.handoff_continue(now_ms, group);
        }
    }

    /// An owner's side: merges a page and acknowledges it.
    pub(super) fn handoff_received(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        page_id: u64,
        objects: Vec<(String, Versioned)>,
    ) {
        if objects.len() > limits::HANDOFF_PAGE_OBJECTS * 4 {
            self.stats.invalid_messages += 1;
            return;
        }
        let mut result = Ok(());
        for (k, o) in &objects {
            if k.is_empty() || k.len() > self.settings.max_key_bytes || o.validate().is_err() {
                self.stats.invalid_messages += 1;
                continue;
            }
            match self.store.apply(k, Update::Merge(o)) {
                Ok(a) if a.changed => self.stats.handoff_keys_received += 1,
                Ok(_) => {}
                Err(e) => {
                    self.stats.storage_errors += 1;
                    result = Err(e.to_string());
                    break;
                }
            }
        }
        self.send(
            from,
            KvMessage::HandoffAck {
                session: page_id,
                result,
            },
        );
    }
}
