/* runtime/tensor/nn.c: an MLP of Linear layers with parameters and gradients in
 * flat buffers. Each parameter is a leaf whose storage is a slice of the
 * flat parameter tensor, and whose .grad is a slice of the flat gradient
 * tensor (kept allocated, so accumulation is in place). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/autograd.h>
#include <todist/nn.h>
#include <todist/ops.h>

struct td_mlp {
    int           n_layers;
    int64_t       sizes[16];
    td_dtype_t    dtype;
    td_tensor_t  *params[32];
    td_tensor_t  *flat;        /* NULL when parameters are not ours */
    td_tensor_t  *flat_grad;
};

/* Views of FLAT (detached, so they are leaves) shaped like layer params. */
static td_status_t
slice_params(td_mlp_t *m, td_tensor_t *flat, td_tensor_t **out, int leaves)
{
    int64_t off = 0;
    td_status_t status;

    for (int l = 0; l < m->n_layers; l++) {
        int64_t shp[2][2] = {{m->sizes[l + 1], m->sizes[l]}, {m->sizes[l + 1], 0}};
        int64_t str[2][2] = {{m->sizes[l], 1}, {1, 0}};
        for (int k = 0; k < 2; k++) {
            td_tensor_t *v;
            status = td__tensor_new_view(flat, shp[k], str[k], k == 0 ? 2 : 1,
                                        flat->offset + off, &v);
            if (status != TD_OK) {
                return status;
            }
            if (leaves) {
                td_tensor_set_requires_grad(v, 1);
            }
            out[2 * l + k] = v;
            off += td_tensor_numel(v);
        }
    }
    return TD_OK;
}

static int64_t
count_params(const int64_t *sizes, int n_layers)
{
    int64_t total = 0;

    for (int l = 0; l < n_layers; l++) {
        total += sizes[l + 1] * sizes[l] + sizes[l + 1];
    }
    return total;
}

/* allocate flat + flat_grad and the parameter leaves over them */
static td_status_t
mlp_alloc(td_mlp_t *m)
{
    int64_t total = count_params(m->sizes, m->n_layers);
    td_tensor_t *gv[32];
    td_status_t status;

    status = td_tensor_zeros(&total, 1, m->dtype, &m->flat);
    if (status == TD_OK) {
        status = td_tensor_zeros(&total, 1, m->dtype, &m->flat_grad);
    }
    if (status == TD_OK) {
        status = slice_params(m, m->flat, m->params, 1);
    }
    if (status == TD_OK) {
        status = slice_params(m, m->flat_grad, gv, 0);
        if (status == TD_OK) {
            for (int i = 0; i < 2 * m->n_layers; i++) {
                td_tensor_set_grad(m->params[i], gv[i]);
                td_tensor_release(gv[i]);
            }
        }
    }
    return status;
}

td_status_t
td_mlp_create(const int64_t *sizes, int n_sizes, td_dtype_t dtype,
              uint64_t seed, td_mlp_t **out)
{
    td_mlp_t *m;
    td_status_t status;

    if (n_sizes < 2 || n_sizes > 16 || !td_dtype_is_float(dtype)) {
        return td_error(TD_ERR_INVALID, "mlp: %d sizes (need 2..16) of dtype "
                        "%s", n_sizes, td_dtype_name(dtype));
    }
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] <= 0) {
            return td_error(TD_ERR_INVALID, "mlp: sizes[%d]=%lld", i,
                            (long long)sizes[i]);
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "mlp: out of memory");
    }
    m->n_layers = n_sizes - 1;
    m->dtype = dtype;
    memcpy(m->sizes, sizes, (size_t)n_sizes * sizeof(int64_t));
    status = mlp_alloc(m);
    if (status != TD_OK) {
        td_mlp_free(m);
        return status;
    }
    /* torch.nn.Linear's init: W and b ~ U(-1/sqrt(in), 1/sqrt(in)) */
    for (int l = 0; l < m->n_layers; l++) {
        double bound = 1.0 / sqrt((double)sizes[l]);
        td_tensor_uniform_(m->params[2 * l], -bound, bound, seed * 1000 + 2 * (uint64_t)l);
        td_tensor_uniform_(m->params[2 * l + 1], -bound, bound,
                           seed * 1000 + 2 * (uint64_t)l + 1);
    }
    *out = m;
    return TD_OK;
}

td_status_t
td_mlp_forward(td_mlp_t *m, td_tensor_t *x, td_tensor_t **out)
{
    td_tensor_t *h = td_tensor_retain(x), *y, *r;
    td_status_t status;

    for (int l = 0; l < m->n_layers; l++) {
        status = td_linear(h, m->params[2 * l], m->params[2 * l + 1], &y);
        td_tensor_release(h);
        if (status != TD_OK) {
            return status;
        }
        if (l + 1 < m->n_layers) {
            status = td_relu(y, &r);
            td_tensor_release(y);
            if (status != TD_OK) {
                return status;
            }
            y = r;
        }
        h = y;
    }
    *out = h;
    return TD_OK;
}

int td_mlp_num_params(const td_mlp_t *m) { return 2 * m->n_layers; }
td_tensor_t *const *td_mlp_params(const td_mlp_t *m) { return m->params; }
td_tensor_t *td_mlp_flat_params(const td_mlp_t *m) { return m->flat; }
td_tensor_t *td_mlp_flat_grads(const td_mlp_t *m) { return m->flat_grad; }

td_status_t
td_mlp_set_params(td_mlp_t *m, td_tensor_t *const *params)
{
    for (int i = 0; i < 2 * m->n_layers; i++) {
        if (!td__shape_equal(params[i], m->params[i]) ||
            params[i]->dtype != m->dtype) {
            return td_error(TD_ERR_SHAPE, "mlp: parameter %d is %s, expected "
                            "%s", i, TD_SHAPE_STR(params[i]),
                            TD_SHAPE_STR(m->params[i]));
        }
    }
    for (int i = 0; i < 2 * m->n_layers; i++) {
        td_tensor_retain(params[i]);
        td_tensor_release(m->params[i]);
        m->params[i] = params[i];
    }
    td_tensor_release(m->flat);
    td_tensor_release(m->flat_grad);
    m->flat = m->flat_grad = NULL;
    return TD_OK;
}

td_status_t
td_mlp_clone(const td_mlp_t *m, td_clone_mode_t mode, td_mlp_t **out)
{
    td_mlp_t *c = calloc(1, sizeof(*c));
    td_status_t status = TD_OK;

    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "mlp: out of memory");
    }
    c->n_layers = m->n_layers;
    c->dtype = m->dtype;
    memcpy(c->sizes, m->sizes, sizeof(c->sizes));
    switch (mode) {
    case TD_CLONE_REFERENCE:
        for (int i = 0; i < 2 * m->n_layers; i++) {
            c->params[i] = td_tensor_retain(m->params[i]);
        }
        c->flat = td_tensor_retain(m->flat);
        c->flat_grad = td_tensor_retain(m->flat_grad);
        break;
    case TD_CLONE_COPY: {
        /* differentiable copies: gradients flow back to m's parameters */
        int was = td_grad_set_enabled(1);
        for (int i = 0; i < 2 * m->n_layers && status == TD_OK; i++) {
            status = td_tensor_clone(m->params[i], &c->params[i]);
        }
        td_grad_set_enabled(was);
        break;
    }
    case TD_CLONE_DEEPCOPY:
        status = mlp_alloc(c);
        for (int i = 0; i < 2 * m->n_layers && status == TD_OK; i++) {
            status = td_tensor_copy_(c->params[i], m->params[i]);
        }
        break;
    default:
        status = td_error(TD_ERR_INVALID, "mlp: clone mode %d", mode);
    }
    if (status != TD_OK) {
        td_mlp_free(c);
        return status;
    }
    *out = c;
    return TD_OK;
}

void
td_mlp_free(td_mlp_t *m)
{
    if (m == NULL) {
        return;
    }
    for (int i = 0; i < 2 * m->n_layers; i++) {
        td_tensor_release(m->params[i]);
    }
    td_tensor_release(m->flat);
    td_tensor_release(m->flat_grad);
    free(m);
}
