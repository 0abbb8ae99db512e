//! The persistent entities over the in-memory store (and a store that can be held or
//! broken): recovery, snapshots, conflicts, failures, permits.

use std::sync::Arc;
use std::time::Duration;

use concord_core::persistence::{AtomicWrite, PersistenceId, PersistentEvent, RetentionCriteria};
use concord_core::Address;
use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::*;
use crate::sharding::{Entity, EntityContext};

struct Counter;

#[derive(Serialize, Deserialize)]
enum Cmd {
    Add(i64),
    AddMany(Vec<i64>),
    Get,
    StopAfter(i64),
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Added(i64);

impl EventSourced for Counter {
    type Command = Cmd;
    type Event = Added;
    type State = i64;
    type Reply = i64;

    async fn handle_command(&mut self, _: &mut EntityContext, state: &i64, c: Cmd) -> Effect<Self> {
        match c {
            Cmd::Add(n) => Effect::persist(Added(n)).then_reply(|v| *v),
            Cmd::AddMany(ns) => Effect::persist_all(ns.into_iter().map(Added)).then_reply(|v| *v),
            Cmd::Get => Effect::reply(*state),
            Cmd::StopAfter(n) => Effect::persist(Added(n)).then_stop().then_reply(|v| *v),
        }
    }

    fn apply_event(state: &mut i64, e: &Added) {
        *state += e.0;
    }
}

fn ctx(id: &str) -> EntityContext {
    EntityContext::new(id.into(), "0".into(), Address::new("s", "127.0.0.1", 1))
}

fn settings(snapshot_every: u64) -> PersistenceSettings {
    PersistenceSettings {
        retention: RetentionCriteria {
            snapshot_every,
            keep_snapshots: 2,
            delete_events: true,
        },
        recovery_permits: 4,
        recovery_timeout: Duration::from_secs(5),
        write_timeout: Duration::from_secs(5),
        replay_batch_size: 3,
    }
}

fn counter(p: &Persistence) -> EventSourcedEntity<Counter> {
    p.event_sourced("counter", |_| Counter)("c1", None)
}

fn pid(id: &str) -> PersistenceId {
    PersistenceId::new("counter", id).unwrap()
}

async fn send<E: Entity>(e: &mut E, c: &mut EntityContext, m: E::Message) -> E::Reply {
    e.handle(c, m).await
}

#[tokio::test]
async fn state_is_recovered_from_the_journal_and_snapshots() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(5));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    for i in 1..=12 {
        assert_eq!(send(&mut a, &mut c, Cmd::Add(i)).await, Ok((1..=i).sum()));
    }
    assert_eq!(
        send(&mut a, &mut c, Cmd::AddMany(vec![100, 200])).await,
        Ok(378)
    );
    assert_eq!(a.seq_nr(), 14);
    // Snapshots at 5 and 10 (the write 13..=14 crosses no multiple of 5), then 15 and 20:
    // keeping 2, the snapshot at 20 deletes snapshots and events up to 20 − 2 × 5 = 10.
    for _ in 0..6 {
        send(&mut a, &mut c, Cmd::Add(1)).await.unwrap();
    }
    assert_eq!(a.seq_nr(), 20);
    let events = store.events(&pid("c1"));
    assert_eq!(
        events.first().map(|e| e.seq_nr),
        Some(11),
        "events ≤ 10 deleted"
    );
    assert_eq!(store.highest_seq_nr(&pid("c1")).await.unwrap(), 20);
    let snapshot = store.load_latest(&pid("c1")).await.unwrap().unwrap();
    assert_eq!(snapshot.seq_nr, 20);
    // A new incarnation recovers the same state and number, from the snapshot at 20.
    let mut b = counter(&p);
    assert_eq!(send(&mut b, &mut c, Cmd::Get).await, Ok(384));
    assert_eq!(b.seq_nr(), 20);
    assert_eq!(*b.state(), 384);
}

#[tokio::test]
async fn without_snapshots_recovery_replays_every_event_in_batches() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    for i in 0..10 {
        send(&mut a, &mut c, Cmd::Add(i)).await.unwrap();
    }
    let mut b = counter(&p);
    assert_eq!(send(&mut b, &mut c, Cmd::Get).await, Ok(45));
    assert_eq!(store.events(&pid("c1")).len(), 10);
}

#[tokio::test]
async fn a_second_writer_is_refused_and_stops_and_histories_never_interleave() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let (mut a, mut b) = (counter(&p), counter(&p));
    let (mut ca, mut cb) = (ctx("c1"), ctx("c1"));
    send(&mut a, &mut ca, Cmd::Add(1)).await.unwrap();
    // B recovers at 1 (a split brain: both believe they are the entity).
    assert_eq!(send(&mut b, &mut cb, Cmd::Get).await, Ok(1));
    assert_eq!(send(&mut a, &mut ca, Cmd::Add(10)).await, Ok(11));
    let r = send(&mut b, &mut cb, Cmd::Add(100)).await;
    assert!(
        matches!(&r, Err(PersistenceError::Conflict { seq_nr: 2, persistence_id }) if persistence_id == "counter|c1"),
        "{r:?}"
    );
    assert!(cb.take_passivate(), "the losing writer stops");
    assert!(matches!(
        send(&mut b, &mut cb, Cmd::Get).await,
        Err(PersistenceError::Stopped { .. })
    ));
    let journal: Vec<i64> = store
        .events(&pid("c1"))
        .iter()
        .map(|e| {
            crate::sharding::entity::decode::<Added>(&e.payload)
                .unwrap()
                .0
        })
        .collect();
    assert_eq!(journal, vec![1, 10], "only the winner's events");
    // Its next incarnation recovers the winner's history and may write after it.
    let mut b2 = counter(&p);
    assert_eq!(send(&mut b2, &mut cb, Cmd::Add(100)).await, Ok(111));
}

#[tokio::test]
async fn an_event_that_does_not_decode_stops_recovery_naming_it_and_changes_nothing() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    send(&mut a, &mut c, Cmd::Add(1)).await.unwrap();
    let garbage = AtomicWrite::new(pid("c1"), 2, vec![vec![0xc1]], 0).unwrap();
    store.append(garbage).await.unwrap();
    let mut b = counter(&p);
    let r = send(&mut b, &mut c, Cmd::Get).await;
    assert!(
        matches!(&r, Err(PersistenceError::RecoveryFailed { seq_nr: 2, persistence_id, .. }) if persistence_id == "counter|c1"),
        "{r:?}"
    );
    assert!(c.take_passivate());
    assert_eq!(
        store.events(&pid("c1")).len(),
        2,
        "the journal is unchanged"
    );
}

#[tokio::test]
async fn a_rejected_write_changes_nothing_and_the_entity_goes_on() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    let r = send(&mut a, &mut c, Cmd::AddMany(vec![1; 1001])).await;
    assert!(matches!(r, Err(PersistenceError::Rejected { .. })), "{r:?}");
    assert!(!c.take_passivate());
    assert_eq!(send(&mut a, &mut c, Cmd::Add(2)).await, Ok(2));
    assert_eq!(store.events(&pid("c1")).len(), 1);
}

#[tokio::test]
async fn then_stop_passivates_after_the_write() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    assert_eq!(send(&mut a, &mut c, Cmd::StopAfter(4)).await, Ok(4));
    assert!(c.take_passivate());
    assert_eq!(store.events(&pid("c1")).len(), 1);
}

/// A store whose reads wait for a permit the test gives, counting the reads waiting.
#[derive(Clone)]
struct Held {
    inner: InMemoryStore,
    gate: Arc<Semaphore>,
}

impl Journal for Held {
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()> {
        self.inner.append(write)
    }
    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64> {
        async move {
            let _p = self.gate.acquire().await.unwrap();
            self.inner.highest_seq_nr(pid).await
        }
        .boxed()
    }
    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>> {
        self.inner.replay(pid, from, max)
    }
    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to: u64) -> StoreFuture<'a, ()> {
        Journal::delete_to(&self.inner, pid, to)
    }
    fn events_by_slices<'a>(&'a self, q: &'a EventsQuery) -> StoreFuture<'a, Vec<EventEnvelope>> {
        self.inner.events_by_slices(q)
    }
}

#[tokio::test(start_paused = true)]
async fn recoveries_wait_for_permits_and_time_out() {
    let inner = InMemoryStore::new();
    let gate = Arc::new(Semaphore::new(0));
    let held = Arc::new(Held {
        inner: inner.clone(),
        gate: gate.clone(),
    });
    let stores = Stores {
        journal: held,
        snapshots: Arc::new(inner.clone()),
        state: Arc::new(inner.clone()),
        snapshots_in_journal: false,
    };
    let mut s = settings(0);
    s.recovery_permits = 1;
    s.recovery_timeout = Duration::from_secs(2);
    let p = Persistence::ready(stores, s);
    // The first recovery takes the only permit and waits on the held store; the second
    // waits for the permit; both time out, naming their ids.
    let first = tokio::spawn({
        let p = p.clone();
        async move {
            let mut e = p.event_sourced("counter", |_| Counter)("a", None);
            send(&mut e, &mut ctx("a"), Cmd::Get).await
        }
    });
    let second = tokio::spawn({
        let p = p.clone();
        async move {
            let mut e = p.event_sourced("counter", |_| Counter)("b", None);
            send(&mut e, &mut ctx("b"), Cmd::Get).await
        }
    });
    let (r1, r2) = (first.await.unwrap(), second.await.unwrap());
    assert!(
        matches!(r1, Err(PersistenceError::RecoveryTimeout { ref persistence_id, timeout_ms: 2000 }) if persistence_id == "counter|a"),
        "{r1:?}"
    );
    assert!(
        matches!(r2, Err(PersistenceError::RecoveryTimeout { ref persistence_id, .. }) if persistence_id == "counter|b"),
        "{r2:?}"
    );
    // Released, recovery goes through: permits are given back after a timeout.
    gate.add_permits(100);
    let mut e = p.event_sourced("counter", |_| Counter)("a", None);
    assert_eq!(send(&mut e, &mut ctx("a"), Cmd::Get).await, Ok(0));
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_starts_fails_the_command_after_the_start_timeout() {
    let p = Persistence::pending();
    let mut e = p.event_sourced("counter", |_| Counter)("a", None);
    let mut c = ctx("a");
    let r = send(&mut e, &mut c, Cmd::Get).await;
    assert!(
        matches!(r, Err(PersistenceError::Unavailable { .. })),
        "{r:?}"
    );
    assert!(c.take_passivate());
}

struct Cart;

#[derive(Serialize, Deserialize)]
enum CartCmd {
    Add(String),
    Clear,
    Items,
}

impl DurableState for Cart {
    type Command = CartCmd;
    type State = Vec<String>;
    type Reply = Vec<String>;

    async fn handle_command(
        &mut self,
        _: &mut EntityContext,
        items: &Vec<String>,
        c: CartCmd,
    ) -> StateEffect<Self> {
        match c {
            CartCmd::Add(i) => {
                let mut next = items.clone();
                next.push(i);
                StateEffect::persist(next).then_reply(|s: &Vec<String>| s.clone())
            }
            CartCmd::Clear => StateEffect::delete().reply(Vec::new()),
            CartCmd::Items => StateEffect::reply(items.clone()),
        }
    }
}

#[tokio::test]
async fn durable_state_is_stored_whole_recovered_and_conflicts_stop_the_second_writer() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mk = || DurableStateEntity::new(Cart, Arc::from("cart"), p.clone());
    let (mut a, mut b) = (mk(), mk());
    let (mut ca, mut cb) = (ctx("alice"), ctx("alice"));
    assert_eq!(
        send(&mut a, &mut ca, CartCmd::Add("book".into())).await,
        Ok(vec!["book".to_string()])
    );
    assert_eq!(
        send(&mut b, &mut cb, CartCmd::Items).await,
        Ok(vec!["book".to_string()])
    );
    send(&mut a, &mut ca, CartCmd::Add("pen".into()))
        .await
        .unwrap();
    let r = send(&mut b, &mut cb, CartCmd::Add("ink".into())).await;
    assert!(
        matches!(r, Err(PersistenceError::Conflict { seq_nr: 2, .. })),
        "{r:?}"
    );
    assert!(cb.take_passivate());
    let stored = store
        .get(&PersistenceId::new("cart", "alice").unwrap())
        .await
        .unwrap();
    assert_eq!(stored.revision, 2);
    let mut c = mk();
    assert_eq!(
        send(&mut c, &mut ctx("alice"), CartCmd::Items).await,
        Ok(vec!["book".to_string(), "pen".to_string()])
    );
    assert_eq!(
        send(&mut c, &mut ctx("alice"), CartCmd::Clear).await,
        Ok(vec![])
    );
    let mut d = mk();
    assert_eq!(
        send(&mut d, &mut ctx("alice"), CartCmd::Items).await,
        Ok(vec![])
    );
    assert_eq!(
        send(&mut d, &mut ctx("alice"), CartCmd::Add("x".into())).await,
        Ok(vec!["x".to_string()])
    );
    assert_eq!(
        store
            .get(&PersistenceId::new("cart", "alice").unwrap())
            .await
            .unwrap()
            .revision,
        4
    );
}

#[tokio::test]
async fn a_snapshot_that_does_not_decode_is_passed_over_while_every_event_exists() {
    let store = InMemoryStore::new();
    let p = Persistence::ready(Stores::of(store.clone()), settings(0));
    let mut a = counter(&p);
    let mut c = ctx("c1");
    for i in 1..=4 {
        send(&mut a, &mut c, Cmd::Add(i)).await.unwrap();
    }
    let garbage = Snapshot {
        seq_nr: 3,
        timestamp_ms: 0,
        payload: vec![0xc1],
    };
    store.save(&pid("c1"), garbage.clone()).await.unwrap();
    let mut b = counter(&p);
    assert_eq!(
        send(&mut b, &mut c, Cmd::Get).await,
        Ok(10),
        "every event replayed"
    );
    // With the events it covers deleted, recovery fails naming the snapshot.
    Journal::delete_to(&store, &pid("c1"), 3).await.unwrap();
    let mut d = counter(&p);
    let r = send(&mut d, &mut c, Cmd::Get).await;
    assert!(
        matches!(&r, Err(PersistenceError::RecoveryFailed { seq_nr: 3, reason, .. }) if reason.contains("snapshot")),
        "{r:?}"
    );
}

/// A journal that keeps the snapshots too and answers a recovery's start in one query
/// ([`Journal::replay_from_snapshot`]) — with no events at all when `empty_start` (as the
/// replicated store may, when a replica's page ends before the newest snapshot).
#[derive(Clone)]
struct OneQuery {
    inner: InMemoryStore,
    empty_start: bool,
    starts: Arc<std::sync::atomic::AtomicUsize>,
}

impl Journal for OneQuery {
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()> {
        self.inner.append(write)
    }
    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64> {
        self.inner.highest_seq_nr(pid)
    }
    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>> {
        self.inner.replay(pid, from, max)
    }
    fn replay_from_snapshot<'a>(
        &'a self,
        pid: &'a PersistenceId,
        max: usize,
    ) -> StoreFuture<'a, Option<RecoveryStart>> {
        async move {
            self.starts
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let snapshot = self.inner.load_latest(pid).await?;
            let from = snapshot.as_ref().map_or(1, |s| s.seq_nr + 1);
            let (events, highest) = self.inner.replay_with_highest(pid, from, max).await?;
            let events = if self.empty_start { Vec::new() } else { events };
            Ok(Some(RecoveryStart {
                snapshot,
                events,
                highest,
            }))
        }
        .boxed()
    }
    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to: u64) -> StoreFuture<'a, ()> {
        Journal::delete_to(&self.inner, pid, to)
    }
    fn events_by_slices<'a>(&'a self, q: &'a EventsQuery) -> StoreFuture<'a, Vec<EventEnvelope>> {
        self.inner.events_by_slices(q)
    }
}

#[tokio::test]
async fn a_journal_that_keeps_the_snapshots_starts_recovery_in_one_query() {
    for empty_start in [false, true] {
        let inner = InMemoryStore::new();
        let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let journal = OneQuery {
            inner: inner.clone(),
            empty_start,
            starts: starts.clone(),
        };
        let stores = |in_journal: bool| Stores {
            journal: Arc::new(journal.clone()),
            snapshots: Arc::new(inner.clone()),
            state: Arc::new(inner.clone()),
            snapshots_in_journal: in_journal,
        };
        let mut s = settings(4);
        s.retention.delete_events = false;
        let p = Persistence::ready(stores(true), s);
        let mut a = counter(&p);
        let mut c = ctx("c1");
        for i in 1..=10 {
            send(&mut a, &mut c, Cmd::Add(i)).await.unwrap();
        }
        assert_eq!(
            inner.load_latest(&pid("c1")).await.unwrap().unwrap().seq_nr,
            8
        );
        // From the snapshot at 8 and events 9, 10 — read on with replay when the first
        // query brought none.
        let before = starts.load(std::sync::atomic::Ordering::SeqCst);
        let mut b = counter(&p);
        assert_eq!(
            send(&mut b, &mut c, Cmd::Get).await,
            Ok(55),
            "{empty_start}"
        );
        assert_eq!(b.seq_nr(), 10);
        assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), before + 1);
        // A snapshot that does not decode: every event replayed from 1 instead.
        let bad = Snapshot {
            seq_nr: 10,
            timestamp_ms: 0,
            payload: vec![0xc1],
        };
        inner.save(&pid("c1"), bad).await.unwrap();
        let mut d = counter(&p);
        assert_eq!(
            send(&mut d, &mut c, Cmd::Get).await,
            Ok(55),
            "{empty_start}"
        );
        // Journal and snapshot store apart: never asked for the one query.
        let before = starts.load(std::sync::atomic::Ordering::SeqCst);
        let q = Persistence::ready(stores(false), s);
        let mut e = counter(&q);
        assert_eq!(
            send(&mut e, &mut c, Cmd::Get).await,
            Ok(55),
            "{empty_start}"
        );
        assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), before);
    }
}
