/* dist_optim_peer.c: one rank of the multi-process tests of the distributed
 * optimizer over remote references (tests/dist_autograd/test_dist_optim_remote.sh), over
 * real RPC and UCX. Run as `todist-run -n 3 dist_optim_peer MODE`. Ranks 1
 * and 2 own the parameters (made by td_remote "make_param"); rank 0 drives
 * the checks and prints "PASS name" or "FAIL name: detail". Expected values
 * come from the same computation done locally on rank 0 with the per-owner
 * optimizer (td_dist_optim_t) in a local context, in float64, to 1e-6. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <todist/todist.h>
#include "tests/peer_check.h"

#define NP 3                      /* parameters: two on rank 1, one on 2 */

static int rank;

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
    double m = 0;

    if (a == NULL || b == NULL || td_tensor_numel(a) != td_tensor_numel(b)) {
        return INFINITY;
    }
    for (int64_t i = 0; i < td_tensor_numel(a); i++) {
        m = fmax(m, fabs(((double *)td_tensor_data(a))[i] -
                         ((double *)td_tensor_data(b))[i]));
    }
    return m;
}

/* ---- remote functions ------------------------------------------------------ */

/* make_param(INT rows, INT cols, INT seed) -> a float64 leaf requiring grad */
static td_status_t
fn_make_param(void *arg, const td_rpc_call_info_t *info,
              const td_rpc_list_t *a, td_rpc_list_t *result)
{
    int64_t r = 0, c = 0, seed = 0;
    td_tensor_t *t;
    td_status_t s;

    (void)arg;
    (void)info;
    if (td_rpc_list_int(a, 0, &r) != TD_OK ||
        td_rpc_list_int(a, 1, &c) != TD_OK ||
        td_rpc_list_int(a, 2, &seed) != TD_OK) {
        return td_error(TD_ERR_INVALID, "make_param: bad arguments");
    }
    t = rnd(r, c, (uint64_t)seed, 1);
    s = td_rpc_list_add_tensor(result, t);
    td_tensor_release(t);
    return s;
}

/* make_string() -> a remote object that is no tensor */
static td_status_t
fn_make_string(void *arg, const td_rpc_call_info_t *info,
               const td_rpc_list_t *a, td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)a;
    return td_rpc_list_add_string(result, "not a parameter");
}

static td_status_t
fn_held(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
        td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)a;
    return td_rpc_list_add_int(result, td_dist_optimizer_held());
}

static td_status_t
fn_die(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
       td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)a;
    (void)result;
    _exit(0);
}

/* ---- rank 0's helpers ---------------------------------------------------- */

static td_rref_t *
make_param(int owner, int64_t r, int64_t c, int64_t seed)
{
    td_rpc_list_t *args = NULL;
    td_rref_t *rref = NULL;

    td_rpc_list_create(&args);
    td_rpc_list_add_int(args, r);
    td_rpc_list_add_int(args, c);
    td_rpc_list_add_int(args, seed);
    if (td_remote(owner, "make_param", args, TD_RPC_DEFAULT_TIMEOUT, &rref) !=
        TD_OK) {
        printf("# td_remote: %s\n", td_last_error());
    }
    td_rpc_list_free(args);
    return rref;
}

/* The parameter's value (new reference; inside a context the fetch is
 * recorded, so the loss reaches the owner's leaf). */
static td_tensor_t *
fetch(td_rref_t *rref)
{
    td_rpc_list_t *v = NULL;
    td_tensor_t *t = NULL;

    if (td_rref_to_here(rref, TD_RPC_DEFAULT_TIMEOUT, &v) == TD_OK &&
        td_rpc_list_tensor(v, 0, &t) == TD_OK) {
        td_tensor_retain(t);
    } else {
        printf("# to_here: %s\n", td_last_error());
    }
    td_rpc_list_free(v);
    return t;
}

static int64_t
held(int r)
{
    td_rpc_list_t *res = NULL;
    int64_t v = -1;

    if (td_rpc_sync(r, "held", NULL, TD_RPC_DEFAULT_TIMEOUT, &res) == TD_OK) {
        td_rpc_list_int(res, 0, &v);
    }
    td_rpc_list_free(res);
    return v;
}

/* loss = sum(tanh(a * b) * c + a * a) */
static td_status_t
loss_of(td_tensor_t *a, td_tensor_t *b, td_tensor_t *c, td_tensor_t **loss)
{
    td_tensor_t *ab = NULL, *th = NULL, *thc = NULL, *aa = NULL, *s = NULL;
    td_status_t st;

    if (a == NULL || b == NULL || c == NULL) {
        return td_error(TD_ERR_INVALID, "loss: missing input");
    }
    if ((st = td_mul(a, b, &ab)) == TD_OK && (st = td_tanh(ab, &th)) == TD_OK &&
        (st = td_mul(th, c, &thc)) == TD_OK &&
        (st = td_mul(a, a, &aa)) == TD_OK && (st = td_add(thc, aa, &s)) == TD_OK) {
        st = td_sum(s, loss);
    }
    td_tensor_release(ab);
    td_tensor_release(th);
    td_tensor_release(thc);
    td_tensor_release(aa);
    td_tensor_release(s);
    return st;
}

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind_t;

static const td_sgd_opts_t sgd_opts = {0.1, 0.9, 0.0, 0.01, 1};

static td_adam_opts_t
adam_opts(opt_kind_t k)
{
    td_adam_opts_t o = k == OPT_ADAMW ? td_adamw_defaults()
                                       : td_adam_defaults();

    o.lr = 0.05;
    o.weight_decay = 0.02;
    o.amsgrad = k == OPT_ADAM;
    return o;
}

static const char *const kind_name[] = {"sgd", "adam", "adamw"};

/* Three steps remotely and locally; the owners' parameters must equal the
 * local ones. */
static void
check_matches_local(opt_kind_t kind)
{
    static const int owner[NP] = {1, 2, 1};
    td_rref_t *rr[NP];
    td_tensor_t *loc[NP], *init[NP], *fin[NP];
    td_dist_optimizer_t *opt = NULL;
    td_dist_optim_t *lopt = NULL;
    td_adam_opts_t ao = adam_opts(kind);
    td_status_t s;
    double diff = 0, moved = INFINITY;
    char name[64];

    for (int i = 0; i < NP; i++) {
        rr[i] = make_param(owner[i], 2, 3, 100 + 10 * kind + i);
        loc[i] = rnd(2, 3, 100 + 10 * kind + i, 1);
        init[i] = rnd(2, 3, 100 + 10 * kind + i, 0);
    }
    if (kind == OPT_SGD) {
        s = td_dist_optimizer_sgd(rr, NP, &sgd_opts, &opt);
        td_dist_optim_sgd(loc, NP, &sgd_opts, &lopt);
    } else if (kind == OPT_ADAM) {
        s = td_dist_optimizer_adam(rr, NP, &ao, &opt);
        td_dist_optim_adam(loc, NP, &ao, &lopt);
    } else {
        s = td_dist_optimizer_adamw(rr, NP, &ao, &opt);
        td_dist_optim_adamw(loc, NP, &ao, &lopt);
    }
    if (kind == OPT_SGD) {
        check(s == TD_OK && td_dist_optimizer_owners(opt) == 2 &&
              td_dist_optimizer_owner(opt, 0) == 1 &&
              td_dist_optimizer_owner(opt, 1) == 2 && held(1) == 1 &&
              held(2) == 1, "grouped_by_owner", "status %d '%s' owners %d",
              s, td_last_error(), td_dist_optimizer_owners(opt));
    }
    for (int step = 0; step < 3 && s == TD_OK; step++) {
        td_tensor_t *v[NP], *loss = NULL;
        int64_t ctx;

        td_dist_autograd_begin(&ctx);
        for (int i = 0; i < NP; i++) {
            v[i] = fetch(rr[i]);
        }
        s = loss_of(v[0], v[1], v[2], &loss);
        if (s == TD_OK) {
            s = td_dist_backward(ctx, &loss, 1, 0);
        }
        if (s == TD_OK) {
            s = td_dist_optimizer_step(opt, ctx);
        }
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
        for (int i = 0; i < NP; i++) {
            td_tensor_release(v[i]);
        }
        loss = NULL;
        td_dist_autograd_begin(&ctx);
        if (s == TD_OK) {
            s = loss_of(loc[0], loc[1], loc[2], &loss);
        }
        if (s == TD_OK) {
            s = td_dist_backward(ctx, &loss, 1, 0);
        }
        if (s == TD_OK) {
            s = td_dist_optim_step(lopt, ctx);
        }
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
    }
    for (int i = 0; i < NP; i++) {
        fin[i] = s == TD_OK ? fetch(rr[i]) : NULL;
        diff = fmax(diff, maxdiff(fin[i], loc[i]));
        moved = fmin(moved, maxdiff(fin[i], init[i]));
    }
    snprintf(name, sizeof(name), "%s_matches_local", kind_name[kind]);
    check(s == TD_OK && diff <= 1e-6, name, "status %d '%s' max diff %g", s,
          td_last_error(), diff);
    if (kind == OPT_ADAMW) {
        /* not vacuous: every parameter moved on its owner */
        check(moved > 1e-3 && moved < INFINITY, "parameters_moved",
              "smallest change %g", moved);
    }
    td_dist_optimizer_destroy(opt);
    if (kind == OPT_ADAMW) {
        check(held(1) == 0 && held(2) == 0, "destroy_releases_owners",
              "rank 1 holds %lld, rank 2 %lld", (long long)held(1),
              (long long)held(2));
    }
    td_dist_optim_destroy(lopt);
    for (int i = 0; i < NP; i++) {
        td_rref_release(rr[i]);
        td_tensor_release(loc[i]);
        td_tensor_release(init[i]);
        td_tensor_release(fin[i]);
    }
}

/* ---- concurrent steps ------------------------------------------------------ */

#define BIG 200000          /* long enough that unserialized updates overlap */

static struct {
    td_dist_optimizer_t *opt;
    td_rref_t           *rref;
    td_tensor_t         *coef;
    pthread_barrier_t    barrier;
} conc;

/* loss = sum(p * coef): the gradient is coef whatever p is, so the result
 * of two steps does not depend on the order of the forwards. */
static void *
conc_thread(void *arg)
{
    td_tensor_t *v, *pc = NULL, *loss = NULL;
    td_status_t s;
    int64_t ctx;

    td_dist_autograd_begin(&ctx);
    v = fetch(conc.rref);
    s = v != NULL ? td_mul(v, conc.coef, &pc) : TD_ERR_INVALID;
    if (s == TD_OK) {
        s = td_sum(pc, &loss);
    }
    if (s == TD_OK) {
        s = td_dist_backward(ctx, &loss, 1, 0);
    }
    pthread_barrier_wait(&conc.barrier);         /* step at the same time */
    if (s == TD_OK) {
        s = td_dist_optimizer_step(conc.opt, ctx);
    }
    if (s != TD_OK) {
        printf("# thread: %s\n", td_last_error());
    }
    td_dist_autograd_end(ctx);
    td_tensor_release(v);
    td_tensor_release(pc);
    td_tensor_release(loss);
    *(td_status_t *)arg = s;
    return NULL;
}

static void
check_concurrent(void)
{
    /* SGD with momentum m from a constant gradient g: two sequential steps
     * give p - lr g - lr (1 + m) g; two unserialized ones would both start
     * the momentum buffer (p - 2 lr g). */
    td_sgd_opts_t o = {0.5, 0.9, 0.0, 0.0, 0};
    td_tensor_t *p0 = rnd(1, BIG, 7, 0), *fin = NULL, *want = NULL;
    td_status_t s, st[2] = {TD_ERR_STATE, TD_ERR_STATE};
    pthread_t th[2];
    double diff;

    conc.rref = make_param(1, 1, BIG, 7);
    conc.coef = rnd(1, BIG, 8, 0);
    pthread_barrier_init(&conc.barrier, NULL, 2);
    s = td_dist_optimizer_sgd(&conc.rref, 1, &o, &conc.opt);
    if (s == TD_OK) {
        for (int i = 0; i < 2; i++) {
            pthread_create(&th[i], NULL, conc_thread, &st[i]);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
        }
        fin = fetch(conc.rref);
    }
    td_tensor_clone(p0, &want);
    for (int64_t i = 0; i < BIG; i++) {
        double g = ((double *)td_tensor_data(conc.coef))[i];

        ((double *)td_tensor_data(want))[i] -= o.lr * g +
                                               o.lr * (1 + o.momentum) * g;
    }
    diff = maxdiff(fin, want);
    check(s == TD_OK && st[0] == TD_OK && st[1] == TD_OK && diff <= 1e-6,
          "concurrent_steps_serialized", "status %d/%d/%d '%s' max diff %g",
          s, st[0], st[1], td_last_error(), diff);
    td_dist_optimizer_destroy(conc.opt);
    pthread_barrier_destroy(&conc.barrier);
    td_rref_release(conc.rref);
    td_tensor_release(conc.coef);
    td_tensor_release(p0);
    td_tensor_release(fin);
    td_tensor_release(want);
}

/* ---- errors ------------------------------------------------------------------ */

static void
check_errors(void)
{
    td_rref_t *rr[2] = {make_param(2, 2, 2, 1), make_param(1, 2, 2, 2)};
    td_rref_t *str = NULL, *mixed[2];
    td_sgd_opts_t bad = {-1.0, 0, 0, 0, 0};
    td_dist_optimizer_t *opt = NULL;
    td_status_t s;

    /* both owners reject the options: the first in owner order is named */
    s = td_dist_optimizer_sgd(rr, 2, &bad, &opt);
    check(s == TD_ERR_REMOTE && opt == NULL &&
          strstr(td_last_error(), "Error on rank 2") != NULL &&
          strstr(td_last_error(), "lr=-1") != NULL,
          "bad_options_error_names_rank", "status %d '%s'", s,
          td_last_error());
    check(held(1) == 0 && held(2) == 0, "bad_options_nothing_left",
          "rank 1 holds %lld, rank 2 %lld", (long long)held(1),
          (long long)held(2));

    td_remote(2, "make_string", NULL, TD_RPC_DEFAULT_TIMEOUT, &str);
    mixed[0] = rr[1];
    mixed[1] = str;
    s = td_dist_optimizer_sgd(mixed, 2, &sgd_opts, &opt);
    check(s != TD_OK && opt == NULL &&
          strstr(td_last_error(), "Error on rank 2") != NULL &&
          held(1) == 0 && held(2) == 0, "not_a_tensor_error_names_rank",
          "status %d '%s' held %lld %lld", s, td_last_error(),
          (long long)held(1), (long long)held(2));
    td_rref_release(str);
    td_rref_release(rr[0]);
    td_rref_release(rr[1]);
}

/* The internal functions' decoders reject malformed calls with an error
 * (never a crash): wrong kinds, a count that does not match, unknown ids. */
static int
rejected(const char *fn, td_rpc_list_t *args, const char *want)
{
    td_rpc_list_t *res = NULL;
    td_status_t s = td_rpc_sync(1, fn, args, TD_RPC_DEFAULT_TIMEOUT, &res);
    int ok = s == TD_ERR_REMOTE && strstr(td_last_error(), want) != NULL;

    if (!ok) {
        printf("# %s: status %d '%s' (want '%s')\n", fn, s, td_last_error(),
               want);
    }
    td_rpc_list_free(res);
    td_rpc_list_free(args);
    return ok;
}

static td_rpc_list_t *
ints(int n, ...)
{
    td_rpc_list_t *l = NULL;
    va_list ap;

    td_rpc_list_create(&l);
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        td_rpc_list_add_int(l, va_arg(ap, int64_t));
    }
    va_end(ap);
    return l;
}

static void
check_malformed(void)
{
    td_rpc_list_t *c = NULL;
    int ok = 1;

    ok &= rejected("todist.dist_optim.create", ints(1, (int64_t)3),
                   "malformed create");
    /* a well-formed head naming 2 parameters but carrying none */
    td_rpc_list_create(&c);
    td_rpc_list_add_string(c, "sgd");
    for (int i = 0; i < 7; i++) {
        td_rpc_list_add_double(c, 0.1);
    }
    td_rpc_list_add_int(c, 0);
    td_rpc_list_add_int(c, 0);
    td_rpc_list_add_int(c, 2);
    ok &= rejected("todist.dist_optim.create", c, "n=2 parameters in 11");
    ok &= rejected("todist.dist_optim.step", ints(1, (int64_t)1),
                   "malformed step");
    ok &= rejected("todist.dist_optim.step", ints(2, (int64_t)999999,
                   (int64_t)1), "no optimizer 999999");
    ok &= rejected("todist.dist_optim.destroy", NULL, "malformed destroy");
    ok &= rejected("todist.dist_optim.destroy", ints(1, (int64_t)999999),
                   "no optimizer 999999");
    check(ok && held(1) == 0, "malformed_calls_rejected", "see above");
}

/* ---- an owner dies ------------------------------------------------------------ */

static void
mode_kill(void)
{
    td_rref_t *rr[2] = {make_param(1, 2, 3, 1), make_param(2, 2, 3, 2)};
    td_dist_optimizer_t *opt = NULL;
    td_tensor_t *v[2], *loss = NULL;
    td_future_t *die = NULL;
    td_status_t s;
    int64_t ctx;

    s = td_dist_optimizer_sgd(rr, 2, &sgd_opts, &opt);
    td_dist_autograd_begin(&ctx);
    v[0] = fetch(rr[0]);
    v[1] = fetch(rr[1]);
    if (s == TD_OK) {
        s = loss_of(v[0], v[1], v[0], &loss);
    }
    if (s == TD_OK) {
        s = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (s == TD_OK) {
        /* wait until rank 2 is gone (the call fails when it dies) */
        td_rpc_async(2, "die", NULL, TD_RPC_DEFAULT_TIMEOUT, &die);
        td_future_wait(die, -1);
        td_future_release(die);
        s = td_dist_optimizer_step(opt, ctx);
        printf("# %s\n", td_last_error());
        check(s != TD_OK && strstr(td_last_error(), "rank 2") != NULL,
              "dead_owner_error_names_rank", "status %d '%s'", s,
              td_last_error());
    } else {
        check(0, "dead_owner_error_names_rank", "set-up failed: %d '%s'", s,
              td_last_error());
    }
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
        signal(SIGTERM, SIG_IGN);   /* finish the check when rank 2 dies */
    }
    td_rpc_register("make_param", fn_make_param, NULL);
    td_rpc_register("make_string", fn_make_string, NULL);
    td_rpc_register("held", fn_held, NULL);
    td_rpc_register("die", fn_die, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    if (rank == 0) {
        if (strcmp(mode, "kill") == 0) {
            mode_kill();
        }
        check_matches_local(OPT_SGD);
        check_matches_local(OPT_ADAM);
        check_matches_local(OPT_ADAMW);
        check_concurrent();
        check_errors();
        check_malformed();
    }
    if (strcmp(mode, "kill") == 0 && rank == 1) {
        td_finalize();
        _exit(0);
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
