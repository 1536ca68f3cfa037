/* runtime/tensor/views.c: the differentiable views (view, reshape,
 * transpose, permute, narrow, select, squeeze, unsqueeze), copies (clone,
 * contiguous, to_dtype) and joins and splits (cat, stack, split, chunk),
 * with their backward functions. Above tensor.c (which knows nothing of
 * autograd) and autograd.c (whose nodes they record). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"
#include "todist/device.h"

/* ---- autograd for views and copies -------------------------------------- */

typedef struct {
    int     kind;
    int     ndim;                  /* input's shape */
    int64_t shape[TD_MAX_DIMS];
    int     d0, d1;                /* transpose dims, narrow/select dim */
    int     perm[TD_MAX_DIMS];
    int64_t start, length;
    td_dtype_t dtype;
} view_state_t;

enum { V_RESHAPE, V_TRANSPOSE, V_PERMUTE, V_NARROW, V_SELECT, V_COPY,
       V_DTYPE, V_PAD };

/* grad of narrow: zeros of the input shape with G written into the slice.
 * Built from differentiable ops: zeros + cat would do too, but a padded
 * write is one pass. Its own gradient is narrow(gg), recorded here. */
static td_status_t narrow_backward(td_tensor_t *g, const int64_t *shape,
                                   int ndim, int dim, int64_t start,
                                   td_tensor_t **out);

static td_status_t
view_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    view_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *tmp = NULL;
    int inv[TD_MAX_DIMS];
    td_status_t status;

    if (g == NULL) {
        gout[0] = NULL;
        return TD_OK;
    }
    switch (st->kind) {
    case V_RESHAPE:
        return td_tensor_reshape(g, st->shape, st->ndim, &gout[0]);
    case V_TRANSPOSE:
        return td_tensor_transpose(g, st->d0, st->d1, &gout[0]);
    case V_PERMUTE:
        for (int d = 0; d < st->ndim; d++) {
            inv[st->perm[d]] = d;
        }
        return td_tensor_permute(g, inv, &gout[0]);
    case V_NARROW:
        return narrow_backward(g, st->shape, st->ndim, st->d0, st->start,
                               &gout[0]);
    case V_SELECT:
        status = td_tensor_unsqueeze(g, st->d0, &tmp);
        if (status == TD_OK) {
            status = narrow_backward(tmp, st->shape, st->ndim, st->d0,
                                     st->start, &gout[0]);
            td_tensor_release(tmp);
        }
        return status;
    case V_COPY:
        gout[0] = td_tensor_retain(g);
        return TD_OK;
    case V_DTYPE:
        return td_tensor_to_dtype(g, st->dtype, &gout[0]);
    case V_PAD:
        return td_tensor_narrow(g, st->d0, st->start, st->length, &gout[0]);
    }
    return td_error(TD_ERR_STATE, "%s: unknown view kind", td_node_name(node));
}

static const td_node_ops_t view_ops[] = {
    [V_RESHAPE] = {"ViewBackward", view_backward, NULL, free},
    [V_TRANSPOSE] = {"TransposeBackward", view_backward, NULL, free},
    [V_PERMUTE] = {"PermuteBackward", view_backward, NULL, free},
    [V_NARROW] = {"NarrowBackward", view_backward, NULL, free},
    [V_SELECT] = {"SelectBackward", view_backward, NULL, free},
    [V_COPY] = {"CloneBackward", view_backward, NULL, free},
    [V_DTYPE] = {"ToCopyBackward", view_backward, NULL, free},
    [V_PAD] = {"NarrowBackwardBackward", view_backward, NULL, free},
};

/* Record a view/copy node for OUT from IN; on failure releases OUT. */
static td_status_t
record_view(td_tensor_t *in, td_tensor_t *out, int kind, int d0, int d1,
            const int *perm, int64_t start, td_tensor_t **out_p)
{
    view_state_t *st;
    td_status_t status;

    if (!td_grad_enabled() || !td_tensor_requires_grad(in)) {
        *out_p = out;
        return TD_OK;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        td_tensor_release(out);
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    st->kind = kind;
    st->ndim = in->ndim;
    memcpy(st->shape, in->shape, sizeof(st->shape));
    st->d0 = d0;
    st->d1 = d1;
    st->start = start;
    st->length = kind == V_PAD ? in->shape[d0] : 0;
    st->dtype = in->dtype;
    if (perm != NULL) {
        memcpy(st->perm, perm, (size_t)in->ndim * sizeof(int));
    }
    status = td__autograd_record(&view_ops[kind], st, &in, 1, out);
    if (status != TD_OK) {
        td_tensor_release(out);
        return status;
    }
    *out_p = out;
    return TD_OK;
}

static td_status_t
narrow_backward(td_tensor_t *g, const int64_t *shape, int ndim, int dim,
                int64_t start, td_tensor_t **out)
{
    td_tensor_t *z, *slice;
    td_status_t status;
    int was = td_grad_set_enabled(0);

    status = td_tensor_zeros(shape, ndim, g->dtype, &z);
    if (status == TD_OK) {
        status = td__tensor_new_view(z, z->shape, z->strides, z->ndim, 0, &slice);
        if (status == TD_OK) {
            slice->shape[dim] = g->shape[dim];
            slice->offset = start * z->strides[dim];
            status = td_tensor_copy_(slice, g);
            td_tensor_release(slice);
        }
    }
    td_grad_set_enabled(was);
    if (status != TD_OK) {
        td_tensor_release(z);
        return status;
    }
    /* d/dg of the padded write is narrow of the incoming gradient */
    return record_view(g, z, V_PAD, dim, 0, NULL, start, out);
}

/* ---- views ---------------------------------------------------------- */

static int
norm_dim(int dim, int ndim)
{
    return dim < 0 ? dim + ndim : dim;
}

td_status_t
td_tensor_view(td_tensor_t *t, const int64_t *shape_in, int ndim,
               td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    int64_t numel = td_tensor_numel(t), known = 1;
    int infer = -1;
    td_tensor_t *v;
    td_status_t status;

    if (ndim < 0 || ndim > TD_MAX_DIMS) {
        return td_error(TD_ERR_SHAPE, "view: ndim=%d is outside 0..%d", ndim,
                        TD_MAX_DIMS);
    }
    for (int d = 0; d < ndim; d++) {
        shape[d] = shape_in[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
        } else if (shape[d] < 0) {
            return td_error(TD_ERR_SHAPE, "view: shape[%d]=%lld is invalid",
                            d, (long long)shape[d]);
        } else {
            known *= shape[d];
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) {
            goto bad;
        }
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        goto bad;
    }
    if (!td_tensor_is_contiguous(t)) {
        return td_error(TD_ERR_SHAPE, "view: tensor %s is not contiguous; "
                        "use reshape", TD_SHAPE_STR(t));
    }
    {
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            strides[d] = s;
            s *= shape[d];
        }
    }
    status = td__tensor_new_view(t, shape, strides, ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_RESHAPE, 0, 0, NULL, 0, out);
bad:
    return td_error(TD_ERR_SHAPE, "view: shape %s is invalid for a tensor %s "
                    "of %lld elements",
                    td__shape_str(shape_in, ndim, (char[96]){0}, 96),
                    TD_SHAPE_STR(t), (long long)numel);
}

td_status_t
td_tensor_reshape(td_tensor_t *t, const int64_t *shape, int ndim,
                  td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status;

    if (td_tensor_is_contiguous(t)) {
        return td_tensor_view(t, shape, ndim, out);
    }
    status = td_tensor_contiguous(t, &c);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_view(c, shape, ndim, out);
    td_tensor_release(c);
    return status;
}

td_status_t
td_tensor_transpose(td_tensor_t *t, int d0, int d1, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS], tmp;
    td_tensor_t *v;
    td_status_t status;

    d0 = norm_dim(d0, t->ndim);
    d1 = norm_dim(d1, t->ndim);
    if (d0 < 0 || d0 >= t->ndim || d1 < 0 || d1 >= t->ndim) {
        return td_error(TD_ERR_RANGE, "transpose: dims (%d, %d) out of range "
                        "for %s", d0, d1, TD_SHAPE_STR(t));
    }
    memcpy(shape, t->shape, sizeof(shape));
    memcpy(strides, t->strides, sizeof(strides));
    tmp = shape[d0]; shape[d0] = shape[d1]; shape[d1] = tmp;
    tmp = strides[d0]; strides[d0] = strides[d1]; strides[d1] = tmp;
    status = td__tensor_new_view(t, shape, strides, t->ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_TRANSPOSE, d0, d1, NULL, 0, out);
}

td_status_t
td_tensor_permute(td_tensor_t *t, const int *dims, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    int seen[TD_MAX_DIMS] = {0}, perm[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;

    for (int d = 0; d < t->ndim; d++) {
        int s = norm_dim(dims[d], t->ndim);
        if (s < 0 || s >= t->ndim || seen[s]) {
            return td_error(TD_ERR_RANGE, "permute: dims[%d]=%d is not a "
                            "permutation of %d dims", d, dims[d], t->ndim);
        }
        seen[s] = 1;
        perm[d] = s;
        shape[d] = t->shape[s];
        strides[d] = t->strides[s];
    }
    status = td__tensor_new_view(t, shape, strides, t->ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_PERMUTE, 0, 0, perm, 0, out);
}

td_status_t
td_tensor_narrow(td_tensor_t *t, int dim, int64_t start, int64_t length,
                 td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim) {
        return td_error(TD_ERR_RANGE, "narrow: dim out of range for %s",
                        TD_SHAPE_STR(t));
    }
    if (start < 0 || length < 0 || start + length > t->shape[dim]) {
        return td_error(TD_ERR_RANGE, "narrow: [%lld, %lld) is outside dim "
                        "%d of %s", (long long)start,
                        (long long)(start + length), dim, TD_SHAPE_STR(t));
    }
    memcpy(shape, t->shape, sizeof(shape));
    shape[dim] = length;
    status = td__tensor_new_view(t, shape, t->strides, t->ndim,
                                t->offset + start * t->strides[dim], &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_NARROW, dim, 0, NULL, start, out);
}

td_status_t
td_tensor_select(td_tensor_t *t, int dim, int64_t index, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;
    int j = 0;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim) {
        return td_error(TD_ERR_RANGE, "select: dim out of range for %s",
                        TD_SHAPE_STR(t));
    }
    if (index < 0) {
        index += t->shape[dim];
    }
    if (index < 0 || index >= t->shape[dim]) {
        return td_error(TD_ERR_RANGE, "select: index %lld is outside dim %d "
                        "of %s", (long long)index, dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim) {
            shape[j] = t->shape[d];
            strides[j++] = t->strides[d];
        }
    }
    status = td__tensor_new_view(t, shape, strides, t->ndim - 1,
                                t->offset + index * t->strides[dim], &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_SELECT, dim, 0, NULL, index, out);
}

td_status_t
td_tensor_squeeze(td_tensor_t *t, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS];
    int j = 0;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim || t->shape[dim] != 1) {
        return td_error(TD_ERR_SHAPE, "squeeze: dim %d of %s is not of size 1",
                        dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim) {
            shape[j++] = t->shape[d];
        }
    }
    return td_tensor_reshape(t, shape, j, out);
}

td_status_t
td_tensor_unsqueeze(td_tensor_t *t, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;
    int j = 0;

    if (dim < 0) {
        dim += t->ndim + 1;
    }
    if (dim < 0 || dim > t->ndim || t->ndim >= TD_MAX_DIMS) {
        return td_error(TD_ERR_RANGE, "unsqueeze: dim %d out of range for %s",
                        dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d <= t->ndim; d++) {
        if (d == dim) {
            shape[d] = 1;
            strides[d] = d < t->ndim ? t->strides[j] * t->shape[j] : 1;
        } else {
            shape[d] = t->shape[j];
            strides[d] = t->strides[j];
            j++;
        }
    }
    status = td__tensor_new_view(t, shape, strides, t->ndim + 1, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_RESHAPE, 0, 0, NULL, 0, out);
}

td_status_t
td_tensor_contiguous(td_tensor_t *t, td_tensor_t **out)
{
    if (td_tensor_is_contiguous(t)) {
        *out = td_tensor_retain(t);
        return TD_OK;
    }
    return td_tensor_clone(t, out);
}

td_status_t
td_tensor_clone(td_tensor_t *t, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status = td__tensor_copy_raw(t, t->dtype, &c);

    if (status != TD_OK) {
        return status;
    }
    return record_view(t, c, V_COPY, 0, 0, NULL, 0, out);
}

td_status_t
td_tensor_to_dtype(td_tensor_t *t, td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status;

    if (td_dtype_size(dtype) == 0) {
        return td_error(TD_ERR_DTYPE, "to_dtype: dtype=%d is unknown", dtype);
    }
    status = td__tensor_copy_raw(t, dtype, &c);
    if (status != TD_OK) {
        return status;
    }
    if (!td_dtype_is_float(dtype)) {
        *out = c;
        return TD_OK;
    }
    return record_view(t, c, V_DTYPE, 0, 0, NULL, 0, out);
}

/* ---- joins and splits ------------------------------------------------- */

typedef struct {
    int      n, dim;
    int64_t *sizes;
} cat_state_t;

static void
cat_destroy(void *p)
{
    cat_state_t *st = p;

    free(st->sizes);
    free(st);
}

static td_status_t
cat_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    cat_state_t *st = td_node_state(node);
    int64_t start = 0;
    td_status_t status;

    for (int i = 0; i < st->n; i++) {
        gout[i] = NULL;
        if (gin[0] != NULL) {
            status = td_tensor_narrow(gin[0], st->dim, start, st->sizes[i],
                                      &gout[i]);
            if (status != TD_OK) {
                for (int j = 0; j < i; j++) {
                    td_tensor_release(gout[j]);
                }
                return status;
            }
        }
        start += st->sizes[i];
    }
    return TD_OK;
}

static const td_node_ops_t cat_ops = {"CatBackward", cat_backward, NULL,
                                      cat_destroy};

td_status_t
td_tensor_cat(td_tensor_t *const *ts, int n, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], start = 0;
    td_tensor_t *c, *slice;
    cat_state_t *st;
    td_status_t status;
    int bad_i = 0;

    if (n <= 0) {
        return td_error(TD_ERR_INVALID, "cat: no tensors");
    }
    dim = norm_dim(dim, ts[0]->ndim);
    if (dim < 0 || dim >= ts[0]->ndim) {
        return td_error(TD_ERR_RANGE, "cat: dim out of range for %s",
                        TD_SHAPE_STR(ts[0]));
    }
    memcpy(shape, ts[0]->shape, sizeof(shape));
    shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        bad_i = i;
        if (!td__device_same(ts[i]->device, ts[0]->device)) {
            char a[24], b[24];

            return td_error(TD_ERR_INVALID, "cat: tensor %d is on %s, tensor "
                            "0 on %s (move them to one device first)", i,
                            td_device_str(ts[i]->device, a, sizeof(a)),
                            td_device_str(ts[0]->device, b, sizeof(b)));
        }
        if (ts[i]->ndim != ts[0]->ndim || ts[i]->dtype != ts[0]->dtype) {
            goto bad;
        }
        for (int d = 0; d < ts[0]->ndim; d++) {
            if (d != dim && ts[i]->shape[d] != ts[0]->shape[d]) {
                goto bad;
            }
        }
        shape[dim] += ts[i]->shape[dim];
    }
    status = td_tensor_empty(shape, ts[0]->ndim, ts[0]->dtype, ts[0]->device, &c);
    if (status != TD_OK) {
        return status;
    }
    for (int i = 0; i < n; i++) {
        td__tensor_new_view(c, ts[i]->shape, c->strides, c->ndim,
                           start * c->strides[dim], &slice);
        td__kernels_get(c->device)->copy(c->dtype,
                            (td_operand_t){td_tensor_data(slice), slice->strides},
                            ts[i]->dtype,
                            (td_operand_t){td_tensor_data(ts[i]), ts[i]->strides},
                            slice->shape, slice->ndim);
        td_tensor_release(slice);
        start += ts[i]->shape[dim];
    }
    if (td_grad_enabled() && td__any_requires_grad(ts, n)) {
        st = calloc(1, sizeof(*st));
        if (st == NULL || (st->sizes = calloc((size_t)n, sizeof(int64_t))) == NULL) {
            free(st);
            td_tensor_release(c);
            return td_error(TD_ERR_NO_MEMORY, "cat: out of memory");
        }
        st->n = n;
        st->dim = dim;
        for (int i = 0; i < n; i++) {
            st->sizes[i] = ts[i]->shape[dim];
        }
        status = td__autograd_record(&cat_ops, st, ts, n, c);
        if (status != TD_OK) {
            td_tensor_release(c);
            return status;
        }
    }
    *out = c;
    return TD_OK;
bad:
    return td_error(TD_ERR_SHAPE, "cat: tensor %d (%s %s) does not match "
                    "tensor 0 (%s %s) outside dim %d", bad_i,
                    td_dtype_name(ts[bad_i]->dtype), TD_SHAPE_STR(ts[bad_i]),
                    td_dtype_name(ts[0]->dtype), TD_SHAPE_STR(ts[0]), dim);
}

td_status_t
td_tensor_stack(td_tensor_t *const *ts, int n, int dim, td_tensor_t **out)
{
    td_tensor_t *u[64];
    td_status_t status = TD_OK;
    int k;

    if (n <= 0 || n > 64) {
        return td_error(TD_ERR_INVALID, "stack: n=%d is outside 1..64", n);
    }
    for (k = 0; k < n; k++) {
        if (!td__shape_equal(ts[k], ts[0])) {
            status = td_error(TD_ERR_SHAPE, "stack: tensor %d %s differs from "
                              "tensor 0 %s", k, TD_SHAPE_STR(ts[k]),
                              TD_SHAPE_STR(ts[0]));
            break;
        }
        status = td_tensor_unsqueeze(ts[k], dim, &u[k]);
        if (status != TD_OK) {
            break;
        }
    }
    if (status == TD_OK) {
        status = td_tensor_cat(u, n, dim < 0 ? dim : dim, out);
    }
    for (int i = 0; i < k; i++) {
        td_tensor_release(u[i]);
    }
    return status;
}

td_status_t
td_tensor_split(td_tensor_t *t, int64_t split_size, int dim,
                td_tensor_t **outs, int max_outs, int *n_p)
{
    int64_t size;
    int n;
    td_status_t status;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim || split_size <= 0) {
        return td_error(TD_ERR_INVALID, "split: split_size=%lld dim=%d for %s",
                        (long long)split_size, dim, TD_SHAPE_STR(t));
    }
    size = t->shape[dim];
    n = (int)((size + split_size - 1) / split_size);
    if (n > max_outs) {
        return td_error(TD_ERR_RANGE, "split: %d pieces do not fit in %d", n,
                        max_outs);
    }
    for (int i = 0; i < n; i++) {
        int64_t len = size - i * split_size < split_size ? size - i * split_size
                                                         : split_size;
        status = td_tensor_narrow(t, dim, i * split_size, len, &outs[i]);
        if (status != TD_OK) {
            for (int j = 0; j < i; j++) {
                td_tensor_release(outs[j]);
            }
            return status;
        }
    }
    *n_p = n;
    return TD_OK;
}

td_status_t
td_tensor_chunk(td_tensor_t *t, int chunks, int dim, td_tensor_t **outs,
                int *n_p)
{
    int d = norm_dim(dim, t->ndim);

    if (chunks <= 0 || d < 0 || d >= t->ndim) {
        return td_error(TD_ERR_INVALID, "chunk: chunks=%d dim=%d for %s",
                        chunks, dim, TD_SHAPE_STR(t));
    }
    /* as torch: pieces of ceil(size / chunks) */
    return td_tensor_split(t, t->shape[d] > 0 ? (t->shape[d] + chunks - 1) / chunks : 1,
                           d, outs, chunks, n_p);
}
