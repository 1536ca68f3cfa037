/* bench/zero: ZeRO-1 against DDP + Adam on the same model (issue 16:
 * target zero step <= 1.05x the DDP+Adam step). A 784-4096-1536-10 MLP
 * (about 9.7 M float32 parameters), batch 64 per rank, three replicas
 * started equal, one training iteration each per round, interleaved,
 * medians over STEPS (default 10):
 *   ddp+adam:  forward + td_ddp_backward + td_ddp_wait + td_optim_step (Adam)
 *   zero:      forward + td_backward + td_zero_step (reduce-scatter, shard
 *              Adam, all-gather)
 *   ddp+zero:  forward + td_ddp_backward + td_ddp_wait +
 *              td_zero_step_averaged (shard Adam from DDP's buckets,
 *              all-gather)
 * Rank 0 prints the three times, the ratios to ddp+adam, the Adam state
 * bytes per rank of each, and the largest parameter difference between
 * the DDP and ZeRO replicas after the run (float32 reduction order only).
 * Run: todist-run -n 2 build/bench/zero [STEPS] */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <todist/todist.h>
#include "bench/bench.h"

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

static int
die(const char *what)
{
    fprintf(stderr, "zero: %s: %s\n", what, td_last_error());
    return 1;
}

static td_status_t
loss_of(td_mlp_t *mlp, td_tensor_t *x, td_tensor_t *y, td_tensor_t **loss)
{
    td_tensor_t *logits;
    td_status_t st = td_mlp_forward(mlp, x, &logits);

    if (st == TD_OK) {
        st = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, loss);
        td_tensor_release(logits);
    }
    return st;
}

/* One iteration of variant V: 0 ddp+adam, 1 zero, 2 ddp+zero. */
static td_status_t
iteration(int v, td_mlp_t *mlp, td_ddp_t *ddp, td_optim_t *opt, td_zero_t *z,
          td_tensor_t *x, td_tensor_t *y)
{
    td_tensor_t *loss = NULL;
    td_status_t st = loss_of(mlp, x, y, &loss);

    if (st != TD_OK) {
        return st;
    }
    if (v == 1) {
        st = td_backward(&loss, NULL, 1, 0, 0);
    } else if ((st = td_ddp_backward(ddp, loss)) == TD_OK) {
        st = td_ddp_wait(ddp);
    }
    td_tensor_release(loss);
    if (st != TD_OK) {
        return st;
    }
    switch (v) {
    case 0:
        if ((st = td_optim_step(opt)) == TD_OK) {
            st = td_optim_zero_grad(opt);
        }
        break;
    case 1:
        if ((st = td_zero_step(z)) == TD_OK) {
            st = td_zero_zero_grad(z);
        }
        break;
    default:
        if ((st = td_zero_step_averaged(z)) == TD_OK) {
            st = td_zero_zero_grad(z);
        }
    }
    return st;
}

int
main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    int64_t sizes[4] = {784, 4096, 1536, 10}, xs[2] = {64, 784}, b = 64;
    td_mlp_t *mlp[3];
    td_ddp_t *ddp[3] = {0};
    td_optim_t *opt = NULL;
    td_zero_t *z[3] = {0};
    td_tensor_t *x, *y;
    td_adam_opts_t adam = td_adam_defaults();
    td_zero_opts_t zo = {.optim = TD_ZERO_ADAM};
    double *t[3], diff = 0;
    int64_t numel = 0, len = 0;

    if (steps < 3) {
        steps = 3;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(1);
    }
    if (td_init(NULL) != TD_OK) {
        return die("td_init");
    }
    zo.adam = adam;
    for (int v = 0; v < 3; v++) {
        if (td_mlp_create(sizes, 4, TD_FLOAT32, 1, &mlp[v]) != TD_OK) {
            return die("model");
        }
        td_tensor_t *const *p = td_mlp_params(mlp[v]);
        int n = td_mlp_num_params(mlp[v]);

        if ((v != 1 && td_ddp_create_mlp(mlp[v], NULL, &ddp[v]) != TD_OK) ||
            (v == 0 && td_optim_adam(p, n, &adam, &opt) != TD_OK) ||
            (v != 0 && td_zero_create(p, n, &zo, &z[v]) != TD_OK)) {
            return die("ddp / optimizer");
        }
        t[v] = calloc((size_t)steps, sizeof(double));
    }
    for (int i = 0; i < td_mlp_num_params(mlp[0]); i++) {
        numel += td_tensor_numel(td_mlp_params(mlp[0])[i]);
    }
    td_zero_shard(z[1], NULL, &len, NULL);
    td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x);
    td_tensor_uniform_(x, -1, 1, 7 + td_world()->rank);
    td_tensor_full(&b, 1, TD_INT64, 3, &y);

    for (int i = 0; i < 2 + steps; i++) {     /* 2 warm-up rounds */
        for (int v = 0; v < 3; v++) {
            double t0;

            td_group_barrier(td_group_world());
            t0 = bench_now_s();
            if (iteration(v, mlp[v], ddp[v], opt, z[v], x, y) != TD_OK) {
                return die(v == 0 ? "ddp+adam" : v == 1 ? "zero" : "ddp+zero");
            }
            if (i >= 2) {
                t[v][i - 2] = bench_now_s() - t0;
            }
        }
    }
    for (int i = 0; i < td_mlp_num_params(mlp[0]); i++) {
        const float *a = td_tensor_data(td_mlp_params(mlp[0])[i]),
                    *c = td_tensor_data(td_mlp_params(mlp[1])[i]);

        for (int64_t k = 0; k < td_tensor_numel(td_mlp_params(mlp[0])[i]);
             k++) {
            diff = fmax(diff, fabs((double)a[k] - (double)c[k]));
        }
    }
    if (td_world()->rank == 0) {
        double d = bench_median(t[0], steps), s = bench_median(t[1], steps),
               e = bench_median(t[2], steps);

        printf("zero ranks=%d params=%lld ddp+adam_ms=%.1f zero_ms=%.1f "
               "ddp+zero_ms=%.1f zero/ddp=%.3f ddp+zero/ddp=%.3f "
               "(target <= 1.05) adam_state_bytes_per_rank: ddp=%lld "
               "zero=%zu max_param_diff=%.2g\n",
               td_world()->world_size, (long long)numel, d * 1e3, s * 1e3,
               e * 1e3, s / d, e / d, (long long)numel * 16,
               td_zero_state_bytes(z[1]), diff);
    }
    for (int v = 0; v < 3; v++) {
        free(t[v]);
        td_zero_free(z[v]);
        td_ddp_destroy(ddp[v]);
        td_mlp_free(mlp[v]);
    }
    td_optim_free(opt);
    td_tensor_release(x);
    td_tensor_release(y);
    (void)len;
    return td_finalize() == TD_OK ? 0 : die("td_finalize");
}
