#!/usr/bin/env python3
"""bench/pipeline_trace.py [--summary] PREFIX [PREFIX ...]: where a pipeline's idle
time went, from the traces examples/pipeline_mlp --trace PREFIX wrote
(PREFIX.RANK: "step stage replica kind micro t0_us t1_us", td_pipe_trace).

Per stage (replica 0), over the traced steps:
  span     the step from its first event to its last (ms, mean)
  busy     F, B, W, BW
  bubble   (span - busy) / span, split into
    peer   waiting for a message the neighbour had not sent yet: the
           schedule's own bubble and the stages' imbalance (and any delay
           the neighbour itself took earlier)
    flight waiting for a message already sent: from max(send, wait start)
           to the wait's end: the transport's latency as the waiting stage
           saw it
    other  neither computing nor waiting (posting sends and receives,
           slicing, the executor's bookkeeping)
  latency  of the messages a stage waited on after they were sent
           (flight > 0): median, p90, max (us)
Each stage's op times: the median F, B, W and BW of one micro-batch (ms)
over the traced steps with their 10th and 90th percentiles (the ops'
jitter), and their sum per step.
The bubble as the schedule's theory defines it ("pipeline bubble"): the
theory's step is the pipeline's, from the first forward on any stage to
the last backward on any stage (on the shared clock), so a stage's own
wait before that (for its neighbour's optimizer step and the step's
start) is not in it; a stage's bubble is then 1 - its busy time / that
span, and the pipeline's is the costliest stage's (its least idle),
which is (S-1)/(M+S-1) for equal stages, F + B per micro-batch and free
messages (the zero-bubble paper's bubble rate: the step less M times the
stage's F + B + W, over the step). Each other stage's bubble is that plus
its imbalance: (busy of the costliest - its busy) / span.
--summary prints one line per PREFIX instead:
  PREFIX pipeline=X replay=X stage0=X stage1=X ... imbalance0=X ...
  raw0=X ... F0_ms=X B0_ms=X ...
(replay: the pipeline's bubble with every step replayed at its ops' own
times and messages free; raw: (span of the stage's own first to last
event - busy) / that span; the op times are medians per micro-batch).
then every step replayed with each op taking its own measured time and
messages none (the schedule, the stages' imbalance and each op's jitter:
what the measured bubble has beyond it is what messages and the executor
cost),
and one step's timeline (the step of median span), 0.25 ms a character
(more where the step is longer than 40 ms):
F forward, B input backward, W weight backward, X whole backward,
- waiting for a message not sent yet, ~ waiting for one in flight,
. the rest. Standard library only."""
import glob
import sys
from collections import defaultdict

COMPUTE = {"F", "B", "W", "BW"}


def load(prefix):
    ev = defaultdict(list)          # (step, stage) -> events, replica 0
    for path in sorted(glob.glob(prefix + ".*")):
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) != 7 or p[2] != "0":
                    continue
                ev[(int(p[0]), int(p[1]))].append(
                    (p[3], int(p[4]), float(p[5]), float(p[6])))
    return ev


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def replay_ops(ops):
    """The step replayed with each op taking its own measured time and
    messages taking none: OPS[s] is stage s's (kind, micro, duration) in
    the order it ran them. Returns (makespan, busy per stage)."""
    S = len(ops)
    t = [0.0] * S
    pos = [0] * S
    act, grad = {}, {}            # (stage, micro) -> when it is in
    moved = True
    while moved:
        moved = False
        for s in range(S):
            if pos[s] == len(ops[s]):
                continue
            kind, m, d = ops[s][pos[s]]
            need = 0.0
            if kind == "F" and s > 0:
                need = act.get((s, m))
            elif kind in ("B", "BW") and s < S - 1:
                need = grad.get((s, m))
            if need is None:
                continue
            t[s] = max(t[s], need) + d
            if kind == "F" and s < S - 1:
                act[(s + 1, m)] = t[s]
            elif kind in ("B", "BW") and s > 0:
                grad[(s - 1, m)] = t[s]
            pos[s] += 1
            moved = True
    busy = [sum(d for _, _, d in o) for o in ops]
    return max(t), busy


def replays(ev, steps, stages):
    """(span, each stage's busy time) of every step traced on all stages,
    replayed at each op's own measured time with messages free."""
    for step in steps:
        if any((step, s) not in ev for s in stages):
            continue
        yield replay_ops([[(k, m, t1 - t0) for k, m, t0, t1 in ev[(step, s)]
                           if k in COMPUTE] for s in stages])


def theory_bubble(ev, steps, stages):
    """The bubble as the theory defines it (see the top): per stage
    1 - busy / the pipeline's span (first compute op on any stage to the
    last), summed over the steps every stage traced; the pipeline's is
    the costliest stage's. Returns (pipeline, {stage: bubble},
    {stage: imbalance}, {stage: raw})."""
    span_sum = 0.0
    busy = defaultdict(float)
    raw_span = defaultdict(float)
    imb = defaultdict(float)
    pipe = 0.0
    for step in steps:
        if any((step, s) not in ev for s in stages):
            continue
        ops = {s: [e for e in ev[(step, s)] if e[0] in COMPUTE]
               for s in stages}
        if any(not ops[s] for s in stages):
            continue
        t0 = min(ops[s][0][2] for s in stages)
        t1 = max(ops[s][-1][3] for s in stages)
        span = t1 - t0
        b = {s: sum(e[3] - e[2] for e in ops[s]) for s in stages}
        top = max(b.values())
        span_sum += span
        pipe += span - top
        for s in stages:
            busy[s] += b[s]
            imb[s] += top - b[s]
            es = ev[(step, s)]
            raw_span[s] += es[-1][3] - es[0][2]
    if span_sum <= 0:
        return None
    return (pipe / span_sum,
            {s: 1 - busy[s] / span_sum for s in stages},
            {s: imb[s] / span_sum for s in stages},
            {s: 1 - busy[s] / raw_span[s] for s in stages})


def op_times(ev, steps, s):
    """Median time of one F, B, W, BW on stage S (ms), and the mean sum of
    each kind per step (ms)."""
    d = defaultdict(list)
    tot = defaultdict(float)
    n = 0
    for step in steps:
        es = ev.get((step, s))
        if not es:
            continue
        n += 1
        for kind, m, t0, t1 in es:
            if kind in COMPUTE:
                d[kind].append(t1 - t0)
                tot[kind] += t1 - t0
    return ({k: pct(v, 0.5) / 1e3 for k, v in d.items()},
            {k: v / n / 1e3 for k, v in tot.items()} if n else {},
            {k: (pct(v, 0.1) / 1e3, pct(v, 0.9) / 1e3) for k, v in d.items()})


def summary(prefix):
    ev = load(prefix)
    steps = sorted({k[0] for k in ev})
    stages = sorted({k[1] for k in ev})
    tb = theory_bubble(ev, steps, stages) if ev else None
    if tb is None:
        print("%s no-trace" % prefix)
        return
    pipe, per, imb, raw = tb
    # the same steps replayed at each op's own time, messages free: the
    # replay's pipeline bubble (its costliest stage's idle share)
    rs = sp = 0.0
    for span, busy in replays(ev, steps, stages):
        sp += span
        rs += span - max(busy)
    f = ["%s pipeline=%.3f replay=%.3f" % (prefix, pipe,
                                           rs / sp if sp > 0 else 0)]
    f += ["stage%d=%.3f" % (s, per[s]) for s in stages]
    f += ["imbalance%d=%.3f" % (s, imb[s]) for s in stages]
    f += ["raw%d=%.3f" % (s, raw[s]) for s in stages]
    for s in stages:
        med, _, _ = op_times(ev, steps, s)
        for k in ("F", "B", "W", "BW"):
            if k in med:
                f.append("%s%d_ms=%.3f" % (k, s, med[k]))
    print(" ".join(f))


def analyse(prefix):
    ev = load(prefix)
    if not ev:
        print("%s: no trace" % prefix)
        return
    steps = sorted({k[0] for k in ev})
    stages = sorted({k[1] for k in ev})
    # the send of each message: (step, to-stage, kind, micro) -> t0
    sent = {}
    for (step, s), es in ev.items():
        for kind, m, t0, t1 in es:
            if kind == "send_act":
                sent[(step, s + 1, "wait_act", m)] = t0
            elif kind == "send_grad":
                sent[(step, s - 1, "wait_grad", m)] = t0
    print("%s: %d steps, stages %s" % (prefix, len(steps), stages))
    for s in stages:
        tot = defaultdict(float)
        lat = []
        spans = []
        for step in steps:
            es = ev.get((step, s), [])
            if not es:
                continue
            span = es[-1][3] - es[0][2]
            spans.append((span, step))
            tot["span"] += span
            for kind, m, t0, t1 in es:
                if kind in COMPUTE:
                    tot["busy"] += t1 - t0
                elif kind.startswith("wait"):
                    ts = sent.get((step, s, kind, m))
                    if ts is None:
                        tot["peer"] += t1 - t0   # sender not traced
                        continue
                    peer = max(0.0, min(ts, t1) - t0)
                    flight = t1 - max(ts, t0) if ts < t1 else 0.0
                    tot["peer"] += peer
                    tot["flight"] += flight
                    if flight > 0:
                        lat.append(flight)
        idle = tot["span"] - tot["busy"]
        other = idle - tot["peer"] - tot["flight"]
        n = len(spans)
        sp = tot["span"]
        print("  stage %d: span %.2f ms busy %.2f bubble %.3f = peer %.3f + "
              "flight %.3f + other %.3f; latency us median %.0f p90 %.0f "
              "max %.0f (%d waits)" % (
                  s, sp / n / 1e3, tot["busy"] / n / 1e3, idle / sp,
                  tot["peer"] / sp, tot["flight"] / sp, other / sp,
                  pct(lat, 0.5), pct(lat, 0.9), max(lat) if lat else 0,
                  len(lat)))
    for s in stages:
        med, tot, spread = op_times(ev, steps, s)
        print("  stage %d ops, ms: one micro-batch, median (p10-p90) %s; "
              "per step %s"
              % (s, " ".join("%s %.3f (%.3f-%.3f)" % (k, med[k], spread[k][0],
                                                      spread[k][1])
                             for k in ("F", "B", "W", "BW") if k in med),
                 " ".join("%s %.2f" % (k, tot[k])
                          for k in ("F", "B", "W", "BW") if k in tot)))
    tb = theory_bubble(ev, steps, stages)
    if tb is not None:
        pipe, per, imb, raw = tb
        print("  bubble as the theory defines it (span: first op to last op "
              "on any stage): pipeline %.3f; %s" % (pipe, " ".join(
                  "stage %d %.3f (imbalance %.3f)" % (s, per[s], imb[s])
                  for s in stages)))
    # every step replayed at its own ops' measured times, messages free:
    # what the schedule, the stages' imbalance and each op's jitter give;
    # the measured bubble beyond it is what the messages and the executor
    # cost
    rs = defaultdict(float)
    span_sum = 0.0
    for span, busy in replays(ev, steps, stages):
        span_sum += span
        for i, s in enumerate(stages):
            rs[s] += span - busy[i]
    if span_sum > 0:
        print("  replay at each op's measured time, messages free: %s" %
              " ".join("stage %d %.3f" % (s, rs[s] / span_sum)
                       for s in stages))
    # one step's timeline: the step of median span on stage 0
    spans0 = sorted((ev[(st, stages[0])][-1][3] - ev[(st, stages[0])][0][2],
                     st) for st in steps if (st, stages[0]) in ev)
    step = spans0[len(spans0) // 2][1]
    origin = min(ev[(step, s)][0][2] for s in stages if (step, s) in ev)
    end = max(ev[(step, s)][-1][3] for s in stages if (step, s) in ev)
    cell = max(250.0, (end - origin) / 160)    # at most 160 wide
    width = int((end - origin) / cell) + 1
    print("  step %d, %.2f ms a character:" % (step, cell / 1e3))
    letter = {"F": "F", "B": "B", "W": "W", "BW": "X"}
    for s in stages:
        row = ["."] * width
        digits = [" "] * width
        for kind, m, t0, t1 in ev.get((step, s), []):
            a = int((t0 - origin) / cell)
            b = max(a + 1, int((t1 - origin) / cell))
            if kind in COMPUTE:
                for i in range(a, min(b, width)):
                    row[i] = letter[kind]
                digits[min(a, width - 1)] = str(m % 10)
            elif kind.startswith("wait"):
                ts = sent.get((step, s, kind, m), t1)
                for i in range(a, min(b, width)):
                    row[i] = "-" if origin + (i + 0.5) * cell < ts else "~"
        print("   %d %s" % (s, "".join(row)))
        print("     %s" % "".join(digits))


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    if argv[1] == "--summary":
        for prefix in argv[2:]:
            summary(prefix)
        return 0
    for prefix in argv[1:]:
        analyse(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
