/* runtime/pipe/schedule.c: the order of a stage's forwards and backwards
 * under each schedule (P1, P3 of todist/pipe.h): pure functions of
 * (schedule, S, s, M), unit-tested by tests/pipe/test_pipe_schedule. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

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

/* One stage of the replay. */
typedef struct {
    double t;          /* its clock */
    int    pos;        /* next op */
    int    w_left;     /* deferred W's */
    int    in_flight;
} replay_stage_t;

int
pipe_schedule_replay_stages(td_pipe_schedule_t sched, int n_stages,
                            int n_micro, const double *fs, const double *bs,
                            const double *ws, double *bubble)
{
    int S = n_stages, M = n_micro, n_ops = 2 * n_micro, moved = 1, rc = -1;
    int split = sched == TD_PIPE_ZB_H1;
    size_t n = (size_t)S * (size_t)M;
    pipe_op_t *ops = malloc(sizeof(*ops) * 2 * n);
    double *act = malloc(sizeof(double) * n);    /* [s][m]: in at s */
    double *grad = malloc(sizeof(double) * n);
    replay_stage_t *st = calloc((size_t)S, sizeof(*st));
    double span = 0;

    if (ops == NULL || act == NULL || grad == NULL || st == NULL) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        act[i] = grad[i] = NAN;                  /* not sent yet */
    }
    for (int s = 0; s < S; s++) {
        pipe_schedule_ops(sched, S, s, M, ops + (size_t)s * n_ops);
    }
    /* the executor's rules (pipe.c): an op waits for its message, running
     * deferred W's while it has not arrived; a forward first runs W's
     * until the micro-batches in flight are below the cap (P3); the rest
     * of the W's at the end. Stages without a sent message yet wait;
     * P4 (no waiting cycle) makes every pass move one. */
    while (moved) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            replay_stage_t *q = &st[s];
            double f = fs[s], b = bs[s], w = ws[s];
            pipe_op_t op;
            double need = -INFINITY;

            if (q->pos == n_ops) {
                continue;
            }
            op = ops[(size_t)s * n_ops + q->pos];
            if (op.kind == PIPE_OP_F && s > 0) {
                need = act[(size_t)s * M + op.micro];
            } else if (op.kind != PIPE_OP_F && s < S - 1) {
                need = grad[(size_t)s * M + op.micro];
            }
            if (isnan(need)) {
                continue;
            }
            for (; q->w_left > 0 && need > q->t; q->w_left--) {
                q->t += w;
                q->in_flight--;
            }
            q->t = need > q->t ? need : q->t;
            if (op.kind == PIPE_OP_F) {
                int cap = pipe_schedule_cap(sched, S, s, M);
                for (; q->w_left > 0 && q->in_flight >= cap; q->w_left--) {
                    q->t += w;
                    q->in_flight--;
                }
                q->t += f;
                q->in_flight++;
                if (s < S - 1) {
                    act[(size_t)(s + 1) * M + op.micro] = q->t;
                }
            } else {
                q->t += split ? b : b + w;
                if (s > 0) {
                    grad[(size_t)(s - 1) * M + op.micro] = q->t;
                }
                if (split) {
                    q->w_left++;
                } else {
                    q->in_flight--;
                }
            }
            q->pos++;
            moved = 1;
        }
    }
    for (int s = 0; s < S; s++) {
        double end = st[s].t + st[s].w_left * ws[s];
        span = end > span ? end : span;
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
    free(st);
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
                                    v + n_stages, v + 2 * n_stages,
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
