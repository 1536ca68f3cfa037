/* runtime/tensor/ops_index.c: the indexing ops: index_select and
 * index_add along a dim, gather and scatter-add with one index per
 * position, each forward (one call of the device's kernel, after the
 * index_check kernel) followed by its backward, the other op of its pair. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/ops_internal.h"
#include <todist/ops.h>

static td_status_t
check_index(const char *op, td_tensor_t *index, int64_t limit)
{
    const int64_t *ix;
    int64_t n = td_tensor_numel(index), bad;

    if (index->dtype != TD_INT64) {
        return td_error(TD_ERR_DTYPE, "%s: index dtype is %s, not int64", op,
                        td_dtype_name(index->dtype));
    }
    if (!td_tensor_is_contiguous(index)) {
        return td_error(TD_ERR_INVALID, "%s: index %s is not contiguous", op,
                        TD_SHAPE_STR(index));
    }
    ix = td_tensor_data(index);
    bad = td__kernels_get(index->device)->index_check(ix, n, limit);
    if (bad >= 0) {
        return td_error(TD_ERR_RANGE, "%s: index[%lld]=%lld is outside "
                        "[0, %lld)", op, (long long)bad, (long long)ix[bad],
                        (long long)limit);
    }
    return TD_OK;
}

/* d index_select = g added back at the selected rows (index_add) */
static td_status_t
index_select_backward(td_node_t *node, td_tensor_t *const *gin,
                      td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *index = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &index));
    TD_OP_TRY(td_index_add_new(st->shape_a, st->ndim_a, st->dim, index,
                               gin[0], &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t index_select_ops =
    TD_OP_NODE("IndexSelectBackward", index_select_backward);

td_status_t
td_index_select(td_tensor_t *a, int dim, td_tensor_t *index,
                td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], outer, inner, nidx, amid;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    td_op_state_t *st = NULL;
    td_status_t status;

    if (dim < 0) {
        dim += a->ndim;
    }
    if (dim < 0 || dim >= a->ndim || index->ndim > 1) {
        return td_error(TD_ERR_SHAPE, "index_select: dim %d of %s with a "
                        "%d-d index (must be 1-d)", dim, TD_SHAPE_STR(a),
                        index->ndim);
    }
    status = check_index("index_select", index, a->shape[dim]);
    if (status != TD_OK) {
        return status;
    }
    if (td_dtype_size(a->dtype) != 4 && td_dtype_size(a->dtype) != 8) {
        return td_error(TD_ERR_DTYPE, "index_select: dtype %s unsupported",
                        td_dtype_name(a->dtype));
    }
    ix = td_tensor_data(index);
    nidx = td_tensor_numel(index);
    td_op_around(a->shape, a->ndim, dim, &outer, &inner);
    amid = a->shape[dim];
    memcpy(shape, a->shape, sizeof(shape));
    shape[dim] = nidx;
    status = td_tensor_contiguous(a, &ac);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(shape, a->ndim, a->dtype, a->device, &out);
    if (status != TD_OK) {
        td_tensor_release(ac);
        return status;
    }
    td__kernels_get(a->device)->index_select(a->dtype, td_tensor_data(out),
                                            td_tensor_data(ac), ix, nidx,
                                            outer, amid, inner);
    td_tensor_release(ac);
    if (td__op_needs_state(&a, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "index_select: out of memory");
        }
        st->dim = dim;
        st->ndim_a = a->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
        td_saved_init(&st->sv[0], index);
    }
    return td__op_finish(&index_select_ops, st, &a, 1, out, out_p);
}

/* d index_add = g read back at the indexed rows (index_select) */
static td_status_t
index_add_backward(td_node_t *node, td_tensor_t *const *gin,
                   td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *index = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &index));
    TD_OP_TRY(td_index_select(gin[0], st->dim, index, &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t index_add_ops =
    TD_OP_NODE("IndexAddBackward", index_add_backward);

td_status_t
td_index_add_new(const int64_t *shape, int ndim, int dim, td_tensor_t *index,
                 td_tensor_t *src, td_tensor_t **out_p)
{
    int64_t outer, inner, nidx, omid;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    td_op_state_t *st = NULL;
    td_status_t status = td__op_check_float("index_add", src);

    if (status != TD_OK) {
        return status;
    }
    if (dim < 0) {
        dim += ndim;
    }
    if (dim < 0 || dim >= ndim || src->ndim != ndim || index->ndim > 1 ||
        src->shape[dim] != td_tensor_numel(index)) {
        return td_error(TD_ERR_SHAPE, "index_add: source %s, index of %lld, "
                        "dim %d into %s", TD_SHAPE_STR(src),
                        (long long)td_tensor_numel(index), dim,
                        td__shape_str(shape, ndim, (char[96]){0}, 96));
    }
    for (int d = 0; d < ndim; d++) {
        if (d != dim && shape[d] != src->shape[d]) {
            return td_error(TD_ERR_SHAPE, "index_add: source %s does not fit "
                            "%s outside dim %d", TD_SHAPE_STR(src),
                            td__shape_str(shape, ndim, (char[96]){0}, 96), dim);
        }
    }
    status = check_index("index_add", index, shape[dim]);
    if (status != TD_OK) {
        return status;
    }
    ix = td_tensor_data(index);
    nidx = td_tensor_numel(index);
    td_op_around(shape, ndim, dim, &outer, &inner);
    omid = shape[dim];
    status = td_tensor_contiguous(src, &ac);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_zeros(shape, ndim, src->dtype, &out);
    if (status != TD_OK) {
        td_tensor_release(ac);
        return status;
    }
    td__kernels_get(src->device)->index_add(src->dtype, td_tensor_data(out),
                                           td_tensor_data(ac), ix, nidx,
                                           outer, omid, inner);
    td_tensor_release(ac);
    if (td__op_needs_state(&src, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "index_add: out of memory");
        }
        st->dim = dim;
        td_saved_init(&st->sv[0], index);
    }
    return td__op_finish(&index_add_ops, st, &src, 1, out, out_p);
}

/* gather and scatter-add are each other's backward */
static td_status_t
gather_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *index = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &index));
    TD_OP_TRY(td_scatter_dim_new(gin[0], st->dim, index, (int64_t)st->c,
                                 &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static td_status_t
scatter_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *index = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &index));
    TD_OP_TRY(td_gather_dim(gin[0], st->dim, index, &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t gather_ops = TD_OP_NODE("GatherBackward",
                                                   gather_backward);
static const td_node_ops_t scatter_ops = TD_OP_NODE("ScatterBackward",
                                                    scatter_backward);

static td_status_t
gather_scatter(td_tensor_t *a, int dim, td_tensor_t *index, int64_t size,
               int scatter, td_tensor_t **out_p)
{
    const char *name = scatter ? "scatter" : "gather";
    int64_t shape[TD_MAX_DIMS], outer, inner, mid;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    td_op_state_t *st = NULL;
    int nd = 0;
    td_status_t status = td__op_check_float(name, a);

    if (status != TD_OK) {
        return status;
    }
    if (scatter) {
        /* a has the index's shape; the result gets DIM of SIZE back */
        if (dim < 0) {
            dim += a->ndim + 1;
        }
        if (dim < 0 || dim > a->ndim || !td__shape_equal(a, index)) {
            return td_error(TD_ERR_SHAPE, "scatter: source %s, index %s, dim %d",
                            TD_SHAPE_STR(a), TD_SHAPE_STR(index), dim);
        }
        for (int d = 0; d <= a->ndim; d++) {
            shape[d] = d == dim ? size : a->shape[d - (d > dim)];
        }
        nd = a->ndim + 1;
        mid = size;
    } else {
        if (dim < 0) {
            dim += a->ndim;
        }
        if (dim < 0 || dim >= a->ndim || index->ndim != a->ndim - 1) {
            goto bad;
        }
        for (int d = 0; d < a->ndim; d++) {
            if (d != dim) {
                if (index->shape[nd] != a->shape[d]) {
                    goto bad;
                }
                shape[nd++] = a->shape[d];
            }
        }
        mid = a->shape[dim];
    }
    status = check_index(name, index, mid);
    if (status != TD_OK) {
        return status;
    }
    ix = td_tensor_data(index);
    td_op_around(scatter ? shape : a->shape, scatter ? nd : a->ndim, dim, &outer,
           &inner);
    status = td_tensor_contiguous(a, &ac);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_zeros(shape, nd, a->dtype, &out);
    if (status != TD_OK) {
        td_tensor_release(ac);
        return status;
    }
    if (scatter) {
        td__kernels_get(a->device)->scatter_add(a->dtype, td_tensor_data(out),
                                               td_tensor_data(ac), ix, outer,
                                               mid, inner);
    } else {
        td__kernels_get(a->device)->gather(a->dtype, td_tensor_data(out),
                                          td_tensor_data(ac), ix, outer, mid,
                                          inner);
    }
    td_tensor_release(ac);
    if (td__op_needs_state(&a, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->dim = dim;
        st->c = (double)mid;
        td_saved_init(&st->sv[0], index);
    }
    return td__op_finish(scatter ? &scatter_ops : &gather_ops, st, &a, 1, out,
                        out_p);
bad:
    return td_error(TD_ERR_SHAPE, "gather: index %s does not match %s without "
                    "dim %d", TD_SHAPE_STR(index), TD_SHAPE_STR(a), dim);
}

td_status_t
td_gather_dim(td_tensor_t *a, int dim, td_tensor_t *index, td_tensor_t **out)
{
    return gather_scatter(a, dim, index, 0, 0, out);
}

td_status_t
td_scatter_dim_new(td_tensor_t *src, int dim, td_tensor_t *index, int64_t size,
                   td_tensor_t **out)
{
    return gather_scatter(src, dim, index, size, 1, out);
}

td_status_t
td_tensor_index_select(td_tensor_t *t, int dim, td_tensor_t *index,
                       td_tensor_t **out)
{
    return td_index_select(t, dim, index, out);
}
