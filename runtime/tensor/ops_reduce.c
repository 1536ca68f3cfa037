/* runtime/tensor/ops_reduce.c: the reductions (sum, mean, over all or
 * some dims, sum_to a broadcast shape), expand (a view whose backward is a
 * sum, so it lives here and tensor.c calls no op) and max along a dim, each
 * forward followed by its backward. Sums go through the device's sum_mid
 * kernel one reduced dim at a time. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/ops_internal.h"
#include <todist/ops.h>

/* ---- sums ------------------------------------------------------------- */

/* Sum over the dims set in MASK of contiguous A, keeping them as size 1. */
static td_status_t
sum_mask_raw(td_tensor_t *a, uint32_t mask, td_tensor_t **out_p)
{
    td_tensor_t *cur, *next;
    int64_t shape[TD_MAX_DIMS];
    td_status_t status = td_tensor_contiguous(a, &cur);

    if (status != TD_OK) {
        return status;
    }
    /* detach so the raw reduction records nothing */
    status = td_tensor_detach(cur, &next);
    td_tensor_release(cur);
    if (status != TD_OK) {
        return status;
    }
    cur = next;
    for (int d = a->ndim - 1; d >= 0; d--) {
        int64_t outer = 1, inner = 1;
        if (!(mask & (1u << d)) || cur->shape[d] == 1) {
            continue;
        }
        for (int k = 0; k < d; k++) {
            outer *= cur->shape[k];
        }
        for (int k = d + 1; k < cur->ndim; k++) {
            inner *= cur->shape[k];
        }
        memcpy(shape, cur->shape, sizeof(shape));
        shape[d] = 1;
        status = td_tensor_empty(shape, cur->ndim, cur->dtype, cur->device, &next);
        if (status != TD_OK) {
            td_tensor_release(cur);
            return status;
        }
        if (outer * inner > 0) {
            td__kernels_get(cur->device)->sum_mid(cur->dtype, td_tensor_data(next),
                                                 td_tensor_data(cur), outer,
                                                 cur->shape[d], inner);
        }
        if (cur->shape[d] == 0) {
            td_tensor_zero_(next);
        }
        td_tensor_release(cur);
        cur = next;
    }
    *out_p = cur;
    return TD_OK;
}

static td_status_t expand_impl(td_tensor_t *t, const int64_t *shape,
                               int ndim, double scale, td_tensor_t **out);

/* d sum = g broadcast back over the reduced dims, times the scale (mean):
 * one scaled expand, whose own backward is the scaled sum again */
static td_status_t
sum_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    int64_t kshape[TD_MAX_DIMS];
    td_tensor_t *t1 = NULL;
    td_status_t status;

    for (int d = 0; d < st->ndim_a; d++) {
        kshape[d] = (st->mask & (1u << d)) ? 1 : st->shape_a[d];
    }
    TD_OP_TRY(td_tensor_reshape(gin[0], kshape, st->ndim_a, &t1));
    TD_OP_TRY(expand_impl(t1, st->shape_a, st->ndim_a, st->c, &gout[0]));
out:
    td_tensor_release(t1);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t sum_ops = TD_OP_NODE("SumBackward", sum_backward);

static td_status_t
sum_impl(td_tensor_t *a, uint32_t mask, int keepdim, double scale,
         td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS];
    td_tensor_t *r, *out;
    td_op_state_t *st = NULL;
    int nd = 0;
    td_status_t status = td__op_check_float("sum", a);

    if (status == TD_OK) {
        status = sum_mask_raw(a, mask, &r);
    }
    if (status != TD_OK) {
        return status;
    }
    if (scale != 1.0 && r->storage == a->storage) {
        /* nothing was reduced: scale a copy, never A itself */
        td_tensor_t *c;

        status = td__tensor_copy_raw(r, r->dtype, &c);
        td_tensor_release(r);
        if (status != TD_OK) {
            return status;
        }
        r = c;
    }
    if (scale != 1.0) {
        td__kernels_get(r->device)->unary(TD_UN_MUL_SCALAR, r->dtype,
                                         td_tensor_data(r),
                                         (td_operand_t){td_tensor_data(r), r->strides},
                                         scale, r->shape, r->ndim);
    }
    for (int d = 0; d < a->ndim; d++) {
        if (keepdim || !(mask & (1u << d))) {
            shape[nd++] = keepdim && (mask & (1u << d)) ? 1 : a->shape[d];
        }
    }
    status = td_tensor_view(r, shape, nd, &out);
    td_tensor_release(r);
    if (status != TD_OK) {
        return status;
    }
    if (td__op_needs_state(&a, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "sum: out of memory");
        }
        st->mask = mask;
        st->c = scale;
        st->ndim_a = a->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
    }
    return td__op_finish(&sum_ops, st, &a, 1, out, out_p);
}

static td_status_t
dims_mask(const char *op, td_tensor_t *a, const int *dims, int n,
          uint32_t *mask_p, double *count_p)
{
    uint32_t mask = 0;
    double count = 1;

    for (int i = 0; i < n; i++) {
        int d = dims[i] < 0 ? dims[i] + a->ndim : dims[i];
        if (d < 0 || d >= a->ndim || (mask & (1u << d))) {
            return td_error(TD_ERR_RANGE, "%s: dim %d is out of range or "
                            "repeated for %s", op, dims[i], TD_SHAPE_STR(a));
        }
        mask |= 1u << d;
        count *= (double)a->shape[d];
    }
    *mask_p = mask;
    *count_p = count;
    return TD_OK;
}

td_status_t
td_sum(td_tensor_t *a, td_tensor_t **out)
{
    return sum_impl(a, (1u << a->ndim) - 1, 0, 1.0, out);
}

td_status_t
td_mean(td_tensor_t *a, td_tensor_t **out)
{
    int64_t n = td_tensor_numel(a);

    return sum_impl(a, (1u << a->ndim) - 1, 0, n > 0 ? 1.0 / (double)n : NAN,
                    out);
}

td_status_t
td_sum_dims(td_tensor_t *a, const int *dims, int n, int keepdim,
            td_tensor_t **out)
{
    uint32_t mask;
    double count;
    td_status_t status = dims_mask("sum", a, dims, n, &mask, &count);

    return status != TD_OK ? status : sum_impl(a, mask, keepdim, 1.0, out);
}

td_status_t
td_mean_dims(td_tensor_t *a, const int *dims, int n, int keepdim,
             td_tensor_t **out)
{
    uint32_t mask;
    double count;
    td_status_t status = dims_mask("mean", a, dims, n, &mask, &count);

    return status != TD_OK ? status
                           : sum_impl(a, mask, keepdim, count > 0 ? 1.0 / count
                                                                  : NAN, out);
}

/* G summed to SHAPE (broadcasting's reverse), times SCALE. */
static td_status_t
sum_to_scaled(td_tensor_t *g, const int64_t *shape, int ndim, double scale,
              td_tensor_t **out)
{
    uint32_t mask = 0;
    int lead = g->ndim - ndim;
    td_tensor_t *r;
    td_status_t status;

    if (scale == 1.0 && lead == 0 &&
        memcmp(g->shape, shape, (size_t)ndim * sizeof(int64_t)) == 0) {
        *out = td_tensor_retain(g);
        return TD_OK;
    }
    if (lead < 0) {
        return td_error(TD_ERR_SHAPE, "sum_to: %s has fewer dims than %s",
                        TD_SHAPE_STR(g), td__shape_str(shape, ndim, (char[96]){0}, 96));
    }
    for (int d = 0; d < g->ndim; d++) {
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) {
            mask |= 1u << d;
        }
    }
    status = sum_impl(g, mask, 1, scale, &r);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_reshape(r, shape, ndim, out);
    td_tensor_release(r);
    return status;
}

td_status_t
td__sum_to(td_tensor_t *g, const int64_t *shape, int ndim, td_tensor_t **out)
{
    return sum_to_scaled(g, shape, ndim, 1.0, out);
}

/* ---- expand ------------------------------------------------------------ */

/* d (c expand) = c g summed back to the input's shape */
static td_status_t
expand_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);

    if (gin[0] == NULL) {
        gout[0] = NULL;
        return TD_OK;
    }
    return sum_to_scaled(gin[0], st->shape_a, st->ndim_a, st->c, &gout[0]);
}

static const td_node_ops_t expand_ops =
    TD_OP_NODE("ExpandBackward", expand_backward);

/* T expanded to SHAPE, times SCALE: a view when SCALE is 1, else a new
 * contiguous tensor (the mean's backward scales while it expands). */
static td_status_t
expand_impl(td_tensor_t *t, const int64_t *shape, int ndim, double scale,
            td_tensor_t **out)
{
    td_op_state_t *st = NULL;
    td_tensor_t *v, *c;
    td_status_t status = td__tensor_expand_view(t, shape, ndim, &v);

    if (status != TD_OK) {
        return status;
    }
    if (scale != 1.0) {
        status = td_tensor_empty(v->shape, v->ndim, v->dtype, v->device, &c);
        if (status != TD_OK) {
            td_tensor_release(v);
            return status;
        }
        td__kernels_get(v->device)->unary(TD_UN_MUL_SCALAR, v->dtype,
                                         td_tensor_data(c),
                                         (td_operand_t){td_tensor_data(v),
                                                        v->strides},
                                         scale, v->shape, v->ndim);
        td_tensor_release(v);
        v = c;
    }
    if (td__op_needs_state(&t, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(v);
            return td_error(TD_ERR_NO_MEMORY, "expand: out of memory");
        }
        st->c = scale;
        st->ndim_a = t->ndim;
        memcpy(st->shape_a, t->shape, sizeof(st->shape_a));
    }
    return td__op_finish(&expand_ops, st, &t, 1, v, out);
}

td_status_t
td_tensor_expand(td_tensor_t *t, const int64_t *shape, int ndim,
                 td_tensor_t **out)
{
    return expand_impl(t, shape, ndim, 1.0, out);
}

/* ---- max along a dim ------------------------------------------------- */

/* The indices come from the max_dim kernel; the values too when nothing
 * needs a gradient, else from gather (whose backward scatters g back to
 * the maxima). */
td_status_t
td_max_dim(td_tensor_t *a, int dim, int keepdim, td_tensor_t **values,
           td_tensor_t **indices)
{
    int64_t shape[TD_MAX_DIMS], outer, inner, mid;
    td_tensor_t *ac, *idx, *v, *vk, *ik;
    int nd = 0;
    td_status_t status = td__op_check_float("max", a);

    if (status != TD_OK) {
        return status;
    }
    if (dim < 0) {
        dim += a->ndim;
    }
    if (dim < 0 || dim >= a->ndim || a->shape[dim] == 0) {
        return td_error(TD_ERR_RANGE, "max: dim %d of %s is out of range or "
                        "empty", dim, TD_SHAPE_STR(a));
    }
    for (int d = 0; d < a->ndim; d++) {
        if (d != dim) {
            shape[nd++] = a->shape[d];
        }
    }
    td_op_around(a->shape, a->ndim, dim, &outer, &inner);
    mid = a->shape[dim];
    status = td_tensor_contiguous(a, &ac);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(shape, nd, TD_INT64, a->device, &idx);
    if (status != TD_OK) {
        td_tensor_release(ac);
        return status;
    }
    if (td__op_needs_state(&a, 1)) {
        td__kernels_get(a->device)->max_dim(a->dtype, NULL,
                                           td_tensor_data(idx),
                                           td_tensor_data(ac), outer, mid,
                                           inner);
        status = td_gather_dim(a, dim, idx, &v);
    } else {
        status = td_tensor_empty(shape, nd, a->dtype, a->device, &v);
        if (status == TD_OK) {
            td__kernels_get(a->device)->max_dim(a->dtype, td_tensor_data(v),
                                               td_tensor_data(idx),
                                               td_tensor_data(ac), outer,
                                               mid, inner);
        }
    }
    td_tensor_release(ac);
    if (status != TD_OK) {
        td_tensor_release(idx);
        return status;
    }
    if (keepdim) {
        status = td_tensor_unsqueeze(v, dim, &vk);
        td_tensor_release(v);
        if (status != TD_OK) {
            td_tensor_release(idx);
            return status;
        }
        v = vk;
        status = td_tensor_unsqueeze(idx, dim, &ik);
        td_tensor_release(idx);
        if (status != TD_OK) {
            td_tensor_release(v);
            return status;
        }
        idx = ik;
    }
    *values = v;
    if (indices != NULL) {
        *indices = idx;
    } else {
        td_tensor_release(idx);
    }
    return TD_OK;
}
