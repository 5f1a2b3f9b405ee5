//! What a `#![no_std]` plugin needs from a runtime on wasm32, which `std` would
//! otherwise bring with its WASI imports: a heap, a panic handler and the component
//! model's `cabi_realloc`. [`crate::no_std_runtime!`] puts them in the plugin crate.

#[cfg(target_arch = "wasm32")]
pub use wasm::{Allocator, keep, realloc, take};

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod wasm {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::{Cell, UnsafeCell};
    use core::ptr;
    use dlmalloc::Dlmalloc;

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

    /// Where dlmalloc gets memory: first the rest of the initial memory, past the
    /// stack and data (so a small request never grows memory, which costs the host
    /// a system call per instance), then new pages.
    struct Heap {
        tail_given: Cell<bool>,
    }

    // SAFETY: the methods follow `dlmalloc::Allocator`'s contract: regions are new,
    // disjoint and zeroed (initial memory past the data is zero, and so is grown
    // memory), and nothing is ever given back.
    unsafe impl dlmalloc::Allocator for Heap {
        fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
            if !self.tail_given.replace(true) {
                let base = (&raw const __heap_base) as usize;
                let end = (&raw const __heap_end) as usize;
                if end > base && end - base >= size {
                    return (base as *mut u8, end - base, 0);
                }
            }
            let pages = size.div_ceil(PAGE);
            match core::arch::wasm32::memory_grow(0, pages) {
                usize::MAX => (ptr::null_mut(), 0, 0),
                previous => ((previous * PAGE) as *mut u8, pages * PAGE, 0),
            }
        }

        fn remap(&self, _: *mut u8, _: usize, _: usize, _: bool) -> *mut u8 {
            ptr::null_mut()
        }

        fn free_part(&self, _: *mut u8, _: usize, _: usize) -> bool {
            false
        }

        fn free(&self, _: *mut u8, _: usize) -> bool {
            false
        }

        fn can_release_part(&self, _: u32) -> bool {
            false
        }

        fn allocates_zeros(&self) -> bool {
            true
        }

        fn page_size(&self) -> usize {
            PAGE
        }
    }

    /// The plugin's global allocator: dlmalloc over [`Heap`].
    pub struct Allocator(UnsafeCell<Dlmalloc<Heap>>);

    impl Allocator {
        #[allow(clippy::new_without_default)] // a `static` needs a const constructor
        pub const fn new() -> Allocator {
            let mut heap = Dlmalloc::new_with_allocator(Heap {
                tail_given: Cell::new(false),
            });
            // dlmalloc asks for memory in multiples of this (64 KiB by default): a
            // multiple of 4 KiB lets it take the initial memory's tail, which is
            // seldom a whole wasm page.
            heap.set_granularity(4 * 1024);
            Allocator(UnsafeCell::new(heap))
        }
    }

    // SAFETY: a component instance runs on one thread and is never re-entered while
    // it allocates, so the allocator is never used from two places at once.
    unsafe impl Sync for Allocator {}

    // SAFETY: forwards to dlmalloc, which upholds `GlobalAlloc`'s contract.
    unsafe impl GlobalAlloc for Allocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe { (*self.0.get()).malloc(layout.size(), layout.align()) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            unsafe { (*self.0.get()).calloc(layout.size(), layout.align()) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { (*self.0.get()).free(ptr, layout.size(), layout.align()) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            unsafe { (*self.0.get()).realloc(ptr, layout.size(), layout.align(), new_size) }
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
/// the component imports nothing. Elsewhere (native tests) it expands to nothing.
///
/// Only for a `#![no_std]` crate: with `std` linked, the panic handler is defined twice.
#[macro_export]
macro_rules! no_std_runtime {
    () => {
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
