/* test_pipe_schedule.c: the schedules' op lists (runtime/pipe/schedule.c)
 * against todist/pipe.h's invariants, for S = 1..5 stages and M = 1..9
 * micro-batches: P1 (forwards and backwards each in micro-batch order, 2M
 * ops), F(m) before its backward, P3 (micro-batches in flight within the
 * bound, which 1F1B's stage 0 reaches), no deadlock (the whole pipeline,
 * run with its message dependencies, finishes), and the bubble theory. */
#include "config.h"

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

    plan(3 * 3 + 4);
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
    return exit_status();
}
