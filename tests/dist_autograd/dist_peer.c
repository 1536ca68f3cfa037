/* dist_peer.c: one rank of the multi-process distributed-autograd tests
 * (tests/dist_autograd/test_dist_rpc.sh), over real RPC and UCX. Run as
 * `todist-run -n 3 dist_peer MODE`. Rank 0 drives the checks and prints
 * "PASS name" or "FAIL name: detail" per check; every rank registers the
 * same functions before td_init. Gradients are checked against the same
 * computation done locally, in float64, to 1e-6. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/dist_autograd/dist_internal.h"
#include <todist/todist.h>
#include "tests/peer_check.h"

static int rank, size;

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- remote functions ------------------------------------------------------ */

static td_tensor_t *
arg_t(const td_rpc_list_t *a, size_t i)
{
    td_tensor_t *t = NULL;

    td_rpc_list_tensor(a, i, &t);
    return t;
}

static td_status_t
put(td_rpc_list_t *result, td_status_t status, td_tensor_t *t)
{
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(result, t);
    }
    td_tensor_release(t);
    return status;
}

static td_status_t
fn_add(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
       td_rpc_list_t *result)
{
    td_tensor_t *out = NULL;

    (void)arg;
    (void)info;
    td_status_t s = td_add(arg_t(a, 0), arg_t(a, 1), &out);

    return put(result, s, out);
}

static td_status_t
tanh_mul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    td_tensor_t *t = NULL;
    td_status_t s = td_tanh(a, &t);

    if (s == TD_OK) {
        s = td_mul(t, b, out);
    }
    td_tensor_release(t);
    return s;
}

static td_status_t
fn_tanh_mul(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
            td_rpc_list_t *result)
{
    td_tensor_t *out = NULL;

    (void)arg;
    (void)info;
    td_status_t s = tanh_mul(arg_t(a, 0), arg_t(a, 1), &out);

    return put(result, s, out);
}

static td_status_t
call1(int dst, const char *fn, td_tensor_t *a, td_tensor_t *b, int64_t i,
      td_tensor_t **out)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_tensor_t *t = NULL;
    td_status_t s;

    s = td_rpc_list_create(&args);
    if (s == TD_OK && a != NULL) {
        s = td_rpc_list_add_tensor(args, a);
    }
    if (s == TD_OK && b != NULL) {
        s = td_rpc_list_add_tensor(args, b);
    }
    if (s == TD_OK && i >= 0) {
        s = td_rpc_list_add_int(args, i);
    }
    if (s == TD_OK) {
        s = td_rpc_sync(dst, fn, args, TD_RPC_DEFAULT_TIMEOUT, &res);
        if (s != TD_OK && getenv("DIST_PEER_DEBUG")) {
            fprintf(stderr, "rank %d: call %s on %d: %s\n", rank, fn, dst,
                    td_last_error());
        }
    }
    if (s == TD_OK) {
        s = td_rpc_list_tensor(res, 0, &t);
    }
    if (s == TD_OK) {
        *out = td_tensor_retain(t);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    return s;
}

/* y = 2a; z = tanh_mul(y, b) on rank NEXT; return z + a */
static td_status_t
fn_chain(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
         td_rpc_list_t *result)
{
    td_tensor_t *x = arg_t(a, 0), *y = NULL, *z = NULL, *out = NULL;
    int64_t next = 0;
    td_status_t s;

    (void)arg;
    (void)info;
    td_rpc_list_int(a, 2, &next);
    s = td_mul_scalar(x, 2.0, &y);
    if (s == TD_OK) {
        s = call1((int)next, "tanh_mul", y, arg_t(a, 1), -1, &z);
    }
    if (s == TD_OK) {
        s = td_add(z, x, &out);
    }
    td_tensor_release(y);
    td_tensor_release(z);
    return put(result, s, out);
}

static td_status_t
boom_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    (void)node;
    (void)gin;
    (void)gout;
    return td_error(TD_ERR_INVALID, "BoomBackward: boom");
}

static td_status_t
die_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    (void)node;
    (void)gin;
    (void)gout;
    _exit(9);                  /* a worker dying in the middle of backward */
}

static const td_node_ops_t boom_ops = {.name = "BoomBackward",
                                       .backward = boom_backward};
static const td_node_ops_t die_ops = {.name = "DieBackward",
                                      .backward = die_backward};

/* a copy of the argument whose backward fails (or kills this worker) */
static td_status_t
fn_bad(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
       td_rpc_list_t *result)
{
    td_tensor_t *x = arg_t(a, 0), *d = NULL, *r = NULL;
    td_edge_t edge = td_tensor_gradient_edge(x);
    td_node_t *node = NULL;
    td_status_t s;

    (void)info;
    s = td_node_create(arg != NULL ? &die_ops : &boom_ops, NULL, 1, &edge, 1,
                       &node);
    if (s == TD_OK) {
        s = td_tensor_detach(x, &d);
    }
    if (s == TD_OK) {
        s = td_tensor_clone(d, &r);
    }
    if (s == TD_OK) {
        s = td_tensor_set_grad_fn(r, node, 0);
    }
    td_node_release(node);
    td_tensor_release(d);
    return put(result, s, r);
}

/* 3 * bad_on_rank_2(a) (or die_on_rank_2 with the int argument 1) */
static td_status_t
fn_bad_far(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
           td_rpc_list_t *result)
{
    td_tensor_t *y = NULL, *out = NULL;
    int64_t die = 0;
    td_status_t s;

    (void)arg;
    (void)info;
    td_rpc_list_int(a, 1, &die);
    s = call1(2, die ? "die" : "bad", arg_t(a, 0), NULL, -1, &y);
    if (s == TD_OK) {
        s = td_mul_scalar(y, 3.0, &out);
    }
    td_tensor_release(y);
    return put(result, s, out);
}

static td_status_t
fn_ctx_count(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *a, td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)a;
    return td_rpc_list_add_int(result, (int64_t)td__dist_engine_n_contexts(
                                           td__dist_engine_default()));
}

/* ---- helpers ---------------------------------------------------------------- */

static td_tensor_t *
rnd(int64_t r, int64_t c, uint64_t seed, int requires_grad)
{
    int64_t shape[2] = {r, c};
    td_tensor_t *t = NULL;

    td_tensor_empty(shape, 2, TD_FLOAT64, TD_CPU, &t);
    td_tensor_uniform_(t, -1.0, 1.0, seed);
    if (requires_grad) {
        td_tensor_set_requires_grad(t, 1);
    }
    return t;
}

static double
maxdiff(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *ca = NULL, *cb = NULL;
    double m = 0;

    if (a == NULL || b == NULL || td_tensor_numel(a) != td_tensor_numel(b)) {
        return INFINITY;
    }
    td_tensor_contiguous(a, &ca);
    td_tensor_contiguous(b, &cb);
    for (int64_t i = 0; i < td_tensor_numel(a); i++) {
        m = fmax(m, fabs(((double *)td_tensor_data(ca))[i] -
                         ((double *)td_tensor_data(cb))[i]));
    }
    td_tensor_release(ca);
    td_tensor_release(cb);
    return m;
}

static td_tensor_t *
grad_of(int64_t ctx, td_tensor_t *leaf)
{
    td_tensor_t *g = NULL;

    td_dist_get_gradient(ctx, leaf, &g);
    return g;
}

static td_tensor_t *
sum_of(td_tensor_t *a)
{
    td_tensor_t *s = NULL;

    td_sum(a, &s);
    return s;
}

/* Intermediates of the checks' graphs, released at exit (so a sanitizer
 * run reports only the library's leaks). */
static pthread_mutex_t junk_lock = PTHREAD_MUTEX_INITIALIZER;
static td_tensor_t *junk[256];
static int n_junk;

static td_tensor_t *
keep(td_tensor_t *t)
{
    pthread_mutex_lock(&junk_lock);
    if (n_junk < 256) {
        junk[n_junk++] = t;        /* else leaked: only the report grows */
    }
    pthread_mutex_unlock(&junk_lock);
    return t;
}

static void
junk_free(void)
{
    for (int i = 0; i < n_junk; i++) {
        td_tensor_release(junk[i]);
    }
    n_junk = 0;
}

static td_tensor_t *
mul_of(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *s = NULL;

    td_mul(a, b, &s);
    return keep(s);
}

static int64_t
ctx_count(int r)
{
    td_rpc_list_t *res = NULL;
    int64_t v = -1;

    if (td_rpc_sync(r, "ctx_count", NULL, TD_RPC_DEFAULT_TIMEOUT, &res) ==
        TD_OK) {
        td_rpc_list_int(res, 0, &v);
    }
    td_rpc_list_free(res);
    return v;
}

/* Releases travel as one-way messages: wait (up to 20 s) until every
 * worker has dropped its contexts; the check does not depend on timing. */
static int
all_released(int64_t *left_p)
{
    double end = now_s() + 20;
    int64_t left;

    do {
        left = 0;
        for (int r = 0; r < size; r++) {
            left += ctx_count(r);
        }
        if (left == 0) {
            break;
        }
        usleep(10000);
    } while (now_s() < end);
    *left_p = left;
    return left == 0;
}

/* ---- the checks -------------------------------------------------------------- */

static void
check_my_add(int dst, const char *name)
{
    td_tensor_t *t1 = rnd(3, 3, 1, 1), *t2 = rnd(3, 3, 2, 1);
    td_tensor_t *t4 = rnd(3, 3, 3, 1), *t3 = NULL, *loss, *g1, *g2, *g4;
    td_status_t s;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    s = call1(dst, "add", t1, t2, -1, &t3);
    loss = s == TD_OK ? sum_of(mul_of(t3, t4)) : NULL;
    if (s == TD_OK) {
        s = td_dist_backward(ctx, &loss, 1, 0);
    }
    g1 = grad_of(ctx, t1);
    g2 = grad_of(ctx, t2);
    g4 = grad_of(ctx, t4);
    {
        td_tensor_t *l3 = NULL;
        td_add(t1, t2, &l3);
        check(s == TD_OK && maxdiff(g1, t4) <= 1e-6 &&
              maxdiff(g2, t4) <= 1e-6 && maxdiff(g4, l3) <= 1e-6, name,
              "status %d '%s' diffs %g %g %g", s, td_last_error(),
              maxdiff(g1, t4), maxdiff(g2, t4), maxdiff(g4, l3));
        td_tensor_release(l3);
    }
    td_dist_autograd_end(ctx);
    td_tensor_release(g1);
    td_tensor_release(g2);
    td_tensor_release(g4);
    td_tensor_release(t3);
    td_tensor_release(loss);
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t4);
}

static void
check_recording(void)
{
    td_tensor_t *t1 = rnd(2, 2, 5, 1), *p = rnd(2, 2, 6, 0), *r = NULL;
    td_dist_context_info_t info;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    call1(1, "add", p, p, -1, &r);
    check(r != NULL && !td_tensor_requires_grad(r) && ctx_count(1) == 0,
          "no_grad_no_recording", "requires_grad %d, rank 1 has %lld "
          "contexts", r ? td_tensor_requires_grad(r) : -1,
          (long long)ctx_count(1));
    td_tensor_release(r);
    r = NULL;
    call1(1, "add", t1, p, -1, &r);
    td__dist_context_info(td__dist_engine_default(), ctx, &info);
    check(r != NULL && td_tensor_grad_fn(r) != NULL &&
          strcmp(td_node_name(td_tensor_grad_fn(r)), "RecvRpcBackward") == 0 &&
          info.n_send == 1 && info.n_recv == 1 && info.n_known == 1 &&
          info.known[0] == 1 && ctx_count(1) == 1,
          "send_recv_recorded", "send %d recv %d known %d",
          info.n_send, info.n_recv, info.n_known);
    td_tensor_release(r);
    td_dist_autograd_end(ctx);
    td_tensor_release(t1);
    td_tensor_release(p);
}

static td_tensor_t *
chain_local(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *y = NULL, *z = NULL, *out = NULL;

    td_mul_scalar(a, 2.0, &y);
    tanh_mul(y, b, &z);
    td_add(z, a, &out);
    td_tensor_release(y);
    td_tensor_release(z);
    return out;
}

static void
check_multi_hop(void)
{
    td_tensor_t *a = rnd(4, 3, 11, 1), *b = rnd(4, 3, 12, 1);
    td_tensor_t *w = rnd(4, 3, 13, 1), *r = NULL, *roots[2], *lroots[2];
    td_tensor_t *ins[3] = {a, b, w}, *lg[3] = {0}, *g[3];
    td_status_t s;
    double worst = 0;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    s = call1(1, "chain", a, b, 2, &r);
    if (s == TD_OK) {
        td_tensor_t *t = NULL;
        roots[0] = sum_of(mul_of(r, w));
        td_tanh(r, &t);
        roots[1] = keep(sum_of(keep(t)));
        keep(roots[0]);
        s = td_dist_backward(ctx, roots, 2, 0);
    }
    for (int i = 0; i < 3; i++) {
        g[i] = grad_of(ctx, ins[i]);
    }
    {
        td_tensor_t *lr = keep(chain_local(a, b)), *t = NULL;
        lroots[0] = keep(sum_of(mul_of(lr, w)));
        td_tanh(lr, &t);
        lroots[1] = keep(sum_of(keep(t)));
        td_grad(lroots, NULL, 2, ins, 3, 0, 0, 0, lg);
    }
    for (int i = 0; i < 3; i++) {
        worst = fmax(worst, maxdiff(g[i], lg[i]));
    }
    check(s == TD_OK && worst <= 1e-6, "two_hops_two_roots",
          "status %d '%s' worst diff %g", s, td_last_error(), worst);
    td_dist_autograd_end(ctx);
    for (int i = 0; i < 3; i++) {
        td_tensor_release(g[i]);
        td_tensor_release(lg[i]);
    }
    td_tensor_release(r);
    td_tensor_release(a);
    td_tensor_release(b);
    td_tensor_release(w);
}

/* a remote object's value: created on rank 1 from tensors that require
 * grad, fetched with to_here inside the context, used in the loss */
static void
check_rref_value(void)
{
    td_tensor_t *a = rnd(2, 3, 51, 1), *b = rnd(2, 3, 52, 1), *v = NULL;
    td_tensor_t *loss = NULL, *ga, *gb, *lg[2] = {0}, *lv = NULL, *ll;
    td_rpc_list_t *args = NULL, *val = NULL;
    td_rref_t *rref = NULL;
    td_status_t s;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, a);
    td_rpc_list_add_tensor(args, b);
    s = td_remote(1, "tanh_mul", args, TD_RPC_DEFAULT_TIMEOUT, &rref);
    if (s == TD_OK) {
        s = td_rref_to_here(rref, TD_RPC_DEFAULT_TIMEOUT, &val);
    }
    if (s == TD_OK) {
        s = td_rpc_list_tensor(val, 0, &v);
    }
    if (s == TD_OK) {
        loss = sum_of(mul_of(v, v));
        s = td_dist_backward(ctx, &loss, 1, 0);
    }
    ga = grad_of(ctx, a);
    gb = grad_of(ctx, b);
    tanh_mul(a, b, &lv);
    ll = sum_of(mul_of(lv, lv));
    td_grad(&ll, NULL, 1, (td_tensor_t *[]){a, b}, 2, 0, 0, 0, lg);
    check(s == TD_OK && maxdiff(ga, lg[0]) <= 1e-6 &&
          maxdiff(gb, lg[1]) <= 1e-6, "rref_to_here_value_recorded",
          "status %d '%s' diffs %g %g", s, td_last_error(),
          maxdiff(ga, lg[0]), maxdiff(gb, lg[1]));
    td_dist_autograd_end(ctx);
    td_rref_release(rref);
    td_rpc_list_free(args);
    td_rpc_list_free(val);
    td_tensor_release(loss);
    td_tensor_release(ga);
    td_tensor_release(gb);
    td_tensor_release(lg[0]);
    td_tensor_release(lg[1]);
    td_tensor_release(lv);
    td_tensor_release(ll);
    td_tensor_release(a);
    td_tensor_release(b);
}

static void
check_unused_and_retain(void)
{
    td_tensor_t *t1 = rnd(2, 3, 21, 1), *t2 = rnd(2, 3, 22, 1);
    td_tensor_t *t5 = rnd(2, 3, 23, 1), *r1 = NULL, *r2 = NULL, *loss;
    td_tensor_t *gs[3] = {0}, *g1;
    td_status_t s;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    call1(1, "add", t1, t2, -1, &r1);
    call1(2, "tanh_mul", t1, t2, -1, &r2);     /* never reaches the loss */
    loss = sum_of(r1);
    s = td_dist_grad(ctx, &loss, 1, (td_tensor_t *[]){t1, t2, t5}, 3, 1, gs);
    check(s == TD_OK && gs[2] == NULL && gs[0] != NULL &&
          fabs(td_tensor_get(gs[0], (int64_t[]){1, 2}) - 1) < 1e-12,
          "unused_send_no_hang_unused_input", "status %d '%s'", s,
          td_last_error());
    s = td_dist_backward(ctx, &loss, 1, 1);
    g1 = grad_of(ctx, t2);
    check(s == TD_OK && g1 != NULL &&
          fabs(td_tensor_get(g1, (int64_t[]){0, 0}) - 2) < 1e-12,
          "retain_graph_accumulates", "status %d value %g", s,
          g1 ? td_tensor_get(g1, (int64_t[]){0, 0}) : NAN);
    td_tensor_release(g1);
    td_dist_autograd_end(ctx);
    for (int i = 0; i < 3; i++) {
        td_tensor_release(gs[i]);
    }
    td_tensor_release(r1);
    td_tensor_release(r2);
    td_tensor_release(loss);
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t5);
}

static void
check_errors(void)
{
    td_tensor_t *t1 = rnd(2, 2, 31, 1), *r = NULL, *loss;
    td_status_t s;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    call1(1, "bad", t1, NULL, -1, &r);
    loss = sum_of(r);
    s = td_dist_backward(ctx, &loss, 1, 0);
    check(s == TD_ERR_REMOTE &&
          strncmp(td_last_error(), "Error on rank 1: BoomBackward: boom",
                  35) == 0, "remote_error_names_rank",
          "status %d '%s'", s, td_last_error());
    td_dist_autograd_end(ctx);
    td_tensor_release(r);
    td_tensor_release(loss);
    r = NULL;

    td_dist_autograd_begin(&ctx);
    call1(1, "bad_far", t1, NULL, 0, &r);
    loss = sum_of(r);
    s = td_dist_backward(ctx, &loss, 1, 0);
    check(s == TD_ERR_REMOTE &&
          strncmp(td_last_error(), "Error on rank 2: BoomBackward: boom",
                  35) == 0, "remote_error_two_hops_names_origin",
          "status %d '%s'", s, td_last_error());
    td_dist_autograd_end(ctx);
    td_tensor_release(r);
    td_tensor_release(loss);
    td_tensor_release(t1);
}

static atomic_int threads_ok;

static void *
thread_body(void *arg)
{
    int k = (int)(intptr_t)arg, good = 1;

    for (int it = 0; it < 10 && good; it++) {
        td_tensor_t *t1 = rnd(3, 3, 100 + k, 1), *t2 = rnd(3, 3, 200 + k, 1);
        td_tensor_t *r = NULL, *sc = NULL, *loss = NULL, *g = NULL;
        int64_t ctx;

        good &= td_dist_autograd_begin(&ctx) == TD_OK;
        good &= call1(1 + (k + it) % 2, "add", t1, t2, -1, &r) == TD_OK;
        if (good) {
            td_mul_scalar(r, (double)(k + 1), &sc);
            loss = sum_of(sc);
            good &= td_dist_backward(ctx, &loss, 1, 0) == TD_OK;
            good &= td_dist_get_gradient(ctx, t1, &g) == TD_OK &&
                    fabs(td_tensor_get(g, (int64_t[]){1, 1}) - (k + 1)) < 1e-12;
        }
        td_dist_autograd_end(ctx);
        td_tensor_release(g);
        td_tensor_release(sc);
        td_tensor_release(loss);
        td_tensor_release(r);
        td_tensor_release(t1);
        td_tensor_release(t2);
    }
    if (good) {
        atomic_fetch_add(&threads_ok, 1);
    }
    return NULL;
}

#if defined(__SANITIZE_ADDRESS__)
/* From ASan's runtime (sanitizer/allocator_interface.h, not always shipped). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* Memory in use, in kB: the resident set, or under ASan the heap bytes
 * still allocated (ASan's quarantine keeps freed memory resident, so the
 * resident set would grow without any leak). */
static long
rss_kb(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
#endif
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) {
            rss = 0;
        }
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void
mode_basic(void)
{
    int64_t left = 0;

    check_my_add(1, "my_add_one_hop");
    check_my_add(0, "my_add_call_to_self");
    check_recording();
    check_multi_hop();
    check_rref_value();
    check_unused_and_retain();
    check_errors();
    check(all_released(&left), "cleanup_every_worker",
          "%lld contexts left", (long long)left);
    {
        pthread_t th[8];
        for (int k = 0; k < 8; k++) {
            pthread_create(&th[k], NULL, thread_body, (void *)(intptr_t)k);
        }
        for (int k = 0; k < 8; k++) {
            pthread_join(th[k], NULL);
        }
        check(atomic_load(&threads_ok) == 8, "eight_threads_own_contexts",
              "%d of 8 threads right", atomic_load(&threads_ok));
    }
}

static void
mode_many(void)
{
    long warm = 0;
    int bad = 0;
    int64_t left = 0;

    for (int i = 0; i < 10000; i++) {
        td_tensor_t *t1 = rnd(1, 4, (uint64_t)i, 1), *r = NULL, *loss = NULL;
        int64_t ctx;

        td_dist_autograd_begin(&ctx);
        if (call1(1 + i % (size - 1), "add", t1, t1, -1, &r) == TD_OK) {
            loss = sum_of(r);
            bad += td_dist_backward(ctx, &loss, 1, 0) != TD_OK;
        } else {
            bad++;
        }
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
        td_tensor_release(r);
        td_tensor_release(t1);
        if (i == 1999) {
            warm = rss_kb();
        }
    }
    check(bad == 0, "ten_thousand_contexts", "%d failed", bad);
    check(all_released(&left), "ten_thousand_released_everywhere",
          "%lld contexts left", (long long)left);
    check(rss_kb() - warm < 8192, "ten_thousand_memory_flat",
          "%ld kB after 2000, %ld kB after 10000", warm, rss_kb());
}

static void
mode_kill(void)
{
    td_tensor_t *t1 = rnd(2, 2, 41, 1), *r = NULL, *loss;
    td_status_t s;
    double t0;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    call1(1, "bad_far", t1, NULL, 1, &r);       /* rank 2 dies in backward */
    loss = sum_of(r);
    t0 = now_s();
    s = td_dist_backward(ctx, &loss, 1, 0);
    printf("# %s\n", td_last_error());
    check((s == TD_ERR_PEER || s == TD_ERR_REMOTE) &&
          strstr(td_last_error(), "rank 2") != NULL,
          "worker_killed_mid_backward", "status %d '%s' after %.1f s", s,
          td_last_error(), now_s() - t0);
    fflush(stdout);
    _exit(n_fail ? 1 : 0);      /* the job is broken: no graceful join */
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "kill") == 0) {
        /* todist-run stops the group when rank 2 dies; ranks 0 and 1 finish
         * the check first */
        signal(SIGTERM, SIG_IGN);
    }
    td_rpc_register("add", fn_add, NULL);
    td_rpc_register("tanh_mul", fn_tanh_mul, NULL);
    td_rpc_register("chain", fn_chain, NULL);
    td_rpc_register("bad", fn_bad, NULL);
    td_rpc_register("die", fn_bad, (void *)1);
    td_rpc_register("bad_far", fn_bad_far, NULL);
    td_rpc_register("ctx_count", fn_ctx_count, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (rank == 0) {
        if (strcmp(mode, "basic") == 0) {
            mode_basic();
        } else if (strcmp(mode, "many") == 0) {
            mode_many();
        } else if (strcmp(mode, "kill") == 0) {
            mode_kill();
        }
    }
    if (strcmp(mode, "kill") == 0 && rank == 1) {
        /* stay up (SIGTERM ignored) until rank 0 has its answer */
        td_finalize();
        _exit(0);
    }
    junk_free();
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
