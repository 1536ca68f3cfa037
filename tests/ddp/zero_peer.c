/* tests/ddp/zero_peer.c: ZeRO-1 (todist/zero.h) on every rank of a todist-run
 * job, run by tests/ddp/test_zero.sh at 1..4 ranks. Prints PASS/FAIL NAME per
 * check on rank 0, after an all_reduce of every rank's failures.
 *
 * Model: x[B,5] -> linear(W1[7,5], b1[7]) -> tanh -> linear(W2[3,7],
 * b2[3]) -> mse to a target, + 0.1 * sum(e * e) for e[3]: 69 elements in 5
 * parameters, so shards split parameters and differ in length. Each rank
 * trains on its own batches; the reference, computed on every rank, is the
 * plain optimizer over a replica stepped with the gradient averaged over
 * every rank's batch (what DDP + the optimizer does). float64 throughout. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#define NP    5
#define BATCH 4
#define STEPS 5

static const int64_t shapes[NP][2] = {{7, 5}, {7, 0}, {3, 7}, {3, 0}, {3, 0}};
static int rank, size, n_fail;

static void check(int cond, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Every rank's verdict, reduced, printed by rank 0. */
static void
check(int cond, const char *name, const char *fmt, ...)
{
    int64_t one = 1;
    td_tensor_t *bad = NULL;
    double nbad = 0;
    va_list ap;

    td_tensor_full(&one, 1, TD_FLOAT64, cond ? 0 : 1, &bad);
    td_all_reduce(td_group_world(), bad, TD_REDUCE_SUM);
    td_tensor_item(bad, &nbad);
    td_tensor_release(bad);
    if (!cond) {
        fprintf(stderr, "rank %d: %s: ", rank, name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n");
    }
    if (rank == 0) {
        printf("%s %s\n", nbad == 0 ? "PASS" : "FAIL", name);
        fflush(stdout);
    }
    n_fail += nbad != 0;
}

static double
val(uint64_t a, uint64_t b)       /* deterministic in [-1, 1) */
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

static void
make_params(td_tensor_t **p)
{
    for (int i = 0; i < NP; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        int64_t numel = shapes[i][0] * (nd == 2 ? shapes[i][1] : 1);

        td_tensor_zeros(shapes[i], nd, TD_FLOAT64, &p[i]);
        double *d = td_tensor_data(p[i]);
        for (int64_t k = 0; k < numel; k++) {
            d[k] = 0.5 * val(i, k);
        }
        td_tensor_set_requires_grad(p[i], 1);
    }
}

static void
free_params(td_tensor_t **p)
{
    for (int i = 0; i < NP; i++) {
        td_tensor_release(p[i]);
        p[i] = NULL;
    }
}

/* The loss of rank R's batch at STEP with parameters P. */
static td_status_t
loss_of(td_tensor_t **p, int r, int step, td_tensor_t **loss)
{
    double x[BATCH * 5], y[BATCH * 3];
    int64_t xs[2] = {BATCH, 5}, ys[2] = {BATCH, 3};
    td_tensor_t *xt = NULL, *yt = NULL, *h = NULL, *a = NULL, *o = NULL,
                *mse = NULL, *ee = NULL, *es = NULL, *reg = NULL;
    td_status_t st;

    for (int k = 0; k < BATCH * 5; k++) {
        x[k] = val(1000 + r, step * 100 + k);
    }
    for (int k = 0; k < BATCH * 3; k++) {
        y[k] = val(2000 + r, step * 100 + k);
    }
    if ((st = td_tensor_from_data(x, xs, 2, TD_FLOAT64, &xt)) == TD_OK &&
        (st = td_tensor_from_data(y, ys, 2, TD_FLOAT64, &yt)) == TD_OK &&
        (st = td_linear(xt, p[0], p[1], &h)) == TD_OK &&
        (st = td_tanh(h, &a)) == TD_OK &&
        (st = td_linear(a, p[2], p[3], &o)) == TD_OK &&
        (st = td_mse_loss(o, yt, TD_REDUCTION_MEAN, &mse)) == TD_OK &&
        (st = td_mul(p[4], p[4], &ee)) == TD_OK &&
        (st = td_sum(ee, &es)) == TD_OK &&
        (st = td_mul_scalar(es, 0.1, &reg)) == TD_OK) {
        st = td_add(mse, reg, loss);
    }
    td_tensor_release(xt);
    td_tensor_release(yt);
    td_tensor_release(h);
    td_tensor_release(a);
    td_tensor_release(o);
    td_tensor_release(mse);
    td_tensor_release(ee);
    td_tensor_release(es);
    td_tensor_release(reg);
    return st;
}

/* Clear P's .grads, then backward of rank R's loss into them. */
static td_status_t
grads_of(td_tensor_t **p, int r, int step)
{
    td_tensor_t *loss = NULL;
    td_status_t st;

    for (int i = 0; i < NP; i++) {
        td_tensor_set_grad(p[i], NULL);
    }
    if ((st = loss_of(p, r, step, &loss)) == TD_OK) {
        st = td_backward(&loss, NULL, 1, 0, 0);
    }
    td_tensor_release(loss);
    return st;
}

static td_status_t
make_optim(int kind, td_tensor_t **p, td_optim_t **o)
{
    td_sgd_opts_t sgd = {0.1, 0.9, 0.0, 0.01, 1};
    td_adam_opts_t adam = td_adam_defaults(), adamw = td_adamw_defaults();

    adam.lr = adamw.lr = 0.05;
    switch (kind) {
    case TD_ZERO_SGD:  return td_optim_sgd(p, NP, &sgd, o);
    case TD_ZERO_ADAM: return td_optim_adam(p, NP, &adam, o);
    default:           return td_optim_adamw(p, NP, &adamw, o);
    }
}

static td_zero_opts_t
zero_opts(int kind)
{
    td_zero_opts_t z;

    memset(&z, 0, sizeof(z));
    z.optim = (td_zero_optim_t)kind;
    z.sgd = (td_sgd_opts_t){0.1, 0.9, 0.0, 0.01, 1};
    z.adam = kind == TD_ZERO_ADAMW ? td_adamw_defaults() : td_adam_defaults();
    z.adam.lr = 0.05;
    return z;
}

/* The reference: a replica stepped with the gradient averaged over every
 * rank's batch. */
static td_status_t
reference(int kind, td_tensor_t **ref)
{
    td_tensor_t *sum[NP] = {0}, *acc;
    td_optim_t *o = NULL;
    td_status_t st;

    make_params(ref);
    if ((st = make_optim(kind, ref, &o)) != TD_OK) {
        return st;
    }
    for (int s = 0; s < STEPS && st == TD_OK; s++) {
        for (int r = 0; r < size && st == TD_OK; r++) {
            if ((st = grads_of(ref, r, s)) != TD_OK) {
                break;
            }
            for (int i = 0; i < NP; i++) {
                if (sum[i] == NULL) {
                    td_tensor_clone(td_tensor_grad(ref[i]), &sum[i]);
                } else if (td_add(sum[i], td_tensor_grad(ref[i]), &acc) ==
                           TD_OK) {
                    td_tensor_release(sum[i]);
                    sum[i] = acc;
                }
            }
        }
        for (int i = 0; i < NP && st == TD_OK; i++) {
            if ((st = td_mul_scalar(sum[i], 1.0 / size, &acc)) == TD_OK) {
                st = td_tensor_set_grad(ref[i], acc);
                td_tensor_release(acc);
            }
            td_tensor_release(sum[i]);
            sum[i] = NULL;
        }
        if (st == TD_OK) {
            st = td_optim_step(o);
        }
    }
    td_optim_free(o);
    return st;
}

static double
max_diff(td_tensor_t **a, td_tensor_t **b)
{
    double m = 0;

    for (int i = 0; i < NP; i++) {
        const double *x = td_tensor_data(a[i]), *y = td_tensor_data(b[i]);

        for (int64_t k = 0; k < td_tensor_numel(a[i]); k++) {
            m = fmax(m, fabs(x[k] - y[k]));
        }
    }
    return m;
}

static void
run(int kind, int with_ddp)
{
    static const char *kinds[] = {"sgd", "adam", "adamw"};
    td_tensor_t *p[NP] = {0}, *ref[NP] = {0};
    td_zero_opts_t zo = zero_opts(kind);
    td_zero_t *z = NULL;
    td_ddp_t *ddp = NULL;
    td_status_t st;
    char name[96];
    double diff = INFINITY;

    make_params(p);
    st = td_zero_create(p, NP, &zo, &z);
    if (st == TD_OK && with_ddp) {
        st = td_ddp_create(p, NP, NULL, &ddp);
    }
    for (int s = 0; s < STEPS && st == TD_OK; s++) {
        if (with_ddp) {
            td_tensor_t *loss = NULL;

            if ((st = loss_of(p, rank, s, &loss)) == TD_OK &&
                (st = td_ddp_backward(ddp, loss)) == TD_OK &&
                (st = td_ddp_wait(ddp)) == TD_OK) {
                st = td_zero_step_averaged(z);
            }
            td_tensor_release(loss);
            if (st == TD_OK) {
                st = td_zero_zero_grad(z);
            }
        } else if ((st = grads_of(p, rank, s)) == TD_OK) {
            st = td_zero_step(z);
        }
    }
    if (st == TD_OK) {
        st = reference(kind, ref);
    }
    if (st == TD_OK) {
        diff = max_diff(p, ref);
    }
    snprintf(name, sizeof(name), "%s%s_equals_plain_n%d", with_ddp ?
             "ddp_" : "", kinds[kind], size);
    check(st == TD_OK && diff <= 1e-10, name, "status %d (%s) max diff %.3g",
          st, st == TD_OK ? "" : td_last_error(), diff);
    if (!with_ddp && kind == TD_ZERO_ADAM) {
        int64_t off, len, total, one = 1;
        td_tensor_t *sum = NULL;
        double all = 0;
        size_t bytes = z != NULL ? td_zero_state_bytes(z) : 0;

        if (z != NULL) {
            td_zero_shard(z, &off, &len, &total);
        } else {
            off = len = total = -1;
        }
        td_tensor_full(&one, 1, TD_FLOAT64, (double)len, &sum);
        td_all_reduce(td_group_world(), sum, TD_REDUCE_SUM);
        td_tensor_item(sum, &all);
        td_tensor_release(sum);
        snprintf(name, sizeof(name), "state_balanced_n%d", size);
        check(total == 69 && (len == 69 / size || len == 69 / size + 1) &&
              (int64_t)all == 69 && bytes == (size_t)len * 2 * 8, name,
              "rank %d: shard [%lld, +%lld) of %lld, sum %g, %zu state bytes",
              rank, (long long)off, (long long)len, (long long)total, all,
              bytes);
        if (st == TD_OK) {
            fprintf(stderr, "rank %d: adam state %zu bytes (%lld of %lld "
                    "elements; unsharded %lld bytes)\n", rank, bytes,
                    (long long)len, (long long)total, (long long)total * 16);
        }
    }
    td_ddp_destroy(ddp);
    td_zero_free(z);
    free_params(p);
    free_params(ref);
}

int
main(void)
{
    td_status_t st = td_init(NULL);

    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rank = td_world()->rank;
    size = td_world()->world_size;
    for (int kind = TD_ZERO_SGD; kind <= TD_ZERO_ADAMW; kind++) {
        run(kind, 0);
    }
    run(TD_ZERO_ADAM, 1);
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
