//! What a `#![no_std]` plugin needs from a runtime on wasm32, which `std` would
//! otherwise bring with its WASI imports: a heap, a panic handler and the component
//! model's `cabi_realloc`. [`crate::no_std_runtime!`] puts them in the plugin crate.

/// A bump heap's bookkeeping, apart from the memory it hands out (so it is tested
/// natively): blocks are taken from `next` up; only the last block taken is given
/// back or resized in place.
///
/// The host runs every plugin call in a fresh instance and drops it after, so nothing
/// a call allocates outlives the call: a general allocator's bins, free lists and
/// coalescing are work no instance lives long enough to profit from (they were a
/// tenth of a request's plugin time). A growing `Vec` or `String`, and a temporary
/// dropped right after it was made, reuse their bytes; any other freed block stays
/// taken until the instance goes, within the host's memory limit for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bump {
    /// The first free byte.
    next: usize,
    /// The end of the region `next` lies in.
    end: usize,
}

/// What [`Bump::resize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resized {
    /// The block is where it was, with its new size.
    InPlace,
    /// The block cannot grow where it is: take a new one and copy.
    Move,
    /// Out of memory.
    Failed,
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
impl Bump {
    /// A heap over `[start, end)`.
    pub const fn new(start: usize, end: usize) -> Bump {
        Bump { next: start, end }
    }

    /// Take a block of `size` bytes aligned to `align` (a power of two); `None` when
    /// memory is exhausted. Past the region, `grow(bytes)` is asked for at least
    /// `bytes` more and answers the new region's start and length: right at the end
    /// it extends the region; elsewhere (something else grew memory) the heap moves
    /// there.
    pub fn alloc(
        &mut self,
        size: usize,
        align: usize,
        mut grow: impl FnMut(usize) -> Option<(usize, usize)>,
    ) -> Option<usize> {
        loop {
            let start = self.next.checked_next_multiple_of(align)?;
            let end = start.checked_add(size)?;
            if end <= self.end {
                self.next = end;
                return Some(start);
            }
            let (region, len) = grow(end - self.end)?;
            if region != self.end {
                self.next = region;
            }
            self.end = region.checked_add(len)?;
        }
    }

    /// Give back the block at `at` of `size` bytes: reused when it was the last taken.
    pub fn dealloc(&mut self, at: usize, size: usize) {
        if at.checked_add(size) == Some(self.next) {
            self.next = at;
        }
    }

    /// Resize the block at `at` from `size` to `new_size` bytes where it is, when it
    /// is the last block taken or it shrinks.
    pub fn resize(
        &mut self,
        at: usize,
        size: usize,
        new_size: usize,
        grow: impl FnOnce(usize) -> Option<(usize, usize)>,
    ) -> Resized {
        if at.checked_add(size) != Some(self.next) {
            return if new_size <= size {
                Resized::InPlace
            } else {
                Resized::Move
            };
        }
        let Some(end) = at.checked_add(new_size) else {
            return Resized::Failed;
        };
        if end <= self.end {
            self.next = end;
            return Resized::InPlace;
        }
        match grow(end - self.end) {
            Some((region, len)) if region == self.end => {
                self.end = region + len;
                self.next = end;
                Resized::InPlace
            }
            // Memory grew elsewhere: the heap moves there and the block is copied.
            Some((region, len)) => {
                self.next = region;
                self.end = region + len;
                Resized::Move
            }
            None => Resized::Failed,
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use wasm::{Allocator, keep, realloc, take};

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod wasm {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::ptr;

    const PAGE: usize = 64 * 1024;

    // `memcmp` and its kin, which `core` calls and which the target's compiler
    // builtins leave to the C library: taken from wasi-libc's archive, where they are
    // plain functions (only what is called is linked, and none of it calls WASI).
    #[link(name = "c")]
    unsafe extern "C" {}

    unsafe extern "C" {
        // Set by the linker: where the heap starts, and the end of the initial memory.
        static __heap_base: u8;
        static __heap_end: u8;
    }

    /// The plugin's global allocator: a [`Bump`](super::Bump) heap over the rest of
    /// the initial memory (past the stack and data), then over pages it grows.
    pub struct Allocator(UnsafeCell<Option<super::Bump>>);

    impl Allocator {
        #[allow(clippy::new_without_default)] // a `static` needs a const constructor
        pub const fn new() -> Allocator {
            Allocator(UnsafeCell::new(None))
        }

        /// Work on the heap, set up on first use: it starts at the linker's heap base
        /// and takes the initial memory's tail before growing memory (a grow costs
        /// the host a system call per instance).
        fn with_heap<R>(&self, work: impl FnOnce(&mut super::Bump) -> R) -> R {
            // SAFETY: see `Sync` below: nothing else uses the heap while `work` runs,
            // and `work` (the allocator's own code) does not allocate.
            let heap = unsafe { &mut *self.0.get() };
            work(heap.get_or_insert_with(|| {
                super::Bump::new(
                    (&raw const __heap_base) as usize,
                    (&raw const __heap_end) as usize,
                )
            }))
        }
    }

    /// New pages for the heap, at least `bytes` of them: their start and length.
    fn grow(bytes: usize) -> Option<(usize, usize)> {
        let pages = bytes.div_ceil(PAGE);
        match core::arch::wasm32::memory_grow(0, pages) {
            usize::MAX => None,
            previous => Some((previous * PAGE, pages * PAGE)),
        }
    }

    // SAFETY: a component instance runs on one thread and is never re-entered while
    // it allocates, so the allocator is never used from two places at once.
    unsafe impl Sync for Allocator {}

    // SAFETY: `Bump` hands out disjoint blocks of the size and alignment asked for, in
    // memory the instance owns, and reuses a block only once it was given back.
    unsafe impl GlobalAlloc for Allocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.with_heap(|heap| heap.alloc(layout.size(), layout.align(), grow))
                .map_or(ptr::null_mut(), |at| at as *mut u8)
        }

        unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
            self.with_heap(|heap| heap.dealloc(block as usize, layout.size()));
        }

        unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let at = block as usize;
            match self.with_heap(|heap| heap.resize(at, layout.size(), new_size, grow)) {
                super::Resized::InPlace => block,
                super::Resized::Failed => ptr::null_mut(),
                // SAFETY: `GlobalAlloc::realloc`'s contract makes the new layout valid;
                // the new block is live and disjoint from the old, which is at least
                // `layout.size()` long (it only moves to grow).
                super::Resized::Move => unsafe {
                    let moved = Layout::from_size_align_unchecked(new_size, layout.align());
                    let new = self.alloc(moved);
                    if !new.is_null() {
                        ptr::copy_nonoverlapping(block, new, layout.size());
                    }
                    new
                },
            }
        }
    }

    /// The request `session.plan-verification` was given, kept for `describe-event`.
    struct Kept(UnsafeCell<Option<crate::Request>>);

    // SAFETY: as for the allocator: one thread, and `keep` and `take` are never
    // re-entered (neither calls out of the SDK while it holds the cell).
    unsafe impl Sync for Kept {}

    static KEPT: Kept = Kept(UnsafeCell::new(None));

    /// Keep this instance's request for `describe-event`.
    pub fn keep(request: crate::Request) {
        // SAFETY: see `Kept`; no reference into the cell outlives this statement.
        unsafe { *KEPT.0.get() = Some(request) }
    }

    /// The kept request, if `keep` was called.
    pub fn take() -> Option<crate::Request> {
        // SAFETY: see `Kept`; no reference into the cell outlives this statement.
        unsafe { (*KEPT.0.get()).take() }
    }

    /// The canonical ABI's `cabi_realloc`, on the global allocator.
    ///
    /// # Safety
    /// As the component model calls it: `old` was allocated with `old_len` and
    /// `align` (or `old_len` is 0), and `align` is a power of two.
    pub unsafe fn realloc(old: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
        use alloc::alloc::{alloc, handle_alloc_error, realloc as grow};
        // SAFETY: the caller's contract.
        unsafe {
            let layout;
            let new = if old_len == 0 {
                if new_len == 0 {
                    return align as *mut u8;
                }
                layout = Layout::from_size_align_unchecked(new_len, align);
                alloc(layout)
            } else {
                layout = Layout::from_size_align_unchecked(old_len, align);
                grow(old, layout, new_len)
            };
            if new.is_null() {
                handle_alloc_error(layout);
            }
            new
        }
    }
}

/// The runtime of a `#![no_std]` plugin: call it once at the crate root, beside
/// [`crate::export_provider!`]. On wasm32 it defines the global allocator, a panic
/// handler (a panic traps; the host answers `plugin_failed`) and `cabi_realloc`, so
/// the component imports nothing. Elsewhere it links `std`, whose allocator and panic
/// handler the plugin's native library then has, so that `cargo test -p <plugin>`
/// builds on its own, not only beside a package that turns on serde_json's `std`.
///
/// Only for a `#![no_std]` crate: with `std` linked, the panic handler is defined twice.
#[macro_export]
macro_rules! no_std_runtime {
    () => {
        #[cfg(not(target_arch = "wasm32"))]
        extern crate std;

        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)] // the runtime's entry points
        const _: () = {
            #[global_allocator]
            static ALLOCATOR: $crate::runtime::Allocator = $crate::runtime::Allocator::new();

            #[panic_handler]
            fn panic(_: &::core::panic::PanicInfo<'_>) -> ! {
                ::core::arch::wasm32::unreachable()
            }

            /// # Safety
            /// Called by the component model's canonical ABI, as it specifies.
            #[unsafe(no_mangle)]
            unsafe extern "C" fn cabi_realloc(
                old: *mut u8,
                old_len: usize,
                align: usize,
                new_len: usize,
            ) -> *mut u8 {
                // SAFETY: the canonical ABI's contract is `realloc`'s.
                unsafe { $crate::runtime::realloc(old, old_len, align, new_len) }
            }
        };
    };
}

#[cfg(test)]
mod tests {
    use super::{Bump, Resized};
    use std::vec::Vec;

    const PAGE: usize = 64 * 1024;

    /// Memory that grows by whole pages from `top`, like `memory.grow`, and records
    /// what each grow was asked for.
    struct Memory {
        top: usize,
        limit: usize,
        asked: Vec<usize>,
    }

    impl Memory {
        fn new(top: usize, limit: usize) -> Memory {
            Memory {
                top,
                limit,
                asked: Vec::new(),
            }
        }

        fn grow(&mut self) -> impl FnMut(usize) -> Option<(usize, usize)> + '_ {
            |bytes| {
                self.asked.push(bytes);
                let len = bytes.div_ceil(PAGE) * PAGE;
                if self.top + len > self.limit {
                    return None;
                }
                let start = self.top;
                self.top += len;
                Some((start, len))
            }
        }
    }

    fn no_growth(_: usize) -> Option<(usize, usize)> {
        panic!("the heap grew while it had room")
    }

    #[test]
    fn blocks_are_disjoint_aligned_and_taken_in_order() {
        let mut heap = Bump::new(1001, PAGE);
        let a = heap.alloc(3, 1, no_growth).expect("a block");
        let b = heap.alloc(16, 8, no_growth).expect("a block");
        let c = heap.alloc(1, 4, no_growth).expect("a block");
        assert_eq!(a, 1001);
        assert_eq!(b, 1008, "aligned past the first block");
        assert_eq!(c, 1024);
        assert!(a + 3 <= b && b + 16 <= c);
    }

    #[test]
    fn the_last_block_given_back_is_reused_and_no_other() {
        let mut heap = Bump::new(0, PAGE);
        let a = heap.alloc(100, 1, no_growth).expect("a block");
        let b = heap.alloc(50, 1, no_growth).expect("a block");
        heap.dealloc(a, 100); // not the last: stays taken
        let c = heap.alloc(10, 1, no_growth).expect("a block");
        assert_eq!(
            c,
            b + 50,
            "a freed block that was not the last is not reused"
        );
        heap.dealloc(c, 10); // a temporary dropped right after use
        let d = heap.alloc(10, 1, no_growth).expect("a block");
        assert_eq!(d, c);
    }

    #[test]
    fn a_growing_vec_stays_in_place_and_takes_only_its_final_size() {
        let mut heap = Bump::new(64, PAGE);
        let at = heap.alloc(4, 4, no_growth).expect("a block");
        let mut size = 4;
        while size < 4096 {
            assert_eq!(heap.resize(at, size, size * 2, no_growth), Resized::InPlace);
            size *= 2;
        }
        assert_eq!(heap.alloc(1, 1, no_growth), Some(at + 4096));
    }

    #[test]
    fn a_block_that_is_not_the_last_moves_to_grow_and_shrinks_in_place() {
        let mut heap = Bump::new(0, PAGE);
        let a = heap.alloc(64, 8, no_growth).expect("a block");
        let b = heap.alloc(8, 8, no_growth).expect("a block");
        assert_eq!(heap.resize(a, 64, 128, no_growth), Resized::Move);
        assert_eq!(heap.resize(a, 64, 32, no_growth), Resized::InPlace);
        assert_eq!(
            heap.alloc(1, 1, no_growth),
            Some(b + 8),
            "nothing was taken"
        );
    }

    #[test]
    fn past_its_region_the_heap_grows_memory_by_the_shortfall() {
        let mut memory = Memory::new(PAGE, 4 * PAGE);
        let mut heap = Bump::new(PAGE - 1000, PAGE);
        let a = heap.alloc(600, 8, memory.grow()).expect("a block");
        let b = heap.alloc(3000, 8, memory.grow()).expect("a block");
        assert_eq!(b, a + 600, "the new page extends the region");
        assert_eq!(memory.asked, [2600]);
        // The last block grows across another page boundary, in place.
        let grown = heap.resize(b, 3000, PAGE + 3000, memory.grow());
        assert_eq!(grown, Resized::InPlace);
        assert_eq!(memory.top, 3 * PAGE);
    }

    #[test]
    fn when_memory_grew_elsewhere_the_heap_moves_there() {
        // Something else took the page right after the heap's region.
        let mut memory = Memory::new(2 * PAGE, 8 * PAGE);
        let mut heap = Bump::new(PAGE - 100, PAGE);
        let a = heap.alloc(100, 1, no_growth).expect("a block");
        let b = heap.alloc(50, 1, memory.grow()).expect("a block");
        assert_eq!(
            b,
            2 * PAGE,
            "the block is in the new region, not past the old one"
        );
        // Memory grows elsewhere again: the last block cannot grow in place.
        memory.top += PAGE;
        assert_eq!(heap.resize(b, 50, 2 * PAGE, memory.grow()), Resized::Move);
        let moved = heap.alloc(2 * PAGE, 1, memory.grow()).expect("a block");
        assert_eq!(moved, 4 * PAGE, "the copy does not overlap what it copies");
        assert_eq!(heap.resize(a, 100, 200, memory.grow()), Resized::Move);
    }

    #[test]
    fn exhausted_memory_fails_without_taking_anything() {
        let mut memory = Memory::new(PAGE, 2 * PAGE);
        let mut heap = Bump::new(PAGE - 10, PAGE);
        let before = heap;
        assert_eq!(heap.alloc(2 * PAGE, 1, memory.grow()), None);
        assert_eq!(heap, before);
        let a = heap.alloc(8, 1, memory.grow()).expect("a block");
        assert_eq!(heap.resize(a, 8, 3 * PAGE, memory.grow()), Resized::Failed);
        assert_eq!(heap.alloc(usize::MAX, 1, no_growth), None, "no overflow");
        assert_eq!(heap.alloc(1, 1, no_growth), Some(a + 8));
    }
}
