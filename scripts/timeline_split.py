#!/usr/bin/env python3
"""Wall-time split of the runtime's event log (`timeline` feature, branch metg11).

Usage: scripts/timeline_split.py LOG [FROM TO]
  LOG: what `TESSERA_TIMELINE=LOG target/release/examples/stencil_steps ...` wrote (built with
  `--features timeline`); FROM/TO: the share of the run's time span to look at (default 0.3
  0.9: the steady state, after the trace is recorded and before the final fence).

Prints, per thread, the wall time in each state (stack attribution: the innermost open span
owns the time): body, node (run_node outside the body), poll (spinning / yielding for a
node), ledger (waiting for a ledger lock another thread holds: only contended acquisitions
are marked, branch ledger14), sleep, issue (submit outside replay and helping), replay, help (the issuer's wait
outside nodes, polls and sleeps), outside (none open: the application's loop, a worker
between nodes); then per point node the delay from ready (queued or kept) to start, and the
step period.
"""

import collections
import statistics
import sys

OPEN = {
    "BodyBegin": "body",
    "NodeBegin": "node",
    "PollBegin": "poll",
    "SleepBegin": "sleep",
    "IssueBegin": "issue",
    "ReplayBegin": "replay",
    "HelpBegin": "help",
    "LetGoBegin": "letgo",
    "LedgerWaitBegin": "ledger",
}
CLOSE = {
    "BodyEnd": "body",
    "NodeEnd": "node",
    "PollEnd": "poll",
    "SleepEnd": "sleep",
    "IssueEnd": "issue",
    "ReplayEnd": "replay",
    "HelpEnd": "help",
    "LetGoEnd": "letgo",
    "LedgerWaitEnd": "ledger",
}


def main():
    path = sys.argv[1]
    lo, hi = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (0.3, 0.9)
    by_thread = collections.defaultdict(list)
    for line in open(path):
        name, t, ev, i = line.split()
        by_thread[name].append((int(t), ev, int(i)))
    t_all = [e[0] for v in by_thread.values() for e in v]
    t0, t1 = min(t_all), max(t_all)
    a, b = t0 + lo * (t1 - t0), t0 + hi * (t1 - t0)
    wall = b - a
    print(f"window {wall / 1e6:.2f} ms ({lo:.0%}-{hi:.0%} of the run)")

    # Steps: point nodes' tasks (position), in the window.
    ready_at = {}  # node address -> last ready time
    points = []  # (thread, position, point, ready, begin, end, body)
    split = {}
    counts = {}
    for name, evs in sorted(by_thread.items()):
        evs.sort(key=lambda e: e[0])
        stack = []
        acc = collections.Counter()
        cnt = collections.Counter()
        last = None
        for t, ev, i in evs:
            if last is not None:
                lo_t, hi_t = max(last, a), min(t, b)
                if hi_t > lo_t:
                    acc[stack[-1] if stack else "outside"] += hi_t - lo_t
            last = t
            if ev in OPEN:
                stack.append(OPEN[ev])
                if a <= t <= b:
                    cnt[OPEN[ev]] += 1
            elif ev in CLOSE:
                want = CLOSE[ev]
                # Tolerate a close without its open (the log starts mid-span).
                if want in stack:
                    while stack and stack.pop() != want:
                        pass
            if ev == "PollEnd" and a <= t <= b:
                cnt["poll_found" if i else "poll_empty"] += 1
        split[name] = acc
        counts[name] = cnt

    # Nodes, from all threads' events in time order (a node is made ready on one thread and
    # run on another).
    merged = sorted((t, name, ev, i) for name, evs in by_thread.items() for t, ev, i in evs)
    cur = {}
    for t, name, ev, i in merged:
        if ev == "Ready":
            ready_at[i] = t
        elif ev == "NodeBegin":
            cur[name] = {"begin": t, "ready": ready_at.pop(i, None), "thread": name}
        elif name not in cur:
            continue
        elif ev == "NodeTask":
            cur[name]["task"] = (i >> 16, i & 0xFFFF)
        elif ev == "BodyBegin":
            cur[name]["bb"] = t
        elif ev == "BodyEnd":
            cur[name]["be"] = t
        elif ev == "NodeEnd":
            node = cur.pop(name)
            node["end"] = t
            if "task" in node and a <= node["begin"] <= b:
                points.append(node)

    steps = sorted({p["task"][0] for p in points})
    nsteps = max(1, len(steps))
    print(f"{len(points)} nodes run in the window, {nsteps} tasks (steps)")
    print(f"wall per step {wall / nsteps:.0f} ns")
    cats = ["body", "ledger", "node", "letgo", "poll", "sleep", "issue", "replay", "help", "outside"]
    print("per step, ns:".ljust(24) + "".join(c.rjust(9) for c in cats))
    for name, acc in split.items():
        print(name[:23].ljust(24) + "".join(f"{acc[c] / nsteps:9.0f}" for c in cats))
    for name, cnt in counts.items():
        print(
            f"{name}: per step "
            + ", ".join(f"{k} {v / nsteps:.3f}" for k, v in sorted(cnt.items()))
        )

    # Who ran the points, and the delay from ready to start.
    ran = collections.Counter(p["thread"] for p in points)
    print("points run by: " + ", ".join(f"{k} {v / len(points):.1%}" for k, v in ran.items()))
    delays = [p["begin"] - p["ready"] for p in points if p["ready"] is not None]
    if delays:
        q = statistics.quantiles(delays, n=20)
        print(
            f"ready -> start: n {len(delays)}, median {statistics.median(delays):.0f} ns,"
            f" p75 {q[14]:.0f}, p90 {q[17]:.0f}, p95 {q[18]:.0f}, max {max(delays)}"
        )
        for name in ran:
            d = [p["begin"] - p["ready"] for p in points if p["thread"] == name and p["ready"]]
            if d:
                print(f"  on {name}: median {statistics.median(d):.0f} ns, mean {statistics.mean(d):.0f}")
    bodies = [p["be"] - p["bb"] for p in points if "bb" in p and "be" in p]
    if bodies:
        print(f"body: median {statistics.median(bodies):.0f} ns, mean {statistics.mean(bodies):.0f}")
    nodes = [p["end"] - p["begin"] - (p.get("be", 0) - p.get("bb", 0)) for p in points]
    print(f"node outside body: median {statistics.median(nodes):.0f} ns")

    # Step structure: per step, its points' begin/end and threads; period = end(s) - end(s-1).
    by_step = collections.defaultdict(list)
    for p in points:
        by_step[p["task"][0]].append(p)
    ends = []
    same = 0
    overlap = 0
    full = 0
    for s in steps:
        ps = [p for p in by_step[s] if p["task"][1] != 0xFFFF]
        if len(ps) != 2:
            continue
        full += 1
        ends.append(max(p["end"] for p in ps))
        if ps[0]["thread"] == ps[1]["thread"]:
            same += 1
        else:
            x, y = ps
            if min(x["end"], y["end"]) > max(x["begin"], y["begin"]):
                overlap += 1
    if len(ends) > 1:
        per = [y - x for x, y in zip(ends, ends[1:])]
        q = statistics.quantiles(per, n=20)
        print(
            f"step period (end to end): median {statistics.median(per):.0f} ns, mean"
            f" {statistics.mean(per):.0f}, p10 {q[1]:.0f}, p90 {q[17]:.0f}"
        )
    if full:
        print(
            f"steps with both points on one thread {same / full:.1%}; on two threads"
            f" overlapping in time {overlap / full:.1%}"
        )


if __name__ == "__main__":
    main()
