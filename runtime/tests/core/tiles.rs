//! Application-chosen tilings (`tile`): which launch dimension cuts which store dimension, in
//! equal tiles or at split points (uneven, empty tiles included), seen as the sub-store
//! rectangles task bodies get; 32-bit coordinate stores as image sources.

use crate::cells;
use std::sync::{Arc, Mutex};
use tessera_runtime::{Cut, DType, PosRange, Rect, Runtime, RuntimeError};

/// Runs a task over `domain` with one read-write argument tiled by `cuts`; every point adds
/// its linear point index + 1 to its cells. Returns each point's rectangle and the store.
fn tiles(
    shape: &[usize],
    domain: &[usize],
    cuts: &[Cut],
    threads: usize,
) -> (Vec<(Vec<usize>, Rect)>, Vec<f64>) {
    let rt = Runtime::builder().threads(threads).build();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    rt.register("mark", move |ctx| {
        let mut s = ctx.write::<f64>(0);
        let rect = s.rect();
        let id = ctx.linear_point() as f64 + 1.0;
        for p in cells(&rect) {
            let v = s.get(&p);
            s.set(&p, v + id);
        }
        log.lock().unwrap().push((ctx.point().to_vec(), rect));
    })
    .unwrap();
    let s = rt.create(DType::F64, shape).unwrap();
    rt.fill(&s, 0.0).unwrap();
    rt.task("mark")
        .read_write(&s)
        .tile(&s, cuts)
        .launch_domain(domain)
        .submit()
        .unwrap();
    let data = rt.read::<f64>(&s).unwrap();
    let mut v = seen.lock().unwrap().clone();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    (v, data)
}

#[test]
fn split_points_give_uneven_and_empty_tiles() {
    for threads in [1, 2, 4] {
        let (rects, data) = tiles(&[10], &[4], &[Cut::At(0, vec![3, 4, 12])], threads);
        let got: Vec<(usize, usize)> = rects.iter().map(|(_, r)| (r.lo()[0], r.hi()[0])).collect();
        // [0,3) [3,4) [4,10) and, past the end, an empty tile.
        assert_eq!(got[..3], [(0, 3), (3, 4), (4, 10)]);
        assert!(rects.len() == 3 || rects[3].1.volume() == 0, "{rects:?}");
        let want: Vec<f64> = (0..10)
            .map(|i| {
                if i < 3 {
                    1.0
                } else if i < 4 {
                    2.0
                } else {
                    3.0
                }
            })
            .collect();
        assert_eq!(data, want, "each cell written by exactly its tile's point");
    }
}

#[test]
fn the_application_chooses_which_launch_dimension_cuts_which_store_dimension() {
    // A 6 × 4 store on a 2 × 3 domain: store dimension 0 follows launch dimension 1 (3 equal
    // tiles of 2 rows), store dimension 1 follows launch dimension 0 (columns split at 1).
    let (rects, data) = tiles(&[6, 4], &[2, 3], &[Cut::Equal(1), Cut::At(0, vec![1])], 2);
    assert_eq!(rects.len(), 6);
    for (p, r) in &rects {
        let rows = (2 * p[1], 2 * p[1] + 2);
        let cols = if p[0] == 0 { (0, 1) } else { (1, 4) };
        assert_eq!((r.lo()[0], r.hi()[0]), rows, "point {p:?}");
        assert_eq!((r.lo()[1], r.hi()[1]), cols, "point {p:?}");
    }
    // Every cell written once, by the point that owns it (linear index = p0 * 3 + p1).
    for i in 0..6 {
        for j in 0..4 {
            let p = (if j == 0 { 0 } else { 1 }) * 3 + i / 2;
            assert_eq!(data[i * 4 + j], p as f64 + 1.0, "cell ({i},{j})");
        }
    }
}

#[test]
fn a_whole_dimension_is_seen_by_every_point_along_it() {
    let (rects, _) = tiles(&[3, 5], &[3], &[Cut::Equal(0), Cut::Whole], 1);
    for (p, r) in &rects {
        assert_eq!(
            (r.lo()[0], r.hi()[0], r.lo()[1], r.hi()[1]),
            (p[0], p[0] + 1, 0, 5)
        );
    }
}

#[test]
fn tilings_that_do_not_fit_are_errors_naming_the_store() {
    let rt = Runtime::new(2);
    rt.register("noop", |_| {}).unwrap();
    let s = rt.create(DType::F64, &[8]).unwrap();
    // (cuts, launch domain, what the error says)
    type Case = (Vec<Cut>, Option<Vec<usize>>, &'static str);
    let cases: Vec<Case> = vec![
        (
            vec![Cut::Equal(0), Cut::Whole],
            Some(vec![2]),
            "2 cuts given for a store of 1",
        ),
        (vec![Cut::At(0, vec![4, 2])], Some(vec![3]), "decrease"),
        (
            vec![Cut::At(0, vec![4])],
            Some(vec![3]),
            "1 split points make 2 tiles",
        ),
        (vec![Cut::Equal(1)], Some(vec![2]), "launch domain has 1"),
        (vec![Cut::Equal(0)], None, "needs a fixed launch domain"),
    ];
    for (cuts, domain, want) in cases {
        let mut t = rt.task("noop").write(&s).tile(&s, &cuts);
        if let Some(d) = &domain {
            t = t.launch_domain(d);
        }
        let err = t.submit().and_then(|_| rt.fence()).unwrap_err();
        assert!(matches!(err, RuntimeError::Tile { .. }), "{cuts:?}: {err}");
        assert!(
            err.to_string().contains(want),
            "{cuts:?}: `{err}` lacks `{want}`"
        );
        assert!(
            err.to_string().contains(&format!("store#{}", s.id())),
            "{err}"
        );
    }
}

#[test]
fn u32_coordinates_are_image_sources() {
    // SpMV with 32-bit crd: pos tiled at a split point, crd and vals imaged, x imaged by crd.
    let rt = Runtime::new(2);
    rt.register("spmv32", |ctx| {
        let mut y = ctx.write::<f64>(0);
        let pos = ctx.read::<PosRange>(1);
        let crd = ctx.read::<u32>(2);
        let vals = ctx.read::<f64>(3);
        let x = ctx.read::<f64>(4);
        let (c0, x0) = (crd.range().start, x.range().start);
        for i in pos.range() {
            let r = pos.at(i);
            let s: f64 = (r.lo as usize..r.hi as usize)
                .map(|k| {
                    vals.as_slice()[k - c0] * x.as_slice()[crd.as_slice()[k - c0] as usize - x0]
                })
                .sum();
            y.set_at(i, s);
        }
    })
    .unwrap();
    // Rows: [0,1) has columns 0,1; [1,2) empty; [2,3) column 3.
    let pos = rt
        .from_vec(
            &[3],
            vec![
                PosRange::new(0, 2),
                PosRange::new(2, 2),
                PosRange::new(2, 3),
            ],
        )
        .unwrap();
    let crd = rt.from_vec(&[3], vec![0u32, 1, 3]).unwrap();
    let vals = rt.from_vec(&[3], vec![1.0, 2.0, 3.0]).unwrap();
    let x = rt.from_vec(&[4], vec![10.0, 20.0, 30.0, 40.0]).unwrap();
    let y = rt.create(DType::F64, &[3]).unwrap();
    rt.task("spmv32")
        .write(&y)
        .read(&pos)
        .read(&crd)
        .read(&vals)
        .read(&x)
        .tile(&y, &[Cut::At(0, vec![1])])
        .align(&y, &pos)
        .image(&pos, &crd)
        .image(&pos, &vals)
        .image(&crd, &x)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&y).unwrap(), vec![50.0, 0.0, 120.0]);
    assert_eq!(crd.dtype(), DType::U32);
}

/// Points reducing into one cell are folded by a summation tree, neighbours first:
/// `((p0 + p1) + (p2 + p3)) + p4`, whatever order they finished in. These values give a
/// different sum in any other association (in point order: 1 + 1e16 … = 2).
#[test]
fn reductions_of_many_points_fold_as_a_summation_tree() {
    let vals = [1e16, 1.0, -1e16, 1.0, 3.0];
    for threads in [1, 2, 4] {
        let rt = Runtime::new(threads);
        rt.register("contribute", move |ctx| {
            let mut r = ctx.reduce::<f64>(0);
            r.reduce(&[0], vals[ctx.linear_point()]);
        })
        .unwrap();
        let s = rt.create(DType::F64, &[1]).unwrap();
        rt.task("contribute")
            .reduce(&s, tessera_runtime::ReduceOp::Sum)
            .broadcast(&s, &[0])
            .launch_domain(&[5])
            .submit()
            .unwrap();
        let tree = ((vals[0] + vals[1]) + (vals[2] + vals[3])) + vals[4];
        let serial = vals.iter().fold(0.0, |a, b| a + b);
        assert_ne!(tree, serial, "the values must tell the two apart");
        assert_eq!(rt.read::<f64>(&s).unwrap(), vec![tree], "{threads} threads");
    }
}
