//! Streaming conversion between `.tns`/`.mtx` and `.tcs` with bounded memory.
//!
//! Text → `.tcs`: sorted input is read once. For the common formats (every level
//! compressed, or a dense level 0 over compressed ones, rank 1 to 4) and `.tns` or general
//! coordinate `.mtx` files, the file is cut into blocks that workers map, parse *and pack*
//! into pieces of the level arrays (`blocks`); the consumer joins the pieces in file order
//! and lays out where each goes in arrays spooled to anonymous temporary files, which the
//! workers then write (`stitch`). Once the level sizes are known, the spools are copied (in
//! the kernel) into the laid-out output. Other formats take the same single pass through
//! the general packer (`scan::CheckedTextSource`, `build::build_spooled`). SuperTaco's two
//! passes (§4.3) are kept only where dense level sizes are needed before the first entry and
//! the file declares no dimensions (pass one, `scan`, counts; pass two, `build`, writes at
//! computed offsets). Input found out of order falls back to an external merge sort
//! (`runs`): sorted runs within the memory budget, merged k ways (in several rounds if
//! there are more runs than buffers); a run whose keys pack into 64 bits is kept as its
//! sorted (packed key, value) pairs, *in memory* while the budget has room for it beside the
//! run buffer and the parser (`runs::Hold`; an input whose pairs would fit that room is cut
//! into smaller runs so that all of it does), otherwise in a temporary file; the final
//! merge has the budget less the held runs. When the final merge can take every run at
//! once (and keys spread evenly enough), runs, held or spilled, are not sorted but only
//! distributed by the top bits of their keys (`runs::distribute`): the final merge then
//! gathers each bucket of all runs and sorts it in a core's cache (`MergeSource::bucketed`)
//! instead of merging sorted runs. When the file declares dimensions
//! whose fields fit 64 bits, the parse workers pack every key as they parse it (no pass
//! over the run packs them, and the thread that collects the run only copies pairs). For the formats the block packer
//! handles, the final merge is cut into key ranges (`ranges::Ranges`: every run's lower bounds
//! of keys sampled from the runs) that workers merge (in memory, when the keys pack) and
//! pack in parallel like text blocks,
//! joined in key order by the `Stitcher` (`stitch::convert_merged`); other formats take one
//! serial merge into the general packer. Output goes to a temporary file renamed into place
//! only when complete, after an `fsync`; on the block paths the data is written back while
//! the conversion runs (`tcs::Appender::flush_behind`), so that `fsync` waits for the last
//! bytes only.
//!
//! Memory: the budget less what the process itself needs (`working_memory`) is shared out
//! as block sizes, run sizes and buffer sizes; peak RSS stays within the budget down to
//! 16 MiB (measured by the conversion bench), for multi-gigabyte inputs too when the
//! program uses one `malloc` arena (`crate::heap::bound_to_budget`, as `tessera-data` does):
//! a 3 GB unsorted `.tns` (125 M entries) at `--memory 16M` peaks at 11.6 MB, a 10 GB one
//! (417 M entries, 8,478 runs) at 13.0-14.5 MB. Until stop 48 what the conversion held grew with
//! the input at a fixed budget (10 GB: 48.3 MB; 3 GB: 16.8 MB): the fences of every sampled
//! key (fixed in stop 47), the final merge's table of every key range's run positions (now
//! only the ranges' boundary keys, 24 bytes a range at rank 3, and a window of positions
//! found as the merge reaches it: `ranges`), and the output's extent list and per-part
//! checksums (now 8 bytes an extent, the checksums folded as they land: `tcs::Appender`).
//! What still grows: the boundary keys, 8 bytes an extent (six a range at rank 3), and at
//! `finish` 32 bytes an extent while the extent table is written (157,000 extents, 5 MB, for the 10 GB file, when the merge's
//! buffers are gone).
//! Sorted text's blocks are sized by what the file's first lines pack into, and a piece
//! that outgrows its share ends early, the rest of its block packed next (`blocks::Blocks`):
//! until stop 49 they were sized for the densest lines possible (one digit a field), about
//! a sixth of what typical lines need, so a small budget paid for many small blocks (3 GB
//! sorted `.tns` at 16M: 2.6-3.3 s against 1.9 s at 256M, 13,300 mappings; now 2.0 s).
//!
//! Sorted text against the parse floor (the conversion bench's pass that only parses every
//! number on both cores): the block packer parses with the floor's own scanners, so what it
//! costs beyond the floor is the packing and the output. Measured on the bench's 263 MB
//! sorted `.tns` (11.2 M entries, 224 MB of `.tcs`), perf's CPU samples: the packing loop
//! 66% (callgrind: 370 instructions an entry against the floor's 301, of which ~35 build the
//! nodes and the rest is the same scan with fewer registers free), the output's `pwrite`s
//! 15% (ext4 taking a delayed-allocation reservation and buffer heads page by page; the
//! copy itself 2.6%), mapping the input blocks with `MAP_POPULATE` and unmapping them 8%
//! (with the page-table lock held against the other worker's faults), checksums 2.6%,
//! first touches of the pieces' arrays 2%. Since (pack16): blocks are mapped without
//! populating (`blocks::map_range`), the output is allocated ahead of its appends
//! (`tcs::Appender`, `fallocate`: the writes then fill allocated blocks), and the run's lines
//! are counted per run and scanned straight into the key (364 instructions an entry).
//! Interleaved single jobs (`TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1`, medians):
//! at load 2 (9 rounds) 0.165 -> 0.152 s against the floor's 0.115 s, 0.70 -> 0.76 of the
//! floor; in a slower phase at load 3-4 (7 rounds) `.tns` 0.189 -> 0.173 s against 0.124 s
//! (0.66 -> 0.72), `.mtx` 0.139 -> 0.123 s against 0.089 s (0.64 -> 0.72). The whole bench
//! (3 rounds, load 4.2-5.2) swings more: sorted `.tns` 0.63-0.65x -> 0.67-0.76x the floor
//! (1.18-1.45 -> 1.45-1.80 GB/s), `.mtx` 0.61-0.64x -> 0.68-0.75x; under load the converter
//! (which writes 224 MB and maps and unmaps its input) loses more than the floor.
//! Tried and left out: the entry before read back from the node rings instead of held in
//! registers (LLVM spilled the text's position instead: 376 instructions an entry), level
//! maxima taken from the rings as they are appended instead of a pass over the arrays at
//! the end (more instructions: two short folds per level every 256 entries).
//! Since (pack17): a line that begins with the bytes of the line before's first coordinate
//! and the separator after it (one masked compare of the line's first eight bytes) is
//! scanned past them, the key keeping that coordinate (`numbers::entry_line_past_first`):
//! in sorted text the first coordinate changes least often (the bench's `.tns` repeats it
//! on 99% of lines, its `.mtx` on ~64%). It takes one field's scan off most lines and off
//! the chain of loads that each depend on the position the last one found, which is what
//! bounds the loop: callgrind counts 364 -> 330 instructions an entry (the floor's 301),
//! and time fell by more. Interleaved single jobs (9 rounds, load 5.8-6.0): sorted `.tns`
//! 0.2125 / 0.2021 -> 0.1566 / 0.1622 s against the floor's 0.1462 s (0.69-0.72 -> 0.90-0.93
//! of the floor), CPU 0.43 -> 0.32 s; sorted `.mtx` unchanged within noise (0.142 -> 0.141
//! s, floor 0.105 s; 9 more rounds at load 7: 0.1347 / 0.1389 -> 0.1340 / 0.1360 s, floor
//! 0.1041 s): its rows hold 2.8 entries on average, so the compare's branch goes either way
//! unpredictably, and on the generator's 64 MiB `.mtx` (0.7 entries a row) callgrind counts
//! 293 -> 300 instructions an entry (0.0431 -> 0.0438 s, within noise). Matrices with
//! longer rows (most real ones) take the short path on most lines. The whole bench
//! (`TESSERA_BENCH_CONVERSION_BUDGETS=16,64,256`, 7 runs interleaved old and new, load
//! 5.2-8.6, one new run disturbed by other work left out): sorted `.tns` 0.69-0.70x ->
//! 0.86-0.90x the floor (1.52-1.64 -> 1.94-2.02 GB/s), sorted `.mtx` 0.67-0.69x ->
//! 0.67-0.71x. Sorted `.tns` being faster, unsorted `.tns` ÷ sorted rose from 1.8-1.9 to
//! 2.3-2.6 (over 2.5 in one run of four): the unsorted path, whose lines do not repeat
//! their first coordinates, is unchanged, and is now the one to make faster (its parse
//! workers read the text through `read` into buffers and the collecting thread copies
//! their pairs into the run: ~9% of its samples).
//!
//! The whole bench against single jobs (pack17): pack16 read sorted `.tns` at 0.72-0.76x
//! the floor in single jobs and 0.66-0.67x in whole-bench runs. Both time the same way
//! (a child process per job under the same `chrt -f 1 taskset -c 0,1`, the same
//! threads: `available_parallelism`, two; the file warm in the page cache for the floor
//! and the conversion alike). Interleaved in one period (load 4.3-6.1), the bench's job
//! order (floor, read, write, sorted, unsorted, `.mtx` floor, `.mtx`, unsorted `.mtx`,
//! `--sync`) gave the floor 0.138 s and sorted 0.194 s (0.71x), floor and sorted alone
//! 0.142 / 0.192 s and 0.147 / 0.196 s (0.74x, 0.75x); and syncing the file system and
//! removing the last output before every job (so that no job inherits another's
//! write-back or journal work) changed nothing (9 rounds: sorted 0.1845 -> 0.1887 s, floor
//! 0.1357 -> 0.1367 s). The gap between the reports is the VM's speed states and the load
//! of the moment, not the bench; the bench was left as it is.
//!
//! Unsorted against sorted (issue 16: at most 2.5x). Unsorted `.tns` and `.mtx` take the
//! same machinery (parse workers packing keys into pairs, runs held distributed by top bits,
//! the bucketed final merge: perf shows the same shares, parse 29-34%, bucket sorts 11%,
//! merge and pack 7-10%, distribution 6%), and cost about the same per entry (the bench's
//! files have the same 11.2 M entries: 0.57-0.60 CPU s each at 256 MiB); but sorted
//! `.mtx` (rank 2: one coordinate to parse and one level to pack fewer) is cheaper than
//! sorted `.tns`, so its ratio is the higher one. Until mtx16, an unsorted `.mtx` that the
//! block packer found out of order also took the general checked single pass
//! (`scan::CheckedTextSource`) before the sort, as `.tns` did not: it stops at the second
//! entry, but only after its parallel parser had read and parsed blocks ahead (and it
//! opened the output and its spools). Now the block packer tells an entry out of order
//! (`stitch::Outcome::Unsorted`) from an entry count to check line by line, and the first
//! goes straight to the external sort. Callgrind (`TESSERA_BENCH_JOB=convert valgrind
//! --tool=callgrind conversion IN out.tcs 268435456`, the bench's generator at 64 MiB, 2.8 M
//! entries): unsorted `.mtx` 1,747.6 M -> 1,595.6 M instructions (625 -> 571 an entry;
//! `parse_block` 958.6 M -> 816.4 M, the rest unchanged), unsorted `.tns` 1,871.8 M both
//! (669 an entry). Interleaved single jobs (9 rounds,
//! `TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1 perf stat -e task-clock`, 256 MiB,
//! load 3.8-4.4, medians): the bench's 239 MB unsorted `.mtx` 0.317 -> 0.298 s, CPU
//! 602 -> 567 ms; 7 more rounds each (load 4.4-5.2): unsorted `.mtx` 0.329 -> 0.304 s,
//! sorted `.mtx` 0.130 / 0.132 s (unchanged), so unsorted ÷ sorted `.mtx` 2.53 -> 2.31;
//! `.tns` unchanged. Under smaller budgets the parser reads less ahead and the gain is
//! within noise (unsorted `.mtx`, load 2.5-3.5: 64 MiB 0.310 -> 0.302 s, 7 rounds; 16 MiB
//! 0.530 -> 0.522 s, 9 rounds). The whole bench (`TESSERA_BENCH_CONVERSION_BUDGETS=16,64,256`,
//! interleaved old, new, new, old): unsorted ÷ sorted `.mtx` 2.52x (load 3.2) and 2.83x
//! (load 7.4) -> 2.25x (4.4) and 2.17x (6.8); peak RSS of unsorted `.mtx` at 256 MiB
//! 223-225 -> 210 MiB (the checked pass's parser blocks and spools are gone), within the
//! budget at 16/64/256 MiB. Tried (pack17) and left out: rank-2 runs planned without the
//! 16 bytes an entry of their own radix scratch (`Hold::new`) when all of them are to be
//! held distributed (which needs none; a run past the estimate then spills held runs to
//! make room for the scratch it takes): the bench's unsorted `.mtx` at 256 MiB made 16 runs
//! instead of 24, byte-identical output at 16/64/128/192/256 MiB, but no faster
//! (interleaved, 7 rounds, load 5.5-6.1: 0.289 / 0.301 s before, 0.297 / 0.293 s after, CPU
//! 0.55-0.56 s both) and peak RSS 222 -> 236 MiB (a larger run buffer). Where unsorted
//! `.mtx` time goes (perf, 256 MiB): parse workers 29%, bucket sorts 10%, merge and pack
//! 10%, distribution 7%, copies of text into read buffers and of pairs into the run buffer
//! (`_copy_to_iter`, `memmove`) 9%, page faults of fresh held runs ~6%.
//! Tried (pack18) and left out: the parallel parser's blocks mapped instead of read (a
//! `chunks::map_blocks` beside `read_blocks`, through `blocks::map_range`, with the same
//! cuts, so byte-identical output: cmp at 16/64/256/1024 MiB on the generator's files and
//! random ones). The kernel's copy goes, but faults and unmaps take its place: on the
//! bench's 263 MB unsorted `.tns` and 239 MB unsorted `.mtx` at 256 MiB (9 interleaved
//! single jobs, `TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1 /usr/bin/time`, load
//! 4.6-6.0, medians) `.tns` 0.331 -> 0.337 s (user 0.42 -> 0.44 s, system 0.21 s both),
//! `.mtx` 0.301 s both (user 0.38 -> 0.37 s, system 0.18 -> 0.20 s); on the generator's
//! 64 MiB `.tns` 0.098 -> 0.096 s at 256 MiB, even at 64 MiB (512 KiB blocks), and slower
//! at 16 MiB (128 KiB blocks: 0.106 -> 0.120 s, user 0.11 -> 0.14 s); callgrind's user
//! instructions 1,871.8 M -> 1,869.6 M. Whole-bench runs (interleaved, load 2.9-6.3)
//! went either way within their noise (unsorted ÷ sorted `.tns` 2.26-2.52 mapped, 2.24-2.53
//! read). The patch is kept outside the tree (`/tmp/pack18/map_blocks.diff`). Of the
//! copies' ~9%, the text's (`_copy_to_iter`) is 3.6% of the samples (`perf record -g`, the
//! 263 MB `.tns` at 256 MiB), `memmove` 5.4%; parse workers 32%, bucket sorts
//! (`lsd_sort_pairs`) 11%, distribution 6%, merge and pack 6%, munmap of freed memory ~1.5%.
//!
//! Tried (pack19) and left out, each byte-identical (cmp at 16/64/256 MiB on the bench's
//! four files) and none faster: timed as interleaved single jobs (`TESSERA_BENCH_JOB=convert
//! perf stat -e task-clock chrt -f 1 taskset -c 0,1`, 256 MiB, load 3-5, medians), the
//! bench's 263 MB unsorted `.tns` (u) and 239 MB unsorted `.mtx` (um). (1) Runs *gathered*:
//! the parse workers' chunks of pairs kept as they come (a chunk split between runs copied)
//! and distributed by top bits straight into the held run, instead of copied into the run
//! buffer first (the `memmove`; used chunks handed back to the parser): 9 rounds u 550 -> 544
//! ms CPU, um 498 -> 486 ms; 15 rounds u 0.301 -> 0.305 s wall (581 -> 588 ms CPU); peak
//! RSS of um 222 -> 247 MB (freed chunks stay in the allocator's arenas), page faults of u
//! 59.4k -> 62.2k. The copy's samples do not go away but move to the distribution's reads. (2)
//! On top of (1), held runs mapped on their own (`memmap2`, safe API): with `MADV_HUGEPAGE` faults fell
//! 59k -> 24k but CPU rose 0.58 -> 0.72-0.77 s (huge page allocation with `defrag=madvise`
//! on this VM, as the huge pages tried before); with `MAP_POPULATE` faults fell 62k -> 19k,
//! CPU within noise, wall 0.271 -> 0.279 s (the populate runs serially in `mmap`, under the
//! lock the other thread's faults take). (3) The bucketed merge's sort reading the runs'
//! sections in its first scatter pass instead of from a gathered copy (`sort_buckets`'
//! `memcpy`, 3.6% of samples): with (1), 21 rounds u 0.288 -> 0.296 s, um 0.267 -> 0.275 s;
//! its loops written without iterator adapters, 15 rounds u 0.301 (main), 0.305 (1),
//! 0.308 s (1 and 3). The patches are kept outside the tree (`/tmp/pack19/*.diff`).
//! (4) The first-coordinate skip off for rank 2 (sorted `.mtx` rows hold 2.8 entries): 21
//! rounds of the 239 MB sorted `.mtx` 0.1234 -> 0.1279 s: the skip pays even there, kept.
//! Where sorted `.mtx` time goes (perf, 256 MiB): the packing loop 65% of samples (about the
//! floor's CPU time), the output's `pwrite`s 10%, checksums 2.8%, first touches of the
//! pieces' arrays ~2.5%. Whole-bench runs before the change below (`TESSERA_BENCH_CONVERSION_BUDGETS=
//! 16,64,256`, two runs at load 1.9-3.5): sorted `.tns` 0.91x, 0.92x the floor (2.31, 2.29
//! GB/s); unsorted ÷ sorted `.tns` 2.27, 2.33; sorted `.mtx` 0.72x, 0.71x; unsorted ÷ sorted
//! `.mtx` 2.40, 2.40; peak RSS within every budget (unsorted `.mtx` 13.7-14.5 MiB at 16 MiB).
//! Since (pack19): the bucketed final merge sorts each bucket with digits of 12 bits where
//! that takes a pass fewer than digits of 11 (`runs::sort_bucket_in`: the bench's unsorted
//! `.mtx` has keys of 44 bits, 10 of them the buckets', so 34 bits in 3 passes instead of
//! 4), and packs the bucket from whichever buffer the last pass wrote (no copy back after
//! an odd number of passes). Byte-identical (cmp at 16/64/256 MiB, unsorted `.mtx` and
//! `.tns`). Callgrind (`TESSERA_BENCH_JOB=convert valgrind --tool=callgrind conversion IN
//! out.tcs 268435456`, the generator's 64 MiB unsorted `.mtx`, 2,796,202 entries): 1,594.5 M
//! -> 1,539.6 M instructions (570 -> 551 an entry; the bucket sort 349.7 M -> 294.9 M; the
//! same change without the copy back had `memcpy` 118.7 M -> 165.8 M and saved only 11.7
//! M). Interleaved single jobs (21 rounds, `perf stat -e task-clock chrt -f 1 taskset -c
//! 0,1`, 256 MiB, load 3-4, medians): the bench's unsorted `.mtx` 0.2932 -> 0.2817 s, CPU
//! 556 -> 538 ms (21 more rounds beside a callgrind run: 0.2725 -> 0.2605 s); unsorted `.tns` (41 bits below its
//! buckets: 4 passes either way) 0.3157 / 0.3153 s, unchanged. The whole bench at load 4-5
//! (two runs each, interleaved) stays within its noise: unsorted ÷ sorted `.mtx` 2.46, 2.46
//! before, 2.50, 2.47 after (its sorted `.mtx` moved 0.106-0.113 s between runs).
//!
//! conv21 (issue 16's `.mtx` margins), measured under load 6-11 (other builds on the two
//! cores: every figure about twice the quiet ones above, and the whole bench's `.mtx`
//! ratios moving 2.0-2.96 between runs of one binary). Since: the radix sort's histograms
//! count in 32 bits (`runs::lsd_sort_pairs_in`: a pass's 4,096 write positions take 16 KiB
//! of L1 beside the lines it writes, not 32 KiB; runs hold at most `u32::MAX` entries).
//! perf (`-F 4000`, cpu-clock, 3 runs each, the bench's 239 MB unsorted `.mtx` at 256
//! MiB): `sort_bucket_in` 602 / 606 / 571 -> 459 / 439 / 571 samples (12.8-14.6% ->
//! 10.7-11.5% of each run); callgrind (`TESSERA_BENCH_JOB=convert valgrind
//! --tool=callgrind conversion IN out.tcs 268435456`, the generator's 64 MiB unsorted
//! `.mtx`, 2,796,202 entries) 1,540.2 M -> 1,518.6 M instructions (551 -> 543 an entry;
//! `sort_bucket_in` 294.9 M -> 285.4 M); interleaved single jobs (9 rounds, `TESSERA_BENCH_JOB=convert
//! chrt -f 1 taskset -c 0,1`, load 6-9, medians) 0.587 -> 0.576 s, CPU 1.10 -> 1.07 s;
//! 11 more rounds at load 8.4-10.4 (other jobs holding the cores: walls 0.5-2.6 s) CPU
//! 0.98 s both: a gain of ~2% of the CPU time at most, within that noise. Output
//! cmp-identical (the bench's unsorted `.mtx` and `.tns` and the generator's 64 MiB ones,
//! at 16, 64 and 256 MiB). The whole bench (`TESSERA_BENCH_CONVERSION_BUDGETS=16,64,256`,
//! three pairs old, new interleaved, load 8.6-10.4): unsorted `.mtx` 0.669 / 0.589 /
//! 0.581 -> 0.558 / 0.561 / 0.586 s; unsorted ÷ sorted `.mtx` 2.96 / 2.90 / 2.01 -> 2.52 /
//! 2.65 / 2.57 (the 2.01 a run whose sorted `.mtx` took 0.289 s against 0.203-0.228 s in
//! the others); sorted `.mtx` 0.80 / 0.69 / 0.63x -> 0.75 / 0.76 / 0.79x the floor and
//! sorted `.tns` 0.64 / 0.61 / 0.62x -> 0.73 / 0.69 / 0.72x (neither path changed: the
//! load's drift); unsorted ÷ sorted `.tns` 2.39 / 2.06 / 2.31 -> 2.16 / 2.28 / 2.60; peak
//! RSS within every budget (unsorted `.mtx` at 16 MiB 13.1-14.3 MiB). Under this load the
//! goals' margins (0.7x, 2.5x) are inside the bench's noise either way: they need quiet
//! runs to settle. Tried and left out: the runs of the block packer (`Builder::push_run`)
//! ordering keys of a 32-bit width by one number (coordinates in 32-bit fields, level 0
//! highest: one comparison for in order and new, and the level from the leading zeros of
//! the XOR, instead of a branch per level, which in a sorted `.mtx` of ~3 entries a row
//! seemed to go either way): callgrind on the bench's sorted `.mtx` (11,184,810 entries,
//! 256 MiB) 3,226.8 M -> 3,461.4 M instructions (288.5 -> 309.5 an entry; `pack` 3,066.4 M
//! -> 3,301.0 M), 7 interleaved single jobs (load 9.5-10.8) 0.252 -> 0.292 s, CPU 0.50 ->
//! 0.57 s. The branch on level 0 follows the first-coordinate skip's branch (`SAME_LEAD`),
//! which goes the same way, so it is predicted; and with the level known only as a
//! number, `Batch::put` is no longer specialised per level. The patch is kept outside the
//! tree (`/tmp/conv21/narrow_and_tests.diff`; its tests are in the tree).
//!
//! conv23 (issue 16, load 3.3-7.2: another helper building on the two cores). Where the
//! unsorted `.tns` job's time goes, by phase (`perf record -F 4000 -e cpu-clock`, the bench's
//! 263 MB file at 256 MiB, samples binned per 40 ms against two cores' worth): collecting
//! runs (parse workers, the reader thread's `read`, this thread's copy into the run buffer,
//! the spill threads' distribution into held runs) ~0.40 s at 82-97% of both cores; the
//! bucketed final merge ~0.18 s at 99-100%; then ~28 ms on one core (`munmap` of the ~180
//! MB of held runs when the merge source drops). Page faults of fresh held runs (clear_page,
//! the fault path) are ~8% of the samples. Callgrind (the generator's 64 MiB unsorted `.tns`,
//! 2,796,202 entries): `parse_block` 1,009.3 M instructions (361 an entry) against the parse
//! floor's 841.5 M (301) on the same file; its loop kept the block's pointer and length,
//! the three line counters and the coordinates on the stack, and chose per line between
//! packed pairs and coordinates and whether bounds were declared. Since (conv23): the
//! packing is chosen per block (`chunks::parse_lines::<R, P>`), the bounds are an array
//! (`u64::MAX` where none is declared), and the loop counts only lines (newlines and entry
//! lines follow: every line but a last one at the block's end ends with a newline, and
//! every line holds an entry but those the line parser finds none in, or an error in):
//! `parse_block` 1,009.3 M -> 953.4 M (361 -> 341 an entry), the whole job 1,835.2 M ->
//! 1,779.4 M; unsorted `.mtx` (the generator's 64 MiB, 2,796,202 entries) `parse_block`
//! 816.4 M -> 757.6 M (292 -> 271), the job 1,517.8 M -> 1,459.5 M. Output cmp-identical
//! (the bench's unsorted `.tns` and `.mtx` at 16, 64 and 256 MiB, the generator's 64 MiB
//! ones at 256 MiB); the block counts are pinned by `chunks::tests`. Interleaved single jobs
//! (15 rounds, `TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1`, 256 MiB, load 5.4-7.2,
//! medians): unsorted `.tns` 0.600 -> 0.584 s (CPU 1.11 -> 1.10 s), unsorted `.mtx` 0.492 /
//! 0.495 s (within noise). The whole bench (`TESSERA_BENCH_CONVERSION_BUDGETS=16,64,256`,
//! interleaved new, old, old, new at load 4.6-7.2): unsorted ÷ sorted `.tns` 2.38, 2.39 (old
//! 2.49, 2.57), `.mtx` 3.04, 2.76 (old 2.57, 2.92: its runs moved 0.47-0.57 s either way);
//! unsorted CPU 1.06, 1.05 s (old 1.19, 1.09 s); peak RSS within every budget (unsorted
//! `.mtx` at 16 MiB 13.6-13.7 MiB). Tried and left out: (1) the held runs freed on every core after the
//! final merge (an earlier `MergeSource::release`: the runs cut into shares of equal bytes, one scoped
//! thread each): the tail fell from ~28 to ~20 ms in a profile (the two `munmap`s contend),
//! but interleaved single jobs (15 rounds, load 4-5.7) gave unsorted `.tns` 0.5555 -> 0.5596
//! s and `.mtx` 0.4486 -> 0.4484 s: kept outside the tree (`/tmp/conv23/release.diff`). (2)
//! More parser blocks in flight (`chunks::ParallelParser`, at most 3 per worker instead of 2,
//! so that the parser runs on through a spill): 0.569 -> 0.579 s (15 rounds), peak RSS +5
//! MiB. (3) A separate loop over the lines of the common shape (`scan_packed`, breaking out
//! to the general loop at the first other line) before the counters changed: 1,009.3 M ->
//! 1,012.1 M, as LLVM had laid out the same loop. What is left above the floor in
//! `parse_block` (~40 instructions an entry): the pointer and length reloaded from the stack
//! at every field (the floor's loop spills them too), the bounds compares, the key's shifts
//! and the push. The idle core-time while runs are collected (~10%, ~40 ms of core time)
//! was not traced to one wait; the next step is `perf sched` (or `sched_switch` with
//! wakeups) on that phase to see which thread the others wait for around each spill.
//!
//! conv24 (issue 16 at 1 GB: the generator's 1.05 GB `.tns` pair, 44.7 M entries, and
//! 954 MB `.mtx` pair, `TESSERA_BENCH_JOB=generate conversion PATH KIND 1073741824`; load
//! 1.6-3.9). At this size the unsorted `.tns` spills all 44 runs at 256 MiB (its pairs, 715
//! MB, would not fit, so `Hold::plan` held none) and peaks at 85 MB. perf (`-F 4000 -e
//! cpu-clock -g`, 256 MiB, 20.0 k samples, 5.0 CPU s): kernel 36.5% of the samples, by the
//! first user frame above: the output's `pwrite`s (`Piece::write_deferred`) 10.3%, the
//! spills' `write`s (`write_pairs`) 9.7%, the input's `read` (`default_read_to_end`) 8.9%,
//! reading runs back (`read_packed`) 2.1%, removing the run files 0.9%; user `parse_block`
//! 32.4%, `lsd_sort_pairs_in` 9.6%, `distribute` 7.8%, the merge's closure 5.0%, `memmove`
//! 4.0%. The sorted `.tns` (7.8 k samples): `pack` 65%, output `pwrite`s 12.8%, faults of the
//! mapped input 4.2%. The output's page-cache copy (`copy_folio_from_iter_atomic` under
//! `write_deferred`) took 1,334 samples unsorted against 475 sorted for the same bytes,
//! and `rwsem_spin_on_owner` 351 against 135: not traced further (the pieces' arrays cold in
//! cache after the merge, or memory bandwidth shared with the other core's sort, are
//! guesses). Output files of one input differ byte for byte between budgets at this size
//! (segments follow the merge's key ranges: 894,862,672 bytes at 256 MiB, 894,885,648 at 192
//! MiB from ffda735 alone), so the checks below write the text back (`tessera-data convert
//! X.tcs X.tns`) and `cmp` it with ffda735's. Since (conv24): an input too large to hold
//! whole has its first runs held while they fit, the rest spilled (`Hold::plan`,
//! `Hold::planned`: only when the final merge takes the runs by buckets, which it does at
//! 1 GB from 192 MiB up, not at 16 or 64 MiB), at most an eighth of the budget. Held up to
//! what collecting leaves them (~half the budget: 8 of 44 runs), 4 interleaved single jobs
//! (`TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1 /usr/bin/time`) gave the unsorted
//! `.tns` system time 1.47-1.81 -> 1.13-1.39 s and wall 2.65 -> 2.39 s (medians), but peak
//! RSS past the budget on the `.mtx` (128 MiB: 148 MiB, 192 MiB: 203 MiB); at most a quarter,
//! 127.5 MiB at 128 MiB. The end of collecting already peaks above its plateau without held
//! runs (RSS sampled every 3 ms, ffda735, unsorted `.mtx`: 85 -> 106 MiB at 128 MiB, 127 ->
//! 140 at 192, none at 256), which is what an eighth leaves room for. With an eighth (2 of 44
//! `.tns` runs held at 256 MiB, 2 of 34 `.mtx`), 5 interleaved rounds (load 1.9-2.6,
//! medians): unsorted `.tns` 2.22 -> 2.17 s (system 1.29 -> 1.13 s), unsorted `.mtx` 2.00 ->
//! 1.88 s; sorted `.tns` 0.87-1.30 s in these periods, so the 1 GB ratio stays ~2-2.7 and
//! the goal is not met. Peak RSS at 1 GB (`.mtx` / `.tns`): 16 MiB 14.3 MiB (`.tns`), 64 MiB
//! 31.8 MiB (`.tns`), 128 MiB 107 / 61 MiB, 192 MiB 141 / 88 MiB, 256 MiB 169 / 116 MiB; text
//! written back identical at 16, 64 and 256 MiB (`.tns`) and 256 MiB (`.mtx`). The next steps:
//! find what the end of collecting allocates beside the run buffer (then hold up to a
//! quarter or more: the half measured above paid ~0.25 s), and why the output's copies cost
//! 2.8x on the unsorted path. The conversion bench's `TESSERA_BENCH_CONVERSION_PAIR_BYTES`
//! runs the pairs at a chosen size (its table's "at N MB" rows).
//!
//! conv25 (issue 16 at 1 GB, what the fresh pages cost). This VM hands free memory back to
//! the host (virtio-balloon's free page reporting, in blocks of 2 MiB and up), so a page
//! that has been free a few seconds costs a fault in the host at its next first touch, and
//! the page cache takes such blocks whole for a write of 2 MiB or more: 720 MB written into
//! a new file took 1.04-1.11 s of system time in 2-16 MiB writes, 0.24-0.29 s in 64 KiB-1
//! MiB writes, and 0.20 s in 4 MiB writes into pages freed a moment before (`dd`, see
//! `piecewise`). The unsorted path wrote its spilled runs whole (16 MB a call: 18% of a
//! cold run's samples, against 1.6% after). Since (conv25): large writes go in pieces of
//! 512 KiB (`piecewise`). Jobs timed as a new user's single conversion would be (the last
//! output removed and the machine idle 8 s before each; `TESSERA_BENCH_JOB=convert chrt -f 1
//! taskset -c 0,1 /usr/bin/time conversion X o.tcs 268435456`), old and new interleaved,
//! medians, 4 rounds of the four 1 GB files: unsorted `.tns` 2.49 -> 2.31 s (system 1.90 ->
//! 1.65 s), unsorted `.mtx` 2.08 -> 1.69 s (1.54 -> 0.76 s), sorted `.tns` 0.91 / 0.90 s,
//! sorted `.mtx` 0.76 / 0.73 s: unsorted ÷ sorted `.tns` 2.74 -> 2.57, `.mtx` 2.74 -> 2.32;
//! 5 rounds of the `.tns` pair alone (each file idle ~20 s instead of ~40 s between its
//! jobs): unsorted 2.37 -> 2.06 s (system 1.84 -> 1.20 s), sorted 0.93 / 0.90 s, 2.55 ->
//! 2.29. How long the input sat idle moves the unsorted job's system time by ~0.5 s (its
//! first read of those page-cache pages), which is why the sets differ. Output
//! byte-identical (`cmp`, old and new, at 16, 64 and 256 MiB, both unsorted files); peak RSS
//! unchanged (16 MiB: 13.4-14.4 MiB; 64 MiB: 30-45 MiB). At 2 GB (the generator's 2.1 GB
//! pair, 2 rounds) nothing changed: unsorted 5.75 / 5.73 s, sorted 2.61 / 2.35 s (system
//! 1.5-1.9 s: the sorted output too pays for fresh pages), and a profile shows the spills'
//! and the output's copies at 14% and 12% of the samples again, in 512 KiB writes: past ~1
//! GB of fresh memory the cheap pages (free, not yet reported to the host) run out whatever
//! the size of the writes. What is left is the bytes themselves: fewer spilled bytes
//! (13-byte records: 51-bit keys less the 11 bucket bits fit 5 bytes) or more runs held.
//! Tried and left out: (1) the final merge punching what it has read out of the run files
//! (`fallocate(PUNCH_HOLE)` of each section's whole pages after its read, the files opened
//! writable), so that the output would reuse those pages: 6 interleaved cold rounds against
//! the pieces alone, unsorted `.tns` 1.80-2.55 s (system 1.04-1.32 s) -> 1.96-2.35 s
//! (1.24-1.51 s), unsorted `.mtx` 1.59-1.85 -> 1.67-2.08 s (system 0.79-0.83 -> 0.95-1.12
//! s): the punches cost more than the reuse gives; at 2 GB as well (5 cold rounds, job
//! order rotated: 5.01-5.76 s against 4.31-6.81 s for the pieces alone, whose medians
//! 4.46 s beat the old 5.18 s). At 2 GB after the change (3 rounds, pair alone): sorted
//! 1.73-1.96 s, unsorted 4.61-5.44 s (system 2.7-3.7 s), 2.6-2.8x: the goal is not met
//! there. The job's order in a round moves a 2 GB job by up to 2 s (what the jobs before
//! it freed, and how recently): rotate the order. (2) The input's reads in pieces of 256
//! KiB (`read_to_end` asks for up to 1 MiB at once): 4 interleaved cold rounds, unsorted
//! `.tns` 2.05 / 2.04 s, `.mtx` 1.63 / 1.69 s; the first pass over an input idle for a while
//! costs the same whatever the size of the reads (the same file read again at once: 0.10 s
//! for 1 GB either way).
//!
//! conv26 (issue 16 at 2 GB, 2026-12-05; the VM on a Zen 3 host since, no AVX-512: every
//! figure here differs from conv25's). Since: spilled runs distributed by their keys' top
//! bits are written as compact records (`runs::distribute_compact`: the key's bits below
//! its bucket's in the fewest bytes, then the value; 13 bytes instead of 16 for the 2.1 GB
//! `.tns`, whose keys have 51 bits, 11 of them the bucket's), read back bucket by bucket
//! (`runs::read_compact`, spread into pairs in place). Output byte-identical (`cmp` at 2 GB,
//! 256 MiB). Cold single jobs as in conv25 (`/usr/bin/time`, order rotated each round,
//! medians): with the machine's memory free, 6 rounds at 2 GB: sorted 1.81 s, unsorted 4.09
//! -> 4.04 s (2.26 -> 2.23x); 4 rounds at 1 GB: sorted 0.92 s, unsorted 2.25 -> 2.21 s.
//! Where the page cache cannot hold input, spills and output together (the job in a memory
//! cgroup that charges its page cache: `memory.limit_in_bytes`), fewer bytes reach the disk:
//! 2 GB unsorted at 1 GiB 7.53 -> 7.38 s (3 rounds), at 1.5 GiB 8.08 -> 5.39 s (4 rounds),
//! at 2 GiB 6.15 -> 5.78 s (3 rounds); sorted 1.9-2.3 s there, so a file larger than the
//! free memory still converts unsorted at ~2.5-3.3x sorted.
//! Since (conv26): the parallel parser's workers map their blocks (`chunks`, through
//! `blocks::Blocks::map`, which now refuses the last line of a block at `MAX_LINE` bytes as
//! the sequential reader does) instead of a reader thread `read`ing them: the kernel's copy
//! was 8.3% of an unsorted 256 MiB job's samples on this host (a timeline of the job,
//! `perf record -F 4000 -g`, binned per 20 ms and thread: the reader thread's copy 0.11 CPU s
//! of the collection phase's ~0.75). Output byte-identical (`cmp`: the 263 MB unsorted
//! `.tns`, the 1 GB `.tns` and `.mtx`). Interleaved single jobs (`TESSERA_BENCH_JOB=convert
//! chrt -f 1 taskset -c 0,1 /usr/bin/time`, medians): 256 MiB unsorted `.tns` 0.54 -> 0.49 s
//! (7 rounds), and in a slower period 0.58 -> 0.54 s against sorted 0.24 s (9 rounds: 2.42
//! -> 2.25x); cold 1 GB (3 rounds) unsorted `.tns` 2.15 -> 1.96 s against sorted 0.89 s
//! (2.42 -> 2.20x), unsorted `.mtx` 1.79 -> 1.67 s; cold 2 GB (3 rounds, the machine slower
//! than above) 6.01 -> 5.30 s against sorted 2.20 s (2.73 -> 2.41x). Peak RSS within every
//! budget (the bench: unsorted `.tns` 10.7-11.6 MiB at 16 MiB).
//! Tried and left out (conv26): (1) the bucketed merge's sort with digits of 14 bits where
//! they take a pass fewer than 12 (keys of 37 to 42 bits below the bucket's: the 263 MB
//! `.tns` has 41 below 10 top bits, buckets of ~14 k pairs; the 1 GB one 40 below 13, ~29 k):
//! switched by an environment variable in one binary, 9 interleaved single jobs three times,
//! 0.49 -> 0.47, 0.48 -> 0.46 and 0.52 -> 0.48 s (user 0.69 -> 0.64 s); but built in as the
//! only path, against the binary before it, 0.51 -> 0.52 s twice (user 0.72 s both), and the
//! cold 1 GB jobs within noise (3 rounds: 2.06 -> 2.13 s `.tns`, 1.94 -> 1.93 s `.mtx`): a
//! gain no larger than code layout moves, left out. (2) Dropping the input's page cache
//! behind the parser (`posix_fadvise(DONTNEED)`, so that spills reuse just-freed pages): 2 GB
//! unsorted 4.07 -> 4.47 s (4 rounds), and a second conversion of the file would read the
//! disk.
//!
//! conv27 (issue 16 at 3 GB, 2026-12-06; a Firecracker VM on an AMD EPYC host, AVX2 and no
//! AVX-512, ext4 mounted with `discard`). The generator's 2.9 GB pair (125 M entries),
//! default budget, `/usr/bin/time tessera-data convert X o.tcs -q`, the last output removed,
//! `sync` and 20 s idle before each (two rounds): sorted 4.08 / 2.76 s (system 2.66 / 1.30
//! s), unsorted 8.30 / 10.40 s (system 5.15 / 6.60 s): 2.0-3.8x, medians ~3x. Back to back,
//! without the idle: sorted 3.21 s, unsorted 9.71 / 10.31 s. Where the unsorted job goes
//! (`perf record -F 2000 -e cpu-clock -g`, samples binned per 0.5 s): collecting, 0-4 s,
//! both cores busy, `parse_block` ~60% of the samples and `distribute_compact` 12-16%, the
//! spills' copies 2-28%; the bucketed final merge, 4-9 s, the bucket sorts 15-35% and the
//! output's page-cache copies (`copy_folio_from_iter_atomic` under `Piece::write_deferred`)
//! 5-20% in its first half, then 35-42% from 6 s on, with `rwsem_spin_on_owner` 7-16%: both
//! workers write the one output file, whose buffered writes take its inode lock
//! exclusively, so one spins while the other copies (4.5% of the whole job's samples, 4.6%
//! of the sorted job's). The page-cache copies took 2.9 CPU s unsorted (~0.55 s of them the
//! spills') against 0.94 s sorted, for the same 2.5 GB of output, probably because the
//! unsorted output lands in pages never used (conv25) and the sorted one, run right after a
//! conversion whose output was removed, partly in pages just freed (not checked). Not
//! tried: the output written by one thread or without the inode lock.
//! Since (conv27): spilled compact runs lie last bucket first, and the final merge cuts each
//! file down to the buckets it has still to read (`runs::MergeSource::release`, in steps of
//! 32 MiB read: a cut costs ~45 µs a file, and a cut per range was 187,441 of them, 8.6 s),
//! so that the output takes the pages the runs give back; truncation drops dirty pages at
//! once, where conv25's punched holes wrote them back first. A model of it (`python`: 2.5
//! GB written while a 1.6 GB dirty file is cut down from its end, against the file left as
//! it is): 2.11 / 2.11 s against 3.86 / 4.65 s, system time 2.03 against 3.61 / 4.32 s.
//! The 3 GB unsorted `.tns` (cold, interleaved, three rounds): 8.31 / 8.84 / 8.80 s, system
//! 5.61 / 5.33 / 4.89 s -> 5.75 / 5.71 / 6.81 s, system 2.17 / 2.29 / 2.73 s; at `--memory
//! 1G` 8.14 -> 5.91 s; at 128M 11.30 / 11.72 s (unchanged); outputs identical (`md5sum`).
//! Three more cold rounds of the pair, sorted then unsorted: 6.71 / 2.91 / 2.78 s against
//! 8.08 / 7.44 / 6.69 s (the first sorted job, right after an unsorted one, took system
//! 5.05 s against 1.4 s: what the job before freed, as in conv25). Where the unsorted job
//! goes now (`perf record`, as above): collecting 0-4 s, the merge 4-6.8 s with the
//! output's copies at 5% of its samples (were 35-42%) and the spin on the inode lock at
//! 1.5%; `parse_block` 33% of all samples, the bucket sorts 12%, `distribute_compact` 10%,
//! the merge's packing 6%, `memmove` 5%, page-cache copies 4%. Repeated by mistake before
//! that: conv25's punching of read sections, on ext4, which
//! writes a range's dirty pages back before it punches (`fallocate -p` of 500 MB just
//! written waited 0.58 s on the disk; `truncate` drops them at once): 315,092 punches took
//! 33.9 s and the 120 unlinks, now of written-back files whose blocks the `discard` mount
//! option hands back one by one, 21.9 s (0.6 s without the punches): unsorted 38-55 s,
//! output identical.

mod back;
pub(crate) mod blocks;
mod build;
mod ranges;
mod rounds;
mod runs;
mod scan;
mod stitch;

use std::path::Path;

pub use back::tcs_to_text;
pub(crate) use blocks::LineSyntax;
#[doc(hidden)]
pub use blocks::{mapped_peak, reset_mapped_peak};

use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::text::{open_text, FileKind};
use crate::value::ValueType;

/// What to do with entries that repeat coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Duplicates {
    /// Add their values.
    #[default]
    Sum,
    /// Reject the input.
    Error,
}

/// Reports progress of long work (the CLI draws bars; libraries pass [`NoProgress`]).
pub trait Progress {
    /// A new stage begins; `total` is in the stage's unit (bytes or entries), 0 if unknown.
    fn stage(&self, name: &str, total: u64);
    /// Work done so far in the current stage.
    fn update(&self, done: u64);
    /// The current stage ended.
    fn end_stage(&self) {}
    /// True when the user asked to stop (e.g. Ctrl-C): long loops then return
    /// [`Error::Cancelled`], and temporary files are removed as for any other failure.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Reports progress and stops the work if it was cancelled.
pub(crate) fn tick(progress: &dyn Progress, done: u64) -> Result<()> {
    progress.update(done);
    if progress.cancelled() {
        return Err(Error::Cancelled);
    }
    Ok(())
}

/// Progress that goes nowhere.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _: &str, _: u64) {}
    fn update(&self, _: u64) {}
}

/// Options of a conversion.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// Output format string for `.tcs` (default: all levels compressed).
    pub format: Option<String>,
    /// Coordinate width of `.tcs` output: 32 or 64.
    pub index_bits: u32,
    /// Value type of `.tcs` output.
    pub value_type: ValueType,
    /// Memory budget in bytes for buffers and sorted runs.
    pub memory: usize,
    pub duplicates: Duplicates,
    /// Where sorted runs go (default: the output's directory).
    pub temp_dir: Option<std::path::PathBuf>,
    /// Forces the external sort even for sorted input (tests and benchmarks).
    pub force_external_sort: bool,
    /// Entries per sorted run, per key range of the final merge and per piece of sorted
    /// text, overriding the budget (tests force many runs, ranges and pieces with this).
    pub run_entries: Option<usize>,
    /// Runs merged at once, overriding the budget (tests force merge rounds with this).
    pub fan_in: Option<usize>,
    /// Writes every sorted run to a temporary file, even those the budget would hold in
    /// memory (tests compare the two with this; the budget is shared out the same way).
    pub spill_runs: bool,
    /// Sync the output to disk before renaming it into place (`fsync`; off by default, as
    /// `cp`, SciPy and TACO do: the output is derived from an input that still exists, and
    /// its checksums reject one that a crash left incomplete). Syncing bounds a conversion
    /// by the disk's write speed.
    pub sync: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            format: None,
            index_bits: 32,
            value_type: ValueType::F64,
            memory: 256 << 20,
            duplicates: Duplicates::Sum,
            temp_dir: None,
            force_external_sort: false,
            run_entries: None,
            fan_in: None,
            spill_runs: false,
            sync: false,
        }
    }
}

/// What a conversion did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertReport {
    /// Entries read from the input (after symmetric expansion, before summing duplicates).
    pub entries_read: u64,
    /// Entries stored (distinct coordinates).
    pub entries_written: u64,
    /// Dimensions of the tensor.
    pub dims: Vec<u64>,
    /// True if the input was already sorted in the target order (read once, no sort).
    pub presorted: bool,
    /// Number of sorted runs the external sort made (0 when presorted).
    pub runs: usize,
    /// Of these, the runs written to temporary files (the others stayed in memory).
    pub runs_spilled: usize,
    /// Merge rounds before the final merge.
    pub merge_rounds: usize,
    /// Bytes of the output file.
    pub output_bytes: u64,
}

/// Converts `input` to `output`; the direction follows the extensions (`.tns`/`.mtx` to
/// `.tcs`, `.tcs` to `.tns`/`.mtx`, or between the text formats).
pub fn convert(
    input: &Path,
    output: &Path,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    if !matches!(opts.index_bits, 32 | 64) {
        return Err(Error::Unsupported {
            path: output.to_path_buf(),
            what: format!("coordinate width {} (use 32 or 64)", opts.index_bits),
        });
    }
    let same = match (std::fs::canonicalize(input), std::fs::canonicalize(output)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(Error::Unsupported {
            path: output.to_path_buf(),
            what: "output is the same file as the input".into(),
        });
    }
    match (FileKind::of(input)?, FileKind::of(output)?) {
        (FileKind::Tcs, FileKind::Tcs) => Err(Error::Unsupported {
            path: output.to_path_buf(),
            what: ".tcs to .tcs conversion is not supported; convert from the text file".into(),
        }),
        (FileKind::Tcs, _) => back::tcs_to_text(input, output, opts.sync, progress),
        (_, FileKind::Tcs) => text_to_tcs(input, output, opts, progress),
        (_, _) => back::text_to_text(input, output, opts.sync, progress),
    }
}

/// `.tns`/`.mtx` → `.tcs`.
pub fn text_to_tcs(
    input: &Path,
    output: &Path,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let opts = &ConvertOptions {
        memory: working_memory(opts.memory),
        ..opts.clone()
    };
    let reader = open_text(input)?;
    let rank = reader.rank();
    let format = match &opts.format {
        None => Format::all_compressed(rank),
        Some(s) => Format::parse(s, rank).map_err(|source| Error::Format {
            path: input.to_path_buf(),
            source,
        })?,
    };
    let declared = reader.declared_dims();
    drop(reader);
    let temp_parent = match &opts.temp_dir {
        Some(d) => d.clone(),
        None => output
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| ".".into()),
    };
    let has_dense = format.levels().contains(&LevelType::Dense);
    if !opts.force_external_sort && stitch::supports(&format) && (declared.is_some() || !has_dense)
    {
        let done = match FileKind::of(input)? {
            FileKind::Tns => {
                let dims = declared.clone();
                let syntax = crate::tns::TnsSyntax { dims: dims.clone() };
                fast(
                    input,
                    syntax,
                    0,
                    0,
                    dims,
                    None,
                    output,
                    &format,
                    opts,
                    &temp_parent,
                    progress,
                )?
            }
            _ => match crate::mtx::MtxReader::open(input)?.block_input() {
                Some((syntax, start, lines, entries)) => fast(
                    input,
                    syntax,
                    start,
                    lines,
                    declared.clone(),
                    Some(entries),
                    output,
                    &format,
                    opts,
                    &temp_parent,
                    progress,
                )?,
                None => Fast::General,
            },
        };
        match done {
            Fast::Done(report) => return Ok(report),
            // Out of order: sort (the general path also finds any later syntax error). An
            // `.mtx` file goes straight there too: the checked single pass below would only
            // stop at its first entry out of order, after its parser had read ahead.
            Fast::Unsorted => {
                return sort_and_build(input, output, &format, opts, &temp_parent, progress)
            }
            Fast::General => {}
        }
    }
    // Sorted input is parsed once when the dense level sizes need no first pass: arrays are
    // spooled while the level sizes are unknown, then copied into place (far cheaper than
    // parsing the text twice).
    if !opts.force_external_sort && (declared.is_some() || !has_dense) {
        let mut source = scan::CheckedTextSource {
            path: input.to_path_buf(),
            format: format.clone(),
            memory: opts.memory,
            unsorted: false,
            entries: 0,
            max: Vec::new(),
            declared: declared.clone(),
        };
        let built = build::build_spooled(
            &mut source,
            input,
            output,
            &format,
            declared.as_deref(),
            opts,
            &temp_parent,
            None,
            progress,
        );
        match built {
            Ok(out) => {
                return Ok(ConvertReport {
                    entries_read: source.entries,
                    entries_written: out.entries,
                    dims: source.dims(),
                    presorted: true,
                    runs: 0,
                    runs_spilled: 0,
                    merge_rounds: 0,
                    output_bytes: out.bytes,
                })
            }
            Err(_) if source.unsorted => {
                return sort_and_build(input, output, &format, opts, &temp_parent, progress)
            }
            Err(e) => return Err(e),
        }
    }
    let scanned = if opts.force_external_sort {
        None
    } else {
        scan::scan_sorted(input, &format, opts, progress)?
    };
    match scanned {
        Some(s) => {
            let mut source = scan::TextSource {
                path: input.to_path_buf(),
                format: format.clone(),
                memory: opts.memory,
            };
            let out = build::build(
                &mut source,
                input,
                output,
                &format,
                &s.dims,
                &s.counts,
                opts,
                progress,
            )?;
            Ok(ConvertReport {
                entries_read: s.entries,
                entries_written: out.entries,
                dims: s.dims,
                presorted: true,
                runs: 0,
                runs_spilled: 0,
                merge_rounds: 0,
                output_bytes: out.bytes,
            })
        }
        None => sort_and_build(input, output, &format, opts, &temp_parent, progress),
    }
}

/// What the block packer made of a text file.
enum Fast {
    Done(ConvertReport),
    /// Out of order: the external sort takes it.
    Unsorted,
    /// The general path takes it (an `.mtx` entry count to be checked line by line, or a
    /// layout the block packer does not read).
    General,
}

/// The block packer (`stitch`) on a text file.
#[allow(clippy::too_many_arguments)]
fn fast<S: LineSyntax>(
    input: &Path,
    syntax: S,
    data_start: u64,
    lines_before: u64,
    dims: Option<Vec<u64>>,
    entries: Option<u64>,
    output: &Path,
    format: &Format,
    opts: &ConvertOptions,
    temp_parent: &Path,
    progress: &dyn Progress,
) -> Result<Fast> {
    let text = stitch::Input {
        path: input.to_path_buf(),
        syntax,
        data_start,
        lines_before,
        dims,
        entries,
    };
    Ok(
        match stitch::convert(&text, output, format, opts, temp_parent, progress)? {
            stitch::Outcome::Done(d) => Fast::Done(ConvertReport {
                entries_read: d.entries_read,
                entries_written: d.entries_written,
                dims: d.dims,
                presorted: true,
                runs: 0,
                runs_spilled: 0,
                merge_rounds: 0,
                output_bytes: d.bytes,
            }),
            stitch::Outcome::Unsorted => Fast::Unsorted,
            stitch::Outcome::Fallback => Fast::General,
        },
    )
}

/// The part of the memory budget the conversion's buffers and runs may take: the process
/// itself (its code, stacks, the allocator's own keeping) needs about 4 MiB whatever they
/// take, which matters under a small budget.
fn working_memory(budget: usize) -> usize {
    budget - (budget / 4).min(4 << 20)
}

/// Unsorted input: external merge sort, then one pass over the merged runs.
fn sort_and_build(
    input: &Path,
    output: &Path,
    format: &Format,
    opts: &ConvertOptions,
    temp_parent: &Path,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let sorted = runs::sort_runs(input, format, opts, temp_parent, progress)?;
    let mut source = sorted.source;
    // The runs held in memory take their part of the budget from the final merge's.
    let opts = &ConvertOptions {
        memory: opts.memory - sorted.held_bytes,
        ..opts.clone()
    };
    if stitch::supports(format) {
        let text = stitch::Input {
            path: input.to_path_buf(),
            syntax: (),
            data_start: 0,
            lines_before: 0,
            dims: Some(sorted.dims.clone()),
            entries: None,
        };
        let out =
            stitch::convert_merged(&source, &text, output, format, opts, temp_parent, progress)?;
        return Ok(ConvertReport {
            entries_read: sorted.entries,
            entries_written: out.entries_written,
            dims: sorted.dims,
            presorted: false,
            runs: sorted.runs,
            runs_spilled: sorted.spilled,
            merge_rounds: sorted.merge_rounds,
            output_bytes: out.bytes,
        });
    }
    let out = build::build_spooled(
        &mut source,
        input,
        output,
        format,
        Some(&sorted.dims),
        opts,
        temp_parent,
        Some("merge"),
        progress,
    )?;
    Ok(ConvertReport {
        entries_read: sorted.entries,
        entries_written: out.entries,
        dims: sorted.dims,
        presorted: false,
        runs: sorted.runs,
        runs_spilled: sorted.spilled,
        merge_rounds: sorted.merge_rounds,
        output_bytes: out.bytes,
    })
}

/// A stream of entries sorted in storage order (duplicates adjacent), that can be read again;
/// `Send`, so that a thread of its own can produce the entries while another packs them.
pub(crate) trait SortedSource: Send {
    /// Calls `f(level-order coordinates, value)` for every entry, in order.
    fn scan(
        &mut self,
        progress: &dyn Progress,
        f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()>;

    /// Dimensions learned while scanning, for sources that do not know them beforehand.
    fn dims(&self) -> Option<Vec<u64>> {
        None
    }
}

/// Feeds `f` with distinct entries: adjacent duplicates summed left to right in the order
/// the source gives them (input order: see `runs::merge`), or an error. A NaN sum is stored
/// as the canonical NaN.
pub(crate) fn scan_distinct(
    source: &mut dyn SortedSource,
    input: &Path,
    format: &Format,
    duplicates: Duplicates,
    progress: &dyn Progress,
    f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
) -> Result<()> {
    let mut pending: Option<(Vec<u64>, f64)> = None;
    source.scan(progress, &mut |c, v| match &mut pending {
        Some((p, acc)) if same_key(p, c) => {
            if duplicates == Duplicates::Error {
                return Err(duplicate_error(input, format, c));
            }
            *acc += v;
            Ok(())
        }
        Some((p, acc)) => {
            f(p, crate::value::canonical_nan(*acc))?;
            p.copy_from_slice(c);
            *acc = v;
            Ok(())
        }
        None => {
            pending = Some((c.to_vec(), v));
            Ok(())
        }
    })?;
    if let Some((p, acc)) = pending {
        f(&p, crate::value::canonical_nan(acc))?;
    }
    Ok(())
}

/// Equal keys, compared from the last level, which changes most often: a short inline loop
/// instead of a `memcmp` call per entry.
#[inline]
fn same_key(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().rev().zip(b.iter().rev()).all(|(x, y)| x == y)
}

/// The error for a repeated entry, with 1-based coordinates in mode order.
pub(crate) fn duplicate_error(input: &Path, format: &Format, level_coords: &[u64]) -> Error {
    let mut coords = vec![0; level_coords.len()];
    for (k, &m) in format.mode_order().iter().enumerate() {
        coords[m] = level_coords[k] + 1;
    }
    Error::Duplicate {
        path: input.to_path_buf(),
        coords,
    }
}

/// How often (in entries) progress is reported.
pub(crate) const PROGRESS_EVERY: u64 = 1 << 16;

#[cfg(test)]
mod sync_tests {
    use super::{convert, ConvertOptions};
    use crate::atomic::SYNCED_COMMITS;
    use crate::NoProgress;
    use std::path::Path;

    /// Commits that synced while `f` ran on this thread.
    fn syncs_during(f: impl FnOnce()) -> u64 {
        let before = SYNCED_COMMITS.with(|n| n.get());
        f();
        SYNCED_COMMITS.with(|n| n.get()) - before
    }

    fn run(input: &Path, output: &Path, opts: &ConvertOptions) -> u64 {
        syncs_during(|| {
            convert(input, output, opts, &NoProgress).unwrap();
        })
    }

    /// `sync` reaches every kind of output a conversion writes, and only when asked for:
    /// the streaming `.tcs` writer, the spooled one, and the text writers.
    #[test]
    fn every_output_is_synced_exactly_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let tns = dir.path().join("t.tns");
        std::fs::write(&tns, "1 2 1.5\n2 1 2.5\n3 3 -1\n").unwrap();
        let tcs = dir.path().join("t.tcs");
        for sync in [false, true] {
            let want = u64::from(sync);
            let opts = ConvertOptions {
                sync,
                ..ConvertOptions::default()
            };
            assert_eq!(run(&tns, &tcs, &opts), want, "streamed .tcs, sync {sync}");
            // A dense level with no declared dims takes the built (not streamed) writer,
            // in memory and then spooled.
            let dense = ConvertOptions {
                format: Some("ds".into()),
                ..opts.clone()
            };
            assert_eq!(run(&tns, &tcs, &dense), want, "built .tcs, sync {sync}");
            let spooled = ConvertOptions {
                force_external_sort: true,
                ..dense.clone()
            };
            assert_eq!(run(&tns, &tcs, &spooled), want, "spooled .tcs, sync {sync}");
            let back = dir.path().join("back.tns");
            assert_eq!(run(&tcs, &back, &opts), want, ".tcs to .tns, sync {sync}");
            let mtx = dir.path().join("m.mtx");
            assert_eq!(run(&tns, &mtx, &opts), want, ".tns to .mtx, sync {sync}");
        }
    }
}
