/* ddp_dist_peer.c: DDP inside a distributed autograd context (DDP9 in
 * todist/ddp.h), over real RPC, collectives and UCX. Run as
 * `todist-run -n 2 ddp_dist_peer` (tests/ddp/test_ddp_dist.sh).
 *
 * Each rank wraps an MLP 4-5-3 (float64) in DDP with one bucket per
 * parameter (so both the asynchronous buckets and the last, synchronous
 * one, DDP8, are exercised). Each step runs in a context: the rank's input
 * X (a leaf that requires grad) goes to the other rank and comes back
 * doubled (a real RPC hop, recorded by distributed autograd), the MLP runs
 * on it, the loss is sum(out * w) with w depending on the rank, and
 * td_ddp_dist_backward runs the distributed backward. The expected values
 * come from the same computation done locally (td_grad) on each rank,
 * averaged with an all_reduce (with find_unused_parameters, an unused
 * parameter's context gradient is zero). Join (uneven inputs, divided by
 * the active ranks) and ZeRO step from the context's gradients too. Each
 * check is agreed over both ranks; rank 0 prints "PASS name" or
 * "FAIL name: detail". */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_agree.h"

#define NP   4          /* W0 b0 W1 b1 */
#define TOL  1e-12

static int rank;

/* "double_it"(x) -> 2 x, computed where it is called, so the result goes
 * back with a send node. */
static td_status_t
fn_double(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
          td_rpc_list_t *result)
{
    td_tensor_t *x, *y = NULL;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_rpc_list_tensor(a, 0, &x)) != TD_OK ||
        (st = td_mul_scalar(x, 2.0, &y)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_tensor(result, y);
    td_tensor_release(y);
    return st;
}

/* This rank's input at step IT (a leaf requiring grad) and loss weights. */
static void
inputs(int it, td_tensor_t **x, td_tensor_t **w)
{
    int64_t xs[2] = {2, 4}, ws[2] = {2, 3};

    td_tensor_empty(xs, 2, TD_FLOAT64, TD_CPU, x);
    td_tensor_uniform_(*x, -1, 1, 100 + 10 * (uint64_t)rank + (uint64_t)it);
    td_tensor_set_requires_grad(*x, 1);
    td_tensor_empty(ws, 2, TD_FLOAT64, TD_CPU, w);
    td_tensor_uniform_(*w, -1, 1, 200 + 10 * (uint64_t)rank + (uint64_t)it);
}

/* loss = sum(mlp(h) * w) */
static td_status_t
loss_of(td_mlp_t *mlp, td_tensor_t *h, td_tensor_t *w, td_tensor_t **loss)
{
    td_tensor_t *out = NULL, *prod = NULL;
    td_status_t st;

    if ((st = td_mlp_forward(mlp, h, &out)) == TD_OK &&
        (st = td_mul(out, w, &prod)) == TD_OK) {
        st = td_sum(prod, loss);
    }
    td_tensor_release(out);
    td_tensor_release(prod);
    return st;
}

/* This rank's local gradients of step IT, not averaged (new references in
 * G[NP]). */
static td_status_t
own_grads(td_mlp_t *mlp, int it, td_tensor_t **g)
{
    td_tensor_t *x = NULL, *w = NULL, *h = NULL, *loss = NULL;
    td_status_t st;

    inputs(it, &x, &w);
    memset(g, 0, NP * sizeof(*g));
    if ((st = td_mul_scalar(x, 2.0, &h)) == TD_OK &&
        (st = loss_of(mlp, h, w, &loss)) == TD_OK) {
        st = td_grad(&loss, NULL, 1, td_mlp_params(mlp), NP, 0, 0, 0, g);
    }
    td_tensor_release(x);
    td_tensor_release(w);
    td_tensor_release(h);
    td_tensor_release(loss);
    return st;
}

/* The average over the ranks of the local gradients of step IT (new
 * references in AVG[NP]). */
static td_status_t
expected(td_mlp_t *mlp, int it, td_tensor_t **avg)
{
    td_status_t st = own_grads(mlp, it, avg);

    for (int i = 0; st == TD_OK && i < NP; i++) {
        st = td_all_reduce(td_group_world(), avg[i], TD_REDUCE_AVG);
    }
    return st;
}

/* Max |t - rank 0's t| (0 on rank 0): the ranks hold the same values. */
static double
diff_to_rank0(td_tensor_t *t)
{
    td_tensor_t *c = NULL;
    double d;

    if (t == NULL || td_tensor_clone(t, &c) != TD_OK ||
        td_broadcast(td_group_world(), c, 0) != TD_OK) {
        td_tensor_release(c);
        return INFINITY;
    }
    d = maxdiff(t, c);
    td_tensor_release(c);
    return d;
}

static double
grad_abs_max(td_tensor_t *p)
{
    td_tensor_t *g = td_tensor_grad(p);
    double m = 0;

    for (int64_t k = 0; g != NULL && k < td_tensor_numel(g); k++) {
        m = fmax(m, fabs(((double *)td_tensor_data(g))[k]));
    }
    return m;
}

/* One step in a context: forward through the RPC hop, DDP's distributed
 * backward; on success the context's gradients of the parameters land in
 * GOT[NP] (new references) and X's in *XG. STEP_LR > 0 also steps the
 * parameters with a per-owner distributed optimizer over the context. */
static td_status_t
dist_step_extra(td_ddp_t *ddp, td_mlp_t *mlp, int it, td_tensor_t **got,
                td_tensor_t **xg, td_dist_optim_t *opt, td_tensor_t *extra,
                td_tensor_t **extra_g)
{
    td_tensor_t *x = NULL, *w = NULL, *h = NULL, *loss = NULL;
    td_rpc_list_t *args = NULL, *res = NULL;
    td_status_t st;
    int64_t ctx;

    memset(got, 0, NP * sizeof(*got));
    *xg = NULL;
    inputs(it, &x, &w);
    if ((st = td_dist_autograd_begin(&ctx)) != TD_OK) {
        goto out;
    }
    if ((st = td_rpc_list_create(&args)) == TD_OK &&
        (st = td_rpc_list_add_tensor(args, x)) == TD_OK &&
        (st = td_rpc_sync(1 - rank, "double_it", args, 60.0, &res)) == TD_OK &&
        (st = td_rpc_list_tensor(res, 0, &h)) == TD_OK) {
        td_tensor_retain(h);
        st = loss_of(mlp, h, w, &loss);
    }
    if (st == TD_OK) {
        st = td_ddp_dist_backward(ddp, ctx, loss);
    }
    for (int i = 0; st == TD_OK && i < NP; i++) {
        st = td_dist_get_gradient(ctx, td_mlp_params(mlp)[i], &got[i]);
    }
    if (st == TD_OK) {
        st = td_dist_get_gradient(ctx, x, xg);
    }
    if (st == TD_OK && extra != NULL) {
        st = td_dist_get_gradient(ctx, extra, extra_g);
    }
    if (st == TD_OK && opt != NULL) {
        st = td_dist_optim_step(opt, ctx);
    }
    td_dist_autograd_end(ctx);
out:
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_tensor_release(x);
    td_tensor_release(w);
    td_tensor_release(h);
    td_tensor_release(loss);
    return st;
}

static td_status_t
dist_step(td_ddp_t *ddp, td_mlp_t *mlp, int it, td_tensor_t **got,
          td_tensor_t **xg, td_dist_optim_t *opt)
{
    return dist_step_extra(ddp, mlp, it, got, xg, opt, NULL, NULL);
}

static void
release_all(td_tensor_t **t, int n)
{
    for (int i = 0; i < n; i++) {
        td_tensor_release(t[i]);
        t[i] = NULL;
    }
}

/* Step IT's loss, computed here (no RPC hop), announced to DDP and run
 * backward in context CTX; DDP is not waited for. */
static td_status_t
local_dist_backward(td_ddp_t *ddp, td_mlp_t *mlp, int it, int64_t ctx)
{
    td_tensor_t *x = NULL, *w = NULL, *h = NULL, *loss = NULL;
    td_status_t st;

    inputs(it, &x, &w);
    if ((st = td_mul_scalar(x, 2.0, &h)) == TD_OK &&
        (st = loss_of(mlp, h, w, &loss)) == TD_OK &&
        (st = td_ddp_prepare_dist_backward(ddp, ctx, &loss, 1)) == TD_OK) {
        st = td_dist_backward(ctx, &loss, 1, 0);
    }
    td_tensor_release(x);
    td_tensor_release(w);
    td_tensor_release(h);
    td_tensor_release(loss);
    return st;
}

/* PARAMS' values minus LR * G (new references in OUT[NP]). */
static td_status_t
sgd_expect(td_tensor_t *const *before, td_tensor_t *const *g, double lr,
           td_tensor_t **out)
{
    td_status_t st = TD_OK;

    memset(out, 0, NP * sizeof(*out));
    for (int i = 0; st == TD_OK && i < NP; i++) {
        td_tensor_t *step = NULL;

        if ((st = td_mul_scalar(g[i], lr, &step)) == TD_OK) {
            st = td_sub(before[i], step, &out[i]);
        }
        td_tensor_release(step);
    }
    return st;
}

/* 7. Join in a distributed backward, divide_by_initial_world_size = 0:
 * rank 0 trains two iterations, rank 1 one; in the second only rank 0
 * trains, so the context must hold its own gradients (the sum over the
 * one active rank), not half of them; .grad stays untouched. */
static void
test_join_in_context(td_mlp_t *mlp)
{
    td_ddp_opts_t o = td_ddp_defaults();
    td_ddp_join_opts_t jo = {.divide_by_initial_world_size = 0};
    td_ddp_t *ddp = NULL;
    td_ddp_join_t *j = NULL;
    td_tensor_t *want[NP] = {0}, *got[NP] = {0};
    td_status_t st;
    double d = 0, dg = 0;
    int iters = rank == 0 ? 2 : 1;

    o.first_bucket_bytes = 1;
    o.bucket_cap_bytes = 1;
    for (int i = 0; i < NP; i++) {
        td_tensor_set_grad(td_mlp_params(mlp)[i], NULL);   /* from step 4 */
    }
    st = td_ddp_create_mlp(mlp, &o, &ddp);
    if (st == TD_OK) {
        st = td_ddp_join_begin(ddp, &jo, &j);
    }
    for (int it = 0; st == TD_OK && it < iters; it++) {
        int64_t ctx;

        st = it == 0 ? expected(mlp, 10, want) : own_grads(mlp, 11, want);
        if (st == TD_OK) {
            st = td_ddp_join_step(j);
        }
        if (st == TD_OK && (st = td_dist_autograd_begin(&ctx)) == TD_OK) {
            if ((st = local_dist_backward(ddp, mlp, 10 + it, ctx)) == TD_OK) {
                st = td_ddp_join_wait(j);
            }
            for (int i = 0; st == TD_OK && i < NP; i++) {
                st = td_dist_get_gradient(ctx, td_mlp_params(mlp)[i],
                                          &got[i]);
            }
            td_dist_autograd_end(ctx);
        }
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(got[i], want[i]) : INFINITY);
            dg = fmax(dg, grad_abs_max(td_mlp_params(mlp)[i]));
        }
        release_all(want, NP);
        release_all(got, NP);
    }
    if (st == TD_OK) {
        st = td_ddp_join_end(j);
    }
    fail_detail("rank %d: %s |context - sum / active| %g, max |.grad| %g",
                rank, st == TD_OK ? "" : td_last_error(), d, dg);
    agree(st == TD_OK && d < TOL && dg == 0,
          "join_divides_the_context_gradients_by_the_active_ranks");
    td_ddp_join_destroy(j);
    td_ddp_destroy(ddp);
}

/* 8. ZeRO in a distributed backward: the shards step from the context's
 * gradients, .grad is not needed: after td_ddp_dist_backward (averaged in
 * the context) and after a plain td_dist_backward (ZeRO averages). */
static void
test_zero_in_context(td_mlp_t *mlp)
{
    td_ddp_opts_t o = td_ddp_defaults();
    td_zero_opts_t zo = {.optim = TD_ZERO_SGD, .sgd = {0.1, 0, 0, 0, 0}};
    td_ddp_t *ddp = NULL;
    td_zero_t *z = NULL;
    td_status_t st;

    st = td_ddp_create_mlp(mlp, &o, &ddp);
    if (st == TD_OK) {
        st = td_zero_create(td_mlp_params(mlp), NP, &zo, &z);
    }
    for (int with_ddp = 1; with_ddp >= 0; with_ddp--) {
        td_tensor_t *before[NP] = {0}, *avg[NP] = {0}, *want[NP] = {0};
        double d = 0, dr = 0;
        int64_t ctx;
        int it = 20 + with_ddp;

        for (int i = 0; st == TD_OK && i < NP; i++) {
            st = td_tensor_clone(td_mlp_params(mlp)[i], &before[i]);
        }
        if (st == TD_OK && (st = expected(mlp, it, avg)) == TD_OK) {
            st = sgd_expect(before, avg, zo.sgd.lr, want);
        }
        if (st == TD_OK && (st = td_dist_autograd_begin(&ctx)) == TD_OK) {
            if (with_ddp) {
                if ((st = local_dist_backward(ddp, mlp, it, ctx)) == TD_OK &&
                    (st = td_ddp_wait(ddp)) == TD_OK) {
                    st = td_zero_dist_step_averaged(z, ctx);
                }
            } else {
                td_tensor_t *x = NULL, *w = NULL, *h = NULL, *loss = NULL;

                inputs(it, &x, &w);
                if ((st = td_mul_scalar(x, 2.0, &h)) == TD_OK &&
                    (st = loss_of(mlp, h, w, &loss)) == TD_OK &&
                    (st = td_dist_backward(ctx, &loss, 1, 0)) == TD_OK) {
                    st = td_zero_dist_step(z, ctx);
                }
                td_tensor_release(x);
                td_tensor_release(w);
                td_tensor_release(h);
                td_tensor_release(loss);
            }
            td_dist_autograd_end(ctx);
        }
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(td_mlp_params(mlp)[i], want[i])
                                    : INFINITY);
            dr = fmax(dr, st == TD_OK ? diff_to_rank0(td_mlp_params(mlp)[i])
                                      : INFINITY);
        }
        fail_detail("rank %d: %s |param - (before - lr avg)| %g, |rank - "
                    "rank 0| %g", rank, st == TD_OK ? "" : td_last_error(),
                    d, dr);
        agree(st == TD_OK && d < TOL && dr == 0, with_ddp
              ? "zero_steps_from_the_context_after_ddp_dist_backward"
              : "zero_steps_from_the_context_after_dist_backward");
        release_all(before, NP);
        release_all(avg, NP);
        release_all(want, NP);
    }
    td_zero_free(z);
    td_ddp_destroy(ddp);
}

int
main(void)
{
    int64_t sizes[3] = {4, 5, 3};
    td_mlp_t *mlp = NULL;
    td_ddp_t *ddp = NULL;
    td_ddp_opts_t o;
    td_tensor_t *got[NP], *want[NP], *xg = NULL, *before[NP] = {0};
    td_dist_optim_t *opt = NULL;
    td_sgd_opts_t sgd = {0.1, 0, 0, 0, 0};
    td_status_t st;
    int good;
    double d, dr;

    if (td_rpc_register("double_it", fn_double, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "set-up: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    if (td_world()->world_size != 2) {
        fprintf(stderr, "ddp_dist_peer: run with 2 ranks\n");
        td_finalize();
        return 2;
    }
    o = td_ddp_defaults();
    o.first_bucket_bytes = 1;     /* one bucket per parameter */
    o.bucket_cap_bytes = 1;
    if (td_mlp_create(sizes, 3, TD_FLOAT64, 7 + (uint64_t)rank, &mlp) !=
            TD_OK ||
        td_ddp_create_mlp(mlp, &o, &ddp) != TD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, td_last_error());
        return 1;
    }

    /* 1. the context's gradients are the average, on both ranks alike;
     * the iteration after the bucket rebuild (DDP4) too */
    for (int it = 0; it < 2; it++) {
        char name[64];

        st = expected(mlp, it, want);
        if (st == TD_OK) {
            st = dist_step(ddp, mlp, it, got, &xg, NULL);
        }
        d = 0;
        dr = 0;
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(got[i], want[i]) : INFINITY);
            dr = fmax(dr, st == TD_OK ? diff_to_rank0(got[i]) : INFINITY);
        }
        if (st != TD_OK) {
            fail_detail("rank %d: %s", rank, td_last_error());
        } else {
            fail_detail("rank %d: |context - average| %g, |rank - rank 0| %g",
                        rank, d, dr);
        }
        snprintf(name, sizeof(name), "context_grads_are_the_average_it%d", it);
        agree(st == TD_OK && d < TOL && dr == 0, name);
        release_all(want, NP);
        release_all(got, NP);
        /* X is not a DDP parameter: its context gradient is this rank's
         * own, 2 * d loss / d h, never averaged */
        good = xg != NULL && td_tensor_numel(xg) == 8;
        fail_detail("rank %d: x's context gradient %s", rank,
                    xg == NULL ? "missing" : "has the wrong size");
        if (it == 0) {
            agree(good, "non_ddp_leaf_gradient_stays_in_context");
        }
        td_tensor_release(xg);
        xg = NULL;
    }

    /* 2. .grad is neither read nor written in a distributed backward */
    d = 0;
    for (int i = 0; i < NP; i++) {
        d = fmax(d, grad_abs_max(td_mlp_params(mlp)[i]));
    }
    fail_detail("rank %d: max |.grad| = %g after distributed backwards",
                rank, d);
    agree(d == 0, "dist_backward_leaves_dot_grad_alone");

    /* 3. a per-owner distributed optimizer over the context steps every
     * rank's replica by the average: the replicas stay equal */
    st = td_dist_optim_sgd(td_mlp_params(mlp), NP, &sgd, &opt);
    for (int i = 0; st == TD_OK && i < NP; i++) {
        st = td_tensor_clone(td_mlp_params(mlp)[i], &before[i]);
    }
    if (st == TD_OK) {
        st = expected(mlp, 2, want);
    }
    if (st == TD_OK) {
        st = dist_step(ddp, mlp, 2, got, &xg, opt);
    }
    d = 0;
    dr = 0;
    for (int i = 0; i < NP; i++) {
        td_tensor_t *step = NULL, *exp = NULL;

        if (st == TD_OK && td_mul_scalar(want[i], sgd.lr, &step) == TD_OK &&
            td_sub(before[i], step, &exp) == TD_OK) {
            d = fmax(d, maxdiff(td_mlp_params(mlp)[i], exp));
            dr = fmax(dr, diff_to_rank0(td_mlp_params(mlp)[i]));
        } else {
            d = INFINITY;
        }
        td_tensor_release(step);
        td_tensor_release(exp);
    }
    fail_detail("rank %d: %s |param - (before - lr avg)| %g, |rank - rank "
                "0| %g", rank, st == TD_OK ? "" : td_last_error(), d, dr);
    agree(st == TD_OK && d < TOL && dr == 0,
          "dist_optimizer_steps_replicas_by_the_average");
    release_all(want, NP);
    release_all(got, NP);
    release_all(before, NP);
    td_tensor_release(xg);
    xg = NULL;

    /* 4. a local backward after distributed ones: .grad is the average
     * of the local gradients, as before (DDP2) */
    {
        td_tensor_t *x = NULL, *w = NULL, *h = NULL, *loss = NULL;

        st = expected(mlp, 3, want);
        inputs(3, &x, &w);
        for (int i = 0; i < NP; i++) {
            td_tensor_set_grad(td_mlp_params(mlp)[i], NULL);
        }
        if (st == TD_OK && (st = td_mul_scalar(x, 2.0, &h)) == TD_OK &&
            (st = loss_of(mlp, h, w, &loss)) == TD_OK &&
            (st = td_ddp_backward(ddp, loss)) == TD_OK) {
            st = td_ddp_wait(ddp);
        }
        d = 0;
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(td_tensor_grad(
                                                  td_mlp_params(mlp)[i]),
                                              want[i]) : INFINITY);
        }
        fail_detail("rank %d: %s |.grad - average| %g", rank,
                    st == TD_OK ? "" : td_last_error(), d);
        agree(st == TD_OK && d < TOL, "local_backward_after_dist_averages_grad");
        release_all(want, NP);
        td_tensor_release(x);
        td_tensor_release(w);
        td_tensor_release(h);
        td_tensor_release(loss);
    }

    /* 5. announcing a local backward, then running a distributed one, is
     * an error naming the context (DDP9), and the next iteration works */
    {
        td_tensor_t *x = NULL, *w = NULL, *loss = NULL, *h = NULL;
        td_rpc_list_t *args = NULL, *res = NULL;
        int64_t ctx;

        inputs(4, &x, &w);
        st = td_dist_autograd_begin(&ctx);
        if (st == TD_OK && (st = td_rpc_list_create(&args)) == TD_OK &&
            (st = td_rpc_list_add_tensor(args, x)) == TD_OK &&
            (st = td_rpc_sync(1 - rank, "double_it", args, 60.0, &res)) ==
                TD_OK &&
            (st = td_rpc_list_tensor(res, 0, &h)) == TD_OK) {
            td_tensor_retain(h);
            st = loss_of(mlp, h, w, &loss);
        }
        if (st == TD_OK &&
            (st = td_ddp_prepare_backward(ddp, &loss, 1)) == TD_OK &&
            (st = td_dist_backward(ctx, &loss, 1, 0)) == TD_OK) {
            st = td_ddp_wait(ddp);
        }
        good = st == TD_ERR_STATE &&
               strstr(td_last_error(), "distributed autograd context") &&
               strstr(td_last_error(), "local backward");
        fail_detail("rank %d: status %d: %s", rank, st, td_last_error());
        agree(good, "mixed_local_and_dist_is_an_error_naming_both");
        td_dist_autograd_end(ctx);
        td_rpc_list_free(args);
        td_rpc_list_free(res);
        td_tensor_release(x);
        td_tensor_release(w);
        td_tensor_release(h);
        td_tensor_release(loss);

        st = expected(mlp, 5, want);
        if (st == TD_OK) {
            st = dist_step(ddp, mlp, 5, got, &xg, NULL);
        }
        d = 0;
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(got[i], want[i]) : INFINITY);
        }
        fail_detail("rank %d: %s |context - average| %g", rank,
                    st == TD_OK ? "" : td_last_error(), d);
        agree(st == TD_OK && d < TOL, "next_dist_iteration_after_error_works");
        release_all(want, NP);
        release_all(got, NP);
        td_tensor_release(xg);
    }

    td_dist_optim_destroy(opt);
    td_ddp_destroy(ddp);

    /* 6. find_unused_parameters in a distributed backward: a parameter the
     * loss does not reach gets the average of zeros in the context, the
     * others the average of their gradients */
    {
        td_tensor_t *params[NP + 1], *extra = NULL, *eg = NULL;
        int64_t three = 3;

        td_tensor_empty(&three, 1, TD_FLOAT64, TD_CPU, &extra);
        td_tensor_uniform_(extra, -1, 1, 5);
        td_tensor_set_requires_grad(extra, 1);
        memcpy(params, td_mlp_params(mlp), NP * sizeof(*params));
        params[NP] = extra;
        o.find_unused_parameters = 1;
        st = td_ddp_create(params, NP + 1, &o, &ddp);
        if (st == TD_OK) {
            st = expected(mlp, 6, want);
        }
        if (st == TD_OK) {
            st = dist_step_extra(ddp, mlp, 6, got, &xg, NULL, extra, &eg);
        }
        d = 0;
        for (int i = 0; i < NP; i++) {
            d = fmax(d, st == TD_OK ? maxdiff(got[i], want[i]) : INFINITY);
        }
        dr = st == TD_OK && eg != NULL && td_tensor_numel(eg) == 3
             ? fmax(fmax(fabs(((double *)td_tensor_data(eg))[0]),
                         fabs(((double *)td_tensor_data(eg))[1])),
                    fabs(((double *)td_tensor_data(eg))[2])) : INFINITY;
        fail_detail("rank %d: %s |context - average| %g, |unused's| %g", rank,
                    st == TD_OK ? "" : td_last_error(), d, dr);
        agree(st == TD_OK && d < TOL && dr == 0,
              "find_unused_in_dist_backward_gives_zeros_and_averages");
        release_all(want, NP);
        release_all(got, NP);
        td_tensor_release(xg);
        td_tensor_release(eg);
        td_ddp_destroy(ddp);
        td_tensor_release(extra);
    }
    test_join_in_context(mlp);
    test_zero_in_context(mlp);
    td_mlp_free(mlp);
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return 0;
}
