/* runtime/pipe/schedule.c: the order of a stage's forwards and backwards
 * under each schedule (P1, P3 of todist/pipe.h): pure functions of
 * (schedule, S, s, M), unit-tested by tests/pipe/test_pipe_schedule. */
#include "config.h"

#include "runtime/pipe/pipe_internal.h"

void
pipe_schedule_ops(td_pipe_schedule_t sched, int n_stages, int s_,
                  int n_micro, pipe_op_t *ops)
{
    pipe_op_kind_t back = sched == TD_PIPE_ZB_H1 ? PIPE_OP_B : PIPE_OP_BW;
    int warm, n = 0, b = 0;

    if (sched == TD_PIPE_GPIPE) {
        warm = n_micro;
    } else {
        /* 1F1B: a stage has S-1-s forwards ahead of its first backward,
         * which is when the first gradient can come back from the last */
        warm = n_stages - 1 - s_;
        if (warm > n_micro) {
            warm = n_micro;
        }
    }
    for (int f = 0; f < warm; f++) {
        ops[n++] = (pipe_op_t){PIPE_OP_F, f};
    }
    for (int f = warm; f < n_micro; f++) {
        ops[n++] = (pipe_op_t){PIPE_OP_F, f};
        ops[n++] = (pipe_op_t){back, b++};
    }
    while (b < n_micro) {
        ops[n++] = (pipe_op_t){back, b++};
    }
}

int
pipe_schedule_cap(td_pipe_schedule_t sched, int n_stages, int s_,
                  int n_micro)
{
    int cap;

    switch (sched) {
    case TD_PIPE_GPIPE:
        return n_micro;
    case TD_PIPE_1F1B:
        cap = n_stages - s_;
        break;
    default:
        /* ZB-H1: deferred W's keep activations; allow stage 0's 1F1B peak
         * everywhere (the paper's "same memory as 1F1B") */
        cap = n_stages;
        break;
    }
    return cap < n_micro ? cap : n_micro;
}

double
pipe_schedule_theory(td_pipe_schedule_t sched, int n_stages, int n_micro)
{
    double s1 = n_stages - 1;

    if (sched == TD_PIPE_ZB_H1) {
        /* F = B = W: the bubble is (S-1)(F+B-W) of (S-1)(F+B-W) + M(F+B+W) */
        return s1 / (3.0 * n_micro + s1);
    }
    return s1 / (n_micro + s1);
}
