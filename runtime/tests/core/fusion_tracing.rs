//! Fusion inside replayed traces (runtime/DESIGN.md, "Fusion inside traces"): a traced loop's
//! replays launch the trace's fused tasks, eliminate its temporaries, and fall back to ordinary
//! analysis when a store that was a temporary is not one this time.

use super::fusion::{axpb, launched, register, sum_of};
use tessera_runtime::{Chunk, DType, Runtime, Stats};

fn runtime(tracing: bool, fusion: bool) -> Runtime {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .tracing(tracing)
        .fusion(fusion)
        .trace_sampling(4)
        .build();
    register(&rt).unwrap();
    rt
}

const N: usize = 256;

/// A Black-Scholes-like chain, `y = ((2x + 1) * 3 - 1) * 0.5 - 2`, over two intermediates made
/// fresh and dropped at the end of the scope (the idiomatic pattern); in iteration `keep`
/// the application keeps the first intermediate, which it then reads.
fn chain(
    rt: &Runtime,
    name: &str,
    iterations: usize,
    keep: Option<usize>,
) -> (Vec<f64>, Option<Vec<f64>>, Stats) {
    let x = rt
        .from_vec(&[N], (0..N).map(|i| i as f64 * 0.25 - 7.0).collect())
        .unwrap();
    let y = rt.create(DType::F64, &[N]).unwrap();
    let mut kept = None;
    for it in 0..iterations {
        let t1 = rt.create(DType::F64, &[N]).unwrap();
        let t2 = rt.create(DType::F64, &[N]).unwrap();
        axpb(rt, name, &x, &t1, 2.0, 1.0);
        axpb(rt, name, &t1, &t2, 3.0, -1.0);
        axpb(rt, name, &t2, &y, 0.5, -2.0);
        if keep == Some(it) {
            kept = Some(t1);
        }
    }
    let out = rt.read::<f64>(&y).unwrap();
    let kept = kept.map(|k| rt.read::<f64>(&k).unwrap());
    rt.fence().unwrap();
    (out, kept, rt.stats())
}

#[test]
fn a_traced_fused_chain_eliminates_its_temporaries_on_replay() {
    for name in ["axpb", "ew_axpb"] {
        let iterations = 60;
        let (want, _, _) = chain(&runtime(false, false), name, iterations, None);
        let (got, _, st) = chain(&runtime(true, true), name, iterations, None);
        assert_eq!(
            got, want,
            "{name}: traced + fused equals sequential, bitwise"
        );
        assert!(st.traces_replayed > 0, "{name}: {st:?}");
        // Every replayed iteration's two intermediates are temporaries, never allocated.
        assert!(st.fused_launches > 0, "{name}: {st:?}");
        assert!(
            st.temporaries_eliminated >= 2 * (st.tasks_traced / 3 - 1),
            "{name}: {st:?}"
        );
        assert!(st.tasks_traced >= 3 * 30, "{name}: {st:?}");
        assert!(
            st.bytes_allocated < (8 * N * iterations) as u64,
            "{name}: the intermediates of replayed iterations are not allocated: {st:?}"
        );
        // Fused launches: fewer launched than issued.
        assert!(st.tasks_launched < 3 * iterations as u64, "{name}: {st:?}");
    }
}

#[test]
fn a_replay_whose_temporary_is_kept_this_time_falls_back() {
    for name in ["axpb", "ew_axpb"] {
        let iterations = 60;
        let keep = Some(45);
        let (want, want_kept, _) = chain(&runtime(false, false), name, iterations, keep);
        let (got, got_kept, st) = chain(&runtime(true, true), name, iterations, keep);
        let kept: Vec<f64> = (0..N)
            .map(|i| 2.0 * (i as f64 * 0.25 - 7.0) + 1.0)
            .collect();
        assert_eq!(want_kept.as_deref(), Some(&kept[..]));
        assert_eq!(
            got_kept, want_kept,
            "{name}: the kept intermediate is written: {st:?}"
        );
        assert_eq!(got, want, "{name}");
        assert!(st.traces_abandoned >= 1, "{name}: {st:?}");
        assert!(st.temporaries_eliminated > 0, "{name}: {st:?}");
    }
}

/// A CG-like loop: `q` is made fresh from `p`, its sum becomes a future `a` (through a
/// one-element store), `x += a p` and `r += a q` read it, and the application drops `q`
/// before it reads `r`'s sum, every iteration. The tracer holds the updates (a trace found
/// from the future on) while the window, holding `q`'s producer and its sum, is launched
/// before the trace is: `q` is no temporary of that prefix, since a held task still reads it
/// (it was made one, and `r += a q` read zeros: CG with `tensor!` statements ran 115
/// iterations instead of 31 with TESSERA_TRACING=1).
fn cg_like(tracing: bool, actors: bool) -> (Vec<u64>, Vec<u64>, Stats) {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .window_size(16)
        .tracing(tracing)
        .actors(actors)
        .build();
    register(&rt).unwrap();
    // out = y + a x, `a` a future.
    rt.register_elementwise::<f64>("ew_axpy_into", |c: &mut Chunk<'_, f64>| {
        let a: f64 = c.scalar_value(0);
        let (ins, outs) = c.split();
        for ((o, x), y) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *o = y + a * x;
        }
    })
    .unwrap();
    let n = 64;
    let p = rt
        .from_vec(&[n], (0..n).map(|i| (i % 7) as f64 - 2.5).collect())
        .unwrap();
    let mut x = rt.from_vec(&[n], vec![0.0; n]).unwrap();
    let mut r = rt.from_vec(&[n], vec![1.0; n]).unwrap();
    let mut sums = Vec::new();
    for it in 0..40 {
        let q = rt.create(DType::F64, &[n]).unwrap();
        axpb(&rt, "ew_axpb", &p, &q, 0.001 * (1 + it % 3) as f64, 0.5);
        let a = rt.value_future(&sum_of(&rt, &q)).unwrap();
        for (src, dst) in [(&p, &mut x), (&q, &mut r)] {
            let out = rt.create(DType::F64, &[n]).unwrap();
            rt.task("ew_axpy_into")
                .read(src)
                .read(dst)
                .write(&out)
                .future(&a)
                .align(src, dst)
                .align(src, &out)
                .submit()
                .unwrap();
            *dst = out;
        }
        let rr = sum_of(&rt, &r);
        drop(q);
        sums.push(rt.read::<f64>(&rr).unwrap()[0].to_bits());
    }
    let bits = rt.read::<f64>(&x).unwrap().into_iter().map(f64::to_bits);
    (bits.collect(), sums, launched(&rt))
}

#[test]
fn a_store_a_held_task_reads_is_no_temporary_of_the_window() {
    let (want_x, want_sums, _) = cg_like(false, false);
    for actors in [false, true] {
        let (x, sums, st) = cg_like(true, actors);
        let first = sums.iter().zip(&want_sums).position(|(a, b)| a != b);
        assert_eq!(first, None, "actors {actors}: first differing sum: {st:?}");
        assert_eq!(x, want_x, "actors {actors}");
        assert!(st.traces_replayed > 0, "actors {actors}: {st:?}");
        assert!(st.fused_launches > 0, "actors {actors}: {st:?}");
    }
}
