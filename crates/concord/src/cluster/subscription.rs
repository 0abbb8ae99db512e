//! [`Subscription`]: membership events that are never silently lost.
//!
//! The daemon publishes each change as a batch (the events and the view after them) on a
//! bounded broadcast channel, after it has replaced the view in the `watch`. A subscriber
//! first receives the whole view ([`SubscriptionItem::CurrentClusterState`], Akka's
//! `InitialStateAsSnapshot`), then every event after it. One that falls more than the
//! channel's capacity behind is not left with a gap: it receives the current view again as
//! a fresh `CurrentClusterState` and continues with the events after that view. Batches
//! already contained in the view it was given (by version) are skipped, so nothing is
//! delivered twice either.

use std::collections::VecDeque;
use std::sync::Arc;

use concord_core::{ClusterEvent, MembershipView};
use tokio::sync::{broadcast, watch};

/// One published change: the events and the view after them.
#[derive(Debug)]
pub struct EventBatch {
    /// The view after the events.
    pub view: Arc<MembershipView>,
    /// The events, in order.
    pub events: Vec<ClusterEvent>,
}

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SubscriptionItem {
    /// The whole view: first, and again after the subscriber lagged behind.
    CurrentClusterState(Arc<MembershipView>),
    /// A domain event.
    Event(ClusterEvent),
}

/// A subscription to this node's membership events; see the module docs.
pub struct Subscription {
    batches: broadcast::Receiver<Arc<EventBatch>>,
    views: watch::Receiver<Arc<MembershipView>>,
    /// The view as of the last item returned.
    view: Arc<MembershipView>,
    pending: VecDeque<ClusterEvent>,
    snapshot_due: bool,
    resyncs: u64,
}

impl Subscription {
    /// Subscribes: the receiver is positioned before the view is read, so no batch after
    /// that view can be missed (the daemon replaces the view before it publishes a batch).
    pub(crate) fn new(
        batches: &broadcast::Sender<Arc<EventBatch>>,
        views: watch::Receiver<Arc<MembershipView>>,
    ) -> Self {
        let rx = batches.subscribe();
        let view = views.borrow().clone();
        Subscription {
            batches: rx,
            views,
            view,
            pending: VecDeque::new(),
            snapshot_due: true,
            resyncs: 0,
        }
    }

    /// The next item; `None` once the node's membership has shut down and everything
    /// published before was received.
    pub async fn recv(&mut self) -> Option<SubscriptionItem> {
        if self.snapshot_due {
            self.snapshot_due = false;
            return Some(SubscriptionItem::CurrentClusterState(self.view.clone()));
        }
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(SubscriptionItem::Event(e));
            }
            match self.batches.recv().await {
                Ok(batch) => {
                    if batch.view.version <= self.view.version {
                        continue; // already in the view this subscriber has
                    }
                    self.view = batch.view.clone();
                    self.pending.extend(batch.events.iter().cloned());
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.resyncs += 1;
                    self.pending.clear();
                    // Start over at the tail (the retained batches are all older than the
                    // view read next), then read the view: as in `new`, nothing after it
                    // can be missed.
                    self.batches = self.batches.resubscribe();
                    self.view = self.views.borrow().clone();
                    return Some(SubscriptionItem::CurrentClusterState(self.view.clone()));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next domain event, skipping whole-view items (for subscribers that only react
    /// to events; use [`Subscription::recv`] to learn about resyncs).
    pub async fn next_event(&mut self) -> Option<ClusterEvent> {
        loop {
            match self.recv().await? {
                SubscriptionItem::Event(e) => return Some(e),
                SubscriptionItem::CurrentClusterState(_) => continue,
            }
        }
    }

    /// The view as of the last item returned: the first view, then the view after the
    /// batch of the last event returned.
    pub fn view(&self) -> &Arc<MembershipView> {
        &self.view
    }

    /// How many times this subscriber lagged and was given a fresh view.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_core::{Address, Member, MemberStatus, UniqueAddress};

    fn ua(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", 2550 + i), u64::from(i))
    }

    fn view(version: u64, members: &[u16]) -> Arc<MembershipView> {
        let mut v = MembershipView::empty(ua(1));
        v.version = version;
        for i in members {
            v.members.insert(
                ua(*i),
                Member::joining(ua(*i), Default::default(), "1").with_status(MemberStatus::Up),
            );
        }
        Arc::new(v)
    }

    fn up(i: u16) -> ClusterEvent {
        ClusterEvent::MemberUp(
            Member::joining(ua(i), Default::default(), "1").with_status(MemberStatus::Up),
        )
    }

    /// Publishes like the daemon: view first, then the batch.
    fn publish(
        tx: &broadcast::Sender<Arc<EventBatch>>,
        vtx: &watch::Sender<Arc<MembershipView>>,
        v: Arc<MembershipView>,
        events: Vec<ClusterEvent>,
    ) {
        vtx.send_replace(v.clone());
        let _ = tx.send(Arc::new(EventBatch { view: v, events }));
    }

    #[tokio::test]
    async fn snapshot_first_then_events_and_a_lagging_subscriber_gets_a_fresh_snapshot() {
        let (tx, _) = broadcast::channel(4);
        let (vtx, vrx) = watch::channel(view(1, &[1]));
        let mut sub = Subscription::new(&tx, vrx);
        publish(&tx, &vtx, view(2, &[1, 2]), vec![up(2)]);
        assert_eq!(
            sub.recv().await,
            Some(SubscriptionItem::CurrentClusterState(view(1, &[1])))
        );
        assert_eq!(sub.recv().await, Some(SubscriptionItem::Event(up(2))));
        assert_eq!(sub.view().version, 2);
        // Fall behind by more than the capacity.
        for i in 3..20u16 {
            let members: Vec<u16> = (1..=i).collect();
            publish(&tx, &vtx, view(u64::from(i), &members), vec![up(i)]);
        }
        let Some(SubscriptionItem::CurrentClusterState(v)) = sub.recv().await else {
            panic!("a lagging subscriber gets the current view");
        };
        assert_eq!(v.version, 19);
        assert_eq!(sub.resyncs(), 1);
        publish(&tx, &vtx, view(20, &[1]), vec![up(20)]);
        assert_eq!(sub.recv().await, Some(SubscriptionItem::Event(up(20))));
        drop(tx);
        assert_eq!(sub.recv().await, None);
    }

    #[tokio::test]
    async fn batches_already_in_the_first_view_are_not_delivered_twice() {
        let (tx, _) = broadcast::channel(8);
        let (vtx, vrx) = watch::channel(view(1, &[1]));
        // The view is replaced before the subscriber reads it, the batch comes after.
        let rx = tx.subscribe();
        vtx.send_replace(view(2, &[1, 2]));
        let mut sub = Subscription::new(&tx, vrx);
        let _ = tx.send(Arc::new(EventBatch {
            view: view(2, &[1, 2]),
            events: vec![up(2)],
        }));
        drop(rx);
        assert!(matches!(
            sub.recv().await,
            Some(SubscriptionItem::CurrentClusterState(v)) if v.version == 2
        ));
        publish(&tx, &vtx, view(3, &[1, 2, 3]), vec![up(3)]);
        assert_eq!(sub.recv().await, Some(SubscriptionItem::Event(up(3))));
    }
}
