/* runtime/tensor/optim.c: SGD, Adam, AdamW (PyTorch 1.13 single-tensor rules,
 * arithmetic in the parameter's dtype like torch) and MetaSGD. Each
 * parameter has its own state, as torch's optimizers keep it: its step
 * count and its buffers (momentum | exp_avg, exp_avg_sq, max_exp_avg_sq),
 * float64 tensors on the parameter's device made at its first update, so
 * a parameter without a gradient at some steps is updated as torch would.
 * The updates themselves are the device's sgd_step / adam_step kernels.
 * td__optim_step_grads takes the gradients from its caller (the
 * distributed optimizer's come from an autograd context, not .grad). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/optim_internal.h"
#include "runtime/tensor/tensor_internal.h"
#include <todist/autograd.h>
#include <todist/device.h>
#include <todist/ops.h>
#include <todist/optim.h>

enum { OPT_SGD, OPT_ADAM, OPT_ADAMW };

typedef struct {
    td_tensor_t *param;
    td_tensor_t *state[3];      /* NULL until the first update */
    int64_t      step;          /* updates this parameter received */
} slot_t;

struct td_optim {
    int            kind;
    int            n;
    slot_t        *slots;
    int            nbuf;        /* state buffers per parameter */
    td_sgd_opts_t  sgd;
    td_adam_opts_t adam;
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
    td_optim_t *o;

    if (n < 0 || (n > 0 && params == NULL)) {
        return td_error(TD_ERR_INVALID, "optim: %d parameters", n);
    }
    for (int i = 0; i < n; i++) {
        if (params[i] == NULL || !td_dtype_is_float(params[i]->dtype) ||
            !td_tensor_is_contiguous(params[i]) ||
            !td_tensor_is_leaf(params[i])) {
            return td_error(TD_ERR_INVALID, "optim: parameter %d (%s %s) must "
                            "be a contiguous floating leaf", i,
                            params[i] ? td_dtype_name(params[i]->dtype) : "-",
                            params[i] ? TD_SHAPE_STR(params[i]) : "NULL");
        }
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL ||
        (o->slots = calloc((size_t)n + 1, sizeof(*o->slots))) == NULL) {
        free(o);
        return td_error(TD_ERR_NO_MEMORY, "optim: out of memory");
    }
    o->kind = kind;
    o->n = n;
    o->nbuf = nbuf;
    for (int i = 0; i < n; i++) {
        o->slots[i].param = td_tensor_retain(params[i]);
    }
    *out = o;
    return TD_OK;
}

td_status_t
td_optim_sgd(td_tensor_t *const *params, int n, const td_sgd_opts_t *opts,
             td_optim_t **out)
{
    td_optim_t *o;
    td_status_t status;

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "sgd: no options");
    }
    if (!(opts->lr >= 0) || !(opts->momentum >= 0) ||
        !(opts->weight_decay >= 0) ||
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

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "adam: no options (start from "
                        "td_adam_defaults())");
    }
    if (!(opts->lr >= 0) || !(opts->eps >= 0) || !(opts->beta1 >= 0) ||
        !(opts->beta1 < 1) || !(opts->beta2 >= 0) || !(opts->beta2 < 1) ||
        !(opts->weight_decay >= 0)) {
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

/* The state buffers of slot S, zeroed float64 like its parameter on the
 * parameter's device, made once. */
static td_status_t
slot_state(const td_optim_t *o, slot_t *s)
{
    for (int b = 0; b < o->nbuf; b++) {
        td_tensor_t *t = NULL;
        td_status_t status;

        if (s->state[b] != NULL) {
            continue;
        }
        status = td_tensor_empty(s->param->shape, s->param->ndim, TD_FLOAT64,
                                 s->param->device, &t);
        if (status == TD_OK) {
            status = td_tensor_zero_(t);
        }
        if (status != TD_OK) {
            td_tensor_release(t);
            return status;
        }
        s->state[b] = t;
    }
    return TD_OK;
}

static double *
state_data(const slot_t *s, int b)
{
    return s->state[b] != NULL ? td_tensor_data(s->state[b]) : NULL;
}

/* One update of slot S from its gradient G (contiguous, checked). */
static void
slot_update(const td_optim_t *o, slot_t *s, td_tensor_t *g)
{
    const td_kernels_t *kern = td__kernels_get(s->param->device);
    td_tensor_t *prm = s->param;
    int64_t n = td_tensor_numel(prm);

    if (o->kind == OPT_SGD) {
        const td_sgd_opts_t *a = &o->sgd;
        td_sgd_args_t args = {a->lr, a->momentum, a->dampening,
                              a->weight_decay, a->nesterov, s->step == 0};

        kern->sgd_step(prm->dtype, td_tensor_data(prm), td_tensor_data(g),
                       state_data(s, 0), n, &args);
        s->step++;
    } else {
        const td_adam_opts_t *a = &o->adam;
        double t = (double)++s->step;   /* bias correction uses t >= 1 */
        td_adam_args_t args = {a->lr, a->beta1, a->beta2, a->eps,
                               a->weight_decay, 1 - pow(a->beta1, t),
                               1 - pow(a->beta2, t), o->kind == OPT_ADAMW};

        kern->adam_step(prm->dtype, td_tensor_data(prm), td_tensor_data(g),
                        state_data(s, 0), state_data(s, 1), state_data(s, 2),
                        n, &args);
    }
    td_tensor_bump_version(prm);
}

td_status_t
td__optim_step_grads(td_optim_t *o, td_tensor_t *const *grads)
{
    td_tensor_t **gc;
    td_status_t status = TD_OK;
    int k;

    gc = calloc((size_t)o->n + 1, sizeof(*gc));
    if (gc == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "optim: out of memory");
    }
    /* Check every gradient and make every buffer first: a bad one leaves
     * all parameters as they were. A gradient a collective is still
     * writing (DDP's bucket before td_ddp_wait) must not be read. */
    for (k = 0; k < o->n && status == TD_OK; k++) {
        slot_t *s = &o->slots[k];
        td_tensor_t *prm = s->param, *g = grads[k];

        if (g == NULL) {
            continue;
        }
        if (atomic_load(&g->storage->pending)) {
            status = td_error(TD_ERR_STATE, "optim: parameter %d's gradient "
                              "is still being reduced by "
                              "DistributedDataParallel; call td_ddp_wait "
                              "before td_optim_step", k);
        } else if (g->dtype != prm->dtype || !td__shape_equal(g, prm) ||
                   !td__device_same(g->device, prm->device)) {
            char dg[16], dp[16];

            td_device_str(g->device, dg, sizeof(dg));
            td_device_str(prm->device, dp, sizeof(dp));
            status = td_error(TD_ERR_SHAPE, "optim: parameter %d is %s %s on "
                              "%s but its gradient is %s %s on %s", k,
                              td_dtype_name(prm->dtype), TD_SHAPE_STR(prm),
                              dp, td_dtype_name(g->dtype), TD_SHAPE_STR(g),
                              dg);
        } else {
            status = td_tensor_contiguous(g, &gc[k]);
        }
        if (status == TD_OK) {
            status = slot_state(o, s);
        }
    }
    for (k = 0; k < o->n && status == TD_OK; k++) {
        if (gc[k] != NULL) {
            slot_update(o, &o->slots[k], gc[k]);
        }
    }
    for (k = 0; k < o->n; k++) {
        td_tensor_release(gc[k]);
    }
    free(gc);
    return status;
}

td_status_t
td_optim_step(td_optim_t *o)
{
    td_tensor_t **grads;
    td_status_t status;

    grads = calloc((size_t)o->n + 1, sizeof(*grads));
    if (grads == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "optim: out of memory");
    }
    for (int k = 0; k < o->n; k++) {
        grads[k] = td_tensor_grad(o->slots[k].param);   /* borrowed */
    }
    status = td__optim_step_grads(o, grads);
    free(grads);
    return status;
}

td_status_t
td_optim_zero_grad(td_optim_t *o)
{
    for (int k = 0; k < o->n; k++) {
        td_tensor_t *g = td_tensor_grad(o->slots[k].param);
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

double
td_optim_lr(const td_optim_t *o)
{
    return o->kind == OPT_SGD ? o->sgd.lr : o->adam.lr;
}

int
td_optim_num_params(const td_optim_t *o)
{
    return o->n;
}

int
td_optim_num_buffers(const td_optim_t *o)
{
    return o->nbuf;
}

int64_t
td_optim_param_step(const td_optim_t *o, int i)
{
    return i >= 0 && i < o->n ? o->slots[i].step : -1;
}

td_status_t
td_optim_set_param_step(td_optim_t *o, int i, int64_t step)
{
    if (i < 0 || i >= o->n || step < 0) {
        return td_error(TD_ERR_INVALID, "optim: step %lld for parameter %d "
                        "of %d", (long long)step, i, o->n);
    }
    o->slots[i].step = step;
    return TD_OK;
}

td_status_t
td_optim_buffer(td_optim_t *o, int i, int b, td_tensor_t **out)
{
    td_status_t status;

    if (i < 0 || i >= o->n || b < 0 || b >= o->nbuf) {
        return td_error(TD_ERR_INVALID, "optim: buffer %d of parameter %d "
                        "(%d parameters, %d buffers each)", b, i, o->n,
                        o->nbuf);
    }
    status = slot_state(o, &o->slots[i]);
    if (status != TD_OK) {
        return status;
    }
    *out = o->slots[i].state[b];
    return TD_OK;
}

void
td_optim_free(td_optim_t *o)
{
    if (o == NULL) {
        return;
    }
    for (int i = 0; i < o->n; i++) {
        td_tensor_release(o->slots[i].param);
        for (int b = 0; b < 3; b++) {
            td_tensor_release(o->slots[i].state[b]);
        }
    }
    free(o->slots);
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
