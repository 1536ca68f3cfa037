/* runtime/pipe/schedule.c: the order of a stage's forwards, backwards and
 * (ZB-H1) weight passes under each schedule (P1-P3 of todist/pipe.h), and
 * that order replayed at given op times: pure functions of (schedule, S,
 * s, M), unit-tested by tests/pipe/test_pipe_schedule. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/pipe/pipe_internal.h"

int
pipe_schedule_n_ops(td_pipe_schedule_t sched, int n_micro)
{
    return (sched == TD_PIPE_ZB_H1 ? 3 : 2) * n_micro;
}

void
pipe_schedule_ops(td_pipe_schedule_t sched, int n_stages, int s_,
                  int n_micro, pipe_op_t *ops)
{
    int zb = sched == TD_PIPE_ZB_H1;
    pipe_op_kind_t back = zb ? PIPE_OP_B : PIPE_OP_BW;
    int warm, n = 0, b = 0, w = 0, lag = 0;

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
    if (zb) {
        /* ZB-H1 (Qi et al. 2024, fig. 3): W(j) right after B(j + lag),
         * the rest after the last B. Stage s defers s W's, so it holds
         * S micro-batches as 1F1B's stage 0 does (P3): its warm-up
         * forwards, the one in hand and the deferred W's, at most the
         * cap; with fewer micro-batches than stages, fewer. Exactly what
         * running a W whenever the stage would wait gives with equal op
         * times and free messages (tests/pipe/test_pipe_schedule checks
         * the two agree), but fixed: a message a little late costs its
         * lateness, not a whole W run in its place. */
        lag = pipe_schedule_cap(sched, n_stages, s_, n_micro) - warm - 1;
        lag = lag < s_ ? lag : s_;
        lag = lag > 0 ? lag : 0;
    }
    for (int f = 0; f < n_micro; f++) {
        ops[n++] = (pipe_op_t){PIPE_OP_F, f};
        if (f < warm) {
            continue;
        }
        ops[n++] = (pipe_op_t){back, b++};
        while (zb && w <= b - 1 - lag) {
            ops[n++] = (pipe_op_t){PIPE_OP_W, w++};
        }
    }
    while (b < n_micro) {
        ops[n++] = (pipe_op_t){back, b++};
        while (zb && w <= b - 1 - lag) {
            ops[n++] = (pipe_op_t){PIPE_OP_W, w++};
        }
    }
    while (zb && w < n_micro) {
        ops[n++] = (pipe_op_t){PIPE_OP_W, w++};
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

int
pipe_schedule_replay_stages(td_pipe_schedule_t sched, int n_stages,
                            int n_micro, const double *fs, const double *bs,
                            const double *ws, double msg, double *bubble)
{
    int S = n_stages, M = n_micro, moved = 1, rc = -1;
    int n_ops = pipe_schedule_n_ops(sched, n_micro);
    int split = sched == TD_PIPE_ZB_H1;
    size_t n = (size_t)S * (size_t)M;
    pipe_op_t *ops = malloc(sizeof(*ops) * (size_t)n_ops * (size_t)S);
    double *act = malloc(sizeof(double) * n);    /* [s][m]: in at s */
    double *grad = malloc(sizeof(double) * n);
    double *t = calloc((size_t)S, sizeof(double));   /* each stage's clock */
    int *pos = calloc((size_t)S, sizeof(int));       /* its next op */
    double span = 0;

    if (ops == NULL || act == NULL || grad == NULL || t == NULL ||
        pos == NULL) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        act[i] = grad[i] = NAN;                  /* not sent yet */
    }
    for (int s = 0; s < S; s++) {
        pipe_schedule_ops(sched, S, s, M, ops + (size_t)s * n_ops);
    }
    /* the executor (pipe.c) runs each stage's list in order, an F or B
     * waiting for its message, which arrives MSG after it was sent.
     * Stages without a sent message yet wait; P4 (no waiting cycle)
     * makes every pass move one. */
    while (moved) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            pipe_op_t op;
            double need = -INFINITY;

            if (pos[s] == n_ops) {
                continue;
            }
            op = ops[(size_t)s * n_ops + pos[s]];
            if (op.kind == PIPE_OP_F && s > 0) {
                need = act[(size_t)s * M + op.micro];
            } else if ((op.kind == PIPE_OP_B || op.kind == PIPE_OP_BW) &&
                       s < S - 1) {
                need = grad[(size_t)s * M + op.micro];
            }
            if (isnan(need)) {
                continue;
            }
            t[s] = need > t[s] ? need : t[s];
            if (op.kind == PIPE_OP_F) {
                t[s] += fs[s];
                if (s < S - 1) {
                    act[(size_t)(s + 1) * M + op.micro] = t[s] + msg;
                }
            } else if (op.kind == PIPE_OP_W) {
                t[s] += ws[s];
            } else {
                t[s] += split ? bs[s] : bs[s] + ws[s];
                if (s > 0) {
                    grad[(size_t)(s - 1) * M + op.micro] = t[s] + msg;
                }
            }
            pos[s]++;
            moved = 1;
        }
    }
    for (int s = 0; s < S; s++) {
        span = t[s] > span ? t[s] : span;
    }
    for (int s = 0; s < S; s++) {
        double busy = M * (fs[s] + bs[s] + ws[s]);
        bubble[s] = span > 0 ? (span - busy) / span : 0;
    }
    rc = 0;
out:
    free(ops);
    free(act);
    free(grad);
    free(t);
    free(pos);
    return rc;
}

double
pipe_schedule_replay(td_pipe_schedule_t sched, int n_stages, int n_micro,
                     double f, double b, double w)
{
    double *v = malloc(sizeof(double) * 4 * (size_t)n_stages), bubble = -1;

    if (v == NULL) {
        return -1;
    }
    for (int s = 0; s < n_stages; s++) {
        v[s] = f;
        v[n_stages + s] = b;
        v[2 * n_stages + s] = w;
    }
    if (pipe_schedule_replay_stages(sched, n_stages, n_micro, v,
                                    v + n_stages, v + 2 * n_stages, 0,
                                    v + 3 * n_stages) == 0) {
        bubble = v[3 * n_stages];
    }
    free(v);
    return bubble;
}

double
pipe_schedule_theory(td_pipe_schedule_t sched, int n_stages, int n_micro)
{
    /* F = B = W. GPipe and 1F1B give (S-1)/(M+S-1) whatever F and B;
     * ZB-H1 (S-1)/(3M+S-1) for M >= S (the paper's (S-1)(F+B-W) of
     * idle), more below: fewer W's than waits to fill. */
    return pipe_schedule_replay(sched, n_stages, n_micro, 1, 1, 1);
}
