/* runtime/dist_autograd/dist_optim.c: the per-owner part of the
 * distributed optimizer: a local optimizer (runtime/tensor/optim.c, whose
 * updates are the kernel table's sgd_step / adam_step, so parameters may
 * live on any device with a kernel row) stepped with the gradients of a
 * distributed autograd context instead of .grad, one step at a time.
 *
 * Invariant (the lock): lock serializes td__optim_step_grads and the step
 * count; the gradients are fetched from the context before it is taken. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include <todist/dist_autograd.h>
#include <todist/dist_optim.h>
#include <todist/optim.h>

#include "runtime/tensor/optim_internal.h"

struct td_dist_optim {
    td_optim_t       *local;
    td_tensor_t     **params;    /* borrowed from local's retained ones */
    int               n;
    int64_t           steps;
    pthread_mutex_t   lock;
};

/* The checks td_optim_t leaves to its kernels: float32/float64 only. */
static td_status_t
check_params(td_tensor_t *const *ts, int n)
{
    if (n <= 0 || ts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: %d parameters", n);
    }
    for (int i = 0; i < n; i++) {
        td_dtype_t dt;

        if (ts[i] == NULL || !td_tensor_is_leaf(ts[i])) {
            return td_error(TD_ERR_INVALID, "dist_optim: parameter %d is "
                            "missing or not a leaf", i);
        }
        dt = td_tensor_dtype(ts[i]);
        if ((dt != TD_FLOAT32 && dt != TD_FLOAT64) ||
            !td_tensor_is_contiguous(ts[i])) {
            return td_error(TD_ERR_DTYPE, "dist_optim: parameter %d must be a "
                            "contiguous float32/float64 tensor (is %s)", i,
                            td_dtype_name(dt));
        }
    }
    return TD_OK;
}

static td_status_t
optim_wrap(td_optim_t *local, td_tensor_t *const *params, int n,
           td_dist_optim_t **optim_p)
{
    td_dist_optim_t *o = calloc(1, sizeof(*o));

    if (o == NULL ||
        (o->params = calloc((size_t)n, sizeof(*o->params))) == NULL) {
        free(o);
        td_optim_free(local);
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    for (int i = 0; i < n; i++) {
        o->params[i] = params[i];
    }
    o->local = local;
    o->n = n;
    pthread_mutex_init(&o->lock, NULL);
    *optim_p = o;
    return TD_OK;
}

td_status_t
td_dist_optim_sgd(td_tensor_t *const *params, int n, const td_sgd_opts_t *opts,
                  td_dist_optim_t **optim_p)
{
    td_optim_t *local;
    td_status_t status;

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: SGD without options");
    }
    status = check_params(params, n);
    if (status == TD_OK) {
        status = td_optim_sgd(params, n, opts, &local);
    }
    return status != TD_OK ? status : optim_wrap(local, params, n, optim_p);
}

static td_status_t
adam_create(td_status_t (*make)(td_tensor_t *const *, int,
                                const td_adam_opts_t *, td_optim_t **),
            td_tensor_t *const *params, int n, const td_adam_opts_t *opts,
            td_dist_optim_t **optim_p)
{
    td_optim_t *local;
    td_status_t status;

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: Adam without options "
                        "(start from td_adam_defaults())");
    }
    status = check_params(params, n);
    if (status == TD_OK) {
        status = make(params, n, opts, &local);
    }
    return status != TD_OK ? status : optim_wrap(local, params, n, optim_p);
}

td_status_t
td_dist_optim_adam(td_tensor_t *const *params, int n,
                   const td_adam_opts_t *opts, td_dist_optim_t **optim_p)
{
    return adam_create(td_optim_adam, params, n, opts, optim_p);
}

td_status_t
td_dist_optim_adamw(td_tensor_t *const *params, int n,
                    const td_adam_opts_t *opts, td_dist_optim_t **optim_p)
{
    return adam_create(td_optim_adamw, params, n, opts, optim_p);
}

void
td_dist_optim_destroy(td_dist_optim_t *o)
{
    if (o == NULL) {
        return;
    }
    td_optim_free(o->local);
    pthread_mutex_destroy(&o->lock);
    free(o->params);
    free(o);
}

int64_t
td_dist_optim_steps(const td_dist_optim_t *o)
{
    return o->steps;
}

td_status_t
td_dist_optim_step(td_dist_optim_t *o, int64_t ctx_id)
{
    td_tensor_t **grads;
    td_status_t status;

    grads = calloc((size_t)o->n, sizeof(*grads));
    if (grads == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    /* a parameter no gradient reached in the context is skipped (None) */
    for (int i = 0; i < o->n; i++) {
        if (td_dist_get_gradient(ctx_id, o->params[i], &grads[i]) != TD_OK) {
            grads[i] = NULL;
        }
    }
    td_error_clear();
    pthread_mutex_lock(&o->lock);
    status = td__optim_step_grads(o->local, grads);
    if (status == TD_OK) {
        o->steps++;
    }
    pthread_mutex_unlock(&o->lock);
    for (int i = 0; i < o->n; i++) {
        td_tensor_release(grads[i]);
    }
    free(grads);
    return status;
}
