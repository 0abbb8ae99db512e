//! What a replica waits for after a ring change ([`super::handoff`]): its wait for a
//! segment ([`Pending`]), the needs an incomplete copy carries on to whoever merges it
//! ([`Need`]), and the arithmetic of quorums that says when a change needs a wait
//! ([`meets_every_majority`], [`catches_up`]).

use std::collections::{BTreeMap, BTreeSet};

use super::standing::Standing;
use crate::address::{Address, UniqueAddress};

/// Of `n` replicas, how many a set must hold to share one with every majority of them:
/// `n − (n / 2 + 1) + 1`, i.e. ⌈n / 2⌉ (0 of 0, 1 of 1 or 2, 2 of 3).
pub fn meets_every_majority(n: usize) -> usize {
    n - n / 2
}

/// A replica list went from `old` to `new`: `None` if every write chosen on a majority of
/// `old` is, once `new`'s new replicas caught up, on a majority of `new` too (the list kept
/// its size or grew, or it shrank to one); otherwise the replicas that stay must catch up
/// from one another first — `Some(true)` if they can answer meanwhile (every majority of
/// `new` that they form alone meets every majority of `old`), `Some(false)` if not.
///
/// A write chosen on a majority `Q` of `old` is, after the change, on `Q`'s members that
/// stay and on every new replica once it caught up (each merges copies that meet every
/// majority of `old`): at least `⌊|old|/2⌋ + 1 − departed + joined` of `new`'s replicas,
/// which is a majority of `new` unless the list shrank (three replicas of which one left:
/// the write may be on one of the two left, and once that one leaves too the other would
/// answer without it — docs/PERSISTENCE.md, "The limit to state precisely"). Meanwhile a
/// majority of `new` formed by replicas that stay meets every majority of `old` if
/// `⌊|new|/2⌋ + 1 + ⌊|old|/2⌋ + 1 > |old|` (three to two: yes; five to three: no).
pub fn catches_up(old: &[&UniqueAddress], new: &[&UniqueAddress]) -> Option<bool> {
    let majority = |n: usize| n / 2 + 1;
    if old.is_empty() || new.is_empty() {
        return None;
    }
    let departed = old.iter().filter(|a| !new.contains(a)).count();
    let joined = new.iter().filter(|a| !old.contains(a)).count();
    if (majority(old.len()) + joined).saturating_sub(departed) >= majority(new.len()) {
        return None;
    }
    Some(majority(new.len()) + majority(old.len()) > old.len())
}

/// True if `a` and `b` name the same replicas (in any order).
pub(super) fn same_replicas(a: &[&UniqueAddress], b: &[&UniqueAddress]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Needs one last page may carry per segment, at most (more: the page is refused as bad
/// input). A copy that owes more folds them ([`fold`]), never drops one.
pub const MAX_NEEDS: usize = 64;
/// Addresses in one need's sets, at most: a segment's previous replicas are at most two
/// preference lists (n ≤ 255 each).
pub const MAX_NEED_ADDRESSES: usize = 512;
/// Addresses in all the needs one segment's last page carries, at most: with addresses of
/// at most 270 bytes of text they take under 600 KB, so a last page (1 MiB of records)
/// still fits in a frame of the large lane (2 MiB).
pub const MAX_PAGE_NEED_ADDRESSES: usize = 2048;

/// A wait an incomplete copy still owes: of the segment's `previous` replicas (by
/// address), `required` must have delivered complete copies, or every one of them a copy;
/// `delivered` and `partial` already delivered to the copy's holder (complete, and maybe
/// incomplete). A last page of an incomplete copy carries its holder's unmet needs, and
/// the new replica that merges it takes them over: what the copy lacks must still come
/// from there (simulator seeds 3647 and 3810: a replica that left a segment's list while
/// it still waited for the replicas holding the last writes handed its copy on, and the
/// next replica counted it as if nothing were missing).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Need {
    /// The replicas whose copies were awaited (addresses).
    pub previous: BTreeSet<Address>,
    /// How many of them must deliver complete copies.
    pub required: usize,
    /// Those that delivered complete copies.
    pub delivered: BTreeSet<Address>,
    /// Those that delivered copies that may be incomplete.
    pub partial: BTreeSet<Address>,
}

impl Need {
    /// Met, counting also the copies `received` by the node that holds the need now.
    pub fn met(&self, received: &BTreeMap<Address, Standing>) -> bool {
        let complete = |a: &&Address| {
            self.delivered.contains(*a) || received.get(*a) == Some(&Standing::Complete)
        };
        self.previous.iter().filter(complete).count() >= self.required
            || self.previous.iter().all(|a| {
                self.delivered.contains(a) || self.partial.contains(a) || received.contains_key(a)
            })
    }

    /// Met by complete copies alone (at least one required), counting also the copies
    /// `received` by the node that holds the need now.
    pub fn met_by_complete_copies(&self, received: &BTreeMap<Address, Standing>) -> bool {
        let complete = |a: &&Address| {
            self.delivered.contains(*a) || received.get(*a) == Some(&Standing::Complete)
        };
        self.required >= 1 && self.previous.iter().filter(complete).count() >= self.required
    }

    /// Addresses in its sets.
    pub fn addresses(&self) -> usize {
        self.previous.len() + self.delivered.len() + self.partial.len()
    }

    /// The need with the copies of its replicas that `received` holds counted in.
    pub(super) fn with_received(mut self, received: &BTreeMap<Address, Standing>) -> Need {
        for a in &self.previous {
            match received.get(a) {
                Some(Standing::Complete) => {
                    self.partial.remove(a);
                    self.delivered.insert(a.clone());
                }
                Some(Standing::Incomplete) if !self.delivered.contains(a) => {
                    self.partial.insert(a.clone());
                }
                _ => {}
            }
        }
        self
    }

    /// A need met only where both `self` and `other` are ([`fold`]): every replica either
    /// names must have delivered a complete copy (or every one of them a copy), counting
    /// as delivered only those both count so.
    ///
    /// Sound because a copy named delivered in a need of this holder is merged into its
    /// copy whichever need names it: if every replica of the union delivered a complete
    /// copy, each of `self` and `other` had all of its previous replicas' complete copies
    /// (at least its `required`); if every one delivered a copy, each had every copy.
    pub fn union(self, other: Need) -> Need {
        let previous: BTreeSet<Address> = self.previous.union(&other.previous).cloned().collect();
        let delivered = self
            .delivered
            .intersection(&other.delivered)
            .filter(|a| previous.contains(*a))
            .cloned()
            .collect();
        Need {
            required: previous.len(),
            previous,
            delivered,
            partial: BTreeSet::new(),
        }
    }

    /// Within the bounds a page may carry ([`MAX_NEED_ADDRESSES`] addresses per set,
    /// `required` at most the previous replicas).
    pub fn is_bounded(&self) -> bool {
        self.previous.len() <= MAX_NEED_ADDRESSES
            && self.delivered.len() <= MAX_NEED_ADDRESSES
            && self.partial.len() <= MAX_NEED_ADDRESSES
            && self.required <= self.previous.len()
    }

    /// Within the bounds a need may have on disk ([`MAX_STORED_NEED_ADDRESSES`] addresses
    /// per set: a folded need may exceed a page's).
    pub fn is_stored_bounded(&self) -> bool {
        self.previous.len() <= MAX_STORED_NEED_ADDRESSES
            && self.delivered.len() <= MAX_STORED_NEED_ADDRESSES
            && self.partial.len() <= MAX_STORED_NEED_ADDRESSES
            && self.required <= self.previous.len()
    }
}

/// Addresses in one need's sets on disk, at most: a need folded from others ([`fold`])
/// may name more replicas than a page may carry ([`MAX_NEED_ADDRESSES`]); kept, it makes
/// its holder's last pages of the segment refused, and so never counted (the segment
/// waits for the operator's give-up rather than counting a copy short of a write).
pub const MAX_STORED_NEED_ADDRESSES: usize = MAX_NEEDS * MAX_NEED_ADDRESSES;

/// `needs` within the bounds of one last page: at most [`MAX_NEEDS`], and at most
/// [`MAX_PAGE_NEED_ADDRESSES`] addresses in all where folding can reach it. Needs beyond
/// are folded ([`Need::union`]) into one that implies them all, never dropped: a copy
/// that owed a need it no longer carried would count as holding writes it lacks.
pub fn fold(mut needs: Vec<Need>) -> Vec<Need> {
    let total = |ns: &[Need]| {
        ns.iter()
            .map(Need::addresses)
            .fold(0usize, usize::saturating_add)
    };
    while needs.len() > MAX_NEEDS || (needs.len() > 1 && total(&needs) > MAX_PAGE_NEED_ADDRESSES) {
        let (Some(a), Some(b)) = (needs.pop(), needs.pop()) else {
            break;
        };
        let u = b.union(a);
        if !needs.contains(&u) {
            needs.push(u);
        }
    }
    needs
}

/// A segment this node waits for copies of after a ring change: it became a replica of it,
/// or it stays in a list that lost replicas. It answers nothing about it meanwhile, unless
/// [`Pending::answers`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// Replicas in the ring whose last page it waits for.
    pub from: BTreeSet<UniqueAddress>,
    /// The addresses of the segment's previous replicas (by address: a restarted node
    /// brings its disk back).
    pub previous: BTreeSet<Address>,
    /// How many of them must have delivered complete copies (this node's own disk counts
    /// if it is one): enough to meet every majority of them ([`meets_every_majority`]), so
    /// that every write chosen before is among what this node merged.
    pub required: usize,
    /// Pending since this node's first ring (it just started: what its disk holds is all
    /// it knows, and it hands that over while it waits); otherwise it hands nothing over
    /// until it is complete itself, unless [`Pending::staying`].
    pub first_ring: bool,
    /// Every copy received (this node's own included), by address, standing so.
    pub received: BTreeMap<Address, Standing>,
    /// Needs taken over from incomplete copies merged here ([`Need`]); each must be met too.
    pub inherited: Vec<Need>,
    /// The needs this node's own copy owed when the wait began ([`Handoffs::owed`]: waits
    /// it left unfinished, or — after a restart — the wait it was in): each must be met
    /// too, unless its own need is met by complete copies ([`Pending::done`]).
    ///
    /// [`Handoffs::owed`]: super::handoff::Handoffs::owed
    pub debts: Vec<Need>,
    /// Previous replicas whose copies count as complete for its own need although their
    /// pages said incomplete: each named itself delivered in a need for the same previous
    /// replicas ([`Pending::inherit`]).
    pub credited: BTreeSet<Address>,
    /// A replica that stays in the segment's list while replicas of it left: its copy is as
    /// complete as before the change, so it hands it over meanwhile (its last page says
    /// incomplete, and carries its need, which names its own copy as delivered).
    pub staying: bool,
    /// It answers proposers meanwhile: the list shrank, but every majority of the new list
    /// still meets every majority of the old one ([`catches_up`]).
    pub answers: bool,
}

impl Pending {
    /// Its own need: `required` complete copies of the previous replicas', or every
    /// previous replica's copy, complete or not (then this node holds everything any of
    /// them holds).
    pub(super) fn own(&self) -> Need {
        Need {
            previous: self.previous.clone(),
            required: self.required,
            delivered: self.credited.clone(),
            partial: BTreeSet::new(),
        }
    }

    /// Everything awaited arrived: its own need and every need taken over from an
    /// incomplete copy are met, and so are its debts unless its own need is met by
    /// complete copies.
    ///
    /// A debt names the replicas of a configuration this node's copy was to catch up
    /// from. Complete copies meeting every majority of the segment's previous replicas
    /// — the replicas of the list before this change, whose own handoffs met whatever
    /// their copies owed — hold every write chosen since then too, so they settle it; a
    /// debt decides where the wait has nothing better: no previous replica known (a node
    /// restarted alone, its disk's ring as old as its debt or absent), or only incomplete
    /// copies (every member it sees as new as it is, after a whole cluster's restart).
    pub fn done(&self) -> bool {
        self.from.is_empty()
            && self.own().met(&self.received)
            && self.inherited.iter().all(|n| n.met(&self.received))
            && (self.debts_settled() || self.debts.iter().all(|n| n.met(&self.received)))
    }

    /// Its own need is met by complete copies: its debts no longer count.
    fn debts_settled(&self) -> bool {
        self.own().met_by_complete_copies(&self.received)
    }

    /// The needs that still count: those taken over, and its debts unless settled.
    fn counted(&self) -> impl Iterator<Item = &Need> {
        let debts: &[Need] = if self.debts_settled() {
            &[]
        } else {
            &self.debts
        };
        self.inherited.iter().chain(debts)
    }

    /// True if a copy from `a` is still awaited: a replica of its own need, of an inherited
    /// one or of a debt that has not delivered a complete copy.
    pub fn awaits(&self, a: &Address) -> bool {
        self.received.get(a) != Some(&Standing::Complete)
            && (self.previous.contains(a) || self.counted().any(|n| n.previous.contains(a)))
    }

    /// Its own need, those it took over and its debts that are not met (or settled), with
    /// the copies received here counted in.
    pub fn unmet_needs(&self) -> Vec<Need> {
        std::iter::once(self.own())
            .chain(self.counted().cloned())
            .filter(|n| !n.met(&self.received))
            .map(|n| n.with_received(&self.received))
            .collect()
    }

    /// Takes over `needs` as debts of this node's own copy (each once); one for the same
    /// previous replicas that names `me` delivered credits its own copy as complete, as
    /// [`Pending::inherit`] does for a sender.
    pub(super) fn owe(&mut self, me: &Address, needs: &[Need]) {
        for n in needs {
            if n.previous == self.previous && n.delivered.contains(me) {
                self.credited.insert(me.clone());
            }
            if !self.debts.contains(n) {
                self.debts.push(n.clone());
            }
        }
    }

    /// Takes over `needs` (from `sender`'s incomplete copy merged here), each once; what
    /// this node's own copy owes is taken over by [`Pending::owe`] instead.
    ///
    /// A need that names `sender` delivered says its copy was complete for that need's
    /// previous replicas (a replica that stays in a shrunk list sends its copy so while it
    /// catches up): it counts as a complete copy for this node's needs of the same previous
    /// replicas. Only the sender itself: copies it merged after it began sending may not
    /// have reached here.
    pub(super) fn inherit(&mut self, sender: &Address, needs: &[Need]) {
        for n in needs {
            let credited = n.delivered.get(sender);
            if n.previous == self.previous {
                self.credited.extend(credited.cloned());
            }
            for q in self
                .inherited
                .iter_mut()
                .filter(|q| q.previous == n.previous)
            {
                q.delivered.extend(credited.cloned());
                q.partial.retain(|a| !q.delivered.contains(a));
            }
            let mut n = n.clone();
            if n.previous == self.previous {
                n.delivered.extend(self.credited.iter().cloned());
                n.partial.retain(|a| !n.delivered.contains(a));
            }
            if !n.met(&self.received) && !self.inherited.contains(&n) {
                self.inherited.push(n);
            }
        }
    }

    /// Counts `from`'s copy by where it stands (a complete copy stays counted complete).
    pub(super) fn count(&mut self, from: &Address, standing: Standing) {
        if self.received.get(from) != Some(&Standing::Complete) {
            self.received.insert(from.clone(), standing);
        }
    }
}
