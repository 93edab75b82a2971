//! MPI self-test: run under `mpirun -n N` with `N` as the first argument.
//!
//! It asserts the world size (a binary started by the wrong launcher runs as independent
//! single-rank copies and must not pass), checks every transport collective against values
//! computed independently on each rank, and round-trips generated tensors through
//! distributed load/store in memory and through `.tcs` split/merge files.
//!
//! ```text
//! mpirun --allow-run-as-root --oversubscribe -n 4 mpi-selftest 4
//! mpirun ... -n 2 mpi-selftest 2 --fail-rank 1    # agreed error: every rank exits 1
//! mpirun ... -n 2 mpi-selftest 2 --abort-rank 1   # unshared error: MPI_Abort ends the job
//! ```

use std::path::PathBuf;
use tessera_formats::tcs::{write_tensor, TcsFile};
use tessera_formats::{Format, Tensor};
use tessera_runtime::io::{
    load_blocks, merge_dir, split_file, store_to_root, NoProgress, SplitSpec,
};
use tessera_runtime::transport::mpi::{run_world, MpiComm};
use tessera_runtime::transport::{Communicator, TransportError};

#[derive(Debug, thiserror::Error)]
enum SelfTestError {
    #[error("expected a world of {expected} ranks but this one has {got}: start with `mpirun -n {expected}` (an MPICH mpirun runs an OpenMPI binary as separate single ranks)")]
    WorldSize { expected: usize, got: usize },
    #[error("check failed on rank {rank}: {what}")]
    Check { rank: usize, what: String },
    #[error("usage: mpi-selftest N [--fail-rank R | --abort-rank R]")]
    Usage,
    #[error("rank {0} fails on purpose (--abort-rank)")]
    Deliberate(usize),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Io(#[from] tessera_runtime::io::IoError),
}

fn ensure(comm: &MpiComm, ok: bool, what: impl Into<String>) -> Result<(), SelfTestError> {
    if ok {
        Ok(())
    } else {
        Err(SelfTestError::Check {
            rank: comm.rank(),
            what: what.into(),
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = run_world(|comm| run(comm, &args));
    match result {
        Ok(()) => {}
        Err(e) => {
            // One write per line, so the lines of several ranks do not interleave.
            let line = format!("mpi-selftest: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            std::process::exit(1);
        }
    }
}

fn run(comm: &MpiComm, args: &[String]) -> Result<(), SelfTestError> {
    let expected: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .ok_or(SelfTestError::Usage)?;
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    if comm.size() != expected {
        return Err(SelfTestError::WorldSize {
            expected,
            got: comm.size(),
        });
    }
    if let Some(r) = flag("--abort-rank") {
        comm.barrier()?;
        if comm.rank() == r {
            return Err(SelfTestError::Deliberate(r));
        }
        // The others wait in a collective that rank r never joins: only the abort ends them.
        comm.barrier()?;
        return Ok(());
    }
    let dir = shared_temp_dir(comm)?;
    if let Some(r) = flag("--fail-rank") {
        // Rank r is given a file that does not exist: an agreed error on every rank.
        let input = if comm.rank() == r {
            dir.join("missing.tcs")
        } else {
            dir.join("present.tcs")
        };
        if comm.rank() == 0 {
            let t = Tensor::<f64, u32>::from_entries(
                vec![3],
                Format::parse("s", 1).unwrap(),
                [(vec![1], 1.0)],
            )
            .unwrap();
            write_tensor(&dir.join("present.tcs"), &t, None).map_err(|e| SelfTestError::Check {
                rank: 0,
                what: e.to_string(),
            })?;
        }
        comm.barrier()?;
        let out = split_file(
            comm,
            &input,
            &SplitSpec::parse_blocks("0:2").unwrap(),
            &dir.join("b"),
            &NoProgress,
        );
        cleanup(comm, &dir)?;
        out?;
        return Ok(());
    }
    transport_checks(comm)?;
    io_checks(comm, &dir)?;
    cleanup(comm, &dir)?;
    if comm.rank() == 0 {
        println!("mpi-selftest: {} ranks OK", comm.size());
    }
    Ok(())
}

/// Rank 0 creates a directory and tells the others its name.
fn shared_temp_dir(comm: &MpiComm) -> Result<PathBuf, SelfTestError> {
    let mine = if comm.rank() == 0 {
        let d = std::env::temp_dir().join(format!("tessera-mpi-selftest-{}", std::process::id()));
        let made = std::fs::create_dir_all(&d).map_err(|e| e.to_string());
        comm.check(made).map_err(|e| SelfTestError::Check {
            rank: 0,
            what: e.to_string(),
        })?;
        d.to_string_lossy().into_owned().into_bytes()
    } else {
        comm.check(Ok(())).map_err(|e| SelfTestError::Check {
            rank: comm.rank(),
            what: e.to_string(),
        })?;
        Vec::new()
    };
    let all = comm.all_gather(&mine)?;
    Ok(PathBuf::from(String::from_utf8_lossy(&all[0]).into_owned()))
}

fn cleanup(comm: &MpiComm, dir: &std::path::Path) -> Result<(), SelfTestError> {
    comm.barrier()?;
    if comm.rank() == 0 {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

fn transport_checks(comm: &MpiComm) -> Result<(), SelfTestError> {
    let (me, n) = (comm.rank(), comm.size());
    let payload = |from: usize, to: usize| -> Vec<u8> {
        (0..(from * 7 + to * 3) % 11 + from)
            .map(|i| (from * 31 + to * 17 + i) as u8)
            .collect()
    };
    let got = comm.all_to_all((0..n).map(|to| payload(me, to)).collect())?;
    for (from, b) in got.iter().enumerate() {
        ensure(
            comm,
            *b == payload(from, me),
            format!("all_to_all from rank {from}"),
        )?;
    }
    let gathered = comm.all_gather_u64(&[me as u64 * 10, 1])?;
    ensure(
        comm,
        gathered == (0..n).map(|r| vec![r as u64 * 10, 1]).collect::<Vec<_>>(),
        "all_gather_u64",
    )?;
    let prefix = comm.exclusive_prefix_sum(&[me as u64 + 1, 2])?;
    ensure(
        comm,
        prefix == vec![(me * (me + 1) / 2) as u64, 2 * me as u64],
        format!("exclusive prefix sum {prefix:?}"),
    )?;
    ensure(
        comm,
        comm.all_sum(&[1, me as u64])? == vec![n as u64, (n * (n - 1) / 2) as u64],
        "all_sum",
    )?;
    // A ring of point-to-point messages, one of them large (several chunks' worth of pages).
    let big: Vec<u8> = (0..(6 << 20)).map(|i| (i % 253) as u8 ^ me as u8).collect();
    // Even ranks send first, odd ranks receive first: MPI may hold a large send until its
    // receive is posted, so a ring where everyone sends first could wait forever.
    let from = (me + n - 1) % n;
    let got = if me % 2 == 0 {
        comm.send((me + 1) % n, 5, big)?;
        comm.recv(from, 5)?
    } else {
        let got = comm.recv(from, 5)?;
        comm.send((me + 1) % n, 5, big)?;
        got
    };
    ensure(
        comm,
        got.len() == 6 << 20
            && got
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 253) as u8 ^ from as u8),
        "ring message",
    )?;
    let agreed = comm.check(if me == n - 1 {
        Err("planned".into())
    } else {
        Ok(())
    });
    ensure(
        comm,
        agreed.is_err(),
        "check must fail on every rank when one rank fails",
    )?;
    comm.barrier()?;
    Ok(())
}

/// A deterministic pseudo-random tensor (the same on every rank).
fn tensor(seed: u64, dims: &[usize], format: &str) -> Tensor<f64, u32> {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let total: usize = dims.iter().product();
    let mut entries = Vec::new();
    for flat in 0..total {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if state.is_multiple_of(3) {
            let mut c = vec![0; dims.len()];
            let mut rest = flat;
            for m in (0..dims.len()).rev() {
                c[m] = rest % dims[m];
                rest /= dims[m];
            }
            entries.push((c, (state % 97) as f64 + 0.5));
        }
    }
    Tensor::from_entries(
        dims.to_vec(),
        Format::parse(format, dims.len()).unwrap(),
        entries,
    )
    .unwrap()
}

fn io_checks(comm: &MpiComm, dir: &std::path::Path) -> Result<(), SelfTestError> {
    let cases: [(&[usize], &str, &str); 6] = [
        (&[40, 30], "csr", "0:3,1:2"),
        (&[40, 30], "csc", "0:7/7/33,1:5"),
        (&[25, 20], "dcsr", "0:9"),
        (&[12, 9, 7], "sds", "0:2,2:3"),
        (&[6, 5, 8], "dense", "1:4"),
        (&[50], "s", "0:1"),
    ];
    for (i, (dims, format, blocks)) in cases.iter().enumerate() {
        let t = tensor(i as u64 + 1, dims, format);
        let spec = if blocks.contains('/') {
            SplitSpec::parse_points(blocks)
        } else {
            SplitSpec::parse_blocks(blocks)
        }
        .unwrap();
        let grid = spec.grid(t.dims())?;
        // In memory: load into blocks, store back to rank 0.
        let mine = load_blocks(comm, &t.view(), &grid, &NoProgress)?;
        let views: Vec<_> = mine.iter().map(|b| b.tensor.view()).collect();
        let back = store_to_root(comm, &views, &NoProgress)?;
        if comm.rank() == 0 {
            ensure(
                comm,
                back.as_ref() == Some(&t),
                format!("in-memory round trip of {format} {dims:?} split {blocks}"),
            )?;
        }
        // Files: split into block files, merge into one file.
        let input = dir.join(format!("t{i}.tcs"));
        if comm.rank() == 0 {
            write_tensor(&input, &t, None).map_err(|e| SelfTestError::Check {
                rank: 0,
                what: e.to_string(),
            })?;
        }
        comm.barrier()?;
        let blocks_dir = dir.join(format!("blocks{i}"));
        let split = split_file(comm, &input, &spec, &blocks_dir, &NoProgress)?;
        ensure(comm, split.blocks == grid.block_count()?, "block count")?;
        let output = dir.join(format!("out{i}.tcs"));
        merge_dir(comm, &blocks_dir, &output, &NoProgress)?;
        let merged = TcsFile::open(&output)
            .and_then(|f| f.to_tensor::<f64, u32>())
            .map_err(|e| SelfTestError::Check {
                rank: comm.rank(),
                what: e.to_string(),
            })?;
        ensure(
            comm,
            merged == t,
            format!("file round trip of {format} {dims:?} split {blocks}"),
        )?;
    }
    Ok(())
}
