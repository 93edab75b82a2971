use super::*;
use proptest::prelude::*;
use std::time::Duration;

fn all_ok<T>(results: Vec<Result<T, TransportError>>) -> Vec<T> {
    results
        .into_iter()
        .map(|r| r.expect("rank succeeded"))
        .collect()
}

#[test]
fn ranks_know_their_rank_and_size() {
    let out = all_ok(run_ranks(5, |c| Ok((c.rank(), c.size()))));
    assert_eq!(out, (0..5).map(|r| (r, 5)).collect::<Vec<_>>());
}

#[test]
fn zero_ranks_means_one() {
    let out = all_ok(run_ranks(0, |c| Ok(c.size())));
    assert_eq!(out, vec![1]);
}

#[test]
fn point_to_point_keeps_order_per_tag() {
    let out = all_ok(run_ranks(2, |c| {
        if c.rank() == 0 {
            for i in 0..10u8 {
                c.send(1, 7, vec![i; i as usize])?;
                c.send(1, 8, vec![100 + i])?;
            }
            Ok(vec![])
        } else {
            // Receive tag 8 first: messages of another tag must not get in the way.
            let eights: Vec<u8> = (0..10)
                .map(|_| c.recv(0, 8).map(|m| m[0]))
                .collect::<Result<_, _>>()?;
            let sevens: Vec<usize> = (0..10)
                .map(|_| c.recv(0, 7).map(|m| m.len()))
                .collect::<Result<_, _>>()?;
            assert_eq!(eights, (100..110).collect::<Vec<u8>>());
            Ok(sevens)
        }
    }));
    assert_eq!(out[1], (0..10).collect::<Vec<usize>>());
}

#[test]
fn reserved_tags_and_bad_ranks_are_errors() {
    let out = run_ranks(2, |c| {
        assert_eq!(
            c.send(1, RESERVED_TAG, vec![]),
            Err(TransportError::ReservedTag { tag: RESERVED_TAG })
        );
        assert_eq!(
            c.send(2, 1, vec![]),
            Err(TransportError::BadRank { rank: 2, size: 2 })
        );
        assert!(matches!(
            c.recv(9, 1),
            Err(TransportError::BadRank { rank: 9, .. })
        ));
        Ok::<_, TransportError>(())
    });
    assert!(out.iter().all(|r| r.is_ok()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// all_to_all delivers exactly what each rank addressed to each other rank.
    #[test]
    fn all_to_all_delivers_every_buffer(n in 1usize..6, seed in any::<u64>()) {
        let payload = |from: usize, to: usize| -> Vec<u8> {
            let len = ((seed >> (from * 3 + to)) % 17) as usize;
            (0..len).map(|i| (from * 31 + to * 7 + i) as u8).collect()
        };
        let out = all_ok(run_ranks(n, |c| {
            let outgoing = (0..n).map(|to| payload(c.rank(), to)).collect();
            c.all_to_all(outgoing)
        }));
        for (to, got) in out.iter().enumerate() {
            for (from, buf) in got.iter().enumerate() {
                prop_assert_eq!(buf, &payload(from, to));
            }
        }
    }

    /// all_gather, prefix sums and sums agree with the same figures computed sequentially.
    #[test]
    fn reductions_match_sequential(vals in prop::collection::vec(prop::collection::vec(0u64..1000, 3), 1..6)) {
        let n = vals.len();
        let out = all_ok(run_ranks(n, |c| {
            let mine = &vals[c.rank()];
            Ok((c.all_gather_u64(mine)?, c.exclusive_prefix_sum(mine)?, c.all_sum(mine)?))
        }));
        for (r, (gathered, prefix, total)) in out.iter().enumerate() {
            prop_assert_eq!(gathered, &vals);
            for k in 0..3 {
                prop_assert_eq!(prefix[k], vals[..r].iter().map(|v| v[k]).sum::<u64>());
                prop_assert_eq!(total[k], vals.iter().map(|v| v[k]).sum::<u64>());
            }
        }
    }
}

#[test]
fn collectives_in_a_loop_do_not_mix_rounds() {
    let out = all_ok(run_ranks(4, |c| {
        let mut seen = Vec::new();
        for round in 0..50u64 {
            c.barrier()?;
            let all = c.all_gather_u64(&[round * 10 + c.rank() as u64])?;
            seen.push(all.iter().map(|v| v[0]).collect::<Vec<_>>());
        }
        Ok(seen)
    }));
    for seen in out {
        for (round, vals) in seen.iter().enumerate() {
            assert_eq!(
                vals,
                &(0..4).map(|r| round as u64 * 10 + r).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn check_turns_one_failure_into_errors_everywhere() {
    let out = run_ranks(4, |c| {
        let local = if c.rank() == 2 {
            Err("cannot open blocks/2.tcs".to_string())
        } else {
            Ok(())
        };
        c.check(local)
    });
    let text = |r: &Result<(), CheckError>| r.as_ref().map_err(|e| e.to_string()).err();
    assert_eq!(text(&out[2]).as_deref(), Some("cannot open blocks/2.tcs"));
    for r in [0, 1, 3] {
        assert_eq!(
            text(&out[r]).as_deref(),
            Some("rank 2 failed: cannot open blocks/2.tcs")
        );
    }
    let ok = run_ranks(3, |c| c.check(Ok(())));
    assert!(ok.iter().all(|r| r.is_ok()));
}

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("bad input on rank {0}")]
    Bad(usize),
    #[error(transparent)]
    Transport(#[from] TransportError),
}

#[test]
fn a_rank_that_returns_an_error_wakes_blocked_peers() {
    // Ranks 0, 1, 3 wait in a collective that rank 2 never joins: without failure
    // propagation this would hang.
    let out = run_ranks(4, |c| {
        if c.rank() == 2 {
            return Err(TestError::Bad(2));
        }
        c.barrier()?;
        Ok(())
    });
    assert!(matches!(out[2], Err(TestError::Bad(2))));
    for r in [0, 1, 3] {
        match &out[r] {
            Err(TestError::Transport(TransportError::PeerFailed { rank: 2, message })) => {
                assert_eq!(message, "bad input on rank 2")
            }
            other => panic!("rank {r}: expected PeerFailed, got {other:?}"),
        }
    }
}

#[test]
fn a_panicking_rank_wakes_blocked_peers() {
    let out = run_ranks(3, |c| {
        if c.rank() == 0 {
            panic!("index out of bounds in rank 0");
        }
        c.recv(0, 1)?;
        Ok::<_, TransportError>(())
    });
    for r in out {
        match r {
            Err(TransportError::PeerFailed { rank: 0, message }) => {
                assert!(message.contains("index out of bounds"), "{message}")
            }
            other => panic!("expected PeerFailed from rank 0, got {other:?}"),
        }
    }
}

#[test]
fn waiting_on_a_rank_that_finished_is_an_error() {
    let out = run_ranks(2, |c| {
        if c.rank() == 1 {
            c.recv(0, 3)?;
        }
        Ok::<_, TransportError>(())
    });
    assert!(out[0].is_ok());
    assert_eq!(
        out[1],
        Err(TransportError::PeerExited {
            rank: 0,
            me: 1,
            tag: 3
        })
    );
}

#[test]
fn large_messages_move_intact() {
    let out = all_ok(run_ranks(2, |c| {
        let big: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
        let got = c.all_to_all(vec![big.clone(), big])?;
        Ok(got
            .iter()
            .map(|b| b.iter().map(|&x| x as u64).sum::<u64>())
            .collect::<Vec<_>>())
    }));
    let expect: u64 = (0..(3u64 << 20)).map(|i| i % 251).sum();
    assert!(out.iter().flatten().all(|&s| s == expect));
}

#[test]
fn recv_any_takes_messages_from_every_sender_and_times_out_when_none_come() {
    let got = all_ok(run_ranks(3, |c| {
        if c.rank() > 0 {
            c.send(0, 7, vec![c.rank() as u8])?;
            return Ok(vec![]);
        }
        let mut from = vec![];
        while from.len() < 2 {
            if let Some((r, m)) = c.recv_any(7, Duration::from_secs(5))? {
                assert_eq!(m, vec![r as u8]);
                from.push(r);
            }
        }
        assert_eq!(c.recv_any(7, Duration::from_millis(10))?, None);
        from.sort();
        Ok(from)
    }));
    assert_eq!(got[0], vec![1, 2]);
}

#[test]
fn recv_any_reports_a_failed_job() {
    let r = run_ranks(2, |c| -> Result<(), TransportError> {
        if c.rank() == 1 {
            return Err(TransportError::Launch("boom".into()));
        }
        loop {
            c.recv_any(7, Duration::from_millis(50))?;
        }
    });
    assert!(
        matches!(&r[0], Err(TransportError::PeerFailed { rank: 1, .. })),
        "{:?}",
        r[0]
    );
}
