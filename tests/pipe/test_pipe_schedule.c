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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipe/pipe_internal.h"
#include "tests/tap.h"

#define SMAX 5
#define MMAX 9

/* P1, P2 and order within one stage's list; *PEAK: in flight at most. */
static int
check_stage(td_pipe_schedule_t sc, int S, int s, int M, int *peak)
{
    pipe_op_t ops[3 * MMAX];
    int nf = 0, nb = 0, nw = 0, fl = 0, n = pipe_schedule_n_ops(sc, M);
    int zb = sc == TD_PIPE_ZB_H1;

    *peak = 0;
    if (n != (zb ? 3 : 2) * M) {
        return 0;
    }
    pipe_schedule_ops(sc, S, s, M, ops);
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == PIPE_OP_F) {
            if (ops[i].micro != nf++) {
                return 0;
            }
            fl++;
        } else if (ops[i].kind == PIPE_OP_W) {
            /* P2: W's in order, each after its B */
            if (!zb || ops[i].micro != nw++ || ops[i].micro >= nb) {
                return 0;
            }
            fl--;
        } else {
            if (ops[i].kind != (zb ? PIPE_OP_B : PIPE_OP_BW) ||
                ops[i].micro != nb++ || ops[i].micro >= nf) {
                return 0;
            }
            fl -= !zb;
        }
        *peak = fl > *peak ? fl : *peak;
    }
    return nf == M && nb == M && nw == (zb ? M : 0);
}

/* Run all S stages' lists with the message dependencies: 1 if all end. */
static int
runs_through(td_pipe_schedule_t sc, int S, int M)
{
    pipe_op_t ops[SMAX][3 * MMAX];
    int pos[SMAX] = {0}, fdone[SMAX] = {0}, bdone[SMAX] = {0}, moved = 1;
    int n = pipe_schedule_n_ops(sc, M);

    for (int s = 0; s < S; s++) {
        pipe_schedule_ops(sc, S, s, M, ops[s]);
    }
    while (moved) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            pipe_op_t op;
            if (pos[s] == n) {
                continue;
            }
            op = ops[s][pos[s]];
            if (op.kind == PIPE_OP_F ? (s > 0 && fdone[s - 1] <= op.micro)
                : op.kind != PIPE_OP_W && (s < S - 1 &&
                                           bdone[s + 1] <= op.micro)) {
                continue;       /* its message has not been sent yet */
            }
            if (op.kind == PIPE_OP_F) {
                fdone[s]++;
            } else if (op.kind != PIPE_OP_W) {
                bdone[s]++;
            }
            pos[s]++;
            moved = 1;
        }
    }
    for (int s = 0; s < S; s++) {
        if (pos[s] != n) {
            return 0;
        }
    }
    return 1;
}

/* ZB with the rule the executor had before the W's got fixed places: a
 * pending W runs whenever the stage would wait for a message, and before
 * a forward that would exceed the cap; F = B = W = 1, messages free. The
 * order each stage ran into RAN[s][3M]; the fixed lists must equal it. */
static void
zb_greedy(int S, int M, pipe_op_t ran[SMAX][3 * MMAX])
{
    pipe_op_t ops[SMAX][3 * MMAX];
    double t[SMAX] = {0}, act[SMAX][MMAX], grad[SMAX][MMAX];
    int pos[SMAX] = {0}, nran[SMAX] = {0}, wq[SMAX] = {0}, wnext[SMAX] = {0};
    int fl[SMAX] = {0}, moved = 1;

    for (int s = 0; s < S; s++) {
        int k = 0;
        pipe_schedule_ops(TD_PIPE_ZB_H1, S, s, M, ops[s]);
        for (int i = 0; i < 3 * M; i++) {       /* F and B only */
            if (ops[s][i].kind != PIPE_OP_W) {
                ops[s][k++] = ops[s][i];
            }
        }
        for (int m = 0; m < M; m++) {
            act[s][m] = grad[s][m] = NAN;
        }
    }
    while (moved) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            pipe_op_t op;
            double need = -INFINITY;
            if (pos[s] == 2 * M) {
                continue;
            }
            op = ops[s][pos[s]];
            if (op.kind == PIPE_OP_F && s > 0) {
                need = act[s][op.micro];
            } else if (op.kind == PIPE_OP_B && s < S - 1) {
                need = grad[s][op.micro];
            }
            if (isnan(need)) {
                continue;
            }
            for (; wq[s] > 0 && (need > t[s] ||
                                 (op.kind == PIPE_OP_F &&
                                  fl[s] >= pipe_schedule_cap(TD_PIPE_ZB_H1, S,
                                                             s, M)));
                 wq[s]--, fl[s]--, t[s] += 1) {
                ran[s][nran[s]++] = (pipe_op_t){PIPE_OP_W, wnext[s]++};
            }
            t[s] = (need > t[s] ? need : t[s]) + 1;
            ran[s][nran[s]++] = op;
            if (op.kind == PIPE_OP_F) {
                fl[s]++;
                if (s < S - 1) {
                    act[s + 1][op.micro] = t[s];
                }
            } else {
                wq[s]++;
                if (s > 0) {
                    grad[s - 1][op.micro] = t[s];
                }
            }
            pos[s]++;
            moved = 1;
        }
    }
    for (int s = 0; s < S; s++) {
        for (; wq[s] > 0; wq[s]--) {
            ran[s][nran[s]++] = (pipe_op_t){PIPE_OP_W, wnext[s]++};
        }
    }
}

/* "F0 B0 W0 ..." of stage S_'s list */
static void
list_str(int S, int s_, int M, char *buf, size_t len)
{
    pipe_op_t ops[3 * MMAX];
    size_t n = 0;

    pipe_schedule_ops(TD_PIPE_ZB_H1, S, s_, M, ops);
    buf[0] = '\0';
    for (int i = 0; i < 3 * M && n < len; i++) {
        /* F, BW, B, W: F B B W */
        n += (size_t)snprintf(buf + n, len - n, "%s%c%d", i ? " " : "",
                              "FBBW"[ops[i].kind], ops[i].micro);
    }
}

int
main(void)
{
    static const char *names[3] = {"gpipe", "1f1b", "zb"};

    plan(3 * 3 + 4 + 6 + 3);
    for (int sc = 0; sc < 3; sc++) {
        int order = 1, bound = 1, flow = 1;
        for (int S = 1; S <= SMAX; S++) {
            for (int M = 1; M <= MMAX; M++) {
                for (int s = 0; s < S; s++) {
                    int peak, cap = pipe_schedule_cap(sc, S, s, M);
                    order &= check_stage(sc, S, s, M, &peak);
                    /* the list's own in-flight count (ZB: W ends one) */
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
        int rc = pipe_schedule_replay_stages(TD_PIPE_1F1B, 2, 2, f, b, w, 0,
                                             got);
        ok(rc == 0 && fabs(got[0] - 0.6) < 1e-12 && fabs(got[1] - 0.2) < 1e-12,
           "1f1b replayed with a slower stage 1: 0.6 / 0.2 by hand (got "
           "%g / %g)", got[0], got[1]);
    }
    /* ZB-H1's W's in the paper's places (Qi et al. 2024, fig. 3):
     * stage s runs W(j) right after B(j + s) */
    {
        static const char *want[4] = {
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 "
            "B6 W6 B7 W7",
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 "
            "B7 W6 W7",
            "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 "
            "W5 W6 W7",
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 "
            "W5 W6 W7"};
        char got[256];
        int same = 1;
        for (int s = 0; s < 4; s++) {
            list_str(4, s, 8, got, sizeof(got));
            if (strcmp(got, want[s]) != 0) {
                diag("stage %d: got  %s", s, got);
                diag("stage %d: want %s", s, want[s]);
                same = 0;
            }
        }
        ok(same, "zb, S=4 M=8: each stage's W's where the paper's ZB-H1 "
           "puts them");
    }
    /* the fixed places are exactly where running a W whenever the stage
     * would wait put them, at equal op times (so theory is unchanged) */
    {
        int same = 1;
        for (int S = 1; S <= SMAX; S++) {
            for (int M = 1; M <= MMAX; M++) {
                pipe_op_t ran[SMAX][3 * MMAX], ops[3 * MMAX];
                zb_greedy(S, M, ran);
                for (int s = 0; s < S; s++) {
                    pipe_schedule_ops(TD_PIPE_ZB_H1, S, s, M, ops);
                    for (int i = 0; i < 3 * M; i++) {
                        same &= ops[i].kind == ran[s][i].kind &&
                                ops[i].micro == ran[s][i].micro;
                    }
                }
            }
        }
        ok(same, "zb: the fixed lists equal a W run whenever the stage "
           "would wait, at F = B = W, S = 1..%d, M = 1..%d", SMAX, MMAX);
    }
    /* messages that take 0.05 of an op: the fixed places lose only the
     * 4 messages on the critical path, 1.2 / 25.2 (a W run whenever a
     * message is late instead gave 0.0805: each wait of 0.05 became a W) */
    {
        double f[2] = {1, 1}, got[2] = {-1, -1};
        int rc = pipe_schedule_replay_stages(TD_PIPE_ZB_H1, 2, 8, f, f, f,
                                             0.05, got);
        ok(rc == 0 && fabs(got[0] - 1.2 / 25.2) < 1e-12 &&
           fabs(got[1] - 1.2 / 25.2) < 1e-12,
           "zb, S=2 M=8, messages 0.05: bubble 1.2/25.2 (got %g / %g)",
           got[0], got[1]);
    }
    return exit_status();
}
