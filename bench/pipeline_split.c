/* bench/pipeline_split.c: the cost of zero-bubble's split backward
 * (runtime/pipe/split.c) against one whole backward, in one process: a
 * stage of L linear layers (tanh between) of width H on a micro-batch of
 * ROWS rows; per repetition, in turn, BW (td_backward accumulating .grad
 * and the input gradient), B alone (input pass) and B then W. Prints min
 * and median milliseconds of each and the ratios of minima (minima resist
 * a loaded machine best):
 *   pipeline_split: L=4 H=512 rows=8 BW 0.61 ms, B 0.33 ms, B+W 0.66 ms,
 *   B+W/BW 1.08, B/BW 0.54
 * Usage: pipeline_split [L] [H] [ROWS] [REPS] */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/pipe/pipe_internal.h"
#include <todist/todist.h>

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static td_tensor_t *
forward(td_tensor_t *x, td_tensor_t **p, int L)
{
    td_tensor_t *h = td_tensor_retain(x), *n;

    for (int l = 0; l < L; l++) {
        td_linear(h, p[2 * l], p[2 * l + 1], &n);
        td_tensor_release(h);
        h = n;
        if (l < L - 1) {
            td_tanh(h, &n);
            td_tensor_release(h);
            h = n;
        }
    }
    return h;
}

int
main(int argc, char **argv)
{
    int L = argc > 1 ? atoi(argv[1]) : 4, reps = argc > 4 ? atoi(argv[4]) : 200;
    int64_t H = argc > 2 ? atoll(argv[2]) : 512;
    int64_t rows = argc > 3 ? atoll(argv[3]) : 8;
    int64_t xs[2] = {rows, H};
    td_tensor_t *p[64], *x, *dy;
    double *t[3];

    if (L < 1 || L > 32 || H < 1 || rows < 1 || reps < 1) {
        fprintf(stderr, "usage: pipeline_split [L 1..32] [H] [ROWS] [REPS]\n");
        return 2;
    }
    for (int k = 0; k < 3; k++) {
        t[k] = calloc((size_t)reps, sizeof(double));
    }
    for (int l = 0; l < L; l++) {
        int64_t ws[2] = {H, H}, bs[1] = {H};
        td_tensor_empty(ws, 2, TD_FLOAT32, TD_CPU, &p[2 * l]);
        td_tensor_empty(bs, 1, TD_FLOAT32, TD_CPU, &p[2 * l + 1]);
        td_tensor_uniform_(p[2 * l], -0.05, 0.05, 1 + l);
        td_tensor_uniform_(p[2 * l + 1], -0.05, 0.05, 100 + l);
        td_tensor_set_requires_grad(p[2 * l], 1);
        td_tensor_set_requires_grad(p[2 * l + 1], 1);
    }
    td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x);
    td_tensor_uniform_(x, -1, 1, 7);
    td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &dy);
    td_tensor_uniform_(dy, -1, 1, 8);
    td_tensor_set_requires_grad(x, 1);
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 3; k++) {
            td_tensor_t *y = forward(x, p, L), *dx = NULL;
            pipe_split_t sp;
            double t0 = now_ms();
            if (k == 0) {
                td_backward(&y, &dy, 1, 0, 0);
            } else {
                pipe_split_input(&sp, y, dy, x, p, 2 * L, &dx);
                if (k == 2) {
                    pipe_split_weight(&sp, p);
                } else {
                    pipe_split_clear(&sp);
                }
            }
            t[k][r] = now_ms() - t0;
            td_tensor_release(dx);
            td_tensor_release(y);
            td_tensor_set_grad(x, NULL);
        }
    }
    for (int k = 0; k < 3; k++) {
        qsort(t[k], (size_t)reps, sizeof(double), cmp);
    }
    printf("pipeline_split: L=%d H=%lld rows=%lld reps=%d: BW %.3f ms (median "
           "%.3f), B %.3f (%.3f), B+W %.3f (%.3f); B+W/BW %.2f, B/BW %.2f "
           "(minima)\n", L, (long long)H, (long long)rows, reps, t[0][0],
           t[0][reps / 2], t[1][0], t[1][reps / 2], t[2][0], t[2][reps / 2],
           t[2][0] / t[0][0], t[1][0] / t[0][0]);
    return 0;
}
