//! Runs of journal slots with one ballot each, as [`super::holding`] lists them: kept up
//! to date slot by slot ([`set`], [`unset`]) for [`super::live_holdings`], and compared
//! with another replica's ([`lacking`]).

use super::entry::Ballot;

/// A run of slots `first .. first + count` with one ballot (marks: the default ballot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) first: u64,
    pub(super) count: u64,
    pub(super) ballot: Ballot,
}

impl Run {
    pub(super) fn end(&self) -> u64 {
        // Slots are below u64::MAX (`Segment::apply` refuses that slot): no overflow.
        self.first + self.count
    }
}

/// Sets `slot` to `ballot` in `runs` (ascending, not overlapping, maximal).
pub(super) fn set(runs: &mut Vec<Run>, slot: u64, ballot: Ballot) {
    let k = runs.partition_point(|r| r.first <= slot);
    if k > 0 && slot < runs[k - 1].end() && runs[k - 1].ballot == ballot {
        return;
    }
    unset(runs, slot);
    let i = runs.partition_point(|r| r.first < slot);
    let prev = i > 0 && runs[i - 1].ballot == ballot && runs[i - 1].end() == slot;
    let next = i < runs.len() && runs[i].ballot == ballot && slot + 1 == runs[i].first;
    match (prev, next) {
        (true, true) => {
            runs[i - 1].count += 1 + runs[i].count;
            runs.remove(i);
        }
        (true, false) => runs[i - 1].count += 1,
        (false, true) => {
            runs[i].first = slot;
            runs[i].count += 1;
        }
        (false, false) => runs.insert(
            i,
            Run {
                first: slot,
                count: 1,
                ballot,
            },
        ),
    }
}

/// Removes `slot` from `runs`.
pub(super) fn unset(runs: &mut Vec<Run>, slot: u64) {
    let k = runs.partition_point(|r| r.first <= slot);
    let Some(i) = k.checked_sub(1) else {
        return;
    };
    let r = runs[i];
    if slot >= r.end() {
        return;
    }
    let left = slot - r.first;
    let right = r.count - left - 1;
    match (left, right) {
        (0, 0) => {
            runs.remove(i);
        }
        (0, _) => {
            runs[i].first = slot + 1;
            runs[i].count = right;
        }
        (_, 0) => runs[i].count = left,
        _ => {
            runs[i].count = left;
            runs.insert(
                i + 1,
                Run {
                    first: slot + 1,
                    count: right,
                    ballot: r.ballot,
                },
            );
        }
    }
}

/// The parts of `own` that `theirs` (`(first, count, ballot)`, ascending, not
/// overlapping) does not cover (`covered(own ballot, their ballot)`), as `(first, end)`
/// slot ranges, ascending.
pub(super) fn lacking(
    own: &[Run],
    theirs: &[(u64, u64, Ballot)],
    covered: impl Fn(Ballot, Ballot) -> bool,
) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut push = |a: u64, b: u64| {
        if a >= b {
            return;
        }
        match out.last_mut() {
            Some(l) if l.1 == a => l.1 = b,
            _ => out.push((a, b)),
        }
    };
    for o in own {
        let mut at = o.first;
        let start = theirs.partition_point(|t| t.0.saturating_add(t.1) <= o.first);
        for &(first, count, ballot) in &theirs[start..] {
            if first >= o.end() {
                break;
            }
            if !covered(o.ballot, ballot) {
                continue;
            }
            push(at, first.max(at));
            at = at.max(first.saturating_add(count).min(o.end()));
        }
        push(at, o.end());
    }
    out
}

/// Calls `f(first, end, lacks)` for each part of `own`'s slots in order: the parts in
/// `missing` (ascending, within `own`) with `lacks` true, the others false.
pub(super) fn for_each_part(
    own: &[Run],
    missing: &[(u64, u64)],
    mut f: impl FnMut(u64, u64, bool),
) {
    let mut m = missing.iter().peekable();
    for r in own {
        let mut at = r.first;
        while let Some(&&(a, b)) = m.peek() {
            if a >= r.end() {
                break;
            }
            if a > at {
                f(at, a, false);
            }
            f(a.max(at), b.min(r.end()), true);
            at = b.min(r.end());
            if b <= r.end() {
                m.next();
            } else {
                break;
            }
        }
        if at < r.end() {
            f(at, r.end(), false);
        }
    }
}

#[cfg(test)]
#[path = "slot_runs_tests.rs"]
mod tests;
