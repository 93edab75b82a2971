//! The same input gives a byte-identical `.tcs` file at every memory budget, thread count
//! and rank count: `convert` with budgets that make one run or many, on one core or all of
//! them, and `split`/`merge` on 1 to 4 thread ranks, all agree with each other. Duplicates
//! with values whose sum depends on the order of addition make a difference visible.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{ok, run, tcs_bytes};

/// The same command on one CPU (`taskset`), so the parser and the run sort use one thread;
/// `None` where taskset is missing.
fn run_on_one_cpu(dir: &Path, args: &[&str]) -> Option<Output> {
    Command::new("taskset")
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_tessera-data"))
        .args(args)
        .current_dir(dir)
        .output()
        .ok()
}

#[test]
fn convert_split_and_merge_give_the_same_bytes_at_every_budget_thread_and_rank_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 120 000 entries on a 60 x 40 x 7 grid: coordinates repeat (about 7 times), values 0.1, 0.2,
    // 0.3, 1/3, ... whose sums change with the order of addition; unsorted.
    let values = [
        "0.1",
        "0.2",
        "0.3",
        "0.001",
        "0.3333333333333333",
        "7",
        "-0.7",
        "1e-17",
    ];
    let mut text = String::with_capacity(8 << 20);
    for k in 0u64..120_000 {
        let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (i, j, l) = (h % 60, (h >> 20) % 40, (h >> 40) % 7);
        text += &format!(
            "{} {} {} {}\n",
            i + 1,
            j + 1,
            l + 1,
            values[(h >> 61) as usize]
        );
    }
    std::fs::write(d.join("t.tns"), text).unwrap();
    let mut outputs = Vec::new();
    for (k, memory) in ["1M", "8M", "64M", "1G"].iter().enumerate() {
        let out = format!("m{k}.tcs");
        ok(run(
            d,
            &["convert", "t.tns", &out, "--memory", memory, "-q"],
        ));
        outputs.push(out);
    }
    for (k, format) in ["dss", "sds:2,0,1"].iter().enumerate() {
        // Dense levels take the other path (two passes) when their sizes are not declared.
        let out = format!("f{k}.tcs");
        ok(run(
            d,
            &[
                "convert", "t.tns", &out, "-f", format, "--memory", "1M", "-q",
            ],
        ));
        let one = format!("f{k}-one-cpu.tcs");
        match run_on_one_cpu(
            d,
            &[
                "convert", "t.tns", &one, "-f", format, "--memory", "1M", "-q",
            ],
        ) {
            Some(o) => {
                ok(o);
                assert_eq!(
                    tcs_bytes(&d.join(&out)),
                    tcs_bytes(&d.join(&one)),
                    "{format}: one CPU and all CPUs differ"
                );
            }
            None => eprintln!("SKIPPED the one-CPU run: taskset is not available"),
        }
    }
    if let Some(o) = run_on_one_cpu(d, &["convert", "t.tns", "one.tcs", "--memory", "1M", "-q"]) {
        ok(o);
        outputs.push("one.tcs".into());
    }
    for ranks in ["1", "2", "3", "4"] {
        let blocks = format!("b{ranks}");
        ok(run(
            d,
            &[
                "split", "m0.tcs", "--blocks", "0:3,2:2", "-o", &blocks, "--ranks", ranks, "-q",
            ],
        ));
        let merged = format!("r{ranks}.tcs");
        ok(run(
            d,
            &["merge", &blocks, "-o", &merged, "--ranks", ranks, "-q"],
        ));
        outputs.push(merged);
    }
    let first = tcs_bytes(&d.join(&outputs[0]));
    for o in &outputs[1..] {
        assert!(
            tcs_bytes(&d.join(o)) == first,
            "{o} differs from {}",
            outputs[0]
        );
    }
}
