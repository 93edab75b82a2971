//! Fusion's temporaries against handles and references that Definition 4's
//! checks do not see (found by stop 59's review of the fusion layer), and kernel fusion over
//! offset 2-d views.

use super::fusion::{axpb, mul, register, rt};
use tessera_runtime::{DType, Runtime, Store};

fn input(rt: &Runtime, n: usize) -> Store {
    rt.from_vec(&[n], (0..n).map(|i| i as f64 - 3.0).collect())
        .unwrap()
}

/// A launcher names a store by its root, not by an application handle: a store the
/// application dropped after building a launcher that reads it, but before submitting it,
/// has no handle left, and a prefix launched in between (a fence, a read, an idle worker)
/// made it a temporary: the launcher's task then read zeros.
#[test]
fn a_store_named_by_a_launcher_not_yet_submitted_is_no_temporary() {
    let n = 64;
    let rt = rt(8, true);
    let x = input(&rt, n);
    let (y, z) = (
        rt.create(DType::F64, &[n]).unwrap(),
        rt.create(DType::F64, &[n]).unwrap(),
    );
    let t = rt.create(DType::F64, &[n]).unwrap();
    axpb(&rt, "axpb", &x, &t, 2.0, 0.0); // t = 2x
    axpb(&rt, "axpb", &t, &y, 1.0, 1.0); // y = t + 1
    let later = rt
        .task("axpb")
        .read(&t)
        .write(&z)
        .scalar(1.0)
        .scalar(0.0)
        .align(&t, &z); // z = t
    drop(t);
    rt.fence().unwrap(); // launches [t = 2x, y = t + 1] fused
    later.submit().unwrap();
    let want: Vec<f64> = (0..n).map(|i| 2.0 * (i as f64 - 3.0)).collect();
    assert_eq!(rt.read::<f64>(&z).unwrap(), want, "z = t = 2x");
}

/// The chunk loop clears a temporary read before it is written with the zeroing kernel of
/// the fused task's *first argument's* element type (`fusion/run.rs`, `steps`): an `f64`
/// temporary in a task whose first argument is `f32` had only the first half of each chunk's
/// bytes cleared, and read the previous chunk's values in the rest (and an `f32` temporary
/// behind an `f64` first argument is cleared past its buffer's end).
#[test]
fn a_temporary_read_before_written_is_cleared_whole_whatever_the_first_argument_s_type() {
    let n = 3 * 4096 + 17;
    let run = |fusion: bool| {
        let rt = rt(16, fusion);
        rt.register_elementwise::<f32>("ew32_axpb", |c: &mut tessera_runtime::Chunk<'_, f32>| {
            let (a, b) = (c.scalar(0).as_f64() as f32, c.scalar(1).as_f64() as f32);
            let (ins, outs) = c.split();
            for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
                *y = a * x + b;
            }
        })
        .unwrap();
        let x32 = rt
            .from_vec(&[n], (0..n).map(|i| i as f32).collect())
            .unwrap();
        let y32 = rt.create(DType::F32, &[n]).unwrap();
        let x = input(&rt, n);
        let out = rt.create(DType::F64, &[n]).unwrap();
        for _ in 0..2 {
            let t = rt.create(DType::F64, &[n]).unwrap();
            axpb(&rt, "ew32_axpb", &x32, &y32, 1.0, 1.0);
            rt.task("ew_axpy")
                .read(&x)
                .read_write(&t)
                .scalar(2.0)
                .align(&x, &t)
                .submit()
                .unwrap();
            axpb(&rt, "ew_axpb", &t, &out, 1.0, 0.5);
            drop(t);
            rt.fence().unwrap();
        }
        (rt.read::<f64>(&out).unwrap(), rt.stats())
    };
    let (fused, s) = run(true);
    assert_eq!(s.kernel_fused_launches, 2, "{s:?}");
    assert_eq!(s.temporaries_eliminated, 2, "{s:?}");
    let want: Vec<f64> = (0..n).map(|i| 2.0 * (i as f64 - 3.0) + 0.5).collect();
    let bad = (0..n).find(|&i| fused[i] != want[i]);
    assert_eq!(
        bad,
        None,
        "first wrong element (of {n}): {:?}",
        bad.map(|i| (fused[i], want[i]))
    );
}

/// Kernel fusion over 2-d row views with offsets, a length that is no multiple of a chunk,
/// an empty view and a temporary: the same values fused and unfused.
#[test]
fn kernel_fused_2d_row_views_with_offsets_match_unfused() {
    use tessera_runtime::Store;
    let (rows, cols) = (37, 301);
    let run = |fusion: bool| {
        let rt = rt(16, fusion);
        let x = rt
            .from_vec(
                &[rows, cols],
                (0..rows * cols).map(|i| (i % 97) as f64 - 11.0).collect(),
            )
            .unwrap();
        let y = rt
            .from_vec(
                &[rows, cols],
                (0..rows * cols).map(|i| (i % 13) as f64 * 0.5).collect(),
            )
            .unwrap();
        let out = rt.create(DType::F64, &[rows, cols]).unwrap();
        let (xv, yv, ov) = (
            x.slice(0, 3..37).unwrap(),
            y.slice(0, 0..34).unwrap(),
            out.slice(0, 2..36).unwrap(),
        );
        let chain = |xv: &Store, yv: &Store, ov: &Store| {
            let t = rt.create(DType::F64, &xv.shape().unwrap()).unwrap();
            let u = rt.create(DType::F64, &xv.shape().unwrap()).unwrap();
            axpb(&rt, "ew_axpb", xv, &t, 2.0, 1.0);
            mul(&rt, &t, yv, &u);
            axpb(&rt, "ew_axpb", &u, ov, 1.0, -0.25);
        };
        chain(&xv, &yv, &ov);
        // An empty view: nothing to do, nothing to fail.
        let (xe, ye, oe) = (
            x.slice(0, 5..5).unwrap(),
            y.slice(0, 7..7).unwrap(),
            out.slice(0, 0..0).unwrap(),
        );
        chain(&xe, &ye, &oe);
        drop((xv, yv, ov, xe, ye, oe));
        (rt.read::<f64>(&out).unwrap(), super::fusion::launched(&rt))
    };
    let ((fused, s), (unfused, _)) = (run(true), run(false));
    assert!(s.kernel_fused_launches >= 1, "{s:?}");
    let bad = (0..fused.len()).find(|&i| fused[i].to_bits() != unfused[i].to_bits());
    assert_eq!(bad, None, "{s:?}");
}

/// Under the default (adaptive) window with fusion and tracing on, a loop whose bodies make,
/// fuse and drop intermediates leaves nothing resident once the application dropped its
/// stores and fenced.
#[test]
fn stores_of_fused_and_traced_loops_are_freed_under_the_adaptive_window() {
    for tracing in [false, true] {
        let rt = Runtime::builder()
            .threads(2)
            .min_piece_size(4)
            .fusion(true)
            .tracing(tracing)
            .build();
        register(&rt).unwrap();
        let n = 4096 + 3;
        let base = super::fusion::launched(&rt).bytes_resident;
        {
            let x = input(&rt, n);
            let mut acc = rt.create(DType::F64, &[n]).unwrap();
            for _ in 0..40 {
                let t = rt.create(DType::F64, &[n]).unwrap();
                let next = rt.create(DType::F64, &[n]).unwrap();
                axpb(&rt, "ew_axpb", &x, &t, 0.5, 1.0);
                mul(&rt, &t, &acc, &next);
                acc = next;
            }
            rt.read::<f64>(&acc).unwrap();
        }
        let s = super::fusion::launched(&rt);
        assert_eq!(s.bytes_resident, base, "tracing {tracing}: {s:?}");
    }
}
