/* test_cuda: CUDA tensors and kernels. Without a device (this build
 * machine: CUDA toolkit, no driver) it checks that every cuda request
 * fails with TD_ERR_UNSUPPORTED "no CUDA device" and nothing crashes, and
 * skips the rest with "# SKIP no CUDA device". With a device it compares
 * every kernel-table entry of the CUDA row with the CPU row on random
 * inputs and shapes (contiguous, broadcast, transposed), checks the
 * caching allocator reuses freed blocks, host<->device round trips of
 * every dtype, and that td_tensor_to is differentiable. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "todist/todist.h"
#include "kernels/kernels.h"
#include "kernels/device.h"
#include "ucx_transport/staging.h"
#include "tests/tap.h"

#define CUDA0 ((td_device_t){TD_DEVICE_CUDA, 0})

static uint64_t rng = 88172645463325252ull;

static double
urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* N values of DTYPE in [lo, hi) into a fresh host buffer. */
static void *
host_random(td_dtype_t dtype, int64_t n, double lo, double hi)
{
    size_t es = td_dtype_size(dtype);
    char *b = malloc((size_t)n * es + 8);

    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * urand();
        switch (dtype) {
        case TD_FLOAT32: ((float *)b)[i] = (float)v; break;
        case TD_FLOAT64: ((double *)b)[i] = v; break;
        case TD_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
        case TD_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
        default: ((uint8_t *)b)[i] = (uint8_t)v; break;
        }
    }
    return b;
}

static void *
to_dev(const void *h, size_t nbytes)
{
    void *d = NULL;

    td__device_alloc(CUDA0, nbytes, &d);
    td__device_memcpy(d, CUDA0, h, TD_CPU, nbytes);
    return d;
}

static void *
to_host(const void *d, size_t nbytes)
{
    void *h = calloc(1, nbytes + 8);

    td__device_memcpy(h, TD_CPU, d, CUDA0, nbytes);
    return h;
}

/* Largest relative difference of two host buffers of DTYPE. */
static double
max_rel(td_dtype_t dtype, const void *a, const void *b, int64_t n)
{
    double m = 0;

    for (int64_t i = 0; i < n; i++) {
        double x, y;
        switch (dtype) {
        case TD_FLOAT32: x = ((const float *)a)[i]; y = ((const float *)b)[i]; break;
        case TD_FLOAT64: x = ((const double *)a)[i]; y = ((const double *)b)[i]; break;
        case TD_INT64: x = (double)((const int64_t *)a)[i]; y = (double)((const int64_t *)b)[i]; break;
        case TD_INT32: x = ((const int32_t *)a)[i]; y = ((const int32_t *)b)[i]; break;
        default: x = ((const uint8_t *)a)[i]; y = ((const uint8_t *)b)[i]; break;
        }
        if (isnan(x) && isnan(y)) continue;
        double d = fabs(x - y) / (fabs(x) > 1 ? fabs(x) : 1);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static double
tol(td_dtype_t dtype)
{
    return dtype == TD_FLOAT32 ? 2e-5 : dtype == TD_FLOAT64 ? 1e-12 : 0;
}

/* Geometries of the elementwise tests: a [4,33,65] output with operand b
 * contiguous, broadcast along dim 1 (stride 0), or a transposed view. */
static const int64_t shape3[3] = {4, 33, 65};
static const int64_t contig3[3] = {33 * 65, 65, 1};
static const int64_t bcast3[3] = {65, 0, 1};
static const int64_t trans3[3] = {33 * 65, 1, 33};
#define N3 (4 * 33 * 65)

static int
device_tests(void)
{
    const td_kernels_t *gk = td__kernels_get(CUDA0), *ck = &td_cpu_kernels;
    const int64_t *bst[3] = {contig3, bcast3, trans3};
    const char *bname[3] = {"contiguous", "broadcast", "transposed"};
    int n_tests = 0;

    /* binary: 5 ops x 2 dtypes x 3 geometries */
    for (int dt = 0; dt < 2; dt++) {
        td_dtype_t dtype = dt ? TD_FLOAT64 : TD_FLOAT32;
        size_t nb = N3 * td_dtype_size(dtype);
        void *ha = host_random(dtype, N3, 0.5, 2), *hb = host_random(dtype, N3, -1, 1);
        void *da = to_dev(ha, nb), *db = to_dev(hb, nb), *dout = to_dev(ha, nb);
        void *hout = malloc(nb);
        for (int op = TD_BIN_ADD; op <= TD_BIN_RELU_MASK; op++) {
            for (int g = 0; g < 3; g++) {
                ck->binary(op, dtype, hout, (td_operand_t){ha, contig3},
                           (td_operand_t){hb, bst[g]}, shape3, 3);
                gk->binary(op, dtype, dout, (td_operand_t){da, contig3},
                           (td_operand_t){db, bst[g]}, shape3, 3);
                void *got = to_host(dout, nb);
                double e = max_rel(dtype, got, hout, N3);
                ok(e <= tol(dtype), "binary op %d %s %s: max rel err %g", op,
                   td_dtype_name(dtype), bname[g], e);
                n_tests++;
                free(got);
            }
        }
        /* unary: 16 ops, transposed input */
        for (int op = TD_UN_NEG; op <= TD_UN_ADD_SCALAR; op++) {
            ck->unary(op, dtype, hout, (td_operand_t){ha, trans3}, 1.7, shape3, 3);
            gk->unary(op, dtype, dout, (td_operand_t){da, trans3}, 1.7, shape3, 3);
            void *got = to_host(dout, nb);
            double e = max_rel(dtype, got, hout, N3);
            ok(e <= 4 * tol(dtype), "unary op %d %s: max rel err %g", op,
               td_dtype_name(dtype), e);
            n_tests++;
            free(got);
        }
        /* sum_mid: inner > 1 and inner == 1 */
        for (int inner1 = 0; inner1 < 2; inner1++) {
            int64_t outer = inner1 ? 33 * 4 : 4, mid = inner1 ? 65 : 33,
                    inner = inner1 ? 1 : 65;
            ck->sum_mid(dtype, hout, ha, outer, mid, inner);
            gk->sum_mid(dtype, dout, da, outer, mid, inner);
            void *got = to_host(dout, (size_t)(outer * inner) * td_dtype_size(dtype));
            double e = max_rel(dtype, got, hout, outer * inner);
            ok(e <= 4 * tol(dtype), "sum_mid %s inner=%lld: max rel err %g",
               td_dtype_name(dtype), (long long)inner, e);
            n_tests++;
            free(got);
        }
        /* gemm, all four transposes: C[33,65] = op(A) op(B), k = 4 */
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                int64_t m = 33, n = 65, k = 4;
                int64_t lda = ta ? m : k, ldb = tb ? k : n;
                ck->gemm(dtype, ta, tb, m, n, k, 1.5, ha, lda, hb, ldb, 0.0, hout, n);
                gk->gemm(dtype, ta, tb, m, n, k, 1.5, da, lda, db, ldb, 0.0, dout, n);
                void *got = to_host(dout, (size_t)(m * n) * td_dtype_size(dtype));
                double e = max_rel(dtype, got, hout, m * n);
                ok(e <= 10 * tol(dtype), "gemm %s ta=%d tb=%d: max rel err %g",
                   td_dtype_name(dtype), ta, tb, e);
                n_tests++;
                free(got);
            }
        }
        td__device_free(CUDA0, da);
        td__device_free(CUDA0, db);
        td__device_free(CUDA0, dout);
        free(ha); free(hb); free(hout);
    }

    /* copy: every dtype pair, a transposed source; fill every dtype */
    for (int d = 0; d < TD_NUM_DTYPES; d++) {
        for (int s = 0; s < TD_NUM_DTYPES; s++) {
            size_t dn = N3 * td_dtype_size(d), sn = N3 * td_dtype_size(s);
            void *hs = host_random(s, N3, 0, 100), *ds = to_dev(hs, sn);
            void *hd = calloc(1, dn), *dd = to_dev(hd, dn);
            ck->copy(d, (td_operand_t){hd, contig3}, s, (td_operand_t){hs, trans3}, shape3, 3);
            gk->copy(d, (td_operand_t){dd, contig3}, s, (td_operand_t){ds, trans3}, shape3, 3);
            void *got = to_host(dd, dn);
            ok(max_rel(d, got, hd, N3) <= tol(d), "copy %s <- %s (transposed)",
               td_dtype_name(d), td_dtype_name(s));
            n_tests++;
            free(got); free(hs); free(hd);
            td__device_free(CUDA0, ds); td__device_free(CUDA0, dd);
        }
        size_t dn = N3 * td_dtype_size(d);
        void *hd = calloc(1, dn), *dd = to_dev(hd, dn);
        ck->fill(d, (td_operand_t){hd, trans3}, 7.0, shape3, 3);
        gk->fill(d, (td_operand_t){dd, trans3}, 7.0, shape3, 3);
        void *got = to_host(dd, dn);
        ok(max_rel(d, got, hd, N3) == 0, "fill %s", td_dtype_name(d));
        n_tests++;
        free(got); free(hd); td__device_free(CUDA0, dd);
    }
    return n_tests;
}

static int
cmp(td_dtype_t dtype, const void *dev, const void *host, int64_t n, double t,
    const char *what, td_dtype_t shown)
{
    void *got = to_host(dev, (size_t)n * td_dtype_size(dtype));
    double e = max_rel(dtype, got, host, n);

    free(got);
    return ok(e <= t, "%s %s: max rel err %g", what, td_dtype_name(shown), e);
}

/* The families added with the complete kernel table: softmax and its
 * backward, max, indexing, bag plans, random draws, optimizer updates. */
static int
device_tests2(void)
{
    const td_kernels_t *gk = td__kernels_get(CUDA0), *ck = &td_cpu_kernels;
    int n_tests = 0;
    int64_t ix_h[40], off_h[5] = {0, 3, 3, 10, 17};
    int64_t *ix_d, *off_d;

    for (int j = 0; j < 40; j++) {
        ix_h[j] = (j * 7) % 33;            /* repeats: adds collide */
    }
    ix_d = to_dev(ix_h, sizeof(ix_h));
    off_d = to_dev(off_h, sizeof(off_h));
    is_int(gk->index_check(ix_d, 40, 33), -1, "index_check: all in range");
    is_int(gk->index_check(ix_d, 40, 30), ck->index_check(ix_h, 40, 30),
           "index_check: the first out-of-range position, as the cpu says");
    {
        int64_t bag_h[20], bag_g[20];
        double sc_h[20], sc_g[20];
        int64_t *bag_d = to_dev(bag_h, sizeof(bag_h));
        double *sc_d = to_dev(sc_h, sizeof(sc_h));
        int64_t rc = ck->bag_plan(off_h, 5, 20, 1, bag_h, sc_h);
        int64_t rg = gk->bag_plan(off_d, 5, 20, 1, bag_d, sc_d);
        td__device_memcpy(bag_g, TD_CPU, bag_d, CUDA0, sizeof(bag_g));
        td__device_memcpy(sc_g, TD_CPU, sc_d, CUDA0, sizeof(sc_g));
        ok(rc == -1 && rg == -1 && memcmp(bag_g, bag_h, sizeof(bag_h)) == 0 &&
           memcmp(sc_g, sc_h, sizeof(sc_h)) == 0, "bag_plan (mean) as the cpu");
        is_int(gk->bag_plan(off_d, 5, 12, 0, bag_d, sc_d),
               ck->bag_plan(off_h, 5, 12, 0, bag_h, sc_h),
               "bag_plan: an offset above n is named as on the cpu");
        td__device_free(CUDA0, bag_d);
        td__device_free(CUDA0, sc_d);
    }
    n_tests += 4;

    for (int dt = 0; dt < 2; dt++) {
        td_dtype_t T = dt ? TD_FLOAT64 : TD_FLOAT32;
        size_t es = td_dtype_size(T), nb = N3 * es;
        double tl = tol(T);
        void *ha = host_random(T, N3, -3, 3), *hg = host_random(T, N3, -1, 1);
        void *da = to_dev(ha, nb), *dg = to_dev(hg, nb);
        void *hout = calloc(1, nb), *dout = to_dev(hout, nb);
        int64_t hi[N3], *di = to_dev(hi, sizeof(hi));

        for (int lg = 0; lg < 2; lg++) {
            for (int in1 = 0; in1 < 2; in1++) {
                int64_t o = in1 ? 4 * 65 : 4, m = 33, in = in1 ? 1 : 65;
                ck->softmax(T, lg, hout, ha, o, m, in);
                gk->softmax(T, lg, dout, da, o, m, in);
                n_tests += cmp(T, dout, hout, N3, 8 * tl,
                               lg ? "log_softmax" : "softmax", T) >= 0;
                /* backward with y = softmax(a) */
                ck->softmax(T, 0, ha, ha, o, m, in);
                td__device_memcpy(da, CUDA0, ha, TD_CPU, nb);
                ck->softmax_backward(T, lg, hout, ha, hg, o, m, in);
                gk->softmax_backward(T, lg, dout, da, dg, o, m, in);
                n_tests += cmp(T, dout, hout, N3, 8 * tl, lg ?
                               "log_softmax_backward" : "softmax_backward",
                               T) >= 0;
            }
        }
        for (int in1 = 0; in1 < 2; in1++) {
            int64_t o = in1 ? 4 * 65 : 4, m = 33, in = in1 ? 1 : 65;
            int64_t *gi = calloc(o * in, sizeof(int64_t));
            ck->max_dim(T, hout, hi, ha, o, m, in);
            gk->max_dim(T, dout, di, da, o, m, in);
            td__device_memcpy(gi, TD_CPU, di, CUDA0, (size_t)(o * in) * 8);
            void *gv = to_host(dout, (size_t)(o * in) * es);
            ok(memcmp(gi, hi, (size_t)(o * in) * 8) == 0 &&
               memcmp(gv, hout, (size_t)(o * in) * es) == 0,
               "max_dim %s inner=%lld: indices and values as the cpu",
               td_dtype_name(T), (long long)in);
            n_tests++;
            free(gi); free(gv);
        }
        /* indexing over [4, 33, 65]: 40 indices into mid */
        size_t big = (size_t)4 * 40 * 65 * es;
        void *hb = calloc(1, big), *db = to_dev(hb, big);
        ck->index_select(T, hb, ha, ix_h, 40, 4, 33, 65);
        gk->index_select(T, db, da, ix_d, 40, 4, 33, 65);
        n_tests += cmp(T, db, hb, 4 * 40 * 65, 0, "index_select", T) >= 0;
        memcpy(hout, ha, nb);
        td__device_memcpy(dout, CUDA0, ha, TD_CPU, nb);
        ck->index_add(T, hout, hb, ix_h, 40, 4, 33, 65);
        gk->index_add(T, dout, db, ix_d, 40, 4, 33, 65);
        n_tests += cmp(T, dout, hout, N3, 4 * tl, "index_add", T) >= 0;
        /* gather / scatter_add with one index per (o, i) of [4, 33, 65] */
        int64_t gix[4 * 65];
        for (int k = 0; k < 4 * 65; k++) gix[k] = (k * 13) % 33;
        int64_t *dgix = to_dev(gix, sizeof(gix));
        ck->gather(T, hb, ha, gix, 4, 33, 65);
        gk->gather(T, db, da, dgix, 4, 33, 65);
        n_tests += cmp(T, db, hb, 4 * 65, 0, "gather", T) >= 0;
        ck->scatter_add(T, hout, hb, gix, 4, 33, 65);
        gk->scatter_add(T, dout, db, dgix, 4, 33, 65);
        n_tests += cmp(T, dout, hout, N3, 4 * tl, "scatter_add", T) >= 0;
        td__device_free(CUDA0, dgix);
        free(hb); td__device_free(CUDA0, db);
        /* random draws: same stream on both devices */
        ck->random(T, hout, N3, 0, -2, 5, 1234);
        gk->random(T, dout, N3, 0, -2, 5, 1234);
        n_tests += cmp(T, dout, hout, N3, 0, "uniform", T) >= 0;
        ck->random(T, hout, N3, 1, 1, 2, 99);
        gk->random(T, dout, N3, 1, 1, 2, 99);
        n_tests += cmp(T, dout, hout, N3, dt ? 1e-13 : 1e-6, "normal", T) >= 0;
        ck->dropout_mask(T, hout, N3, 0.3, 7);
        gk->dropout_mask(T, dout, N3, 0.3, 7);
        n_tests += cmp(T, dout, hout, N3, 0, "dropout_mask", T) >= 0;
        /* two SGD steps (momentum, nesterov, weight decay) */
        double *hm = calloc(N3, 8), *dm = to_dev(hm, N3 * 8);
        memcpy(hout, ha, nb);
        td__device_memcpy(dout, CUDA0, ha, TD_CPU, nb);
        for (int st = 0; st < 2; st++) {
            td_sgd_args_t a = {0.1, 0.9, 0.1, 0.01, 1, st == 0};
            ck->sgd_step(T, hout, hg, hm, N3, &a);
            gk->sgd_step(T, dout, dg, dm, N3, &a);
        }
        n_tests += cmp(T, dout, hout, N3, tl, "sgd_step x2", T) >= 0;
        /* two AdamW steps with amsgrad */
        double *hv = calloc(N3, 8), *hx = calloc(N3, 8);
        double *dv = to_dev(hv, N3 * 8), *dx = to_dev(hx, N3 * 8);
        td__device_memcpy(dm, CUDA0, hv, TD_CPU, N3 * 8);
        memset(hm, 0, N3 * 8);
        for (int st = 1; st <= 2; st++) {
            td_adam_args_t a = {1e-3, 0.9, 0.999, 1e-8, 0.01,
                                1 - pow(0.9, st), 1 - pow(0.999, st), 1};
            ck->adam_step(T, hout, hg, hm, hv, hx, N3, &a);
            gk->adam_step(T, dout, dg, dm, dv, dx, N3, &a);
        }
        n_tests += cmp(T, dout, hout, N3, 4 * tl, "adamw (amsgrad) x2", T) >= 0;
        free(hm); free(hv); free(hx);
        td__device_free(CUDA0, dm); td__device_free(CUDA0, dv);
        td__device_free(CUDA0, dx);
        free(ha); free(hg); free(hout);
        td__device_free(CUDA0, da); td__device_free(CUDA0, dg);
        td__device_free(CUDA0, dout); td__device_free(CUDA0, di);
    }
    td__device_free(CUDA0, ix_d);
    td__device_free(CUDA0, off_d);
    return n_tests;
}

#define N_DEVICE_TESTS (2 * (15 + 16 + 2 + 4) + 5 * 5 + 5 + 9 + 4 + 2 * 19 + 1 + 5)
/* cuda_device.h TD_CUDA_SMALL_COPY (that header is the module's) */
#define TD_CUDA_SMALL_COPY_BYTES ((size_t)64 << 10)

int
main(void)
{
    td_tensor_t *t = NULL, *x = NULL, *y = NULL, *z = NULL, *s = NULL;
    int64_t shape[2] = {3, 5};
    int n = -1;
    td_status_t st;

    plan(7 + N_DEVICE_TESTS);
    st = td_device_count(TD_DEVICE_CUDA, &n);
    if (st != TD_OK) {
        is_int(st, TD_ERR_UNSUPPORTED, "no device: the count is unsupported");
        like(td_last_error(), "^no CUDA device", "and says 'no CUDA device'");
        is_int(td_tensor_empty(shape, 2, TD_FLOAT32, CUDA0, &t),
               TD_ERR_UNSUPPORTED, "a cuda:0 tensor cannot be made");
        like(td_last_error(), "^no CUDA device", "'no CUDA device' again");
        td_tensor_full(shape, 2, TD_FLOAT32, 1.0, &x);
        is_int(td_tensor_to(x, CUDA0, &y), TD_ERR_UNSUPPORTED,
               "to(cuda:0) of a cpu tensor is unsupported, not a crash");
        ok(y == NULL, "and leaves the output unset");
        td_staging_copy_ops_t sops;
        is_int(td__staging_cuda_ops(0, &sops), TD_ERR_UNSUPPORTED,
               "the staging engine's CUDA copies: no CUDA device");
        td_tensor_release(x);
        skip(N_DEVICE_TESTS, "no CUDA device");
        return exit_status();
    }
    ok(n >= 1, "%d CUDA device(s)", n);
    {   /* the staging engine's CUDA copies: a round trip through pinned */
        td_staging_copy_ops_t o;
        void *pin = NULL, *dev = NULL, *back = NULL;
        double v[64], w[64];
        for (int i = 0; i < 64; i++) v[i] = i * 0.5;
        int good = td__staging_cuda_ops(0, &o) == TD_OK &&
                   o.host_alloc(o.ctx, sizeof(v), &pin) == TD_OK &&
                   o.host_alloc(o.ctx, sizeof(v), &back) == TD_OK &&
                   td__device_alloc(CUDA0, sizeof(v), &dev) == TD_OK;
        if (good) {
            memcpy(pin, v, sizeof(v));
            good = o.copy(o.ctx, dev, pin, sizeof(v), TD_STAGE_H2D) == TD_OK &&
                   o.copy(o.ctx, back, dev, sizeof(v), TD_STAGE_D2H) == TD_OK &&
                   o.wait(o.ctx) == TD_OK;
            memcpy(w, back, sizeof(w));
            o.host_free(o.ctx, pin);
            o.host_free(o.ctx, back);
            td__device_free(CUDA0, dev);
        }
        ok(good && memcmp(v, w, sizeof(v)) == 0,
           "staging copies: pinned -> cuda:0 -> pinned round trip");
    }
    {   /* staging.h S8: a peer reads staging buffers with process_vm_readv
         * (the remote side of it here: this process's own pid) */
        td_staging_copy_ops_t o;
        void *pin = NULL;
        char got[4096], plain[64] = {1};
        ssize_t r = -1;
        struct iovec pl = { got, sizeof(plain) };
        struct iovec pr = { plain, sizeof(plain) };
        if (process_vm_readv(getpid(), &pl, 1, &pr, 1, 0) !=
            (ssize_t)sizeof(plain)) {
            /* the machine forbids it (seccomp, no CAP_SYS_PTRACE): then
             * the transport's offers are refused and chunks go by UCX */
            skip(1, "process_vm_readv is not permitted here");
            r = -2;
        } else if (td__staging_cuda_ops(0, &o) == TD_OK &&
            o.host_alloc(o.ctx, sizeof(got), &pin) == TD_OK) {
            struct iovec l = { got, sizeof(got) }, rm = { pin, sizeof(got) };
            memset(pin, 7, sizeof(got));
            memset(got, 0, sizeof(got));
            r = process_vm_readv(getpid(), &l, 1, &rm, 1, 0);
            o.host_free(o.ctx, pin);
        }
        if (r != -2) {
            ok(r == (ssize_t)sizeof(got) && got[0] == 7 &&
               got[sizeof(got) - 1] == 7, "a pinned staging buffer is "
               "readable by process_vm_readv (returned %zd)", r);
        }
    }
    is_int(td__device_check((td_device_t){TD_DEVICE_CUDA, n}), TD_ERR_RANGE,
           "cuda:%d is out of range", n);
    like(td_last_error(), "is not below", "the error says so");

    /* host <-> device round trips and the differentiable to() */
    is_int(td_tensor_full(shape, 2, TD_FLOAT64, 2.5, &x), TD_OK, "cpu tensor");
    td_tensor_set_requires_grad(x, 1);
    is_int(td_tensor_to(x, CUDA0, &y), TD_OK, "to(cuda:0)");
    ok(y != NULL && td_tensor_device(y).type == TD_DEVICE_CUDA,
       "lands on cuda:0");

    int done = device_tests() + device_tests2();
    is_int(td_tensor_to(y, TD_CPU, &z), TD_OK, "back to the cpu");
    double v = td_tensor_get(z, (int64_t[]){2, 4});
    is_double(v, 2.5, 0, "values survive the round trip");
    is_int(td_sum(z, &s), TD_OK, "sum on the cpu");
    is_int(td_backward(&s, NULL, 1, 0, 0), TD_OK, "backward through two to()s");
    ok(td_tensor_grad(x) != NULL &&
       td_tensor_get(td_tensor_grad(x), (int64_t[]){1, 1}) == 1.0,
       "d sum(x.to(cuda).to(cpu)) / dx = 1");
    td_tensor_release(s); td_tensor_release(z); td_tensor_release(y);

    /* the module's diagnostics, through its device row */
    const td_device_ops_t *row = td__device_ops(TD_DEVICE_CUDA);
    td_block_cache_stats_t a, b;
    row->cache_stats(0, &a);
    td_tensor_empty(shape, 2, TD_FLOAT32, CUDA0, &t);
    td_tensor_release(t);
    td_tensor_empty(shape, 2, TD_FLOAT32, CUDA0, &t);
    td_tensor_release(t);
    row->cache_stats(0, &b);
    is_int(b.raw_allocs - a.raw_allocs, a.cached_bytes >= 512 ? 0 : 1,
           "two tensors of one class: at most one cudaMalloc");
    ok(b.reuses > a.reuses, "the freed block was reused");
    ok(row->last_launch_error()[0] == '\0', "no kernel launch failed: %s",
       row->last_launch_error());
    {   /* cuda_device.h G4: small copies through the pinned bounce ring,
         * host-to-device ones left in flight; more copies than the ring
         * has slots, each source overwritten at once (the slot holds it) */
        enum { N = 9 };
        void *d[N] = {0};
        double src, got[N];
        int good = 1;
        for (int i = 0; i < N && good; i++) {
            src = 100.0 + i;
            good = td__device_alloc(CUDA0, 8, &d[i]) == TD_OK &&
                   td__device_memcpy(d[i], CUDA0, &src, TD_CPU, 8) == TD_OK;
            src = -1.0;
        }
        for (int i = 0; i < N && good; i++) {
            good = td__device_memcpy(&got[i], TD_CPU, d[i], CUDA0, 8) ==
                   TD_OK && got[i] == 100.0 + i;
        }
        ok(good, "%d small copies to the device in flight at once, then "
           "back: every value in place", N);
        for (int i = 0; i < N; i++) {
            td__device_free(CUDA0, d[i]);
        }
        /* the sizes either side of the ring's slot */
        size_t sizes[3] = {1, TD_CUDA_SMALL_COPY_BYTES,
                           TD_CUDA_SMALL_COPY_BYTES + 1};
        good = 1;
        for (int k = 0; k < 3 && good; k++) {
            unsigned char *h = malloc(sizes[k]), *back = malloc(sizes[k]);
            void *dv = to_dev(memset(h, 0x5a + k, sizes[k]), sizes[k]);
            td__device_memcpy(back, TD_CPU, dv, CUDA0, sizes[k]);
            good = memcmp(h, back, sizes[k]) == 0;
            td__device_free(CUDA0, dv);
            free(h);
            free(back);
        }
        ok(good, "round trips of 1, 64 Ki and 64 Ki + 1 bytes");
        /* what an 8 B device body costs: one sync for both copies */
        td_device_copy_counts_t c0, c1, c2;
        void *dv = NULL;
        double one = 1.0, two = 0;
        td__device_alloc(CUDA0, 8, &dv);
        td__device_copy_counts(CUDA0, &c0);
        td__device_memcpy(dv, CUDA0, &one, TD_CPU, 8);
        td__device_memcpy(&two, TD_CPU, dv, CUDA0, 8);
        td__device_copy_counts(CUDA0, &c1);
        is_int((long)(c1.bounced - c0.bounced), 2,
               "an 8 B copy each way goes through the pinned bounce ring");
        is_int((long)(c1.syncs - c0.syncs), 1,
               "and synchronises the stream once, for the copy to the host "
               "(got %g)", two);
        td__device_free(CUDA0, dv);
        size_t big = TD_CUDA_SMALL_COPY_BYTES + 1;
        unsigned char *hb = calloc(1, big);
        dv = to_dev(hb, big);
        td__device_memcpy(hb, TD_CPU, dv, CUDA0, big);
        td__device_copy_counts(CUDA0, &c2);
        ok(c2.bounced == c1.bounced && c2.syncs - c1.syncs == 2 &&
           c2.copies - c1.copies == 2, "a copy of 64 Ki + 1 bytes each way "
           "is direct and synchronous (bounced %llu, syncs %llu)",
           c2.bounced - c1.bounced, c2.syncs - c1.syncs);
        td__device_free(CUDA0, dv);
        free(hb);
    }
    td_tensor_release(x);
    is_int(done, N_DEVICE_TESTS - 15, "every kernel comparison ran");
    return exit_status();
}
