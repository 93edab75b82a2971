//! The runtime across MPI ranks (control replication): run under `mpirun -n N` with `N` as
//! the first argument. Every rank runs the stencil, a banded SpMV with images, and CG, and
//! checks them: the stencil against the sequential loop (bitwise), with the bytes moved equal
//! to the halo volume and each rank running its block of points; SpMV against the host
//! product; each rank's memory after an SpMV over inputs every rank made whole is its share;
//! CG bitwise against a one-rank runtime with as many processors in this process; a
//! transfer of megabytes (rendezvous-sized messages) into one point; launches with a
//! sharding key run each point on the rank the key names.
//!
//! ```text
//! mpirun --allow-run-as-root --oversubscribe -n 4 mpi-runtime 4
//! mpirun ... -n 2 mpi-runtime 2 --fail-rank 1   # a task fails on rank 1: every rank errs
//! mpirun ... -n 2 mpi-runtime 2 --kill-rank 1   # rank 1 dies mid-run: the job ends
//! mpirun ... -n 2 mpi-runtime 2 --leave-rank 1  # rank 1 returns early: every other rank errs
//! ```

#[path = "../../examples/sparse/mod.rs"]
mod sparse;

use sparse::{cg, stencil, Csr, HostCsr};
use std::sync::Arc;
use tessera_runtime::transport::mpi::{run_world_threaded, ThreadedMpiComm};
use tessera_runtime::transport::Communicator;
use tessera_runtime::{Result, Runtime, RuntimeError};

fn fail(what: String) -> RuntimeError {
    RuntimeError::Transport(what)
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(fail(what()))
    }
}

/// `--leave-rank`: every rank launches each task at submit (a window of one), so the others
/// are in the stencil's collectives when the leaving rank says goodbye. With the default
/// fixed window the leaving rank's `fence` launches what the others still hold, and the
/// agreement check (debug builds) ends the job first, with a disagreement instead.
static LAUNCH_AT_SUBMIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn runtime(comm: &Arc<ThreadedMpiComm>) -> Result<Runtime> {
    let b = Runtime::builder()
        .threads(1)
        .min_piece_size(16)
        .communicator(comm.clone());
    let b = if LAUNCH_AT_SUBMIT.load(std::sync::atomic::Ordering::Relaxed) {
        b.window_size(1)
    } else {
        b
    };
    b.try_build()
}

fn check_stencil(comm: &Arc<ThreadedMpiComm>, kill: Option<usize>) -> Result<()> {
    let rt = runtime(comm)?;
    stencil::register(&rt)?;
    let (n, steps, ranks) = (2000, 20, comm.size());
    let mut cur = rt.from_vec(&[n + 2], stencil::initial(n))?;
    let mut next = rt.from_vec(&[n + 2], stencil::initial(n))?;
    for s in 0..steps {
        if kill == Some(comm.rank()) && s == steps / 2 {
            eprintln!("rank {} dies on purpose (--kill-rank)", comm.rank());
            std::process::abort();
        }
        stencil::step(&rt, &cur, &next, n, None)?;
        std::mem::swap(&mut cur, &mut next);
    }
    rt.fence()?;
    let stats = rt.stats();
    let got = rt.read::<f64>(&cur)?;
    ensure(got == stencil::sequential(n, steps), || {
        format!("rank {}: stencil differs from the loop", comm.rank())
    })?;
    // One processor per rank: one point per rank and step.
    ensure(stats.points_run == steps as u64, || {
        format!("rank {}: ran {} points", comm.rank(), stats.points_run)
    })?;
    let sent = comm.all_sum(&[stats.bytes_sent])?[0];
    let halo = ((steps - 1) * 2 * (ranks - 1) * 8) as u64;
    ensure(sent == halo, || {
        format!("stencil moved {sent} bytes, halo is {halo}")
    })
}

/// A rank that stops issuing early and returns normally: three steps of the stencil where
/// the others run twenty (the others wait for it and must fail, not hang).
fn leave_early(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let rt = runtime(comm)?;
    stencil::register(&rt)?;
    let n = 2000;
    let (cur, next) = (
        rt.from_vec(&[n + 2], stencil::initial(n))?,
        rt.from_vec(&[n + 2], stencil::initial(n))?,
    );
    for s in 0..3 {
        let (a, b) = if s % 2 == 0 {
            (&cur, &next)
        } else {
            (&next, &cur)
        };
        stencil::step(&rt, a, b, n, None)?;
    }
    rt.fence()?;
    eprintln!(
        "rank {} leaves early on purpose (--leave-rank)",
        comm.rank()
    );
    Ok(())
}

/// Memory per rank: a tridiagonal SpMV over inputs every rank made whole (`from_vec`); each
/// rank's store elements in memory afterwards are its share (1 / N of the five stores, plus
/// pages at the ends of its shares and the x cells its rows reach), and `y` is right.
fn check_memory(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let rt = runtime(comm)?;
    sparse::register_spmv(&rt)?;
    let n = 20_000;
    let host = HostCsr::tridiagonal(n);
    let a = Csr::upload(&rt, &host)?;
    let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let x = rt.from_vec(&[n], xs.clone())?;
    let y = sparse::spmv(&rt, &a, &x)?;
    rt.fence()?;
    let resident = rt.stats().bytes_resident as f64;
    // pos (16 B a row), crd and vals (8 B a nonzero), x and y (8 B a row).
    let whole = (n * 32 + host.crd.len() * 16) as f64;
    let share = resident / whole;
    let at_most = 1.0 / comm.size() as f64 + 0.03;
    ensure(share <= at_most, || {
        format!(
            "rank {} holds {share:.3} of the stores' bytes (at most {at_most:.3})",
            comm.rank()
        )
    })?;
    let got = rt.read_on::<f64>(&y, 0)?;
    ensure(got.is_none_or(|y| y == host.spmv(&xs)), || {
        "SpMV over cut inputs differs from the host product".into()
    })
}

fn check_spmv(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let rt = runtime(comm)?;
    sparse::register_spmv(&rt)?;
    let n = 256;
    let host = HostCsr::tridiagonal(n);
    let a = Csr::upload(&rt, &host)?;
    let x = rt.create(tessera_runtime::DType::F64, &[n])?;
    rt.fill(&x, 2.0)?;
    let y = sparse::spmv(&rt, &a, &x)?;
    ensure(rt.read::<f64>(&y)? == host.spmv(&vec![2.0; n]), || {
        format!("rank {}: SpMV differs from the host product", comm.rank())
    })
}

fn check_cg(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let host = HostCsr::laplacian_2d(12);
    let b: Vec<f64> = (0..host.rows).map(|i| 1.0 + (i % 5) as f64).collect();
    let solve = |rt: &Runtime| -> Result<(Vec<f64>, usize)> {
        cg::register(rt)?;
        let a = Csr::upload(rt, &host)?;
        cg::solve(rt, &a, &b, 1e-10, 1000)
    };
    let (x, it) = solve(&runtime(comm)?)?;
    // The same number of processors on one rank: the same launch domains.
    let one = Runtime::builder()
        .threads(comm.size())
        .min_piece_size(16)
        .build();
    let (x1, it1) = solve(&one)?;
    let same = it == it1 && x.iter().zip(&x1).all(|(a, b)| a.to_bits() == b.to_bits());
    ensure(same, || {
        format!(
            "rank {}: CG differs from one rank ({it} vs {it1} iterations)",
            comm.rank()
        )
    })
}

/// Megabytes in one transfer (rendezvous-sized MPI messages): every rank writes a block,
/// one point on rank 0 sums the whole store.
fn check_big_transfer(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let rt = runtime(comm)?;
    rt.register("iota", |ctx| {
        let mut x = ctx.write::<f64>(0);
        for i in x.range() {
            x.set_at(i, i as f64);
        }
    })?;
    rt.register("sum", |ctx| {
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
    })?;
    let n = 1 << 20;
    let x = rt.create(tessera_runtime::DType::F64, &[n])?;
    rt.task("iota")
        .write(&x)
        .launch_domain(&[comm.size()])
        .submit()?;
    let sum = rt
        .task("sum")
        .read(&x)
        .launch_domain(&[1])
        .submit_reduce(tessera_runtime::ReduceOp::Sum)?
        .get()?
        .as_f64();
    let want = (n * (n - 1) / 2) as f64;
    ensure(sum == want, || {
        format!("rank {}: sum {sum}, want {want}", comm.rank())
    })
}

/// A sharding key (`shard_by`): a 3 × 2 launch sharded by its second dimension runs point
/// `p` on rank `(p % 2) · N / 2` only, and the values every rank reads equal a one-rank
/// runtime's in this process.
fn check_keyed(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    use std::sync::Mutex;
    use tessera_runtime::Cut;
    let run = |rt: &Runtime| -> Result<(Vec<usize>, Vec<f64>)> {
        let ran: Arc<Mutex<Vec<usize>>> = Arc::default();
        let log = ran.clone();
        rt.register("mark", move |ctx| {
            log.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ctx.linear_point());
            let id = ctx.linear_point() as f64;
            let mut m = ctx.write::<f64>(0);
            for i in m.rect().lo()[0]..m.rect().hi()[0] {
                for j in m.rect().lo()[1]..m.rect().hi()[1] {
                    let v = m.get(&[i, j]);
                    m.set(&[i, j], 2.0 * v + id + (i * 100 + j) as f64);
                }
            }
        })?;
        let m = rt.from_vec(&[6, 4], (0..24).map(|v| v as f64).collect())?;
        for key in [&[1][..], &[0]] {
            rt.task("mark")
                .read_write(&m)
                .tile(&m, &[Cut::Equal(0), Cut::Equal(1)])
                .launch_domain(&[3, 2])
                .shard_by(key)
                .submit()?;
        }
        let values = rt.read::<f64>(&m)?;
        let mut ran = ran.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ran.sort_unstable();
        Ok((ran, values))
    };
    let (me, ranks) = (comm.rank(), comm.size());
    let (ran, values) = run(&runtime(comm)?)?;
    let (_, one) = run(&Runtime::builder().threads(1).build())?;
    let mut want: Vec<usize> = (0..6).filter(|p| (p % 2) * ranks / 2 == me).collect();
    want.extend((0..6).filter(|p| (p / 2) * ranks / 3 == me));
    want.sort_unstable();
    ensure(ran == want, || {
        format!("rank {me} ran points {ran:?}, its keys give {want:?}")
    })?;
    ensure(values == one, || {
        format!("rank {me}: the keyed launches differ from one rank")
    })
}

/// Reductions into a store fold at each sub-store's owner (`sparse::tiled_sum`): the values
/// equal a one-rank runtime's bitwise, and a rank sends exactly the buffers of its points whose
/// tile another rank folds.
fn check_reduction(comm: &Arc<ThreadedMpiComm>) -> Result<()> {
    let (me, ranks) = (comm.rank(), comm.size());
    let (total, acc, sent) = sparse::tiled_sum::run(&runtime(comm)?)?;
    let (total1, acc1, _) = sparse::tiled_sum::run(&Runtime::builder().threads(1).build())?;
    ensure(total == total1 && acc == acc1, || {
        format!("rank {me}: the reduction differs from one rank")
    })?;
    let want = sparse::tiled_sum::bytes_sent_by(me, ranks);
    ensure(sent == want, || {
        format!("rank {me} sent {sent} B of reduction buffers, want {want}")
    })
}

fn check_failure(comm: &Arc<ThreadedMpiComm>, rank: usize) -> Result<()> {
    let rt = runtime(comm)?;
    rt.register("fragile", move |ctx| {
        assert!(
            ctx.linear_point() != rank,
            "the point on rank {rank} refuses"
        );
        ctx.write::<f64>(0).as_mut_slice().fill(1.0);
    })?;
    let x = rt.create(tessera_runtime::DType::F64, &[64 * comm.size()])?;
    rt.task("fragile")
        .write(&x)
        .launch_domain(&[comm.size()])
        .submit()?;
    rt.read::<f64>(&x).map(|_| ())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let expected: Option<usize> = args.first().and_then(|a| a.parse().ok());
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let (fail_rank, kill_rank) = (flag("--fail-rank"), flag("--kill-rank"));
    let leave_rank = flag("--leave-rank");
    LAUNCH_AT_SUBMIT.store(leave_rank.is_some(), std::sync::atomic::Ordering::Relaxed);
    let Some(expected) = expected else {
        eprintln!("usage: mpi-runtime N [--fail-rank R | --kill-rank R | --leave-rank R]");
        return std::process::ExitCode::FAILURE;
    };
    let out = run_world_threaded(|comm| -> Result<()> {
        let got = comm.size();
        ensure(got == expected, || {
            format!("expected a world of {expected} ranks but this one has {got}")
        })?;
        if leave_rank == Some(comm.rank()) {
            return leave_early(comm);
        }
        let r = match fail_rank {
            Some(r) => check_failure(comm, r),
            None => check_stencil(comm, kill_rank)
                .and_then(|_| check_spmv(comm))
                .and_then(|_| check_memory(comm))
                .and_then(|_| check_cg(comm))
                .and_then(|_| check_keyed(comm))
                .and_then(|_| check_reduction(comm))
                .and_then(|_| check_big_transfer(comm)),
        };
        // Every rank reports its own outcome; a failure anywhere ends every rank with one.
        comm.check(r.map_err(|e| e.to_string()))
            .map_err(|e| fail(e.to_string()))?;
        if comm.rank() == 0 {
            println!("runtime on {got} ranks OK");
        }
        Ok(())
    });
    match out {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One write: `eprintln!` may write the prefix and the message separately, and
            // mpirun's own lines then land between them.
            use std::io::Write;
            let _ = std::io::stderr().write_all(format!("rank error: {e}\n").as_bytes());
            std::process::ExitCode::FAILURE
        }
    }
}
