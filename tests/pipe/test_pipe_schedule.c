/* test_pipe_schedule.c: the schedules' op lists (runtime/pipe/schedule.c)
 * against todist/pipe.h's invariants, for S = 1..5 stages and M = 1..9
 * micro-batches: P1 (forwards and backwards each in micro-batch order, 2M
 * ops), F(m) before its backward, P3 (micro-batches in flight within the
 * bound, which 1F1B's stage 0 reaches), no deadlock (the whole pipeline,
 * run with its message dependencies, finishes), and the bubble theory:
 * the executor's rules replayed (pipe_schedule_replay) against the closed
 * forms and small cases worked out by hand. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/pipe/pipe_internal.h"
#include "tests/tap.h"

#define SMAX 5
#define MMAX 9

/* P1 and order within one stage's list; *PEAK: in flight at most. */
static int
check_stage(td_pipe_schedule_t sc, int S, int s, int M, int *peak)
{
    pipe_op_t ops[2 * MMAX];
    int nf = 0, nb = 0, fl = 0;

    pipe_schedule_ops(sc, S, s, M, ops);
    *peak = 0;
    for (int i = 0; i < 2 * M; i++) {
        if (ops[i].kind == PIPE_OP_F) {
            if (ops[i].micro != nf++) {
                return 0;
            }
            fl++;
        } else {
            if (ops[i].kind != (sc == TD_PIPE_ZB_H1 ? PIPE_OP_B : PIPE_OP_BW) ||
                ops[i].micro != nb++ || ops[i].micro >= nf) {
                return 0;
            }
            fl--;
        }
        *peak = fl > *peak ? fl : *peak;
    }
    return nf == M && nb == M;
}

/* Run all S stages' lists with the message dependencies: 1 if all end. */
static int
runs_through(td_pipe_schedule_t sc, int S, int M)
{
    pipe_op_t ops[SMAX][2 * MMAX];
    int pos[SMAX] = {0}, fdone[SMAX] = {0}, bdone[SMAX] = {0}, moved = 1;

    for (int s = 0; s < S; s++) {
        pipe_schedule_ops(sc, S, s, M, ops[s]);
    }
    while (moved) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            pipe_op_t op;
            if (pos[s] == 2 * M) {
                continue;
            }
            op = ops[s][pos[s]];
            if (op.kind == PIPE_OP_F ? (s > 0 && fdone[s - 1] <= op.micro)
                                     : (s < S - 1 && bdone[s + 1] <= op.micro)) {
                continue;       /* its message has not been sent yet */
            }
            if (op.kind == PIPE_OP_F) {
                fdone[s]++;
            } else {
                bdone[s]++;
            }
            pos[s]++;
            moved = 1;
        }
    }
    for (int s = 0; s < S; s++) {
        if (pos[s] != 2 * M) {
            return 0;
        }
    }
    return 1;
}

int
main(void)
{
    static const char *names[3] = {"gpipe", "1f1b", "zb"};

    plan(3 * 3 + 4 + 6);
    for (int sc = 0; sc < 3; sc++) {
        int order = 1, bound = 1, flow = 1;
        for (int S = 1; S <= SMAX; S++) {
            for (int M = 1; M <= MMAX; M++) {
                for (int s = 0; s < S; s++) {
                    int peak, cap = pipe_schedule_cap(sc, S, s, M);
                    order &= check_stage(sc, S, s, M, &peak);
                    /* the static list's own in-flight count (ZB's W's are
                     * the executor's, bounded by the cap) */
                    if (sc == TD_PIPE_GPIPE) {
                        bound &= peak == M && cap == M;
                    } else if (sc == TD_PIPE_1F1B) {
                        bound &= peak <= cap && cap == (S - s < M ? S - s : M);
                        bound &= s > 0 || peak == cap;
                    } else {
                        bound &= peak <= cap && cap == (S < M ? S : M);
                    }
                }
                flow &= runs_through(sc, S, M);
            }
        }
        ok(order, "%s: forwards and backwards each in micro-batch order, "
           "F(m) before its backward (P1)", names[sc]);
        ok(bound, "%s: micro-batches in flight within the bound (P3)",
           names[sc]);
        ok(flow, "%s: every pipeline of 1..%d stages, 1..%d micro-batches "
           "runs to the end", names[sc], SMAX, MMAX);
    }
    is_double(pipe_schedule_theory(TD_PIPE_GPIPE, 2, 8), 1.0 / 9, 1e-15,
              "gpipe bubble (S-1)/(M+S-1), S=2 M=8");
    is_double(pipe_schedule_theory(TD_PIPE_1F1B, 4, 8), 3.0 / 11, 1e-15,
              "1f1b bubble, S=4 M=8");
    is_double(pipe_schedule_theory(TD_PIPE_ZB_H1, 4, 8), 3.0 / 27, 1e-15,
              "zb bubble (S-1)/(3M+S-1), S=4 M=8");
    is_double(pipe_schedule_theory(TD_PIPE_1F1B, 1, 5), 0, 0,
              "one stage has no bubble");
    /* the replay of the executor's rules against the closed forms, and
     * against small cases worked out by hand */
    {
        int closed = 1, anyfb = 1;
        for (int S = 1; S <= SMAX; S++) {
            for (int M = 1; M <= MMAX; M++) {
                double s1 = S - 1, one = s1 / (M + s1);
                closed &= fabs(pipe_schedule_theory(TD_PIPE_GPIPE, S, M) -
                               one) < 1e-12;
                closed &= fabs(pipe_schedule_theory(TD_PIPE_1F1B, S, M) -
                               one) < 1e-12;
                closed &= M < S || fabs(pipe_schedule_theory(TD_PIPE_ZB_H1,
                                                             S, M) -
                                        s1 / (3 * M + s1)) < 1e-12;
                /* GPipe and 1F1B: whatever F and B */
                anyfb &= fabs(pipe_schedule_replay(TD_PIPE_1F1B, S, M, 0.7,
                                                   1.9, 0.4) - one) < 1e-12;
                anyfb &= fabs(pipe_schedule_replay(TD_PIPE_GPIPE, S, M, 1.3,
                                                   0.5, 0) - one) < 1e-12;
            }
        }
        ok(closed, "theory: (S-1)/(M+S-1) for gpipe and 1f1b, (S-1)/(3M+S-1) "
           "for zb with M >= S, S = 1..%d, M = 1..%d", SMAX, MMAX);
        ok(anyfb, "gpipe and 1f1b replayed at unequal F and B: the same "
           "bubble");
    }
    /* one micro-batch: F on each stage, B on each back, stage 0's W last:
     * 2S+1 units for 3 of work */
    is_double(pipe_schedule_theory(TD_PIPE_ZB_H1, 2, 1), 2.0 / 5, 1e-12,
              "zb with M=1 < S=2: (2S-2)/(2S+1), not (S-1)/(3M+S-1)");
    /* S=2, M=2, F=1, B=1, W=2 by hand: stage 0 F0 F1 [wait] B0 W0 (while
     * grad 1 is not in) B1 W1, stage 1 F0 B0 F1 B1 W0 W1: both end at 9,
     * busy 8 */
    is_double(pipe_schedule_replay(TD_PIPE_ZB_H1, 2, 2, 1, 1, 2), 1.0 / 9,
              1e-12, "zb replayed at W = 2F: 1/9 by hand");
    /* the same costs unsplit (BW = 3): grads at 5 and 9, stage 0 ends 12 */
    is_double(pipe_schedule_replay(TD_PIPE_1F1B, 2, 2, 1, 1, 2), 4.0 / 12,
              1e-12, "1f1b replayed at BW = 3F: 4/12 by hand");
    /* unequal stages, 1F1B, S=2, M=2: stage 0 F=1 BW=1, stage 1 F=1
     * BW=3: stage 0 F0 0-1 F1 1-2, waits for grad 0 (stage 1 F0 1-2 BW0
     * 2-5), BW0 5-6, waits for grad 1 (F1 5-6 BW1 6-9), BW1 9-10: the
     * makespan 10, stage 0 busy 4 (0.6 idle), stage 1 busy 8 (0.2) */
    {
        double f[2] = {1, 1}, b[2] = {1, 3}, w[2] = {0, 0}, got[2] = {-1, -1};
        ok(pipe_schedule_replay_stages(TD_PIPE_1F1B, 2, 2, f, b, w, got) ==
           0 && fabs(got[0] - 0.6) < 1e-12 && fabs(got[1] - 0.2) < 1e-12,
           "1f1b replayed with a slower stage 1: 0.6 / 0.2 by hand (got "
           "%g / %g)", got[0], got[1]);
    }
    return exit_status();
}
