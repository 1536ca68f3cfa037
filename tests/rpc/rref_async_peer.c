/* tests/rpc/rref_async_peer.c: remote references and the distributed optimizer
 * hold no RPC pool thread while they wait, run by tests/rpc/test_rref_async.sh
 * under todist-run -n 3 with TODIST_RPC_THREADS=1. Rank 0 drives; each
 * check prints PASS/FAIL NAME. The pool grows to 256 threads at most, so
 * each check makes one worker wait on more than 256 things at once: a
 * handler holding a thread per wait (the code before rref.c's RR1) runs
 * out, the message that would end the waits queues behind them, and the
 * check ends in a timeout instead of the right values.
 *
 * Mode "all" (the default):
 *  - rref_chain: a chain of HOPS nested calls between ranks 2 and 1, the
 *    reference (owned by 1) passed along every hop: rank 2's "rfwd" calls
 *    "rhop" on the object (td_rref_rpc_async), whose handler on the owner
 *    calls "rfwd" on rank 2 with the reference, and so on; both async.
 *    HOPS/2 method calls on the owner are in flight at once.
 *  - rref_pending_fanout: rank 0 creates an object on rank 1 whose creating
 *    function (async) completes only when "open" arrives, passes the
 *    reference to rank 2, which makes FAN method calls on it and then sends
 *    "open" to rank 1 behind them; rank 0's own td_rref_to_here waits too.
 *  - optim_busy_owners: parameters created the same way on ranks 1 and 2,
 *    each owner busy with FAN calls on the other's parameter from before
 *    its own creation; the distributed optimizer is created over both
 *    while nothing exists yet (the owners' create handler waits for the
 *    parameters), then one forward, distributed backward and SGD step,
 *    and a second step by td_dist_optimizer_step_async from an async
 *    handler.
 * Mode "timeout" (TODIST_RPC_TIMEOUT=2): a method call and a fetch of an
 * object never created end in "rref: object ... does not exist on rank 1
 * after 2 s", as they did before. Mode "bound": the parked requests'
 * bound (TODIST_RREF_MAX_PARKED). */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_check.h"

#define N_EL      4
#define GATES_MAX 64
#define LR        0.1

static td_tensor_t *param;       /* this rank's parameter: a leaf made before
                                  * td_init (handlers may run at once) */

static const double xs[N_EL] = {0.5, 1.0, 1.5, 2.0};

static double
param_init(int rank, int i)
{
    return 0.25 * (i + 1) + rank;
}

static td_tensor_t *
input_x(void)
{
    int64_t shape[1] = {N_EL};
    td_tensor_t *x = NULL;

    td_tensor_from_data(xs, shape, 1, TD_FLOAT64, &x);
    return x;
}

/* max |t - want| */
static double
max_err(const td_tensor_t *t, const double *want)
{
    const double *d = td_tensor_data(t);
    double m = 0;

    for (int i = 0; i < N_EL; i++) {
        m = fmax(m, fabs(d[i] - want[i]));
    }
    return m;
}

static td_status_t
answer_now(td_rpc_list_t *out, td_future_t **fut_p)
{
    td_status_t st = td_future_create(fut_p);

    if (st == TD_OK) {
        td_future_complete(*fut_p, out);
    } else {
        td_rpc_list_free(out);
    }
    return st;
}

/* ---- the gate: creating functions that finish when "open" arrives ------- */

static struct {
    pthread_mutex_t lock;
    int             open;
    td_future_t    *waiting[GATES_MAX];
    int             kind[GATES_MAX];
    int             n;
} gate = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The value of a gated object of KIND: 0 the input x, 1 the parameter. */
static void
gate_complete(td_future_t *f, int kind)
{
    td_rpc_list_t *v = NULL;
    td_tensor_t *x = kind == 0 ? input_x() : td_tensor_retain(param);

    if (td_rpc_list_create(&v) == TD_OK &&
        td_rpc_list_add_tensor(v, x) == TD_OK) {
        td_future_complete(f, v);
    } else {
        td_rpc_list_free(v);
        td_future_fail(f, TD_ERR_NO_MEMORY, "gate: out of memory");
    }
    td_tensor_release(x);
}

/* gated(kind): async; done once "open" came (before or after). */
static td_status_t
fn_gated(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_future_t **fut_p)
{
    int64_t kind;
    td_status_t st;
    int now;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_int(args, 0, &kind)) != TD_OK ||
        (st = td_future_create(fut_p)) != TD_OK) {
        return st;
    }
    pthread_mutex_lock(&gate.lock);
    now = gate.open;
    if (!now) {
        if (gate.n == GATES_MAX) {
            pthread_mutex_unlock(&gate.lock);
            td_future_release(*fut_p);
            *fut_p = NULL;
            return td_error(TD_ERR_RANGE, "gate: full");
        }
        gate.kind[gate.n] = (int)kind;
        gate.waiting[gate.n++] = td_future_retain(*fut_p);
    }
    pthread_mutex_unlock(&gate.lock);
    if (now) {
        gate_complete(*fut_p, (int)kind);
    }
    return TD_OK;
}

static td_status_t
fn_open(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    td_future_t *w[GATES_MAX];
    int k[GATES_MAX], n;

    (void)arg;
    (void)info;
    (void)args;
    (void)result;
    pthread_mutex_lock(&gate.lock);
    gate.open = 1;
    n = gate.n;
    memcpy(w, gate.waiting, sizeof(w[0]) * (size_t)n);
    memcpy(k, gate.kind, sizeof(k[0]) * (size_t)n);
    gate.n = 0;
    pthread_mutex_unlock(&gate.lock);
    for (int i = 0; i < n; i++) {
        gate_complete(w[i], k[i]);
        td_future_release(w[i]);
    }
    return TD_OK;
}

/* make_x(): the input x (a plain creating function). */
static td_status_t
fn_make_x(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
          td_rpc_list_t *result)
{
    td_tensor_t *x = input_x();
    td_status_t st;

    (void)arg;
    (void)info;
    (void)args;
    st = td_rpc_list_add_tensor(result, x);
    td_tensor_release(x);
    return st;
}

/* read(value): the object's tensor (a plain method). */
static td_status_t
fn_read(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    td_tensor_t *t, *c = NULL;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_tensor(args, 0, &t)) != TD_OK ||
        (st = td_tensor_clone(t, &c)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_tensor(result, c);
    td_tensor_release(c);
    return st;
}

/* mul_by(value, x): value * x, in the caller's autograd context. */
static td_status_t
fn_mul_by(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
          td_rpc_list_t *result)
{
    td_tensor_t *p, *x, *y = NULL;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_tensor(args, 0, &p)) != TD_OK ||
        (st = td_rpc_list_tensor(args, 1, &x)) != TD_OK ||
        (st = td_mul(p, x, &y)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_tensor(result, y);
    td_tensor_release(y);
    return st;
}

/* ---- the chain: rfwd (rank 2) <-> rhop (the owner, rank 1) -------------- */

/* rfwd(ref, n, y): what ref.rhop(ref, n, y) answers. */
static td_status_t
fn_rfwd(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_future_t **fut_p)
{
    td_rref_t *r;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_rref(args, 0, &r)) != TD_OK) {
        return st;
    }
    return td_rref_rpc_async(r, "rhop", args, TD_RPC_DEFAULT_TIMEOUT, fut_p);
}

/* rhop(x, ref, n, y): y + x; while n > 1, what rfwd(ref, n - 1, y + x) on
 * rank 2 answers (its future, handed back). */
static td_status_t
fn_rhop(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_future_t **fut_p)
{
    td_tensor_t *x, *y, *y2 = NULL;
    td_rref_t *r;
    td_rpc_list_t *out = NULL;
    int64_t n;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_tensor(args, 0, &x)) != TD_OK ||
        (st = td_rpc_list_rref(args, 1, &r)) != TD_OK ||
        (st = td_rpc_list_int(args, 2, &n)) != TD_OK ||
        (st = td_rpc_list_tensor(args, 3, &y)) != TD_OK ||
        (st = td_add(y, x, &y2)) != TD_OK ||
        (st = td_rpc_list_create(&out)) != TD_OK) {
        goto out;
    }
    if (n <= 1) {
        st = td_rpc_list_add_tensor(out, y2);
        if (st == TD_OK) {
            st = answer_now(out, fut_p);
            out = NULL;
        }
        goto out;
    }
    if ((st = td_rpc_list_add_rref(out, r)) != TD_OK ||
        (st = td_rpc_list_add_int(out, n - 1)) != TD_OK ||
        (st = td_rpc_list_add_tensor(out, y2)) != TD_OK) {
        goto out;
    }
    st = td_rpc_async(2, "rfwd", out, TD_RPC_DEFAULT_TIMEOUT, fut_p);
out:
    td_rpc_list_free(out);
    td_tensor_release(y2);
    return st;
}

/* ---- fan: N method calls on a reference, then "open" to its owner ------ */

typedef struct {
    td_future_t **reads;
    int           n;
    td_future_t  *answer;
} fan_t;

/* All reads are done: answer with their sum. */
static void
fan_done(void *arg, td_future_t *all)
{
    fan_t *f = arg;
    int64_t shape[1] = {N_EL};
    td_tensor_t *sum = NULL;
    td_rpc_list_t *out = NULL;
    td_status_t st = td_future_status(all);

    if (st != TD_OK) {
        td_future_fail(f->answer, st, "%s", td_future_error(all));
        goto out;
    }
    st = td_tensor_zeros(shape, 1, TD_FLOAT64, &sum);
    for (int i = 0; i < f->n && st == TD_OK; i++) {
        td_tensor_t *t, *s2 = NULL;

        st = td_rpc_list_tensor(td_future_value(f->reads[i]), 0, &t);
        if (st == TD_OK) {
            st = td_add(sum, t, &s2);
        }
        if (st == TD_OK) {
            td_tensor_release(sum);
            sum = s2;
        }
    }
    if (st == TD_OK && (st = td_rpc_list_create(&out)) == TD_OK &&
        (st = td_rpc_list_add_tensor(out, sum)) == TD_OK) {
        td_future_complete(f->answer, out);
        out = NULL;
    } else {
        td_future_fail(f->answer, st, "fan: %s", td_last_error());
    }
out:
    td_rpc_list_free(out);
    td_tensor_release(sum);
    for (int i = 0; i < f->n; i++) {
        td_future_release(f->reads[i]);
    }
    free(f->reads);
    td_future_release(f->answer);
    free(f);
}

/* fan(ref, n): n - 1 calls ref.read() and one fetch (td_rref_to_here_async),
 * then "open" on the owner behind them
 * (same sender, same destination: they arrive in that order); answers
 * with the sum of the reads. */
static td_status_t
fn_fan(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
       td_future_t **fut_p)
{
    td_rref_t *r;
    int64_t n;
    td_future_t *all = NULL, *opened = NULL;
    fan_t *f;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_rref(args, 0, &r)) != TD_OK ||
        (st = td_rpc_list_int(args, 1, &n)) != TD_OK) {
        return st;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL || n < 1 ||
        (f->reads = calloc((size_t)n, sizeof(*f->reads))) == NULL) {
        free(f);
        return td_error(TD_ERR_NO_MEMORY, "fan: n=%lld", (long long)n);
    }
    f->n = (int)n;
    st = td_future_create(&f->answer);
    for (int i = 0; i < n - 1 && st == TD_OK; i++) {
        st = td_rref_rpc_async(r, "read", NULL, TD_RPC_DEFAULT_TIMEOUT,
                               &f->reads[i]);
    }
    if (st == TD_OK) {          /* the last one a fetch (the same value) */
        st = td_rref_to_here_async(r, TD_RPC_DEFAULT_TIMEOUT,
                                   &f->reads[n - 1]);
    }
    if (st == TD_OK) {
        st = td_rpc_async(td_rref_owner(r), "open", NULL,
                          TD_RPC_DEFAULT_TIMEOUT, &opened);
        td_future_release(opened);
    }
    if (st == TD_OK) {
        st = td_future_collect_all(f->reads, (size_t)n, &all);
    }
    if (st != TD_OK) {
        for (int i = 0; i < n; i++) {
            td_future_release(f->reads[i]);
        }
        free(f->reads);
        td_future_release(f->answer);
        free(f);
        return st;
    }
    *fut_p = td_future_retain(f->answer);
    td_future_then(all, fan_done, f);
    td_future_release(all);
    return TD_OK;
}

/* astep(ctx): td_dist_optimizer_step_async of rank 0's optimizer, its
 * future handed back: the pool thread is free while the owners step. */
static td_dist_optimizer_t *g_opt;

static td_status_t
fn_astep(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_future_t **fut_p)
{
    int64_t ctx;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_int(args, 0, &ctx)) != TD_OK) {
        return st;
    }
    if (g_opt == NULL) {
        return td_error(TD_ERR_STATE, "astep: no optimizer here");
    }
    return td_dist_optimizer_step_async(g_opt, ctx, fut_p);
}

/* ---- the checks (rank 0) -------------------------------------------------- */

static td_rpc_list_t *
list_of(const char *fmt, ...)
{
    td_rpc_list_t *l = NULL;
    va_list ap;

    if (td_rpc_list_create(&l) != TD_OK) {
        return NULL;
    }
    va_start(ap, fmt);
    for (const char *c = fmt; *c; c++) {
        switch (*c) {
        case 'i': td_rpc_list_add_int(l, va_arg(ap, int64_t)); break;
        case 't': td_rpc_list_add_tensor(l, va_arg(ap, td_tensor_t *)); break;
        case 'r': td_rpc_list_add_rref(l, va_arg(ap, td_rref_t *)); break;
        }
    }
    va_end(ap);
    return l;
}

static void
rref_chain(int hops)
{
    int64_t shape[1] = {N_EL};
    td_tensor_t *y0 = NULL, *y;
    td_rref_t *r = NULL;
    td_rpc_list_t *args = NULL, *res = NULL;
    double want[N_EL];
    td_status_t st;

    for (int i = 0; i < N_EL; i++) {
        want[i] = 1.0 + (hops / 2) * xs[i];
    }
    td_tensor_full(shape, 1, TD_FLOAT64, 1.0, &y0);
    st = td_remote(1, "make_x", NULL, TD_RPC_DEFAULT_TIMEOUT, &r);
    if (st == TD_OK) {
        args = list_of("rit", r, (int64_t)(hops / 2), y0);
        st = td_rpc_sync(2, "rfwd", args, 120.0, &res);
    }
    if (st == TD_OK) {
        st = td_rpc_list_tensor(res, 0, &y);
    }
    check(st == TD_OK && max_err(y, want) == 0, "rref_chain",
          "%d hops: %s y[3] %.17g want %.17g", hops,
          st == TD_OK ? "" : td_last_error(),
          st == TD_OK ? ((const double *)td_tensor_data(y))[3] : NAN,
          want[3]);
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_rref_release(r);
    td_tensor_release(y0);
}

static void
rref_pending_fanout(int fan)
{
    td_rref_t *r = NULL;
    td_rpc_list_t *args = NULL, *res = NULL, *val = NULL;
    td_future_t *fut = NULL;
    td_tensor_t *t;
    double want[N_EL];
    td_status_t st;

    for (int i = 0; i < N_EL; i++) {
        want[i] = fan * xs[i];
    }
    args = list_of("i", (int64_t)0);
    st = td_remote(1, "gated", args, TD_RPC_DEFAULT_TIMEOUT, &r);
    td_rpc_list_free(args);
    args = NULL;
    if (st == TD_OK) {
        args = list_of("ri", r, (int64_t)fan);
        st = td_rpc_async(2, "fan", args, 120.0, &fut);
    }
    /* fetched while the object does not exist yet either */
    if (st == TD_OK) {
        st = td_rref_to_here(r, 120.0, &val);
    }
    if (st == TD_OK) {
        st = td_rpc_list_tensor(val, 0, &t);
    }
    check(st == TD_OK && max_err(t, xs) == 0, "rref_pending_fetch",
          "%s", st == TD_OK ? "wrong value" : td_last_error());
    if (fut != NULL) {
        st = td_future_wait(fut, -1);
        if (st == TD_OK) {
            st = td_rpc_list_tensor(td_future_value(fut), 0, &t);
        }
        check(st == TD_OK && max_err(t, want) == 0, "rref_pending_fanout",
              "%d calls: %s", fan, st == TD_OK ? "wrong sum" :
              td_last_error());
    } else {
        check(0, "rref_pending_fanout", "%s", td_last_error());
    }
    td_future_release(fut);
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_rpc_list_free(val);
    td_rref_release(r);
}

static void
optim_busy_owners(int fan)
{
    td_rref_t *p[3] = {NULL, NULL, NULL};
    td_future_t *busy[3] = {NULL, NULL, NULL};
    td_dist_optimizer_t *opt = NULL;
    td_sgd_opts_t so = {LR, 0, 0, 0, 0};
    td_tensor_t *x = input_x(), *loss = NULL, *sum = NULL;
    td_tensor_t *y[3] = {NULL, NULL, NULL};
    int64_t ctx = 0;
    const char *what = "create the parameters";
    td_status_t st = TD_OK;

    for (int o = 1; o <= 2 && st == TD_OK; o++) {
        td_rpc_list_t *a = list_of("i", (int64_t)1);

        st = td_remote(o, "gated", a, TD_RPC_DEFAULT_TIMEOUT, &p[o]);
        td_rpc_list_free(a);
    }
    /* each owner makes FAN calls on the other's parameter, then opens the
     * other's gate behind them */
    for (int o = 1; o <= 2 && st == TD_OK; o++) {
        td_rpc_list_t *a = list_of("ri", p[3 - o], (int64_t)fan);

        what = "start the busy owners";
        st = td_rpc_async(o, "fan", a, 120.0, &busy[o]);
        td_rpc_list_free(a);
    }
    if (st == TD_OK) {
        what = "create the optimizer";
        st = td_dist_optimizer_sgd(&p[1], 2, &so, &opt);
    }
    for (int o = 1; o <= 2 && st == TD_OK; o++) {
        what = "the owners' calls";
        st = td_future_wait(busy[o], -1);
    }
    if (st == TD_OK) {
        /* x requires grad: the calls then carry the context (RPC records
         * a send node only for such messages) */
        what = "forward";
        st = td_tensor_set_requires_grad(x, 1);
    }
    if (st == TD_OK) {
        st = td_dist_autograd_begin(&ctx);
    }
    for (int o = 1; o <= 2 && st == TD_OK; o++) {
        td_rpc_list_t *a = list_of("t", x), *res = NULL;

        st = td_rref_rpc_sync(p[o], "mul_by", a, 60.0, &res);
        if (st == TD_OK && (st = td_rpc_list_tensor(res, 0, &y[o])) == TD_OK) {
            td_tensor_retain(y[o]);
        }
        td_rpc_list_free(a);
        td_rpc_list_free(res);
    }
    if (st == TD_OK && (st = td_add(y[1], y[2], &sum)) == TD_OK &&
        (st = td_sum(sum, &loss)) == TD_OK) {
        what = "backward";
        st = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (st == TD_OK) {
        what = "step";
        st = td_dist_optimizer_step(opt, ctx);
    }
    check(st == TD_OK, "optim_busy_owners", "%s: %s", what, td_last_error());
    if (st == TD_OK) {
        /* a second step with the same gradients, from an async handler */
        td_rpc_list_t *a = list_of("i", ctx);

        g_opt = opt;
        st = td_rpc_sync(0, "astep", a, 60.0, NULL);
        g_opt = NULL;
        td_rpc_list_free(a);
        check(st == TD_OK, "optim_step_async_in_handler", "%s",
              td_last_error());
    }
    for (int o = 1; o <= 2 && st == TD_OK; o++) {
        /* d sum(p1 * x + p2 * x) / d p = x; two SGD steps: p - 2 lr x */
        double want[N_EL];
        td_rpc_list_t *v = NULL;
        td_tensor_t *t = NULL;
        char name[64];

        for (int i = 0; i < N_EL; i++) {
            want[i] = param_init(o, i) - LR * xs[i] - LR * xs[i];
        }
        snprintf(name, sizeof(name), "optim_busy_owners_param%d", o);
        st = td_rref_to_here(p[o], 60.0, &v);
        if (st == TD_OK) {
            st = td_rpc_list_tensor(v, 0, &t);
        }
        check(st == TD_OK && max_err(t, want) < 1e-15, name,
              "%s p[0] %.17g want %.17g", st == TD_OK ? "" : td_last_error(),
              st == TD_OK ? ((const double *)td_tensor_data(t))[0] : NAN,
              want[0]);
        td_rpc_list_free(v);
        st = TD_OK;
    }
    if (ctx != 0) {
        td_dist_autograd_end(ctx);
    }
    td_dist_optimizer_destroy(opt);
    for (int o = 1; o <= 2; o++) {
        td_future_release(busy[o]);
        td_rref_release(p[o]);
        td_tensor_release(y[o]);
    }
    td_tensor_release(sum);
    td_tensor_release(loss);
    td_tensor_release(x);
}

/* Mode "timeout": an object never created in time. */
static void
pending_timeout(void)
{
    td_rpc_list_t *a = list_of("i", (int64_t)0), *res = NULL;
    td_rref_t *r = NULL;
    const char *want = "does not exist on rank 1 after 2 s";
    td_status_t st;

    st = td_remote(1, "gated", a, TD_RPC_DEFAULT_TIMEOUT, &r);
    if (st == TD_OK) {
        st = td_rref_rpc_sync(r, "read", NULL, 30.0, &res);
    }
    check(st == TD_ERR_REMOTE && strstr(td_last_error(), want) != NULL,
          "pending_call_times_out", "status %d: %s", st, td_last_error());
    td_rpc_list_free(res);
    res = NULL;
    st = td_rref_to_here(r, 30.0, &res);
    check(st == TD_ERR_REMOTE && strstr(td_last_error(), want) != NULL,
          "pending_fetch_times_out", "status %d: %s", st, td_last_error());
    td_rpc_list_free(res);
    /* let the creation finish so that nothing is left at shutdown */
    td_rpc_sync(1, "open", NULL, 30.0, NULL);
    td_rref_release(r);
    td_rpc_list_free(a);
}

/* Mode "bound" (TODIST_RREF_MAX_PARKED=50): of 60 calls on an object not
 * created yet, the 51st is refused naming the bound; the 50 parked ones
 * still end when it is created. */
static void
pending_bound(void)
{
    td_rpc_list_t *a = list_of("i", (int64_t)0), *args = NULL;
    td_rref_t *r = NULL;
    td_status_t st;

    st = td_remote(1, "gated", a, TD_RPC_DEFAULT_TIMEOUT, &r);
    if (st == TD_OK) {
        args = list_of("ri", r, (int64_t)60);
        st = td_rpc_sync(2, "fan", args, 60.0, NULL);
    }
    check(st == TD_ERR_REMOTE &&
          strstr(td_last_error(), "rank 1 already parks 50 requests") != NULL,
          "parked_bound_refuses", "status %d: %s", st, td_last_error());
    td_rpc_list_free(args);
    td_rpc_list_free(a);
    td_rref_release(r);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    int hops = argc > 2 ? atoi(argv[2]) : 1000;
    int fan = argc > 3 ? atoi(argv[3]) : 400;
    int64_t shape[1] = {N_EL};
    double init[N_EL];
    int rank;
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    td_rpc_register_async("gated", fn_gated, NULL);
    td_rpc_register("open", fn_open, NULL);
    td_rpc_register("make_x", fn_make_x, NULL);
    td_rpc_register("read", fn_read, NULL);
    td_rpc_register("mul_by", fn_mul_by, NULL);
    td_rpc_register_async("rfwd", fn_rfwd, NULL);
    td_rpc_register_async("rhop", fn_rhop, NULL);
    td_rpc_register_async("fan", fn_fan, NULL);
    td_rpc_register_async("astep", fn_astep, NULL);
    {
        td_world_t w;

        rank = td_world_from_env(&w) == TD_OK ? w.rank : 0;
    }
    for (int i = 0; i < N_EL; i++) {
        init[i] = param_init(rank, i);
    }
    td_tensor_from_data(init, shape, 1, TD_FLOAT64, &param);
    td_tensor_set_requires_grad(param, 1);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size != 3) {
        fprintf(stderr, "rref_async_peer: needs 3 workers\n");
        td_finalize();
        return 1;
    }
    if (rank == 0 && strcmp(mode, "timeout") == 0) {
        pending_timeout();
    } else if (rank == 0 && strcmp(mode, "bound") == 0) {
        pending_bound();
    } else if (rank == 0) {
        rref_chain(hops);
        rref_pending_fanout(fan);
        optim_busy_owners(fan);
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    if (td_rref_leaks() != 0) {
        fprintf(stderr, "rank %d: %zu rref leak(s)\n", rank, td_rref_leaks());
        return 1;
    }
    td_tensor_release(param);
    return n_fail ? 1 : 0;
}
