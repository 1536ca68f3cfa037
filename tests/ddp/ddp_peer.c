/* ddp_peer.c: one rank of the multi-process DDP tests (tests/ddp/test_ddp.sh),
 * over real collectives and UCX. Run as `todist-run -n N ddp_peer`.
 *
 * The model is a two-layer perceptron in float64 (W0 [8,16], b0, W1 [16,4],
 * b1) plus an EXTRA parameter the loss may leave unused. Every rank trains on
 * its own shard (inputs made from its rank); the expected values come from a
 * plain replica on each rank that computes every shard's gradient itself
 * and averages them, i.e. single-process training on the whole batch. Each
 * check is agreed over the group (all_reduce MIN of the ranks' verdicts), and
 * rank 0 prints "PASS name" or "FAIL name: detail". */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_agree.h"

#define NPAR 5
#define TOL  1e-10

static int rank, size;

typedef struct {
    td_tensor_t *p[NPAR];          /* W0 b0 W1 b1 extra */
} model_t;

static const char *names[NPAR] = {"W0", "b0", "W1", "b1", "extra"};
static const int64_t shapes[NPAR][2] = {{8, 16}, {16, 0}, {16, 4}, {4, 0},
                                        {3, 0}};

static void
model_init(model_t *m, uint64_t seed)
{
    for (int i = 0; i < NPAR; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        td_tensor_empty(shapes[i], nd, TD_FLOAT64, TD_CPU, &m->p[i]);
        td_tensor_uniform_(m->p[i], -0.5, 0.5, seed * 10 + i);
        td_tensor_set_requires_grad(m->p[i], 1);
    }
}

static void
model_free(model_t *m)
{
    for (int i = 0; i < NPAR; i++) {
        td_tensor_release(m->p[i]);
    }
}

/* Shard R's batch: 4 rows of 8 inputs and 4 targets, a function of R. */
static void
shard(int r, int it, td_tensor_t **x, td_tensor_t **y)
{
    int64_t xs[2] = {4, 8}, ys[2] = {4, 4};

    td_tensor_empty(xs, 2, TD_FLOAT64, TD_CPU, x);
    td_tensor_empty(ys, 2, TD_FLOAT64, TD_CPU, y);
    td_tensor_uniform_(*x, -1, 1, 1000 + 97 * r + it);
    td_tensor_uniform_(*y, -1, 1, 5000 + 89 * r + it);
}

/* loss = mse(relu(x W0 + b0) W1 + b1, y) [+ 0 * nothing: EXTRA unused
 * unless USE_EXTRA, then + sum(extra^2)] */
static td_tensor_t *
loss_of(model_t *m, td_tensor_t *x, td_tensor_t *y, int use_extra)
{
    td_tensor_t *h, *h2, *h3, *o, *o2, *loss, *e2, *es, *tot;

    td_matmul(x, m->p[0], &h);
    td_add(h, m->p[1], &h2);
    td_relu(h2, &h3);
    td_matmul(h3, m->p[2], &o);
    td_add(o, m->p[3], &o2);
    td_mse_loss(o2, y, TD_REDUCTION_MEAN, &loss);
    td_tensor_release(h);
    td_tensor_release(h2);
    td_tensor_release(h3);
    td_tensor_release(o);
    td_tensor_release(o2);
    if (!use_extra) {
        return loss;
    }
    td_mul(m->p[4], m->p[4], &e2);
    td_sum(e2, &es);
    td_add(loss, es, &tot);
    td_tensor_release(e2);
    td_tensor_release(es);
    td_tensor_release(loss);
    return tot;
}

/* The reference: REF's .grad = average over all shards of iteration IT. */
static void
reference_grads(model_t *ref, int it, int use_extra, int iters_accum)
{
    for (int i = 0; i < NPAR; i++) {
        td_tensor_set_grad(ref->p[i], NULL);
    }
    for (int k = 0; k < iters_accum; k++) {
        for (int r = 0; r < size; r++) {
            td_tensor_t *x, *y, *loss;
            shard(r, it + k, &x, &y);
            loss = loss_of(ref, x, y, use_extra);
            td_backward(&loss, NULL, 1, 0, 0);
            td_tensor_release(loss);
            td_tensor_release(x);
            td_tensor_release(y);
        }
    }
    for (int i = 0; i < NPAR; i++) {
        td_tensor_t *g = td_tensor_grad(ref->p[i]);
        if (g != NULL) {
            for (int64_t j = 0; j < td_tensor_numel(g); j++) {
                ((double *)td_tensor_data(g))[j] /= size;
            }
        }
    }
}

static double
grads_diff(model_t *a, model_t *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        m = fmax(m, maxdiff(td_tensor_grad(a->p[i]), td_tensor_grad(b->p[i])));
    }
    return m;
}

static double
params_diff(model_t *a, model_t *b)
{
    double m = 0;
    for (int i = 0; i < NPAR; i++) {
        m = fmax(m, maxdiff(a->p[i], b->p[i]));
    }
    return m;
}

static int
local_step(model_t *m, int it, int use_extra, td_ddp_t *ddp)
{
    td_tensor_t *x, *y, *loss;
    td_status_t st;

    shard(rank, it, &x, &y);
    loss = loss_of(m, x, y, use_extra);
    st = td_ddp_backward(ddp, loss);
    if (st == TD_OK) {
        st = td_ddp_wait(ddp);
    }
    td_tensor_release(loss);
    td_tensor_release(x);
    td_tensor_release(y);
    return st;
}

/* ---- the checks ------------------------------------------------------------ */

static void
check_broadcast_and_grads(void)
{
    model_t m, ref;
    td_ddp_t *ddp = NULL;
    td_status_t st;
    double d;

    model_init(&m, 100 + rank);        /* replicas start different */
    model_init(&ref, 100);             /* rank 0's values */
    td_ddp_opts_t o = td_ddp_defaults();
    o.find_unused_parameters = 1;
    o.names = names;
    st = td_ddp_create(m.p, NPAR, &o, &ddp);
    d = params_diff(&m, &ref);
    if (st != TD_OK || d > 0) {
        fail_detail("create: %s; params differ from rank 0's by %g",
                    st ? td_last_error() : "ok", d);
    }
    agree(st == TD_OK && d == 0, "parameters_broadcast_from_rank0");

    st = local_step(&m, 0, 0, ddp);
    reference_grads(&ref, 0, 0, 1);
    d = grads_diff(&m, &ref, 4);
    if (st != TD_OK || d > TOL) {
        fail_detail("step: %s; grads differ from the average by %g",
                    st ? td_last_error() : "ok", d);
    }
    agree(st == TD_OK && d <= TOL, "gradients_are_the_average");
    {
        /* every element of the unused parameter's gradient, not the first */
        td_tensor_t *g = td_tensor_grad(m.p[4]);
        int64_t n = g != NULL ? td_tensor_numel(g) : 0, nz = 0;

        for (int64_t i = 0; i < n; i++) {
            nz += ((double *)td_tensor_data(g))[i] != 0.0;
        }
        if (g == NULL || n != td_tensor_numel(m.p[4]) || nz != 0) {
            fail_detail("unused grad: %s, %lld of %lld elements nonzero",
                        g == NULL ? "none" : "present", (long long)nz,
                        (long long)n);
        }
        agree(g != NULL && n == td_tensor_numel(m.p[4]) && n > 1 && nz == 0,
              "find_unused_parameters_unused_grad_is_zero");
    }
    td_ddp_destroy(ddp);
    agree(td_tensor_grad(m.p[0]) != NULL, "destroy_keeps_gradients");
    model_free(&m);
    model_free(&ref);
}

/* Train 4 SGD steps with tiny buckets (several of them, rebuilt after the
 * first iteration) and with the example hook; compare with the reference. */
static void
check_training(int hook)
{
    model_t m, ref;
    td_ddp_t *ddp = NULL;
    td_optim_t *opt, *ropt;
    td_status_t st = TD_OK;
    double d = 0;
    const char *name = hook ? "training_with_divide_then_sum_hook"
                            : "training_matches_single_process";

    model_init(&m, 200);
    model_init(&ref, 200);
    td_ddp_opts_t o = td_ddp_defaults();
    o.first_bucket_bytes = 64;      /* W1's 512 B gets its own bucket */
    o.bucket_cap_bytes = 600;
    o.find_unused_parameters = 1;
    if (hook) {
        o.comm_hook = td_ddp_hook_divide_then_sum;
    }
    td_ddp_create(m.p, NPAR, &o, &ddp);
    td_sgd_opts_t so = {.lr = 0.1, .momentum = 0.9};
    td_optim_sgd(m.p, NPAR, &so, &opt);
    td_optim_sgd(ref.p, NPAR, &so, &ropt);
    for (int it = 0; it < 4 && st == TD_OK; it++) {
        st = local_step(&m, it, 0, ddp);
        if (st == TD_OK) {
            td_optim_step(opt);
            td_optim_zero_grad(opt);
        }
        reference_grads(&ref, it, 0, 1);
        td_optim_step(ropt);
    }
    d = params_diff(&m, &ref);
    if (st != TD_OK || d > TOL) {
        fail_detail("%s; parameters differ by %g after 4 steps",
                    st ? td_last_error() : "ok", d);
    }
    agree(st == TD_OK && d <= TOL && td_ddp_num_buckets(ddp) >= 3, name);
    td_optim_free(opt);
    td_optim_free(ropt);
    td_ddp_destroy(ddp);
    model_free(&m);
    model_free(&ref);
}

/* The flattened launch order of DDP's buckets, as "4 3 2 1 0". */
static void
bucket_order(td_ddp_t *ddp, char *buf, size_t len)
{
    size_t k = 0;

    buf[0] = '\0';
    for (int b = 0; b < td_ddp_num_buckets(ddp); b++) {
        int n;
        const int *p = td_ddp_bucket_params(ddp, b, &n);
        for (int i = 0; i < n && k < len - 8; i++) {
            k += snprintf(buf + k, len - k, "%s%d", k ? " " : "", p[i]);
        }
    }
}

/* Registered as W1 b1 W0 b0 extra, the buckets start in reverse
 * registration order (extra b0 W0 b1 W1 = 4 3 2 1 0); backward delivers
 * extra (unused, at prepare), b1, W1, b0, W0, so after the first iteration
 * they are rebuilt as 4 1 0 3 2, and training still equals the reference. */
static void
check_rebuild(void)
{
    model_t m, ref;
    td_tensor_t *reg[NPAR];
    td_ddp_t *ddp = NULL;
    td_optim_t *opt, *ropt;
    td_status_t st = TD_OK;
    char before[64], after[64];
    double d;

    model_init(&m, 250);
    model_init(&ref, 250);
    reg[0] = m.p[2]; reg[1] = m.p[3]; reg[2] = m.p[0]; reg[3] = m.p[1];
    reg[4] = m.p[4];
    td_ddp_opts_t o = td_ddp_defaults();
    o.first_bucket_bytes = 64;
    o.bucket_cap_bytes = 600;
    o.find_unused_parameters = 1;
    td_ddp_create(reg, NPAR, &o, &ddp);
    bucket_order(ddp, before, sizeof(before));
    td_sgd_opts_t so = {.lr = 0.1, .momentum = 0.9};
    td_optim_sgd(m.p, NPAR, &so, &opt);
    td_optim_sgd(ref.p, NPAR, &so, &ropt);
    for (int it = 0; it < 3 && st == TD_OK; it++) {
        st = local_step(&m, it, 0, ddp);
        if (it == 0) {
            bucket_order(ddp, after, sizeof(after));
        }
        if (st == TD_OK) {
            td_optim_step(opt);
            td_optim_zero_grad(opt);
        }
        reference_grads(&ref, it, 0, 1);
        td_optim_step(ropt);
    }
    fail_detail("order before '%s', after '%s'", before, after);
    agree(strcmp(before, "4 3 2 1 0") == 0 && strcmp(after, "4 1 0 3 2") == 0,
          "buckets_rebuilt_in_arrival_order");
    d = params_diff(&m, &ref);
    fail_detail("%s; parameters differ by %g", st ? td_last_error() : "ok", d);
    agree(st == TD_OK && d <= TOL, "training_right_across_the_rebuild");
    td_optim_free(opt);
    td_optim_free(ropt);
    td_ddp_destroy(ddp);
    model_free(&m);
    model_free(&ref);
}

static void
check_unused_error(void)
{
    model_t m;
    td_ddp_t *ddp = NULL;
    td_status_t st;
    int good;

    model_init(&m, 300);
    td_ddp_opts_t o = td_ddp_defaults();
    o.names = names;
    td_ddp_create(m.p, NPAR, &o, &ddp);
    st = local_step(&m, 0, 0, ddp);
    good = st == TD_ERR_STATE && strstr(td_last_error(), "extra") &&
           strstr(td_last_error(), "find_unused_parameters");
    fail_detail("status %d: %s", st, td_last_error());
    agree(good, "unused_parameter_is_an_error_naming_it");
    /* the same object keeps working once every parameter is used */
    st = local_step(&m, 1, 1, ddp);
    fail_detail("status %d: %s", st, td_last_error());
    agree(st == TD_OK, "next_iteration_with_all_used_succeeds");
    td_ddp_destroy(ddp);
    model_free(&m);
}

static void
check_no_sync(void)
{
    model_t m, ref, loc;
    td_ddp_t *ddp = NULL;
    td_status_t st;
    double d;

    model_init(&m, 400);
    model_init(&ref, 400);
    model_init(&loc, 400);
    td_ddp_opts_t o = td_ddp_defaults();
    td_ddp_create(m.p, NPAR, &o, &ddp);
    td_ddp_set_require_sync(ddp, 0);
    st = local_step(&m, 0, 1, ddp);
    /* grads are this rank's alone */
    {
        td_tensor_t *x, *y, *loss;
        shard(rank, 0, &x, &y);
        loss = loss_of(&loc, x, y, 1);
        td_backward(&loss, NULL, 1, 0, 0);
        td_tensor_release(loss);
        td_tensor_release(x);
        td_tensor_release(y);
    }
    d = grads_diff(&m, &loc, NPAR);
    fail_detail("%s; local grads differ by %g", st ? td_last_error() : "ok",
                d);
    agree(st == TD_OK && d <= TOL, "no_sync_keeps_local_gradients");
    td_ddp_set_require_sync(ddp, 1);
    if (st == TD_OK) {
        st = local_step(&m, 1, 1, ddp);
    }
    reference_grads(&ref, 0, 1, 2);
    d = grads_diff(&m, &ref, NPAR);
    fail_detail("%s; accumulated grads differ from the average by %g",
                st ? td_last_error() : "ok", d);
    agree(st == TD_OK && d <= TOL, "no_sync_then_sync_averages_the_sums");
    td_ddp_destroy(ddp);
    model_free(&m);
    model_free(&ref);
    model_free(&loc);
}

/* DDP7: an optimizer stepped between the backward and td_ddp_wait refuses
 * rather than read gradients still being reduced; after the wait it steps. */
static void
check_step_before_wait(void)
{
    model_t m;
    td_ddp_t *ddp = NULL;
    td_optim_t *opt;
    td_tensor_t *x, *y, *loss;
    td_status_t st1, st2, st3;

    model_init(&m, 600);
    td_ddp_opts_t o = td_ddp_defaults();
    o.find_unused_parameters = 1;
    td_ddp_create(m.p, NPAR, &o, &ddp);
    td_sgd_opts_t so = {.lr = 0.1};
    td_optim_sgd(m.p, NPAR, &so, &opt);
    shard(rank, 0, &x, &y);
    loss = loss_of(&m, x, y, 0);
    td_ddp_backward(ddp, loss);
    st1 = td_optim_step(opt);
    fail_detail("step before wait: %d %s", st1, td_last_error());
    agree(st1 == TD_ERR_STATE && strstr(td_last_error(), "td_ddp_wait"),
          "optimizer_refuses_before_wait");
    st2 = td_ddp_wait(ddp);
    st3 = td_optim_step(opt);
    fail_detail("wait %d, step %d: %s", st2, st3, td_last_error());
    agree(st2 == TD_OK && st3 == TD_OK, "optimizer_steps_after_wait");
    td_tensor_release(loss);
    td_tensor_release(x);
    td_tensor_release(y);
    td_optim_free(opt);
    td_ddp_destroy(ddp);
    model_free(&m);
}

static void
check_bad_input(void)
{
    model_t m;
    td_ddp_t *ddp = NULL;
    td_tensor_t *dup[2], *nl, *two;
    td_status_t st;
    int good = 1;

    model_init(&m, 500);
    st = td_ddp_create(NULL, 3, NULL, &ddp);
    good &= st == TD_ERR_INVALID;
    dup[0] = m.p[0];
    dup[1] = m.p[0];
    st = td_ddp_create(dup, 2, NULL, &ddp);
    good &= st == TD_ERR_INVALID && strstr(td_last_error(), "parameter 1 is "
                                           "parameter 0") != NULL;
    td_tensor_scalar(2.0, TD_FLOAT64, &two);
    td_mul(m.p[1], two, &nl);                 /* not a leaf */
    dup[1] = nl;
    st = td_ddp_create(dup, 2, NULL, &ddp);
    good &= st == TD_ERR_INVALID && strstr(td_last_error(), "parameter 1 is "
                                           "not a leaf") != NULL;
    fail_detail("last: %s", td_last_error());
    agree(good, "bad_parameters_are_named");
    td_tensor_release(nl);
    td_tensor_release(two);
    model_free(&m);
}

int
main(int argc, char **argv)
{
    td_status_t st = td_init(NULL);

    (void)argc;
    (void)argv;
    if (st != TD_OK) {
        fprintf(stderr, "ddp_peer: td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    check_broadcast_and_grads();
    check_training(0);
    check_training(1);
    check_rebuild();
    check_unused_error();
    check_no_sync();
    check_step_before_wait();
    check_bad_input();
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "ddp_peer: td_finalize: %s\n", td_last_error());
        return 1;
    }
    return 0;
}
