//! Test support: node identities and membership views for unit tests of the machines that
//! read a [`MembershipView`] (singleton, cluster metrics).

use std::collections::BTreeSet;

use crate::address::{Address, UniqueAddress};
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::membership_view::MembershipView;

/// Node `i`: system `s`, host `h`, port 2550 + i, uid i + 100.
pub(crate) fn ua(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "h", 2550 + i), u64::from(i) + 100)
}

/// A view of members `(index, status)`, up-numbers in index order, seen from `me`.
pub(crate) fn view(me: u16, members: &[(u16, MemberStatus)]) -> MembershipView {
    let mut g = Gossip::empty();
    for (i, st) in members {
        let m = Member::joining(ua(*i), BTreeSet::new(), "1")
            .with_up(u32::from(*i) + 1)
            .with_status(*st);
        g.members.insert(ua(*i), m);
    }
    MembershipView::of(&MembershipState::new(g, ua(me)), 1)
}
