//! Transparent huge pages off for the `concord` process, unless the operator asks for them.
//!
//! Why: the process's allocator, mimalloc, asks the kernel for transparent huge pages on
//! its memory (`madvise(MADV_HUGEPAGE)`, honoured where the system's THP mode is
//! `madvise` or `always`) and returns memory it has not reused for a second to the kernel
//! (its purge, `MADV_DONTNEED`). Every later page fault in such a range then zeroes a whole
//! 2 MiB page, on the thread that allocated: in `concord bench persistence` (3 nodes, 3,334
//! events/s each) 4.7 % of all CPU samples were the kernel zeroing huge pages
//! (`clear_page_erms` under `do_huge_pmd_anonymous_page`), most of them on the journal's
//! host threads, inside the commit of a turn whose answers wait for it. Off, the benchmark's
//! p99 over 30 s was 7.6–30.5 ms in five runs (median 11.0 ms), against 19.3–38.3 ms
//! (median 22.4 ms) in four with them on (docs/BENCHMARKS.md, "Huge pages").
//!
//! `prctl(PR_SET_THP_DISABLE)` (Linux ≥ 3.15) applies to the whole process and is inherited
//! by its children. With [`ALLOW_THP_ENV`] set (mimalloc's own option, read as the
//! allocator starts: `1` allows huge pages, `0` turns them off) the choice is the operator's
//! and nothing is changed here.

/// mimalloc's option that decides instead when it is set (`MIMALLOC_ALLOW_THP=1`: huge
/// pages as the system has them).
pub const ALLOW_THP_ENV: &str = "MIMALLOC_ALLOW_THP";

/// What [`configure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HugePages {
    /// Turned off for this process.
    Disabled,
    /// Left to mimalloc's option: [`ALLOW_THP_ENV`] is set.
    LeftToOption,
    /// Not available here (not Linux), or the kernel refused (the message).
    Unchanged(String),
}

/// Turns transparent huge pages off for this process unless [`ALLOW_THP_ENV`] is set; call
/// it first thing in `main`, before the runtime's threads allocate.
pub fn configure() -> HugePages {
    if std::env::var_os(ALLOW_THP_ENV).is_some() {
        return HugePages::LeftToOption;
    }
    disable()
}

#[cfg(target_os = "linux")]
fn disable() -> HugePages {
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => HugePages::Disabled,
        Err(e) => HugePages::Unchanged(format!("prctl(PR_SET_THP_DISABLE) failed: {e}")),
    }
}

#[cfg(not(target_os = "linux"))]
fn disable() -> HugePages {
    HugePages::Unchanged("transparent huge pages are a Linux setting".into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn disabling_sets_the_process_flag() {
        // The flag only goes from off to on here: other tests of this binary are not hurt
        // by small pages.
        assert_eq!(disable(), HugePages::Disabled);
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    }
}
