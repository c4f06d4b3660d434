//! Cache-line prefetch: the one place the crate asks the processor to bring memory in
//! ahead of its use (a memtable search's next nodes, a Bloom builder's next blocks).
//! Owns only the hint; must never read or write what it is given, and never changes
//! what the program computes.

/// Asks the processor to bring the cache line at `p` in. A hint: nothing where the
/// target has no such instruction or under Miri, and nothing for a null pointer.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if !p.is_null() {
        // SAFETY: a prefetch never faults, whatever the address, and reads nothing the
        // program sees.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
        };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}
