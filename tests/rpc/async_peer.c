/* tests/rpc/async_peer.c: async RPC handlers (td_rpc_register_async) between
 * two workers, run by tests/rpc/test_async.sh under todist-run -n 2 with
 * TODIST_RPC_THREADS=1. Rank 0 drives; each check prints PASS/FAIL NAME.
 *
 * "ahop" multiplies its tensor by this worker's weight and, while hops
 * remain, calls "ahop" on the other worker and hands back that call's
 * future: a 1,000-hop chain holds no pool thread on either side while it
 * is in flight (the synchronous form needs one thread per hop per worker
 * and, at 600 hops under TODIST_RPC_THREADS=1, timed out). */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <todist/todist.h>
#include "tests/peer_check.h"

#define N_EL 4

static int rank;
static td_tensor_t *weights[2];   /* leaves (requires grad), made before
                                   * td_init: handlers may run at once */
#define weight weights[td_world()->rank]
#define me     (td_world()->rank)

static double
w_of(int r)
{
    return r == 0 ? 1.001 : 0.999;
}

/* ahop(x, n): y = x * w_rank; n == 1: answer y; else answer what
 * ahop(y, n - 1) on the other worker answers (its future, handed back). */
static td_status_t
fn_ahop(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_future_t **fut_p)
{
    td_tensor_t *x, *y = NULL;
    td_rpc_list_t *out = NULL;
    int64_t n;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_tensor(args, 0, &x)) != TD_OK ||
        (st = td_rpc_list_int(args, 1, &n)) != TD_OK ||
        (st = td_mul(x, weight, &y)) != TD_OK ||
        (st = td_rpc_list_create(&out)) != TD_OK ||
        (st = td_rpc_list_add_tensor(out, y)) != TD_OK) {
        goto out;
    }
    if (n <= 1) {
        st = td_future_create(fut_p);
        if (st == TD_OK) {
            td_future_complete(*fut_p, out);
            out = NULL;
        }
        goto out;
    }
    if ((st = td_rpc_list_add_int(out, n - 1)) != TD_OK) {
        goto out;
    }
    st = td_rpc_async(1 - me, "ahop", out, TD_RPC_DEFAULT_TIMEOUT, fut_p);
out:
    td_rpc_list_free(out);
    td_tensor_release(y);
    return st;
}

/* afail(n): the future fails with "boom at depth N" after N-1 more hops. */
static td_status_t
fn_afail(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_future_t **fut_p)
{
    td_rpc_list_t *out = NULL;
    int64_t n;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_int(args, 0, &n)) != TD_OK) {
        return st;
    }
    if (n <= 1) {
        st = td_future_create(fut_p);
        if (st == TD_OK) {
            td_future_fail(*fut_p, TD_ERR_INVALID, "boom on rank %d", me);
        }
        return st;
    }
    if ((st = td_rpc_list_create(&out)) == TD_OK &&
        (st = td_rpc_list_add_int(out, n - 1)) == TD_OK) {
        st = td_rpc_async(1 - me, "afail", out, TD_RPC_DEFAULT_TIMEOUT,
                          fut_p);
    }
    td_rpc_list_free(out);
    return st;
}

/* arefuse: returns an error at once, no future. */
static td_status_t
fn_arefuse(void *arg, const td_rpc_call_info_t *info,
           const td_rpc_list_t *args, td_future_t **fut_p)
{
    (void)arg;
    (void)args;
    (void)fut_p;
    return td_error(TD_ERR_RANGE, "arefuse: caller %d refused", info->caller);
}

/* alater: the future is completed by another thread 100 ms later, with
 * the argument plus one; the pool thread is long free by then. */
typedef struct {
    td_future_t *fut;
    int64_t      v;
} later_t;

static void *
later_main(void *arg)
{
    later_t *l = arg;
    td_rpc_list_t *out = NULL;

    usleep(100000);
    if (td_rpc_list_create(&out) == TD_OK &&
        td_rpc_list_add_int(out, l->v + 1) == TD_OK) {
        td_future_complete(l->fut, out);
    } else {
        td_rpc_list_free(out);
        td_future_fail(l->fut, TD_ERR_NO_MEMORY, "alater: out of memory");
    }
    td_future_release(l->fut);
    free(l);
    return NULL;
}

static td_status_t
fn_alater(void *arg, const td_rpc_call_info_t *info,
          const td_rpc_list_t *args, td_future_t **fut_p)
{
    later_t *l;
    pthread_t th;
    td_status_t st;

    (void)arg;
    (void)info;
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "alater: out of memory");
    }
    if ((st = td_rpc_list_int(args, 0, &l->v)) != TD_OK ||
        (st = td_future_create(&l->fut)) != TD_OK) {
        free(l);
        return st;
    }
    *fut_p = td_future_retain(l->fut);
    if (pthread_create(&th, NULL, later_main, l) != 0) {
        td_future_fail(l->fut, TD_ERR_STATE, "alater: no thread");
        td_future_release(l->fut);
        free(l);
        return TD_OK;
    }
    pthread_detach(th);
    return TD_OK;
}

/* grad_w(ctx): this worker's gradient of its weight in context CTX. */
static td_status_t
fn_grad_w(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
          td_rpc_list_t *result)
{
    td_tensor_t *g = NULL;
    int64_t ctx;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_int(args, 0, &ctx)) != TD_OK ||
        (st = td_dist_get_gradient(ctx, weight, &g)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_tensor(result, g);
    td_tensor_release(g);
    return st;
}

static td_tensor_t *
input_x(void)
{
    double d[N_EL] = {0.5, 1.0, 1.5, 2.0};
    int64_t shape[1] = {N_EL};
    td_tensor_t *x = NULL;

    td_tensor_from_data(d, shape, 1, TD_FLOAT64, &x);
    return x;
}

static double
max_rel(const td_tensor_t *t, const double *want)
{
    const double *d = td_tensor_data(t);
    double m = 0;

    for (int i = 0; i < N_EL; i++) {
        double e = fabs(d[i] - want[i]) / fmax(fabs(want[i]), 1e-300);
        m = e > m ? e : m;
    }
    return m;
}

/* Rank 0 calls ahop(x, HOPS) on rank 1; ranks 1 and 0 alternate, so each
 * weight multiplies HOPS/2 times: y = x * w0^(H/2) * w1^(H/2). */
static void
chain(int hops, int grad)
{
    td_tensor_t *x = input_x(), *y = NULL, *loss = NULL, *g = NULL;
    td_rpc_list_t *args = NULL, *res = NULL;
    int64_t ctx = 0;
    double k = hops / 2, want_y[N_EL], want_gx[N_EL], want_gw[2][N_EL];
    double p = pow(w_of(0), k) * pow(w_of(1), k);
    const double *xd = td_tensor_data(x);
    char name[64];
    td_status_t st;

    for (int i = 0; i < N_EL; i++) {
        want_y[i] = xd[i] * p;
        want_gx[i] = p;
        for (int r = 0; r < 2; r++) {
            want_gw[r][i] = k * xd[i] * p / w_of(r);
        }
    }
    if (grad) {
        td_tensor_set_requires_grad(x, 1);
        td_dist_autograd_begin(&ctx);
    }
    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, x);
    td_rpc_list_add_int(args, hops);
    st = td_rpc_sync(1, "ahop", args, 120.0, &res);
    snprintf(name, sizeof(name), "chain_%d_%s", hops,
             grad ? "backward" : "forward");
    if (st != TD_OK) {
        check(0, name, "call failed: %s", td_last_error());
        goto out;
    }
    td_rpc_list_tensor(res, 0, &y);
    td_tensor_retain(y);
    check(max_rel(y, want_y) < 1e-12, name, "y[0] %.17g want %.17g",
          ((const double *)td_tensor_data(y))[0], want_y[0]);
    if (!grad) {
        goto out;
    }
    snprintf(name, sizeof(name), "chain_%d_grads", hops);
    if ((st = td_sum(y, &loss)) != TD_OK ||
        (st = td_dist_backward(ctx, &loss, 1, 0)) != TD_OK) {
        check(0, name, "backward failed: %s", td_last_error());
        goto out;
    }
    if ((st = td_dist_get_gradient(ctx, x, &g)) != TD_OK) {
        check(0, name, "no gradient of x: %s", td_last_error());
        goto out;
    }
    check(max_rel(g, want_gx) < 1e-12, name, "dx[0] %.17g want %.17g",
          ((const double *)td_tensor_data(g))[0], want_gx[0]);
    td_tensor_release(g);
    g = NULL;
    snprintf(name, sizeof(name), "chain_%d_grad_w0", hops);
    st = td_dist_get_gradient(ctx, weight, &g);
    check(st == TD_OK && max_rel(g, want_gw[0]) < 1e-12, name,
          "dw0[0] %.17g want %.17g (%s)",
          st == TD_OK ? ((const double *)td_tensor_data(g))[0] : NAN,
          want_gw[0][0], st == TD_OK ? "" : td_last_error());
    td_tensor_release(g);
    g = NULL;
    td_rpc_list_free(res);
    res = NULL;
    td_rpc_list_free(args);
    td_rpc_list_create(&args);
    td_rpc_list_add_int(args, ctx);
    snprintf(name, sizeof(name), "chain_%d_grad_w1", hops);
    st = td_rpc_sync(1, "grad_w", args, 60.0, &res);
    if (st == TD_OK) {
        td_rpc_list_tensor(res, 0, &g);
        td_tensor_retain(g);
    }
    check(st == TD_OK && max_rel(g, want_gw[1]) < 1e-12, name,
          "dw1[0] %.17g want %.17g (%s)",
          st == TD_OK ? ((const double *)td_tensor_data(g))[0] : NAN,
          want_gw[1][0], st == TD_OK ? "" : td_last_error());
out:
    if (ctx != 0) {
        td_dist_autograd_end(ctx);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_tensor_release(g);
    td_tensor_release(loss);
    td_tensor_release(y);
    td_tensor_release(x);
}

static void
errors(void)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_status_t st;
    int64_t v = 0;

    td_rpc_list_create(&args);
    td_rpc_list_add_int(args, 7);
    st = td_rpc_sync(1, "afail", args, 60.0, NULL);
    check(st == TD_ERR_REMOTE && strstr(td_last_error(), "boom on rank 1"),
          "future_error_travels_back", "status %d: %s", st, td_last_error());
    st = td_rpc_sync(1, "arefuse", NULL, 60.0, NULL);
    check(st == TD_ERR_REMOTE &&
          strstr(td_last_error(), "arefuse: caller 0 refused") &&
          strstr(td_last_error(), "rank 1"),
          "handler_error_names_rank", "status %d: %s", st, td_last_error());
    st = td_rpc_sync(1, "alater", args, 60.0, &res);
    if (st == TD_OK) {
        st = td_rpc_list_int(res, 0, &v);
    }
    check(st == TD_OK && v == 8, "completed_by_other_thread",
          "status %d value %lld: %s", st, (long long)v, td_last_error());
    td_rpc_list_free(res);
    res = NULL;
    {
        /* td_remote runs the function on its owner directly
         * (td__rpc_run_local): an async one's future, when done, makes
         * the object (no thread waits for it there) */
        td_rref_t *rr = NULL;

        v = 0;
        st = td_remote(1, "alater", args, 60.0, &rr);
        if (st == TD_OK) {
            st = td_rref_to_here(rr, 60.0, &res);
        }
        if (st == TD_OK) {
            st = td_rpc_list_int(res, 0, &v);
        }
        check(st == TD_OK && v == 8, "remote_object_of_async_handler",
              "status %d value %lld: %s", st, (long long)v, td_last_error());
        td_rref_release(rr);
    }
    td_rpc_list_free(res);
    td_rpc_list_free(args);
}

int
main(int argc, char **argv)
{
    int64_t shape[1] = {N_EL};
    int hops = argc > 1 ? atoi(argv[1]) : 1000;
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    td_rpc_register_async("ahop", fn_ahop, NULL);
    td_rpc_register_async("afail", fn_afail, NULL);
    td_rpc_register_async("arefuse", fn_arefuse, NULL);
    td_rpc_register_async("alater", fn_alater, NULL);
    td_rpc_register("grad_w", fn_grad_w, NULL);
    for (int r = 0; r < 2; r++) {
        td_tensor_full(shape, 1, TD_FLOAT64, w_of(r), &weights[r]);
        td_tensor_set_requires_grad(weights[r], 1);
    }
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    if (rank == 0) {
        errors();
        chain(hops, 0);
        chain(hops, 1);
    }
    st = td_finalize();
    td_tensor_release(weights[0]);
    td_tensor_release(weights[1]);
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
