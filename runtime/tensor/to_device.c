/* runtime/tensor/to_device.c: td_tensor_to (moving a tensor between
 * devices, differentiably) and td_device_count (todist/device.h;
 * td_device_str is tensor.c's). Copies go through kernels/device.h, so this file has
 * no CUDA in it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/tensor/tensor_internal.h"
#include "kernels/device.h"
#include "todist/device.h"

td_status_t
td_device_count(td_device_type_t type, int *n_p)
{
    return td__device_count_of(type, n_p);
}

/* A contiguous copy of T on its own device, no autograd. */
static td_status_t
contiguous_on_device(td_tensor_t *t, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status;

    if (td_tensor_is_contiguous(t)) {
        *out = td_tensor_retain(t);
        return TD_OK;
    }
    status = td_tensor_empty(t->shape, t->ndim, t->dtype, t->device, &c);
    if (status != TD_OK) {
        return status;
    }
    td__kernels_get(t->device)->copy(t->dtype,
                                    (td_operand_t){td_tensor_data(c), c->strides},
                                    t->dtype,
                                    (td_operand_t){td_tensor_data(t), t->strides},
                                    t->shape, t->ndim);
    *out = c;
    return TD_OK;
}

/* The values of T on DEVICE, no autograd. */
static td_status_t
move_raw(td_tensor_t *t, td_device_t device, td_tensor_t **out)
{
    td_tensor_t *src = NULL, *dst = NULL;
    td_status_t status;

    status = contiguous_on_device(t, &src);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(t->shape, t->ndim, t->dtype, device, &dst);
    if (status == TD_OK) {
        status = td__device_memcpy(td_tensor_data(dst), device,
                                  td_tensor_data(src), t->device,
                                  td_tensor_nbytes(t));
    }
    td_tensor_release(src);
    if (status != TD_OK) {
        td_tensor_release(dst);
        return status;
    }
    *out = dst;
    return TD_OK;
}

typedef struct {
    td_device_t from;
} to_state_t;

/* d to(x, dev) / dx: the gradient, moved back to x's device. */
static td_status_t
to_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    to_state_t *st = td_node_state(node);

    gout[0] = NULL;
    if (gin[0] == NULL) {
        return TD_OK;
    }
    return td_tensor_to(gin[0], st->from, &gout[0]);
}

static const td_node_ops_t to_ops = {"ToCopyBackward", to_backward, NULL,
                                     free};

td_status_t
td_tensor_to(td_tensor_t *t, td_device_t device, td_tensor_t **out)
{
    td_tensor_t *c;
    to_state_t *st;
    td_status_t status;

    if (td__device_same(t->device, device)) {
        *out = td_tensor_retain(t);
        return TD_OK;
    }
    status = move_raw(t, device, &c);
    if (status != TD_OK) {
        return status;
    }
    if (td_grad_enabled() && td__any_requires_grad(&t, 1)) {
        st = malloc(sizeof(*st));
        if (st == NULL) {
            td_tensor_release(c);
            return td_error(TD_ERR_NO_MEMORY, "to: out of memory");
        }
        st->from = t->device;
        status = td__autograd_record(&to_ops, st, &t, 1, c);
        if (status != TD_OK) {
            td_tensor_release(c);
            return status;
        }
    }
    *out = c;
    return TD_OK;
}
