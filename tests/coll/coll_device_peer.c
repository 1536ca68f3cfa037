/* coll_device_peer: one rank of tests/coll/test_coll_device.sh (todist-run
 * -n 3). Collectives on device tensors (runtime/coll/nccl.h).
 *
 *   device   every rank installs the test device backend (2 "cuda"
 *            devices whose memory is host memory, kernels/device.h D4) and
 *            holds its tensors on cuda:(rank % 2): the staged route; every
 *            collective's result is exact and stays on the device
 *   mixed    the same with rank 0's tensors on the cpu
 *   nccl     real GPUs: rank r on cuda:r (NCCL route); prints "SKIP no
 *            CUDA device" where there is none
 *   shared   real GPUs, rank r on cuda:(r % N) of N: with fewer GPUs than
 *            ranks they share one, which NCCL refuses, so the collectives
 *            must take the staged route; "SKIP no CUDA device" without
 * Prints "rank R: ok NAME" per check passed, "rank R: FAIL NAME ..."
 * otherwise; exits 0 when all passed. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"
#include "kernels/device.h"

static int rank, size, failures;
static td_device_t dev;

#define CHECK(c_, ...) do {                                            \
    if (!(c_)) {                                                       \
        printf("rank %d: FAIL ", rank); printf(__VA_ARGS__);           \
        printf(" (%s)\n", td_last_error()); failures++;                \
    } else {                                                           \
        printf("rank %d: ok ", rank); printf(__VA_ARGS__);             \
        printf("\n");                                                  \
    }                                                                  \
} while (0)

/* A float64 tensor of N values F(i) on DEV. */
static td_tensor_t *
make(int64_t n, double (*f)(int r, int64_t i), int r)
{
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    td_tensor_t *c = NULL, *t = NULL;

    for (int64_t i = 0; i < n; i++) {
        v[i] = f(r, i);
    }
    td_tensor_from_data(v, &n, 1, TD_FLOAT64, &c);
    td_tensor_to(c, dev, &t);
    td_tensor_release(c);
    free(v);
    return t;
}

static double val(int r, int64_t i) { return r * 1000003.0 + (double)i; }

/* T (on DEV) equals G(i) everywhere. */
static int
equals(td_tensor_t *t, double (*g)(int64_t i, int64_t n), int64_t n)
{
    td_tensor_t *h = NULL;
    td_device_t d = td_tensor_device(t);
    int good = d.type == dev.type && d.index == dev.index &&
               td_tensor_numel(t) == n;

    if (good && td_tensor_to(t, TD_CPU, &h) == TD_OK) {
        const double *x = td_tensor_data(h);

        for (int64_t i = 0; i < n && good; i++) {
            good = x[i] == g(i, n);
        }
    } else {
        good = 0;
    }
    td_tensor_release(h);
    return good;
}

static double sum_all(int64_t i, int64_t n)
{
    double s = 0;

    (void)n;
    for (int r = 0; r < size; r++) {
        s += val(r, i);
    }
    return s;
}
static double from1(int64_t i, int64_t n) { (void)n; return val(1, i); }
static int64_t chunk;
static double gathered(int64_t i, int64_t n)
{
    (void)n;
    return val((int)(i / chunk), i % chunk);
}
static double scattered_mine(int64_t i, int64_t n)
{
    (void)n;
    return sum_all(rank * chunk + i, 0);
}
static double a2a(int64_t i, int64_t n)
{
    /* out block s = in block RANK of rank s */
    (void)n;
    return val((int)(i / chunk), rank * chunk + i % chunk);
}
static double scat(int64_t i, int64_t n)
{
    (void)n;
    return val(2, rank * chunk + i);
}

/* DDP with its parameters on DEV: loss = sum(p * (rank + 1)) gives the
 * gradient rank + 1 everywhere; DDP averages it to (size + 1) / 2, in
 * gradients that stay on the parameters' device (views of a bucket there). */
static double ddp_avg(int64_t i, int64_t n)
{
    (void)i;
    (void)n;
    return (size + 1) / 2.0;
}

static void
ddp_check(const char *tag)
{
    td_tensor_t *p[2], *prod = NULL, *loss = NULL;
    td_ddp_t *ddp = NULL;
    td_ddp_opts_t o = td_ddp_defaults();
    td_status_t st;
    int good = 1;

    p[0] = make(1000, val, rank);
    p[1] = make(10, val, rank);
    for (int i = 0; i < 2; i++) {
        td_tensor_set_requires_grad(p[i], 1);
    }
    st = td_ddp_create(p, 2, &o, &ddp);
    for (int i = 0; i < 2 && st == TD_OK; i++) {
        td_tensor_t *s = NULL;

        st = td_mul_scalar(p[i], rank + 1.0, &prod);
        if (st == TD_OK) {
            st = td_sum(prod, &s);
        }
        td_tensor_release(prod);
        if (st == TD_OK && loss != NULL) {
            td_tensor_t *sum2 = NULL;

            st = td_add(loss, s, &sum2);
            td_tensor_release(loss);
            td_tensor_release(s);
            loss = sum2;
        } else {
            loss = s;
        }
    }
    if (st == TD_OK) {
        st = td_ddp_backward(ddp, loss);
    }
    if (st == TD_OK) {
        st = td_ddp_wait(ddp);
    }
    for (int i = 0; i < 2; i++) {
        td_tensor_t *g = td_tensor_grad(p[i]);

        good = good && g != NULL &&
               equals(g, ddp_avg, td_tensor_numel(p[i]));
    }
    CHECK(st == TD_OK && good, "%s: DDP averages gradients of parameters on "
          "the device, on the device", tag);
    td_ddp_destroy(ddp);
    td_tensor_release(loss);
    td_tensor_release(p[0]);
    td_tensor_release(p[1]);
}

static void
run_all(const char *tag)
{
    td_group_t *g = td_group_world();
    int64_t sizes[2] = {1000, 300000};         /* recursive doubling, ring */
    td_tensor_t *t, *in, *out, *outs[8];
    td_work_t *w = NULL;

    for (int k = 0; k < 2; k++) {
        int64_t n = sizes[k];

        t = make(n, val, rank);
        CHECK(td_all_reduce(g, t, TD_REDUCE_SUM) == TD_OK &&
              equals(t, sum_all, n), "%s: all_reduce SUM of %lld float64 "
              "exact, stays on the device", tag, (long long)n);
        td_tensor_release(t);
    }
    t = make(5000, val, rank);
    CHECK(td_all_reduce_async(g, t, TD_REDUCE_SUM, &w) == TD_OK &&
          td_work_wait(w, 60) == TD_OK && equals(t, sum_all, 5000),
          "%s: all_reduce_async, then td_work_wait: result in place", tag);
    td_work_release(w);
    td_tensor_release(t);

    t = make(777, val, rank);
    CHECK(td_broadcast(g, t, 1) == TD_OK && equals(t, from1, 777),
          "%s: broadcast from rank 1", tag);
    td_tensor_release(t);

    chunk = 100;
    in = make(chunk, val, rank);
    out = make(chunk * size, val, -1);
    CHECK(td_all_gather(g, out, in) == TD_OK &&
          equals(out, gathered, chunk * size), "%s: all_gather into one tensor", tag);
    td_tensor_release(out);
    for (int r = 0; r < size; r++) {
        outs[r] = make(chunk, val, -1);
    }
    CHECK(td_all_gather_list(g, outs, in) == TD_OK &&
          equals(outs[1], from1, chunk), "%s: all_gather_list into device "
          "tensors", tag);
    for (int r = 0; r < size; r++) {
        td_tensor_release(outs[r]);
    }
    td_tensor_release(in);

    in = make(chunk * size, val, rank);
    out = make(chunk, val, -1);
    CHECK(td_reduce_scatter(g, out, in, TD_REDUCE_SUM) == TD_OK &&
          equals(out, scattered_mine, chunk), "%s: reduce_scatter SUM", tag);
    td_tensor_release(out);
    out = make(chunk * size, val, -1);
    CHECK(td_all_to_all(g, out, in) == TD_OK &&
          equals(out, a2a, chunk * size), "%s: all_to_all", tag);
    td_tensor_release(out);
    td_tensor_release(in);

    in = make(chunk * size, val, rank);
    out = make(chunk, val, -1);
    CHECK(td_scatter(g, out, rank == 2 ? in : NULL, 2) == TD_OK &&
          equals(out, scat, chunk), "%s: scatter from rank 2", tag);
    td_tensor_release(out);
    td_tensor_release(in);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "device";
    td_status_t s;
    int n = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    if (strcmp(mode, "shared") == 0) {
        if (td_device_count(TD_DEVICE_CUDA, &n) != TD_OK || n < 1) {
            printf("rank %d: SKIP no CUDA device\n", rank);
            return 0;
        }
        dev = (td_device_t){TD_DEVICE_CUDA, rank % n};
    } else if (strcmp(mode, "nccl") == 0) {
        int ws = atoi(getenv("TODIST_WORLD_SIZE") ? getenv("TODIST_WORLD_SIZE")
                                                   : "1");

        if (td_device_count(TD_DEVICE_CUDA, &n) != TD_OK || n < ws) {
            /* NCCL wants one GPU per rank of a communicator */
            printf("rank %d: SKIP no CUDA device for each of %d ranks (%d "
                   "here)\n", rank, ws, n);
            return 0;
        }
        dev = (td_device_t){TD_DEVICE_CUDA, rank % n};
    } else {
        td__device_test_backend_install(2);
        dev = strcmp(mode, "mixed") == 0 && rank == 0
              ? TD_CPU : (td_device_t){TD_DEVICE_CUDA, rank % 2};
    }
    s = td_init(NULL);
    if (s != TD_OK) {
        printf("rank %d: FAIL td_init: %s\n", rank, td_last_error());
        return 1;
    }
    size = td_group_size(td_group_world());
    run_all(mode);
    ddp_check(mode);
    if (td_finalize() != TD_OK) {
        printf("rank %d: FAIL td_finalize: %s\n", rank, td_last_error());
        failures++;
    }
    if (strcmp(mode, "nccl") != 0 && strcmp(mode, "shared") != 0) {
        CHECK(td__device_test_live(0) == 0 && td__device_test_live(1) == 0,
              "%s: every test-device block was given back", mode);
    }
    return failures ? 1 : 0;
}
