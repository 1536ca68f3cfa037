/* examples/ps_batch.c: seed 003's batch-updating parameter server (PyTorch's
 * "Implementing Batch RPC Processing Using Asynchronous Executions"), in C.
 *
 *   todist-run -n 4 examples/ps_batch [--steps 20] [--lr 0.05] [--check]
 *
 * Rank 0 is the parameter server; ranks 1..N-1 are trainers. Each step every
 * trainer computes the gradient of a linear regression (weight [1, D], bias
 * [1], MSE loss) on its own batch and calls "update_and_fetch" with it. The
 * server's handler is async (td_rpc_register_async): it adds the gradient
 * to a running sum and hands back the future of this round, holding no pool
 * thread; when all N-1 gradients have arrived it applies ONE update with
 * their average (params -= lr * mean) and completes that future with the new
 * parameters, which answers every trainer of the round at once.
 *
 * --check: the server then repeats the same training in one process (the
 * same batches, the averaged gradient, the same updates) and compares the
 * parameters: prints "check=ok max_abs_diff=..." or exits 1. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#define D      8      /* features */
#define BATCH  16

static int    steps = 20;
static double lr = 0.05;

/* ---- data: deterministic per (trainer, step) ---------------------------- */

static uint64_t
mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double
unit(uint64_t *s)            /* uniform in [-1, 1) */
{
    *s = mix(*s);
    return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

/* Trainer T's batch at step S: y = x . w_true + 0.5 + noise. */
static td_status_t
batch(int t, int s, td_tensor_t **x_p, td_tensor_t **y_p)
{
    double x[BATCH * D], y[BATCH];
    int64_t xs[2] = {BATCH, D}, ys[2] = {BATCH, 1};
    uint64_t seed = (uint64_t)t << 32 | (uint64_t)s;
    td_status_t st;

    for (int i = 0; i < BATCH; i++) {
        y[i] = 0.5 + 0.01 * unit(&seed);
        for (int j = 0; j < D; j++) {
            x[i * D + j] = unit(&seed);
            y[i] += x[i * D + j] * (double)(j + 1) / D;
        }
    }
    st = td_tensor_from_data(x, xs, 2, TD_FLOAT64, x_p);
    if (st == TD_OK) {
        st = td_tensor_from_data(y, ys, 2, TD_FLOAT64, y_p);
        if (st != TD_OK) {
            td_tensor_release(*x_p);
        }
    }
    return st;
}

/* Gradients of the batch's MSE loss at (W, B) into G[2]; *LOSS_P its value. */
static td_status_t
gradients(td_tensor_t *w, td_tensor_t *b, int t, int s, td_tensor_t **g,
          double *loss_p)
{
    td_tensor_t *x = NULL, *y = NULL, *wl = NULL, *bl = NULL, *pred = NULL,
                *loss = NULL;
    td_tensor_t *leaves[2];
    td_status_t st;

    if ((st = batch(t, s, &x, &y)) != TD_OK ||
        (st = td_tensor_detach(w, &wl)) != TD_OK ||
        (st = td_tensor_detach(b, &bl)) != TD_OK) {
        goto out;
    }
    td_tensor_set_requires_grad(wl, 1);
    td_tensor_set_requires_grad(bl, 1);
    leaves[0] = wl;
    leaves[1] = bl;
    if ((st = td_linear(x, wl, bl, &pred)) != TD_OK ||
        (st = td_mse_loss(pred, y, TD_REDUCTION_MEAN, &loss)) != TD_OK ||
        (st = td_grad(&loss, NULL, 1, leaves, 2, 0, 0, 0, g)) != TD_OK) {
        goto out;
    }
    *loss_p = *(const double *)td_tensor_data(loss);
out:
    td_tensor_release(loss);
    td_tensor_release(pred);
    td_tensor_release(bl);
    td_tensor_release(wl);
    td_tensor_release(y);
    td_tensor_release(x);
    return st;
}

static td_status_t
initial_params(td_tensor_t **w, td_tensor_t **b)
{
    int64_t ws[2] = {1, D}, bs[1] = {1};
    td_status_t st = td_tensor_zeros(ws, 2, TD_FLOAT64, w);

    if (st == TD_OK && (st = td_tensor_zeros(bs, 1, TD_FLOAT64, b)) != TD_OK) {
        td_tensor_release(*w);
    }
    return st;
}

/* P <- P - LR * SUM / N, as a new tensor (the old one may still be on its
 * way to a trainer). */
static td_status_t
sgd_update(td_tensor_t **p, td_tensor_t *sum, int n)
{
    td_tensor_t *step = NULL, *next = NULL;
    td_status_t st = td_mul_scalar(sum, lr / n, &step);

    if (st == TD_OK && (st = td_sub(*p, step, &next)) == TD_OK) {
        td_tensor_release(*p);
        *p = next;
    }
    td_tensor_release(step);
    return st;
}

/* ---- the server --------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    td_tensor_t    *w, *b;          /* current parameters */
    td_tensor_t    *sum[2];         /* this round's gradient sum */
    int             arrived;        /* of n_trainers */
    int             n_trainers;
    int             rounds;
    td_future_t    *round;          /* answers every trainer of the round */
} ps = { .lock = PTHREAD_MUTEX_INITIALIZER };

static td_status_t
params_list(td_rpc_list_t **out)
{
    td_status_t st = td_rpc_list_create(out);

    if (st == TD_OK && ((st = td_rpc_list_add_tensor(*out, ps.w)) != TD_OK ||
                        (st = td_rpc_list_add_tensor(*out, ps.b)) != TD_OK)) {
        td_rpc_list_free(*out);
    }
    return st;
}

/* get_params(): the current parameters (before the first step). */
static td_status_t
fn_get_params(void *arg, const td_rpc_call_info_t *info,
              const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_status_t st;

    (void)arg;
    (void)info;
    (void)args;
    pthread_mutex_lock(&ps.lock);
    if ((st = td_rpc_list_add_tensor(result, ps.w)) == TD_OK) {
        st = td_rpc_list_add_tensor(result, ps.b);
    }
    pthread_mutex_unlock(&ps.lock);
    return st;
}

/* update_and_fetch(gw, gb): async; answered when the round is complete. */
static td_status_t
fn_update_and_fetch(void *arg, const td_rpc_call_info_t *info,
                    const td_rpc_list_t *args, td_future_t **fut_p)
{
    td_tensor_t *g[2], *acc;
    td_future_t *done = NULL;
    td_rpc_list_t *value = NULL;
    td_status_t st = TD_OK;

    (void)arg;
    for (int k = 0; k < 2; k++) {
        if ((st = td_rpc_list_tensor(args, (size_t)k, &g[k])) != TD_OK) {
            return st;
        }
    }
    pthread_mutex_lock(&ps.lock);
    if (ps.round == NULL && (st = td_future_create(&ps.round)) != TD_OK) {
        goto unlock;
    }
    for (int k = 0; k < 2 && st == TD_OK; k++) {
        if (ps.sum[k] == NULL) {
            st = td_tensor_clone(g[k], &ps.sum[k]);
        } else if ((st = td_add(ps.sum[k], g[k], &acc)) == TD_OK) {
            td_tensor_release(ps.sum[k]);
            ps.sum[k] = acc;
        }
    }
    if (st != TD_OK) {
        goto unlock;
    }
    *fut_p = td_future_retain(ps.round);
    if (++ps.arrived == ps.n_trainers) {
        /* the last of the round: one averaged update, then answer all */
        if ((st = sgd_update(&ps.w, ps.sum[0], ps.n_trainers)) == TD_OK &&
            (st = sgd_update(&ps.b, ps.sum[1], ps.n_trainers)) == TD_OK) {
            st = params_list(&value);
        }
        done = ps.round;
        ps.round = NULL;
        ps.arrived = 0;
        ps.rounds++;
        td_tensor_release(ps.sum[0]);
        td_tensor_release(ps.sum[1]);
        ps.sum[0] = ps.sum[1] = NULL;
    }
unlock:
    pthread_mutex_unlock(&ps.lock);
    if (done != NULL) {
        /* outside the lock: completing answers N calls */
        if (st == TD_OK) {
            td_future_complete(done, value);
        } else {
            td_future_fail(done, st, "ps_batch: update on rank 0 failed "
                           "(caller %d): %s", info->caller, td_last_error());
        }
        td_future_release(done);
        st = TD_OK;      /* this caller's answer is the future's */
    }
    return st;
}

/* The same training in one process: N-1 trainers' batches per step,
 * averaged, one update. Returns the largest |difference| to (W, B). */
static td_status_t
check_local(int n_trainers, double *diff_p)
{
    td_tensor_t *w = NULL, *b = NULL, *g[2] = {0}, *sum[2] = {0}, *acc;
    td_status_t st;
    double loss, diff = 0;

    if ((st = initial_params(&w, &b)) != TD_OK) {
        return st;
    }
    for (int s = 0; s < steps && st == TD_OK; s++) {
        for (int t = 1; t <= n_trainers && st == TD_OK; t++) {
            if ((st = gradients(w, b, t, s, g, &loss)) != TD_OK) {
                break;
            }
            for (int k = 0; k < 2 && st == TD_OK; k++) {
                if (sum[k] == NULL) {
                    sum[k] = td_tensor_retain(g[k]);
                } else if ((st = td_add(sum[k], g[k], &acc)) == TD_OK) {
                    td_tensor_release(sum[k]);
                    sum[k] = acc;
                }
                td_tensor_release(g[k]);
                g[k] = NULL;
            }
        }
        if (st == TD_OK && (st = sgd_update(&w, sum[0], n_trainers)) == TD_OK) {
            st = sgd_update(&b, sum[1], n_trainers);
        }
        for (int k = 0; k < 2; k++) {
            td_tensor_release(sum[k]);
            sum[k] = NULL;
        }
    }
    if (st == TD_OK) {
        const double *a = td_tensor_data(w), *c = td_tensor_data(ps.w);

        for (int j = 0; j < D; j++) {
            diff = fmax(diff, fabs(a[j] - c[j]));
        }
        diff = fmax(diff, fabs(*(const double *)td_tensor_data(b) -
                               *(const double *)td_tensor_data(ps.b)));
        *diff_p = diff;
    }
    td_tensor_release(w);
    td_tensor_release(b);
    return st;
}

/* ---- a trainer ------------------------------------------------------------ */

static int
trainer(int rank)
{
    td_rpc_list_t *res = NULL, *args = NULL;
    td_tensor_t *w, *b, *g[2] = {0};
    double loss = 0;
    td_status_t st;

    st = td_rpc_sync(0, "get_params", NULL, TD_RPC_DEFAULT_TIMEOUT, &res);
    for (int s = 0; s < steps && st == TD_OK; s++) {
        if ((st = td_rpc_list_tensor(res, 0, &w)) != TD_OK ||
            (st = td_rpc_list_tensor(res, 1, &b)) != TD_OK ||
            (st = gradients(w, b, rank, s, g, &loss)) != TD_OK ||
            (st = td_rpc_list_create(&args)) != TD_OK ||
            (st = td_rpc_list_add_tensor(args, g[0])) != TD_OK ||
            (st = td_rpc_list_add_tensor(args, g[1])) != TD_OK) {
            break;
        }
        td_rpc_list_free(res);
        res = NULL;
        st = td_rpc_sync(0, "update_and_fetch", args, TD_RPC_DEFAULT_TIMEOUT,
                         &res);
        td_rpc_list_free(args);
        args = NULL;
        td_tensor_release(g[0]);
        td_tensor_release(g[1]);
        g[0] = g[1] = NULL;
        if (s == 0 || s == steps - 1) {
            printf("trainer %d step %d loss %.6f\n", rank, s, loss);
        }
    }
    td_tensor_release(g[0]);
    td_tensor_release(g[1]);
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    if (st != TD_OK) {
        fprintf(stderr, "trainer %d: %s\n", rank, td_last_error());
        return 1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    int check = 0, rc = 0, rank;
    td_status_t st;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--lr") == 0 && i + 1 < argc) {
            lr = atof(argv[++i]);
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else {
            fprintf(stderr, "usage: %s [--steps N] [--lr X] [--check]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1) {
        fprintf(stderr, "ps_batch: --steps must be >= 1\n");
        return 2;
    }
    if (initial_params(&ps.w, &ps.b) != TD_OK ||
        td_rpc_register("get_params", fn_get_params, NULL) != TD_OK ||
        td_rpc_register_async("update_and_fetch", fn_update_and_fetch,
                              NULL) != TD_OK) {
        fprintf(stderr, "ps_batch: %s\n", td_last_error());
        return 1;
    }
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    ps.n_trainers = td_world()->world_size - 1;
    if (ps.n_trainers < 1) {
        fprintf(stderr, "ps_batch: needs at least 2 workers (a server and "
                "a trainer), got %d\n", td_world()->world_size);
        td_finalize();
        return 2;
    }
    rank = td_world()->rank;
    if (rank > 0) {
        rc = trainer(rank);
    }
    /* td_finalize waits until every worker is done: the server's rounds
     * are complete when it returns */
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        rc = 1;
    }
    if (rank == 0) {
        printf("server: %d rounds of %d trainers, w[0] %.6f b %.6f\n",
               ps.rounds, ps.n_trainers,
               ((const double *)td_tensor_data(ps.w))[0],
               *(const double *)td_tensor_data(ps.b));
        if (check) {
            double diff = INFINITY;

            st = check_local(ps.n_trainers, &diff);
            if (st != TD_OK || ps.rounds != steps || !(diff <= 1e-12)) {
                printf("check=FAILED rounds=%d/%d max_abs_diff=%.3g %s\n",
                       ps.rounds, steps, diff,
                       st != TD_OK ? td_last_error() : "");
                rc = 1;
            } else {
                printf("check=ok max_abs_diff=%.3g\n", diff);
            }
        }
    }
    td_tensor_release(ps.w);
    td_tensor_release(ps.b);
    return rc;
}
