//! The process' heap kept within a memory budget (`--memory`), for the programs that
//! promise one: `tessera-data` and the conversion bench's jobs.
//!
//! glibc's `malloc` gives every thread that allocates its own arena, and memory one thread
//! frees stays in its arena for that thread: with the parse and merge workers allocating
//! and freeing pieces, peak RSS ran 2.5–3 MB above the heap's own peak (a 3 GB unsorted
//! `.tns` at `--memory 16M`: 20.3 MB peak RSS, 17.6 MB with one arena and an eager trim; no
//! change in time at 256 MiB, interleaved rounds). One arena lets any thread reuse what
//! another freed, and a trim threshold of 128 KiB gives freed tops of the heap back.
//! The library leaves the allocator alone: a program embedding it decides for itself.

/// Makes `malloc` use one arena and trim its heap eagerly; a no-op off glibc. Call it at
/// the start of `main`, before any thread is spawned.
pub fn bound_to_budget() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const M_TRIM_THRESHOLD: i32 = -1;
        const M_ARENA_MAX: i32 = -8;
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        // SAFETY: `mallopt` (glibc, `malloc.h`) takes two integers and only changes the
        // allocator's tuning; both parameters are documented for glibc ≥ 2.10. It is safe
        // to call at any time (the allocator takes its own lock); a rejected value returns 0
        // and leaves the default, which is only a weaker bound, so the result is ignored.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
            mallopt(M_TRIM_THRESHOLD, 128 << 10);
        }
    }
}
