/* bench/ddp_overlap: does DDP hide its all_reduce behind the backward?
 * A 784-4096-1536-10 MLP (about 39 MB of float32 gradients), batch 64 per
 * rank, timed three ways on every rank, medians over STEPS (default 10):
 *   compute:    forward + backward + wait with no_sync (no communication)
 *   all_reduce: one td_all_reduce (AVG) of a buffer the size of the grads
 *   ddp step:   forward + backward + td_ddp_wait, buckets overlapping
 * Rank 0 prints them and ratio = ddp / max(compute, all_reduce)
 * (target <= 1.1). Run: todist-run -n 2 bench/ddp_overlap [STEPS] */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <todist/todist.h>
#include "bench/bench.h"

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

static int
die(const char *what)
{
    fprintf(stderr, "ddp_overlap: %s: %s\n", what, td_last_error());
    return 1;
}

static td_status_t
step(td_mlp_t *mlp, td_ddp_t *ddp, td_tensor_t *x, td_tensor_t *y)
{
    td_tensor_t *logits, *loss;
    td_status_t st = td_mlp_forward(mlp, x, &logits);

    if (st != TD_OK) {
        return st;
    }
    st = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss);
    td_tensor_release(logits);
    if (st == TD_OK) {
        st = td_ddp_backward(ddp, loss);
        td_tensor_release(loss);
    }
    return st == TD_OK ? td_ddp_wait(ddp) : st;
}

int
main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    int64_t sizes[4] = {784, 4096, 1536, 10}, xs[2] = {64, 784}, b = 64;
    td_mlp_t *mlp;
    td_ddp_t *ddp;
    td_tensor_t *x, *y, *flat;
    double *tc, *ta, *td;
    int64_t numel = 0;

    if (steps < 3) {
        steps = 3;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(1);
    }
    if (td_init(NULL) != TD_OK) {
        return die("td_init");
    }
    if (td_mlp_create(sizes, 4, TD_FLOAT32, 1, &mlp) != TD_OK ||
        td_ddp_create_mlp(mlp, NULL, &ddp) != TD_OK) {
        return die("model");
    }
    for (int i = 0; i < td_mlp_num_params(mlp); i++) {
        numel += td_tensor_numel(td_mlp_params(mlp)[i]);
    }
    td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x);
    td_tensor_uniform_(x, -1, 1, 7 + td_world()->rank);
    td_tensor_full(&b, 1, TD_INT64, 3, &y);
    td_tensor_zeros(&numel, 1, TD_FLOAT32, &flat);
    tc = calloc((size_t)steps, sizeof(double));
    ta = calloc((size_t)steps, sizeof(double));
    td = calloc((size_t)steps, sizeof(double));

    /* warm up both paths (the first DDP iteration also rebuilds buckets) */
    for (int i = 0; i < 2; i++) {
        if (step(mlp, ddp, x, y) != TD_OK) {
            return die("warm-up step");
        }
    }
    for (int i = 0; i < steps; i++) {
        double t0;

        td_group_barrier(td_group_world());
        td_ddp_set_require_sync(ddp, 0);
        t0 = bench_now_s();
        if (step(mlp, ddp, x, y) != TD_OK) {
            return die("compute step");
        }
        tc[i] = bench_now_s() - t0;
        td_ddp_set_require_sync(ddp, 1);

        td_group_barrier(td_group_world());
        t0 = bench_now_s();
        if (td_all_reduce(td_group_world(), flat, TD_REDUCE_AVG) != TD_OK) {
            return die("all_reduce");
        }
        ta[i] = bench_now_s() - t0;

        td_group_barrier(td_group_world());
        t0 = bench_now_s();
        if (step(mlp, ddp, x, y) != TD_OK) {
            return die("ddp step");
        }
        td[i] = bench_now_s() - t0;
    }
    if (td_world()->rank == 0) {
        double c = bench_median(tc, steps), a = bench_median(ta, steps),
               d = bench_median(td, steps);
        printf("ddp_overlap ranks=%d grad_mb=%.1f buckets=%d compute_ms=%.1f "
               "allreduce_ms=%.1f ddp_step_ms=%.1f ratio=%.2f (target <= 1.1)\n",
               td_world()->world_size, numel * 4.0 / 1e6,
               td_ddp_num_buckets(ddp), c * 1e3, a * 1e3, d * 1e3,
               d / (c > a ? c : a));
    }
    free(tc);
    free(ta);
    free(td);
    td_tensor_release(flat);
    td_tensor_release(x);
    td_tensor_release(y);
    td_ddp_destroy(ddp);
    td_mlp_free(mlp);
    return td_finalize() == TD_OK ? 0 : die("td_finalize");
}
