/* bench/dist_backward: forward + distributed backward of PyTorch's my_add
 * graph (t3 = my_add(t1, t2) on worker 1 via RPC, loss = sum(t3 * t4) on
 * worker 0), timed on worker 0. Run with todist-run -n 2 (see
 * bench/dist_backward.sh, which puts torch.distributed.autograd beside it).
 * Prints the medians in microseconds:
 *   todist rpc_roundtrip_us=... forward_us=... backward_us=... total_us=...
 *   backward_over_rpc=...
 * rpc_roundtrip is the same my_add call outside any context (no autograd
 * recording): the target is backward <= 3 x that round trip.
 * Options: --iters N (default 2000) --warmup N (default 200) --size N
 * (square tensors of N x N, default 3). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/todist.h>

static double
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static td_status_t
my_add(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
       td_rpc_list_t *result)
{
    td_tensor_t *a, *b, *sum = NULL;
    td_status_t status;

    (void)arg;
    (void)info;
    status = td_rpc_list_tensor(args, 0, &a);
    if (status == TD_OK) {
        status = td_rpc_list_tensor(args, 1, &b);
    }
    if (status == TD_OK) {
        status = td_add(a, b, &sum);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(result, sum);
    }
    td_tensor_release(sum);
    return status;
}

static td_tensor_t *
rnd(int64_t n, uint64_t seed, int rg)
{
    int64_t shape[2] = {n, n};
    td_tensor_t *t = NULL;

    td_tensor_empty(shape, 2, TD_FLOAT32, TD_CPU, &t);
    td_tensor_uniform_(t, 0, 1, seed);
    if (rg) {
        td_tensor_set_requires_grad(t, 1);
    }
    return t;
}

static int
run(int iters, int warmup, int64_t size)
{
    td_tensor_t *t1 = rnd(size, 1, 1), *t2 = rnd(size, 2, 1);
    td_tensor_t *t4 = rnd(size, 3, 1), *p1 = rnd(size, 1, 0);
    td_tensor_t *p2 = rnd(size, 2, 0);
    double *rtt = calloc((size_t)iters, sizeof(double));
    double *fwd = calloc((size_t)iters, sizeof(double));
    double *bwd = calloc((size_t)iters, sizeof(double));
    double *tot = calloc((size_t)iters, sizeof(double));
    td_rpc_list_t *args = NULL, *plain = NULL;

    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, t1);
    td_rpc_list_add_tensor(args, t2);
    td_rpc_list_create(&plain);
    td_rpc_list_add_tensor(plain, p1);
    td_rpc_list_add_tensor(plain, p2);
    for (int i = -warmup; i < iters; i++) {
        td_rpc_list_t *res = NULL;
        td_tensor_t *t3, *t5 = NULL, *loss = NULL;
        double a, b, c, d;
        int64_t ctx;

        /* the plain round trip */
        a = now_us();
        if (td_rpc_sync(1, "my_add", plain, TD_RPC_DEFAULT_TIMEOUT, &res) !=
            TD_OK) {
            goto fail;
        }
        b = now_us();
        td_rpc_list_free(res);
        res = NULL;
        /* forward + backward in a context */
        td_dist_autograd_begin(&ctx);
        c = now_us();
        if (td_rpc_sync(1, "my_add", args, TD_RPC_DEFAULT_TIMEOUT, &res) !=
                TD_OK ||
            td_rpc_list_tensor(res, 0, &t3) != TD_OK ||
            td_mul(t3, t4, &t5) != TD_OK || td_sum(t5, &loss) != TD_OK) {
            goto fail;
        }
        d = now_us();
        if (td_dist_backward(ctx, &loss, 1, 0) != TD_OK) {
            goto fail;
        }
        if (i >= 0) {
            double e = now_us();
            rtt[i] = b - a;
            fwd[i] = d - c;
            bwd[i] = e - d;
            tot[i] = e - c;
        }
        td_dist_autograd_end(ctx);
        td_rpc_list_free(res);
        td_tensor_release(t5);
        td_tensor_release(loss);
    }
    {
        double r = median(rtt, iters), f = median(fwd, iters);
        double bk = median(bwd, iters), t = median(tot, iters);
        printf("todist rpc_roundtrip_us=%.1f forward_us=%.1f backward_us=%.1f "
               "total_us=%.1f\n", r, f, bk, t);
        printf("backward_over_rpc=%.2f\n", bk / r);
    }
    return 0;
fail:
    fprintf(stderr, "dist_backward: %s\n", td_last_error());
    return 1;
}

int
main(int argc, char **argv)
{
    int iters = 2000, warmup = 200, rc = 0;
    int64_t size = 3;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--iters") == 0) {
            iters = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--warmup") == 0) {
            warmup = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--size") == 0) {
            size = atoll(argv[i + 1]);
        }
    }
    if (iters < 1 || warmup < 0 || size < 1) {
        fprintf(stderr, "usage: dist_backward [--iters N] [--warmup N] "
                "[--size N]\n");
        return 2;
    }
    if (td_rpc_register("my_add", my_add, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "dist_backward: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->rank == 0) {
        rc = run(iters, warmup, size);
    }
    if (td_finalize() != TD_OK) {
        rc = 1;
    }
    return rc;
}
