/* test_nn: the MLP's flat parameter and gradient buffers, its three clone
 * modes, and a functional MetaSGD update through set_params. */
#include "config.h"

#include "tests/tap.h"
#include <todist/todist.h>

static td_status_t
loss_of(td_mlp_t *m, td_tensor_t *x, td_tensor_t *y, td_tensor_t **loss)
{
    td_tensor_t *logits;
    td_status_t st = td_mlp_forward(m, x, &logits);

    if (st != TD_OK) {
        return st;
    }
    st = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, loss);
    td_tensor_release(logits);
    return st;
}

static int
inside(td_tensor_t *t, td_tensor_t *flat)
{
    char *p = td_tensor_data(t), *b = td_tensor_data(flat);

    return p >= b && p + td_tensor_nbytes(t) <= b + td_tensor_nbytes(flat);
}

int
main(void)
{
    int64_t sizes[3] = {6, 5, 3};
    td_mlp_t *m, *ref, *cp, *deep;
    td_tensor_t *x, *y, *loss, *flat, *fg;
    td_tensor_t *const *ps;
    int all_in = 1, grads_in = 1;
    double gsum = 0;

    plan(16);
    is_int(td_mlp_create(sizes, 3, TD_FLOAT64, 3, &m), TD_OK, "6-5-3 MLP");
    is_int(td_mlp_num_params(m), 4, "W0 b0 W1 b1");
    flat = td_mlp_flat_params(m);
    fg = td_mlp_flat_grads(m);
    is_int(td_tensor_numel(flat), 6 * 5 + 5 + 5 * 3 + 3, "one flat buffer of "
           "all parameters");
    ps = td_mlp_params(m);
    for (int i = 0; i < 4; i++) {
        all_in &= inside(ps[i], flat) && td_tensor_is_leaf(ps[i]) &&
                  td_tensor_requires_grad(ps[i]);
        grads_in &= inside(td_tensor_grad(ps[i]), fg);
    }
    ok(all_in, "parameters are leaves viewing the flat buffer");
    ok(grads_in, ".grad of each parameter views the flat gradient buffer");
    {
        /* torch.nn.Linear's bound: |W0| <= 1/sqrt(6) */
        double mx = 0;
        for (int64_t i = 0; i < 30; i++) {
            double v = fabs(((double *)td_tensor_data(ps[0]))[i]);
            mx = v > mx ? v : mx;
        }
        ok(mx <= 1 / sqrt(6.0) && mx > 0.2, "init within U(-1/sqrt(in), "
           "1/sqrt(in)) (max %.3f)", mx);
    }
    td_tensor_empty((int64_t[]){4, 6}, 2, TD_FLOAT64, TD_CPU, &x);
    td_tensor_normal_(x, 0, 1, 9);
    td_tensor_from_data((int64_t[]){0, 2, 1, 2}, (int64_t[]){4}, 1, TD_INT64, &y);
    loss_of(m, x, y, &loss);
    td_backward(&loss, NULL, 1, 0, 0);
    td_tensor_release(loss);
    for (int64_t i = 0; i < td_tensor_numel(fg); i++) {
        gsum += fabs(((double *)td_tensor_data(fg))[i]);
    }
    ok(gsum > 0, "backward accumulates into the flat gradient buffer");

    /* clone by reference: same tensors */
    td_mlp_clone(m, TD_CLONE_REFERENCE, &ref);
    ok(td_mlp_params(ref)[2] == ps[2], "reference clone shares parameters");

    /* deep copy: same values, own storage, independent */
    td_mlp_clone(m, TD_CLONE_DEEPCOPY, &deep);
    ok(td_tensor_data(td_mlp_params(deep)[0]) != td_tensor_data(ps[0]) &&
       memcmp(td_tensor_data(td_mlp_params(deep)[0]), td_tensor_data(ps[0]),
              240) == 0, "deep copy: equal values in new storage");
    td_tensor_fill_(ps[1], 0.5);
    ok(td_tensor_get(td_mlp_params(deep)[1], (int64_t[]){0}) != 0.5,
       "deep copy does not follow later writes");
    ok(td_tensor_is_leaf(td_mlp_params(deep)[0]), "deep copy params are leaves");

    /* copy: non-leaf params; the clone's gradient flows to the originals */
    td_optim_t *opt;
    td_sgd_opts_t so = {0.1, 0, 0, 0, 0};
    td_optim_sgd(ps, 4, &so, &opt);
    td_optim_zero_grad(opt);
    td_mlp_clone(m, TD_CLONE_COPY, &cp);
    ok(!td_tensor_is_leaf(td_mlp_params(cp)[0]), "copy clone: parameters are "
       "non-leaf (not detached)");
    loss_of(cp, x, y, &loss);
    td_backward(&loss, NULL, 1, 0, 0);
    td_tensor_release(loss);
    {
        /* compare with the gradient of the original module directly */
        td_tensor_t *g2[4];
        double e = 0;
        loss_of(m, x, y, &loss);
        td_grad(&loss, NULL, 1, ps, 4, 0, 0, 0, g2);
        for (int i = 0; i < 4; i++) {
            for (int64_t k = 0; k < td_tensor_numel(ps[i]); k++) {
                double a = ((double *)td_tensor_data(td_tensor_grad(ps[i])))[k];
                double b = ((double *)td_tensor_data(g2[i]))[k];
                e = fabs(a - b) > e ? fabs(a - b) : e;
            }
            td_tensor_release(g2[i]);
        }
        td_tensor_release(loss);
        ok(e < 1e-14, "copy clone's backward reached the originals' .grad "
           "(max diff %.2g)", e);
    }

    /* MetaSGD + set_params: a functional inner step lowers the loss */
    {
        td_tensor_t *np[4], *l0, *l1;
        double v0, v1;
        td_mlp_t *fast;
        td_mlp_clone(m, TD_CLONE_REFERENCE, &fast);
        loss_of(fast, x, y, &l0);
        is_int(td_meta_sgd_step(l0, td_mlp_params(fast), 4, 0.5, np), TD_OK,
               "meta_sgd_step");
        is_int(td_mlp_set_params(fast, np), TD_OK, "set_params with the "
               "updated (non-leaf) parameters");
        loss_of(fast, x, y, &l1);
        td_tensor_item(l0, &v0);
        td_tensor_item(l1, &v1);
        ok(v1 < v0 && td_tensor_requires_grad(l1), "inner step lowered the "
           "loss %.4f -> %.4f and stays differentiable", v0, v1);
        for (int i = 0; i < 4; i++) {
            td_tensor_release(np[i]);
        }
        td_tensor_release(l0);
        td_tensor_release(l1);
        td_mlp_free(fast);
    }
    td_optim_free(opt);
    td_mlp_free(cp);
    td_mlp_free(deep);
    td_mlp_free(ref);
    td_mlp_free(m);
    td_tensor_release(x);
    td_tensor_release(y);
    return exit_status();
}
