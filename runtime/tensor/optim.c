/* runtime/tensor/optim.c: SGD, Adam, AdamW (PyTorch 1.13 single-tensor rules,
 * arithmetic in the parameter's dtype like torch) and MetaSGD. State
 * (momentum buffers, exp_avg, exp_avg_sq, max_exp_avg_sq) lives in flat
 * buffers indexed by each parameter's offset; the updates themselves are
 * the device's sgd_step / adam_step kernels. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/autograd.h>
#include <todist/ops.h>
#include <todist/optim.h>

enum { OPT_SGD, OPT_ADAM, OPT_ADAMW };

struct td_optim {
    int            kind;
    int            n;
    td_tensor_t  **params;
    int64_t       *offset;      /* into the flat state buffers */
    int64_t        total;
    td_sgd_opts_t  sgd;
    td_adam_opts_t adam;
    double        *buf[3];      /* momentum | exp_avg, exp_avg_sq, max */
    int64_t        step;
    int            has_buf;     /* momentum buffer initialised */
};

td_adam_opts_t
td_adam_defaults(void)
{
    return (td_adam_opts_t){1e-3, 0.9, 0.999, 1e-8, 0.0, 0};
}

td_adam_opts_t
td_adamw_defaults(void)
{
    return (td_adam_opts_t){1e-3, 0.9, 0.999, 1e-8, 1e-2, 0};
}

static td_status_t
optim_new(int kind, td_tensor_t *const *params, int n, int nbuf,
          td_optim_t **out)
{
    td_optim_t *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "optim: out of memory");
    }
    o->kind = kind;
    o->n = n;
    o->params = calloc((size_t)n + 1, sizeof(*o->params));
    o->offset = calloc((size_t)n + 1, sizeof(*o->offset));
    if (o->params == NULL || o->offset == NULL) {
        goto nomem;
    }
    for (int i = 0; i < n; i++) {
        if (!td_dtype_is_float(params[i]->dtype) ||
            !td_tensor_is_contiguous(params[i]) || !td_tensor_is_leaf(params[i])) {
            td_optim_free(o);
            return td_error(TD_ERR_INVALID, "optim: parameter %d (%s %s) must "
                            "be a contiguous floating leaf", i,
                            td_dtype_name(params[i]->dtype),
                            TD_SHAPE_STR(params[i]));
        }
        o->params[i] = td_tensor_retain(params[i]);
        o->offset[i] = o->total;
        o->total += td_tensor_numel(params[i]);
    }
    /* state is stored as double, but every value stored was computed in
     * the parameter's dtype, so float32 runs match torch's float32 buffers */
    for (int b = 0; b < nbuf; b++) {
        o->buf[b] = calloc((size_t)(o->total > 0 ? o->total : 1), sizeof(double));
        if (o->buf[b] == NULL) {
            goto nomem;
        }
    }
    *out = o;
    return TD_OK;
nomem:
    td_optim_free(o);
    return td_error(TD_ERR_NO_MEMORY, "optim: out of memory");
}

td_status_t
td_optim_sgd(td_tensor_t *const *params, int n, const td_sgd_opts_t *opts,
             td_optim_t **out)
{
    td_optim_t *o;
    td_status_t status;

    if (opts->lr < 0 || opts->momentum < 0 || opts->weight_decay < 0 ||
        (opts->nesterov && (opts->momentum <= 0 || opts->dampening != 0))) {
        return td_error(TD_ERR_INVALID, "sgd: lr=%g momentum=%g "
                        "weight_decay=%g nesterov=%d (nesterov needs momentum "
                        "> 0 and dampening 0)", opts->lr, opts->momentum,
                        opts->weight_decay, opts->nesterov);
    }
    status = optim_new(OPT_SGD, params, n, opts->momentum != 0 ? 1 : 0, &o);
    if (status != TD_OK) {
        return status;
    }
    o->sgd = *opts;
    *out = o;
    return TD_OK;
}

static td_status_t
adam_new(int kind, td_tensor_t *const *params, int n,
         const td_adam_opts_t *opts, td_optim_t **out)
{
    td_optim_t *o;
    td_status_t status;

    if (opts->lr < 0 || opts->eps < 0 || opts->beta1 < 0 || opts->beta1 >= 1 ||
        opts->beta2 < 0 || opts->beta2 >= 1 || opts->weight_decay < 0) {
        return td_error(TD_ERR_INVALID, "adam: lr=%g betas=(%g, %g) eps=%g "
                        "weight_decay=%g out of range", opts->lr, opts->beta1,
                        opts->beta2, opts->eps, opts->weight_decay);
    }
    status = optim_new(kind, params, n, opts->amsgrad ? 3 : 2, &o);
    if (status != TD_OK) {
        return status;
    }
    o->adam = *opts;
    *out = o;
    return TD_OK;
}

td_status_t
td_optim_adam(td_tensor_t *const *params, int n, const td_adam_opts_t *opts,
              td_optim_t **out)
{
    return adam_new(OPT_ADAM, params, n, opts, out);
}

td_status_t
td_optim_adamw(td_tensor_t *const *params, int n, const td_adam_opts_t *opts,
               td_optim_t **out)
{
    return adam_new(OPT_ADAMW, params, n, opts, out);
}

td_status_t
td_optim_step(td_optim_t *o)
{
    int first = !o->has_buf;
    double bc1 = 0, bc2 = 0;

    /* A gradient a collective is still writing (DDP's bucket before
     * td_ddp_wait) must not be read: refuse before touching anything. */
    for (int k = 0; k < o->n; k++) {
        td_tensor_t *g = td_tensor_grad(o->params[k]);
        if (g != NULL && atomic_load(&g->storage->pending)) {
            return td_error(TD_ERR_STATE, "optim: parameter %d's gradient is "
                            "still being reduced by DistributedDataParallel; "
                            "call td_ddp_wait before td_optim_step", k);
        }
    }
    o->step++;
    if (o->kind != OPT_SGD) {
        bc1 = 1 - pow(o->adam.beta1, (double)o->step);
        bc2 = 1 - pow(o->adam.beta2, (double)o->step);
    }
    for (int k = 0; k < o->n; k++) {
        td_tensor_t *prm = o->params[k], *grad = td_tensor_grad(prm), *gc;
        const td_kernels_t *kern = td_kernels_get(prm->device);
        int64_t off = o->offset[k], n = td_tensor_numel(prm);
        td_status_t status;

        if (grad == NULL) {
            continue;
        }
        if (grad->dtype != prm->dtype || !td_shape_equal(grad, prm)) {
            return td_error(TD_ERR_SHAPE, "optim: parameter %d is %s %s but "
                            "its grad is %s %s", k, td_dtype_name(prm->dtype),
                            TD_SHAPE_STR(prm), td_dtype_name(grad->dtype),
                            TD_SHAPE_STR(grad));
        }
        status = td_tensor_contiguous(grad, &gc);
        if (status != TD_OK) {
            return status;
        }
        grad = gc;
        if (o->kind == OPT_SGD) {
            const td_sgd_opts_t *s = &o->sgd;
            td_sgd_args_t args = {s->lr, s->momentum, s->dampening,
                                  s->weight_decay, s->nesterov, first};
            kern->sgd_step(prm->dtype, td_tensor_data(prm),
                           td_tensor_data(grad),
                           o->buf[0] ? o->buf[0] + off : NULL, n, &args);
        } else {
            const td_adam_opts_t *a = &o->adam;
            td_adam_args_t args = {a->lr, a->beta1, a->beta2, a->eps,
                                   a->weight_decay, bc1, bc2,
                                   o->kind == OPT_ADAMW};
            kern->adam_step(prm->dtype, td_tensor_data(prm),
                            td_tensor_data(grad), o->buf[0] + off,
                            o->buf[1] + off,
                            o->buf[2] ? o->buf[2] + off : NULL, n, &args);
        }
        td_tensor_release(gc);
        td_tensor_bump_version(prm);
    }
    o->has_buf = 1;
    return TD_OK;
}

td_status_t
td_optim_zero_grad(td_optim_t *o)
{
    for (int k = 0; k < o->n; k++) {
        td_tensor_t *g = td_tensor_grad(o->params[k]);
        if (g != NULL) {
            td_tensor_zero_(g);
        }
    }
    return TD_OK;
}

void
td_optim_set_lr(td_optim_t *o, double lr)
{
    o->sgd.lr = lr;
    o->adam.lr = lr;
}

void
td_optim_free(td_optim_t *o)
{
    if (o == NULL) {
        return;
    }
    for (int i = 0; i < o->n && o->params != NULL; i++) {
        td_tensor_release(o->params[i]);
    }
    free(o->params);
    free(o->offset);
    for (int b = 0; b < 3; b++) {
        free(o->buf[b]);
    }
    free(o);
}

td_status_t
td_meta_sgd_step(td_tensor_t *loss, td_tensor_t *const *params, int n,
                 double lr, td_tensor_t **new_params)
{
    td_tensor_t **grads = calloc((size_t)n, sizeof(*grads)), *scaled;
    td_status_t status;
    int i, was;

    if (grads == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "meta_sgd: out of memory");
    }
    /* create_graph: the update stays differentiable w.r.t. params */
    status = td_grad(&loss, NULL, 1, params, n, 1, 1, 1, grads);
    if (status != TD_OK) {
        free(grads);
        return status;
    }
    was = td_grad_set_enabled(1);
    for (i = 0; i < n; i++) {
        if (grads[i] == NULL) {
            new_params[i] = td_tensor_retain(params[i]);
            continue;
        }
        status = td_mul_scalar(grads[i], lr, &scaled);
        if (status == TD_OK) {
            status = td_sub(params[i], scaled, &new_params[i]);
            td_tensor_release(scaled);
        }
        if (status != TD_OK) {
            break;
        }
    }
    td_grad_set_enabled(was);
    if (status != TD_OK) {
        for (int j = 0; j < i; j++) {
            td_tensor_release(new_params[j]);
        }
    }
    for (int j = 0; j < n; j++) {
        td_tensor_release(grads[j]);
    }
    free(grads);
    return status;
}
