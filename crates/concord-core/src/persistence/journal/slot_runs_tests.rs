use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn ballot(round: u64) -> Ballot {
    Ballot { round, node: 1 }
}

/// The runs a map of slot → ballot makes: ascending, maximal.
fn runs_of(model: &BTreeMap<u64, u64>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (&slot, &round) in model {
        match out.last_mut() {
            Some(r) if r.end() == slot && r.ballot == ballot(round) => r.count += 1,
            _ => out.push(Run {
                first: slot,
                count: 1,
                ballot: ballot(round),
            }),
        }
    }
    out
}

proptest! {
    /// Runs set and unset slot by slot are those of the slots' map, maximal.
    #[test]
    fn runs_follow_every_set_and_unset(
        ops in proptest::collection::vec((0..40u64, 0..3u64, any::<bool>()), 0..80),
    ) {
        let (mut runs, mut model) = (Vec::new(), BTreeMap::new());
        for (slot, round, put) in ops {
            if put {
                set(&mut runs, slot, ballot(round));
                model.insert(slot, round);
            } else {
                unset(&mut runs, slot);
                model.remove(&slot);
            }
            prop_assert_eq!(&runs, &runs_of(&model));
        }
    }

    /// The parts lacking are exactly the slots held here that the other side does not
    /// hold at a ballot as high.
    #[test]
    fn the_parts_lacking_are_the_slots_not_covered(
        own in proptest::collection::btree_map(0..40u64, 0..3u64, 0..30),
        theirs in proptest::collection::btree_map(0..40u64, 0..3u64, 0..30),
    ) {
        let their_runs: Vec<(u64, u64, Ballot)> =
            runs_of(&theirs).iter().map(|r| (r.first, r.count, r.ballot)).collect();
        let missing = lacking(&runs_of(&own), &their_runs, |o, t| o <= t);
        let mut slots = Vec::new();
        for (a, b) in &missing {
            prop_assert!(a < b);
            slots.extend(*a..*b);
        }
        let want: Vec<u64> = own
            .iter()
            .filter(|(s, r)| theirs.get(s).is_none_or(|t| t < r))
            .map(|(s, _)| *s)
            .collect();
        prop_assert_eq!(slots, want);
        // Each part of `own` is visited once, lacking or not.
        let mut seen = Vec::new();
        for_each_part(&runs_of(&own), &missing, |a, b, lacks| {
            seen.extend((a..b).map(|s| (s, lacks)));
        });
        let all: Vec<(u64, bool)> = own
            .iter()
            .map(|(s, r)| (*s, theirs.get(s).is_none_or(|t| t < r)))
            .collect();
        prop_assert_eq!(seen, all);
    }
}
