/* test_pipe_split.c: zero bubble's split backward (runtime/pipe/split.c)
 * and the engine's td__autograd_output_needed it relies on.
 *  - A node's backward sees which of its gradients the pass needs: both in
 *    a plain backward, only the requested input's in td_grad mode.
 *  - On a stage of linear layers (tanh between), the input pass gives the
 *    input gradient of a whole backward and leaves .grad alone; the weight
 *    pass then gives every parameter the whole backward's gradient.
 *  - A weight used by two layers (tied) fails the weight pass with the
 *    engine's "second time" error instead of a wrong gradient. */
#include "config.h"

#include <math.h>

#include "runtime/pipe/pipe_internal.h"
#include "runtime/tensor/tensor_internal.h"
#include "tests/tap.h"
#include <todist/todist.h>

static int seen[2];

/* y = a + b, recording what the pass asks of it */
static td_status_t
probe_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    for (int i = 0; i < 2; i++) {
        seen[i] = td__autograd_output_needed(node, i);
        gout[i] = seen[i] ? td_tensor_retain(gin[0]) : NULL;
    }
    return TD_OK;
}

static const td_node_ops_t probe_ops = {"ProbeBackward", probe_backward, NULL,
                                        NULL};

static double
diff(td_tensor_t *a, td_tensor_t *b)
{
    double d = 0;

    if (a == NULL || b == NULL) {
        return INFINITY;
    }
    for (int64_t i = 0; i < td_tensor_numel(a); i++) {
        double e = fabs(((double *)td_tensor_data(a))[i] -
                        ((double *)td_tensor_data(b))[i]);
        d = e > d ? e : d;
    }
    return d;
}

static td_tensor_t *
rand_t(int64_t r, int64_t c, uint64_t seed, int grad)
{
    int64_t s[2] = {r, c};
    td_tensor_t *t;

    td_tensor_empty(s, c ? 2 : 1, TD_FLOAT64, TD_CPU, &t);
    td_tensor_uniform_(t, -1, 1, seed);
    td_tensor_set_requires_grad(t, grad);
    return t;
}

/* 3 linear layers, tanh between; W[1] is W[0] when TIED */
static td_tensor_t *
stage(td_tensor_t *x, td_tensor_t **w, td_tensor_t **b, int tied)
{
    td_tensor_t *h = td_tensor_retain(x), *n;

    for (int l = 0; l < 3; l++) {
        td_linear(h, tied && l == 1 ? w[0] : w[l], b[l], &n);
        td_tensor_release(h);
        h = n;
        if (l < 2) {
            td_tanh(h, &n);
            td_tensor_release(h);
            h = n;
        }
    }
    return h;
}

int
main(void)
{
    td_tensor_t *a = rand_t(3, 0, 1, 1), *b = rand_t(3, 0, 2, 1), *y, *g;
    td_tensor_t *w[3], *bs[3], *params[6], *x, *dy, *out, *dx_ref = NULL;
    td_tensor_t *dx = NULL, *gref[6];
    td_edge_t next[2];
    td_node_t *node;
    pipe_split_t sp;
    double d = 0;
    int untouched = 1;

    plan(8);
    /* the probe node: y = a + b */
    next[0] = td_tensor_gradient_edge(a);
    next[1] = td_tensor_gradient_edge(b);
    td_node_create(&probe_ops, NULL, 1, next, 2, &node);
    y = rand_t(3, 0, 3, 0);
    td_tensor_set_grad_fn(y, node, 0);
    td_node_release(node);
    g = rand_t(3, 0, 4, 0);
    td_autograd_run(&(td_backward_opts_t){.roots = &y, .root_grads = &g,
                                          .n_roots = 1, .retain_graph = 1});
    ok(seen[0] == 1 && seen[1] == 1, "a plain backward needs both gradients "
       "(saw %d %d)", seen[0], seen[1]);
    td_tensor_t *ga = NULL;
    td_grad(&y, &g, 1, &a, 1, 1, 0, 0, &ga);
    ok(seen[0] == 1 && seen[1] == 0, "td_grad towards a needs only a's (saw "
       "%d %d)", seen[0], seen[1]);
    td_tensor_release(ga);

    /* the split on a stage of linear layers */
    for (int l = 0; l < 3; l++) {
        w[l] = rand_t(4, 4, 10 + l, 1);
        bs[l] = rand_t(4, 0, 20 + l, 1);
        params[2 * l] = w[l];
        params[2 * l + 1] = bs[l];
    }
    x = rand_t(5, 4, 30, 1);
    dy = rand_t(5, 4, 31, 0);
    out = stage(x, w, bs, 0);
    td_backward(&out, &dy, 1, 0, 0);
    td_tensor_release(out);
    dx_ref = td_tensor_retain(td_tensor_grad(x));
    for (int i = 0; i < 6; i++) {
        gref[i] = td_tensor_retain(td_tensor_grad(params[i]));
        td_tensor_set_grad(params[i], NULL);
    }
    td_tensor_set_grad(x, NULL);
    out = stage(x, w, bs, 0);
    is_int(pipe_split_input(&sp, out, dy, x, params, 6, &dx), TD_OK,
           "input pass");
    for (int i = 0; i < 6; i++) {
        untouched &= td_tensor_grad(params[i]) == NULL;
    }
    ok(diff(dx, dx_ref) <= 1e-15 && untouched, "the input pass gives the "
       "input gradient (diff %g) and leaves .grad alone (%d)",
       diff(dx, dx_ref), untouched);
    is_int(pipe_split_weight(&sp, params), TD_OK, "weight pass");
    for (int i = 0; i < 6; i++) {
        double e = diff(td_tensor_grad(params[i]), gref[i]);
        d = e > d ? e : d;
    }
    ok(d <= 1e-15, "the weight pass gives every parameter the whole "
       "backward's gradient (max diff %g)", d);
    td_tensor_release(out);
    td_tensor_release(dx);
    dx = NULL;

    /* tied: W0 in layers 0 and 1 */
    out = stage(x, w, bs, 1);
    pipe_split_input(&sp, out, dy, x, params, 6, &dx);
    is_int(pipe_split_weight(&sp, params), TD_ERR_STATE,
           "a tied weight fails the weight pass");
    like(td_last_error(), "second time", "naming the engine's reason: %s",
         td_last_error());
    td_tensor_release(out);
    td_tensor_release(dx);
    for (int i = 0; i < 6; i++) {
        td_tensor_release(params[i]);
        td_tensor_release(gref[i]);
    }
    td_tensor_release(dx_ref);
    td_tensor_release(x);
    td_tensor_release(dy);
    td_tensor_release(y);
    td_tensor_release(g);
    td_tensor_release(a);
    td_tensor_release(b);
    return exit_status();
}
