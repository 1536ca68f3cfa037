/* tests/dist_autograd/remote_module_peer.c: RemoteModule (todist/remote_module.h) over
 * real RPC, run by tests/dist_autograd/test_remote_module.sh with todist-run -n 2. Rank 0
 * creates modules on rank 1 and prints PASS/FAIL NAME per check:
 *  - a linear's forward equals the same linear computed locally from its
 *    parameters (fetched through remote_parameters + to_here);
 *  - an embedding_bag (sum) forward, and, inside a distributed autograd
 *    context, a local linear on top: distributed backward gives the
 *    embedding weight's gradient on rank 1 equal to the local computation's;
 *  - a distributed optimizer (SGD) over the remote embedding weight steps
 *    it to the local computation's value;
 *  - an mlp's forward equals td_mlp_forward of a local copy;
 *  - after free, the owner's forward function fails for that id: the
 *    module is gone from its table;
 *  - a handle passed through a value list (add_to_list / from_list, RM3)
 *    runs the same module, freeing it leaves the module alive, and a list
 *    that is not a handle is rejected. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_check.h"


static double
max_diff(td_tensor_t *a, td_tensor_t *b)
{
    const double *x = td_tensor_data(a), *y = td_tensor_data(b);
    double m = 0;

    if (td_tensor_numel(a) != td_tensor_numel(b)) {
        return INFINITY;
    }
    for (int64_t k = 0; k < td_tensor_numel(a); k++) {
        m = fmax(m, fabs(x[k] - y[k]));
    }
    return m;
}

/* A detached local copy of a remote reference's tensor (requires grad). */
static td_tensor_t *
fetch(td_rref_t *r)
{
    td_rpc_list_t *v = NULL;
    td_tensor_t *t = NULL, *c = NULL, *d = NULL;

    if (td_rref_to_here(r, 60.0, &v) != TD_OK ||
        td_rpc_list_tensor(v, 0, &t) != TD_OK ||
        td_tensor_detach(t, &d) != TD_OK || td_tensor_clone(d, &c) != TD_OK) {
        fprintf(stderr, "fetch: %s\n", td_last_error());
    }
    td_tensor_release(d);
    td_rpc_list_free(v);
    if (c != NULL) {
        td_tensor_set_requires_grad(c, 1);
    }
    return c;
}

static td_tensor_t *
tensor(const double *d, int64_t n0, int64_t n1, td_dtype_t dt)
{
    int64_t shape[2] = {n0, n1};
    td_tensor_t *t = NULL;

    if (dt == TD_INT64) {
        int64_t v[64];

        for (int64_t i = 0; i < n0; i++) {
            v[i] = (int64_t)d[i];
        }
        td_tensor_from_data(v, shape, 1, TD_INT64, &t);
    } else {
        td_tensor_from_data(d, shape, n1 ? 2 : 1, dt, &t);
    }
    return t;
}

static void
linear_forward(void)
{
    int64_t cfg[2] = {3, 2};
    double xd[6] = {0.1, -0.2, 0.3, 0.5, 0.4, -0.6};
    td_remote_module_t *rm = NULL;
    td_rref_t **rr = NULL;
    td_tensor_t *x = tensor(xd, 2, 3, TD_FLOAT64), *y = NULL, *w = NULL,
                *b = NULL, *ref = NULL;
    int n = 0;
    td_status_t st;

    if ((st = td_remote_module_create(1, TD_RM_LINEAR, cfg, 2, TD_FLOAT64, 5,
                                      &rm)) == TD_OK &&
        (st = td_remote_module_forward(rm, x, NULL, &y)) == TD_OK &&
        (st = td_remote_module_parameters(rm, &rr, &n)) == TD_OK) {
        w = fetch(rr[0]);
        b = fetch(rr[1]);
        st = td_linear(x, w, b, &ref);
    }
    check(st == TD_OK && n == 2 && td_rref_owner(rr[0]) == 1 &&
          max_diff(y, ref) < 1e-15, "linear_forward_equals_local",
          "status %d (%s), %d params, diff %g", st,
          st == TD_OK ? "" : td_last_error(), n,
          st == TD_OK ? max_diff(y, ref) : NAN);
    for (int k = 0; k < n; k++) {
        td_rref_release(rr[k]);
    }
    free(rr);
    td_remote_module_free(rm);
    td_tensor_release(x);
    td_tensor_release(y);
    td_tensor_release(w);
    td_tensor_release(b);
    td_tensor_release(ref);
}

/* embedding_bag(10, 4, sum) on rank 1 -> local linear(4, 2) -> mse loss */
static void
embedding_backward_and_optimizer(void)
{
    int64_t cfg[3] = {10, 4, TD_BAG_SUM}, lcfg[2] = {4, 2};
    double idx[6] = {1, 3, 3, 7, 9, 0}, offs[3] = {0, 2, 3},
           tgt[6] = {0.5, -1, 2, 0.25, 0, 1};
    td_remote_module_t *rm = NULL;
    td_rref_t **rr = NULL, *all[1] = {0};
    td_mlp_t *lin = NULL;
    td_tensor_t *ind = tensor(idx, 6, 0, TD_INT64),
                *off = tensor(offs, 3, 0, TD_INT64),
                *target = tensor(tgt, 3, 2, TD_FLOAT64);
    td_tensor_t *emb = NULL, *out = NULL, *loss = NULL, *g = NULL;
    td_tensor_t *w = NULL, *lw = NULL, *lb = NULL, *e2 = NULL, *o2 = NULL,
                *l2 = NULL, *refg[3] = {0}, *after = NULL;
    td_tensor_t *leaves[3];
    td_dist_optimizer_t *opt = NULL;
    td_sgd_opts_t sgd = {0.05, 0, 0, 0, 0};
    int64_t ctx = 0;
    int n = 0;
    td_status_t st;

    if ((st = td_remote_module_create(1, TD_RM_EMBEDDING_BAG, cfg, 3,
                                      TD_FLOAT64, 11, &rm)) != TD_OK ||
        (st = td_remote_module_parameters(rm, &rr, &n)) != TD_OK ||
        (st = td_mlp_create(lcfg, 2, TD_FLOAT64, 3, &lin)) != TD_OK) {
        goto out;
    }
    /* the same computation in this process first (local autograd) */
    w = fetch(rr[0]);
    if ((st = td_tensor_clone(td_mlp_params(lin)[0], &lw)) != TD_OK ||
        (st = td_tensor_clone(td_mlp_params(lin)[1], &lb)) != TD_OK) {
        goto out;
    }
    td_tensor_set_requires_grad(lw, 1);
    td_tensor_set_requires_grad(lb, 1);
    leaves[0] = w;
    leaves[1] = lw;
    leaves[2] = lb;
    if ((st = td_embedding_bag(w, ind, off, TD_BAG_SUM, &e2)) != TD_OK ||
        (st = td_linear(e2, lw, lb, &o2)) != TD_OK ||
        (st = td_mse_loss(o2, target, TD_REDUCTION_MEAN, &l2)) != TD_OK ||
        (st = td_grad(&l2, NULL, 1, leaves, 3, 0, 0, 0, refg)) != TD_OK) {
        goto out;
    }
    /* then remotely, inside a context */
    if ((st = td_dist_autograd_begin(&ctx)) != TD_OK ||
        (st = td_remote_module_forward(rm, ind, off, &emb)) != TD_OK ||
        (st = td_mlp_forward(lin, emb, &out)) != TD_OK ||
        (st = td_mse_loss(out, target, TD_REDUCTION_MEAN, &loss)) != TD_OK) {
        goto out;
    }
    check(fabs(*(double *)td_tensor_data(loss) -
               *(double *)td_tensor_data(l2)) < 1e-14,
          "embedding_bag_loss_equals_local", "%.17g vs %.17g",
          *(double *)td_tensor_data(loss), *(double *)td_tensor_data(l2));
    if ((st = td_dist_backward(ctx, &loss, 1, 0)) != TD_OK ||
        (st = td_dist_get_gradient(ctx, td_mlp_params(lin)[0], &g)) != TD_OK) {
        goto out;
    }
    check(max_diff(g, refg[1]) < 1e-14, "local_linear_grad_in_context",
          "diff %g", max_diff(g, refg[1]));
    /* one distributed SGD step over the remote weight: it becomes
     * w - lr * grad on its owner */
    all[0] = rr[0];
    if ((st = td_dist_optimizer_sgd(all, 1, &sgd, &opt)) != TD_OK ||
        (st = td_dist_optimizer_step(opt, ctx)) != TD_OK) {
        goto out;
    }
    after = fetch(rr[0]);
    {
        td_tensor_t *step = NULL, *want = NULL;

        td_mul_scalar(refg[0], 0.05, &step);
        td_sub(w, step, &want);
        check(max_diff(after, want) < 1e-14,
              "dist_optimizer_steps_remote_embedding", "diff %g (to the "
              "weight before: %g)", max_diff(after, want), max_diff(after, w));
        td_tensor_release(step);
        td_tensor_release(want);
    }
out:
    if (st != TD_OK) {
        check(0, "embedding_backward_and_optimizer", "status %d: %s", st,
              td_last_error());
    }
    if (ctx != 0) {
        td_dist_autograd_end(ctx);
    }
    td_dist_optimizer_destroy(opt);
    for (int k = 0; k < n; k++) {
        td_rref_release(rr[k]);
    }
    free(rr);
    td_remote_module_free(rm);
    td_mlp_free(lin);
    for (int k = 0; k < 3; k++) {
        td_tensor_release(refg[k]);
    }
    td_tensor_release(ind);
    td_tensor_release(off);
    td_tensor_release(target);
    td_tensor_release(emb);
    td_tensor_release(out);
    td_tensor_release(loss);
    td_tensor_release(g);
    td_tensor_release(w);
    td_tensor_release(lw);
    td_tensor_release(lb);
    td_tensor_release(e2);
    td_tensor_release(o2);
    td_tensor_release(l2);
    td_tensor_release(after);
}

static void
mlp_and_free(void)
{
    int64_t sizes[3] = {3, 5, 2};
    double xd[6] = {0.1, -0.2, 0.3, 0.5, 0.4, -0.6};
    td_remote_module_t *rm = NULL;
    td_tensor_t *x = tensor(xd, 2, 3, TD_FLOAT64), *y = NULL, *ref = NULL;
    td_mlp_t *local = NULL;
    td_status_t st;

    if ((st = td_remote_module_create(1, TD_RM_MLP, sizes, 3, TD_FLOAT64, 9,
                                      &rm)) == TD_OK &&
        (st = td_remote_module_forward(rm, x, NULL, &y)) == TD_OK &&
        (st = td_mlp_create(sizes, 3, TD_FLOAT64, 9, &local)) == TD_OK) {
        st = td_mlp_forward(local, x, &ref);
    }
    check(st == TD_OK && max_diff(y, ref) < 1e-15, "mlp_forward_equals_local",
          "status %d (%s) diff %g", st, st == TD_OK ? "" : td_last_error(),
          st == TD_OK ? max_diff(y, ref) : NAN);
    td_tensor_release(y);
    y = NULL;
    if (rm != NULL) {
        /* free it, then call its owner's forward with the old id */
        td_rpc_list_t *args = NULL;
        int64_t id = td_remote_module_id(rm);

        st = td_remote_module_free(rm);
        check(st == TD_OK, "free_returns_ok", "status %d: %s", st,
              td_last_error());
        td_rpc_list_create(&args);
        td_rpc_list_add_int(args, id);
        td_rpc_list_add_tensor(args, x);
        st = td_rpc_sync(1, "_td.rm.forward", args, 60.0, NULL);
        check(st == TD_ERR_REMOTE && strstr(td_last_error(), "no module"),
              "owner_freed_module", "status %d: %s", st, td_last_error());
        td_rpc_list_free(args);
    }
    td_mlp_free(local);
    td_tensor_release(x);
    td_tensor_release(y);
    td_tensor_release(ref);
}

static void
handle_passing(void)
{
    int64_t cfg[2] = {3, 2};
    double xd[6] = {0.1, -0.2, 0.3, 0.5, 0.4, -0.6};
    td_remote_module_t *rm = NULL, *copy = NULL, *bad = NULL;
    td_rpc_list_t *list = NULL, *junk = NULL;
    td_tensor_t *x = tensor(xd, 2, 3, TD_FLOAT64), *y = NULL, *y2 = NULL,
                *y3 = NULL;
    td_status_t st, st2 = TD_OK;

    if ((st = td_remote_module_create(1, TD_RM_LINEAR, cfg, 2, TD_FLOAT64, 5,
                                      &rm)) == TD_OK &&
        (st = td_remote_module_forward(rm, x, NULL, &y)) == TD_OK &&
        (st = td_rpc_list_create(&list)) == TD_OK &&
        (st = td_rpc_list_add_string(list, "before")) == TD_OK &&
        (st = td_remote_module_add_to_list(rm, list)) == TD_OK &&
        (st = td_remote_module_from_list(list, 1, &copy)) == TD_OK) {
        st = td_remote_module_forward(copy, x, NULL, &y2);
    }
    check(st == TD_OK && td_remote_module_owner(copy) == 1 &&
          td_remote_module_id(copy) == td_remote_module_id(rm) &&
          max_diff(y, y2) == 0, "handle_from_list_runs_the_module",
          "status %d (%s)", st, st == TD_OK ? "" : td_last_error());
    if (st == TD_OK) {
        st = td_remote_module_free(copy);
        copy = NULL;
        st2 = td_remote_module_forward(rm, x, NULL, &y3);
    }
    check(st == TD_OK && st2 == TD_OK && max_diff(y, y3) == 0,
          "freeing_a_received_handle_keeps_the_module", "status %d/%d (%s)",
          st, st2, td_last_error());
    td_rpc_list_create(&junk);
    td_rpc_list_add_int(junk, 99);      /* no such rank */
    td_rpc_list_add_int(junk, 1);
    td_rpc_list_add_int(junk, 1);
    st = td_remote_module_from_list(junk, 0, &bad);
    check(st == TD_ERR_PROTOCOL && bad == NULL &&
          strstr(td_last_error(), "owner 99") != NULL,
          "list_that_is_not_a_handle_is_rejected", "status %d: %s", st,
          td_last_error());
    td_remote_module_free(copy);
    td_remote_module_free(rm);
    td_rpc_list_free(list);
    td_rpc_list_free(junk);
    td_tensor_release(x);
    td_tensor_release(y);
    td_tensor_release(y2);
    td_tensor_release(y3);
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
    if (td_world()->rank == 0) {
        linear_forward();
        embedding_backward_and_optimizer();
        mlp_and_free();
        handle_passing();
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "td_finalize: %s\n", td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
