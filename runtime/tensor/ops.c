/* runtime/tensor/ops.c: differentiable ops. Forward and backward of each op sit
 * side by side: the forward calls one kernel of the device's table, the
 * backward (op_backward, by kind) is written with the same public ops, so
 * it is itself differentiable (create_graph). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/ops.h>

enum {
    K_ADD, K_SUB, K_MUL, K_DIV, K_NEG, K_POW, K_MULS, K_ADDS, K_EXP, K_LOG,
    K_SQRT, K_ABS, K_TANH, K_SIGMOID, K_RELU, K_GELU, K_GELU_GRAD, K_SUM,
    K_MATMUL, K_LINEAR, K_SOFTMAX, K_LOG_SOFTMAX, K_GATHER, K_SCATTER,
    K_INDEX_SELECT, K_INDEX_ADD, K_NUM
};

typedef struct {
    int        kind;
    td_saved_t sv[3];
    double     c;
    int        dim;
    int        ndim_a, ndim_b;
    int64_t    shape_a[TD_MAX_DIMS], shape_b[TD_MAX_DIMS];
    uint32_t   mask;        /* reduced dims */
} op_state_t;

static td_status_t op_backward(td_node_t *node, td_tensor_t *const *gin,
                               td_tensor_t **gout);

static void
op_release_saved(td_node_t *node)
{
    op_state_t *st = td_node_state(node);

    for (int i = 0; i < 3; i++) {
        td_saved_release(&st->sv[i]);
    }
}

static void
op_destroy(void *p)
{
    op_state_t *st = p;

    for (int i = 0; i < 3; i++) {
        td_saved_release(&st->sv[i]);
    }
    free(st);
}

#define OPS(name) {name, op_backward, op_release_saved, op_destroy}
static const td_node_ops_t op_ops[K_NUM] = {
    [K_ADD] = OPS("AddBackward"), [K_SUB] = OPS("SubBackward"),
    [K_MUL] = OPS("MulBackward"), [K_DIV] = OPS("DivBackward"),
    [K_NEG] = OPS("NegBackward"), [K_POW] = OPS("PowBackward"),
    [K_MULS] = OPS("MulScalarBackward"), [K_ADDS] = OPS("AddScalarBackward"),
    [K_EXP] = OPS("ExpBackward"), [K_LOG] = OPS("LogBackward"),
    [K_SQRT] = OPS("SqrtBackward"), [K_ABS] = OPS("AbsBackward"),
    [K_TANH] = OPS("TanhBackward"), [K_SIGMOID] = OPS("SigmoidBackward"),
    [K_RELU] = OPS("ReluBackward"), [K_GELU] = OPS("GeluBackward"),
    [K_GELU_GRAD] = OPS("GeluBackwardBackward"), [K_SUM] = OPS("SumBackward"),
    [K_MATMUL] = OPS("MmBackward"), [K_LINEAR] = OPS("LinearBackward"),
    [K_SOFTMAX] = OPS("SoftmaxBackward"),
    [K_LOG_SOFTMAX] = OPS("LogSoftmaxBackward"),
    [K_GATHER] = OPS("GatherBackward"), [K_SCATTER] = OPS("ScatterBackward"),
    [K_INDEX_SELECT] = OPS("IndexSelectBackward"),
    [K_INDEX_ADD] = OPS("IndexAddBackward"),
};

/* New state if OUT will need a node (grad mode on, an input requires grad),
 * else NULL: ops skip all bookkeeping on the no-grad path. */
static op_state_t *
state_if_needed(int kind, td_tensor_t *const *ins, int n)
{
    op_state_t *st;

    if (!td_grad_enabled() || !td_any_requires_grad(ins, n)) {
        return NULL;
    }
    st = calloc(1, sizeof(*st));
    if (st != NULL) {
        st->kind = kind;
    }
    return st;
}

/* Record ST for OUT (takes ST); releases OUT on failure. */
static td_status_t
finish(op_state_t *st, td_tensor_t *const *ins, int n, td_tensor_t *out,
       td_tensor_t **out_p)
{
    td_status_t status;

    if (st != NULL) {
        status = td_autograd_record(&op_ops[st->kind], st, ins, n, out);
        if (status != TD_OK) {
            td_tensor_release(out);
            return status;
        }
    }
    *out_p = out;
    return TD_OK;
}

static int
needs_state(td_tensor_t *const *ins, int n)
{
    return td_grad_enabled() && td_any_requires_grad(ins, n);
}

static td_status_t
check_float(const char *op, td_tensor_t *a)
{
    if (!td_dtype_is_float(a->dtype)) {
        return td_error(TD_ERR_DTYPE, "%s: dtype %s is not float32/float64 "
                        "(shape %s)", op, td_dtype_name(a->dtype),
                        TD_SHAPE_STR(a));
    }
    return TD_OK;
}

static td_status_t
check_pair(const char *op, td_tensor_t *a, td_tensor_t *b)
{
    td_status_t status = check_float(op, a);

    if (status != TD_OK) {
        return status;
    }
    if (a->dtype != b->dtype) {
        return td_error(TD_ERR_DTYPE, "%s: dtypes differ: %s %s and %s %s", op,
                        td_dtype_name(a->dtype), TD_SHAPE_STR(a),
                        td_dtype_name(b->dtype), TD_SHAPE_STR(b));
    }
    if (a->device.type != b->device.type || a->device.index != b->device.index) {
        return td_error(TD_ERR_INVALID, "%s: tensors on different devices", op);
    }
    return TD_OK;
}

/* ---- elementwise ------------------------------------------------------- */

static td_status_t
broadcast_shape(const char *op, td_tensor_t *a, td_tensor_t *b,
                int64_t *shape, int *ndim_p, int64_t *sa, int64_t *sb)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;

    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        int64_t xa = da >= 0 ? a->shape[da] : 1, xb = db >= 0 ? b->shape[db] : 1;
        if (xa != xb && xa != 1 && xb != 1) {
            return td_error(TD_ERR_SHAPE, "%s: shapes %s and %s do not "
                            "broadcast (dim %d: %lld vs %lld)", op,
                            TD_SHAPE_STR(a), TD_SHAPE_STR(b), d,
                            (long long)xa, (long long)xb);
        }
        shape[d] = xa == 1 ? xb : xa;
        sa[d] = da >= 0 && xa != 1 ? a->strides[da] : 0;
        sb[d] = db >= 0 && xb != 1 ? b->strides[db] : 0;
    }
    *ndim_p = nd;
    return TD_OK;
}

static const char *bin_names[] = {"add", "sub", "mul", "div"};

static td_status_t
binary(int kind, td_binary_op_t bop, td_tensor_t *a, td_tensor_t *b,
       td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], sa[TD_MAX_DIMS], sb[TD_MAX_DIMS];
    td_tensor_t *ins[2] = {a, b}, *out;
    op_state_t *st = NULL;
    int nd;
    td_status_t status;

    status = check_pair(bin_names[bop], a, b);
    if (status == TD_OK) {
        status = broadcast_shape(bin_names[bop], a, b, shape, &nd, sa, sb);
    }
    if (status == TD_OK) {
        status = td_tensor_empty(shape, nd, a->dtype, a->device, &out);
    }
    if (status != TD_OK) {
        return status;
    }
    td_kernels_get(a->device)->binary(bop, a->dtype, td_tensor_data(out),
                                      (td_operand_t){td_tensor_data(a), sa},
                                      (td_operand_t){td_tensor_data(b), sb},
                                      shape, nd);
    if (needs_state(ins, 2)) {
        st = state_if_needed(kind, ins, 2);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory",
                            bin_names[bop]);
        }
        st->ndim_a = a->ndim;
        st->ndim_b = b->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
        memcpy(st->shape_b, b->shape, sizeof(st->shape_b));
        if (kind == K_MUL || kind == K_DIV) {
            td_saved_init(&st->sv[0], a);
            td_saved_init(&st->sv[1], b);
        }
    }
    return finish(st, ins, 2, out, out_p);
}

td_status_t td_add(td_tensor_t *a, td_tensor_t *b, td_tensor_t **o)
{ return binary(K_ADD, TD_BIN_ADD, a, b, o); }
td_status_t td_sub(td_tensor_t *a, td_tensor_t *b, td_tensor_t **o)
{ return binary(K_SUB, TD_BIN_SUB, a, b, o); }
td_status_t td_mul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **o)
{ return binary(K_MUL, TD_BIN_MUL, a, b, o); }
td_status_t td_div(td_tensor_t *a, td_tensor_t *b, td_tensor_t **o)
{ return binary(K_DIV, TD_BIN_DIV, a, b, o); }

/* A unary kernel; KIND < 0 means "record nothing" (constants used inside
 * backward formulas, e.g. the relu mask). */
static td_status_t
unary(int kind, td_unary_op_t uop, const char *name, td_tensor_t *a, double c,
      td_tensor_t **out_p)
{
    td_tensor_t *out;
    op_state_t *st = NULL;
    td_status_t status = check_float(name, a);

    if (status == TD_OK) {
        status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &out);
    }
    if (status != TD_OK) {
        return status;
    }
    td_kernels_get(a->device)->unary(uop, a->dtype, td_tensor_data(out),
                                     (td_operand_t){td_tensor_data(a), a->strides},
                                     c, a->shape, a->ndim);
    if (kind >= 0 && needs_state(&a, 1)) {
        st = state_if_needed(kind, &a, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->c = c;
        if (kind != K_NEG && kind != K_MULS && kind != K_ADDS) {
            td_saved_init(&st->sv[0], a);
        }
    }
    return finish(st, &a, 1, out, out_p);
}

td_status_t td_neg(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_NEG, TD_UN_NEG, "neg", a, 0, o); }
td_status_t td_pow_scalar(td_tensor_t *a, double e, td_tensor_t **o)
{ return unary(K_POW, TD_UN_POW, "pow", a, e, o); }
td_status_t td_mul_scalar(td_tensor_t *a, double c, td_tensor_t **o)
{ return unary(K_MULS, TD_UN_MUL_SCALAR, "mul", a, c, o); }
td_status_t td_add_scalar(td_tensor_t *a, double c, td_tensor_t **o)
{ return unary(K_ADDS, TD_UN_ADD_SCALAR, "add", a, c, o); }
td_status_t td_exp(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_EXP, TD_UN_EXP, "exp", a, 0, o); }
td_status_t td_log(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_LOG, TD_UN_LOG, "log", a, 0, o); }
td_status_t td_sqrt(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_SQRT, TD_UN_SQRT, "sqrt", a, 0, o); }
td_status_t td_abs(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_ABS, TD_UN_ABS, "abs", a, 0, o); }
td_status_t td_tanh(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_TANH, TD_UN_TANH, "tanh", a, 0, o); }
td_status_t td_sigmoid(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_SIGMOID, TD_UN_SIGMOID, "sigmoid", a, 0, o); }
td_status_t td_relu(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_RELU, TD_UN_RELU, "relu", a, 0, o); }
td_status_t td_gelu(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_GELU, TD_UN_GELU, "gelu", a, 0, o); }
static td_status_t gelu_grad(td_tensor_t *a, td_tensor_t **o)
{ return unary(K_GELU_GRAD, TD_UN_GELU_GRAD, "gelu", a, 0, o); }
static td_status_t constant(td_unary_op_t op, td_tensor_t *a, td_tensor_t **o)
{ return unary(-1, op, "backward", a, 0, o); }

/* g * (x > 0) in one pass, recording nothing (g and x have one shape) */
static td_status_t
relu_mask(td_tensor_t *g, td_tensor_t *x, td_tensor_t **out)
{
    td_status_t status = td_tensor_empty(x->shape, x->ndim, x->dtype,
                                         x->device, out);

    if (status == TD_OK) {
        td_kernels_get(x->device)->binary(
            TD_BIN_RELU_MASK, x->dtype, td_tensor_data(*out),
            (td_operand_t){td_tensor_data(g), g->strides},
            (td_operand_t){td_tensor_data(x), x->strides}, x->shape, x->ndim);
    }
    return status;
}

/* ---- reductions ---------------------------------------------------------- */

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
            td_kernels_get(cur->device)->sum_mid(cur->dtype, td_tensor_data(next),
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

static td_status_t
sum_impl(td_tensor_t *a, uint32_t mask, int keepdim, double scale,
         td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS];
    td_tensor_t *r, *out;
    op_state_t *st = NULL;
    int nd = 0;
    td_status_t status = check_float("sum", a);

    if (status == TD_OK) {
        status = sum_mask_raw(a, mask, &r);
    }
    if (status != TD_OK) {
        return status;
    }
    if (scale != 1.0) {
        td_kernels_get(r->device)->unary(TD_UN_MUL_SCALAR, r->dtype,
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
    if (needs_state(&a, 1)) {
        st = state_if_needed(K_SUM, &a, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "sum: out of memory");
        }
        st->mask = mask;
        st->c = scale;
        st->ndim_a = a->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
    }
    return finish(st, &a, 1, out, out_p);
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

td_status_t
td_sum_to(td_tensor_t *g, const int64_t *shape, int ndim, td_tensor_t **out)
{
    uint32_t mask = 0;
    int lead = g->ndim - ndim;
    td_tensor_t *r;
    td_status_t status;

    if (lead == 0 && memcmp(g->shape, shape, (size_t)ndim * sizeof(int64_t)) == 0) {
        *out = td_tensor_retain(g);
        return TD_OK;
    }
    if (lead < 0) {
        return td_error(TD_ERR_SHAPE, "sum_to: %s has fewer dims than %s",
                        TD_SHAPE_STR(g), td_shape_str(shape, ndim, (char[96]){0}, 96));
    }
    for (int d = 0; d < g->ndim; d++) {
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) {
            mask |= 1u << d;
        }
    }
    status = sum_impl(g, mask, 1, 1.0, &r);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_reshape(r, shape, ndim, out);
    td_tensor_release(r);
    return status;
}

/* ---- matmul ------------------------------------------------------------ */

/* How cblas reads the last two dims of T: row-major with leading dim, or
 * transposed. 0 if neither (needs a contiguous copy). */
static int
mat_layout(const td_tensor_t *t, int *trans, int64_t *ld)
{
    int64_t r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    int64_t sr = t->strides[t->ndim - 2], sc = t->strides[t->ndim - 1];

    if ((sc == 1 || c == 1) && (r == 1 || sr >= (c > 1 ? c : 1))) {
        *trans = 0;
        *ld = r == 1 ? (c > 1 ? c : 1) : sr;
        return 1;
    }
    if ((sr == 1 || r == 1) && (c == 1 || sc >= (r > 1 ? r : 1))) {
        *trans = 1;
        *ld = c == 1 ? (r > 1 ? r : 1) : sc;
        return 1;
    }
    return 0;
}

static td_status_t
matmul_raw(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], sa[TD_MAX_DIMS], sb[TD_MAX_DIMS];
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t n = b->shape[b->ndim - 1], lda, ldb, nbatch = 1;
    td_tensor_t *ac = NULL, *bc = NULL, *out = NULL;
    const td_kernels_t *kern = td_kernels_get(a->device);
    size_t es = td_dtype_size(a->dtype);
    int ta, tb, nd, bnd;
    td_status_t status;

    if (b->shape[b->ndim - 2] != k) {
        return td_error(TD_ERR_SHAPE, "matmul: shapes %s and %s: inner "
                        "dimensions %lld and %lld differ", TD_SHAPE_STR(a),
                        TD_SHAPE_STR(b), (long long)k,
                        (long long)b->shape[b->ndim - 2]);
    }
    if (!mat_layout(a, &ta, &lda)) {
        if ((status = td_tensor_contiguous(a, &ac)) != TD_OK) {
            return status;
        }
        a = ac;
        mat_layout(a, &ta, &lda);
    }
    if (!mat_layout(b, &tb, &ldb)) {
        if ((status = td_tensor_contiguous(b, &bc)) != TD_OK) {
            goto out;
        }
        b = bc;
        mat_layout(b, &tb, &ldb);
    }
    /* batch dims broadcast like elementwise ops */
    {
        td_tensor_t ha = *a, hb = *b;
        ha.ndim = a->ndim - 2;
        hb.ndim = b->ndim - 2;
        status = broadcast_shape("matmul", &ha, &hb, shape, &bnd, sa, sb);
        if (status != TD_OK) {
            goto out;
        }
    }
    nd = bnd + 2;
    shape[bnd] = m;
    shape[bnd + 1] = n;
    for (int d = 0; d < bnd; d++) {
        nbatch *= shape[d];
    }
    status = td_tensor_empty(shape, nd, a->dtype, a->device, &out);
    if (status != TD_OK) {
        goto out;
    }
    if (m * n == 0) {
        goto done;
    }
    if (k == 0) {
        td_tensor_zero_(out);
        goto done;
    }
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t rem = bi, oa = 0, ob = 0;
        for (int d = bnd - 1; d >= 0; d--) {
            int64_t idx = rem % shape[d];
            rem /= shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        kern->gemm(a->dtype, ta, tb, m, n, k, 1.0,
                   (char *)td_tensor_data(a) + oa * (int64_t)es, lda,
                   (char *)td_tensor_data(b) + ob * (int64_t)es, ldb, 0.0,
                   (char *)td_tensor_data(out) + bi * m * n * (int64_t)es, n);
    }
done:
    *out_p = out;
    out = NULL;
out:
    td_tensor_release(out);
    td_tensor_release(ac);
    td_tensor_release(bc);
    return status;
}

td_status_t
td_matmul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out_p)
{
    td_tensor_t *ins[2] = {a, b}, *a2 = NULL, *b2 = NULL, *r = NULL, *out;
    op_state_t *st = NULL;
    td_status_t status = check_pair("matmul", a, b);

    if (status != TD_OK) {
        return status;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        return td_error(TD_ERR_SHAPE, "matmul: both arguments need at least "
                        "1 dimension (got %s and %s)", TD_SHAPE_STR(a),
                        TD_SHAPE_STR(b));
    }
    /* 1-D operands: as torch, a vector is a row (left) or column (right),
     * and that dim is removed from the result; views keep autograd */
    if (a->ndim == 1 || b->ndim == 1) {
        status = a->ndim == 1 ? td_tensor_unsqueeze(a, 0, &a2)
                              : (a2 = td_tensor_retain(a), TD_OK);
        if (status == TD_OK) {
            status = b->ndim == 1 ? td_tensor_unsqueeze(b, 1, &b2)
                                  : (b2 = td_tensor_retain(b), TD_OK);
        }
        if (status == TD_OK) {
            status = td_matmul(a2, b2, &r);
        }
        if (status == TD_OK && b->ndim == 1) {
            status = td_tensor_squeeze(r, -1, &out);
            td_tensor_release(r);
            r = status == TD_OK ? out : NULL;
        }
        if (status == TD_OK && a->ndim == 1) {
            status = td_tensor_squeeze(r, -2, &out);
            td_tensor_release(r);
            r = status == TD_OK ? out : NULL;
        }
        td_tensor_release(a2);
        td_tensor_release(b2);
        if (status == TD_OK) {
            *out_p = r;
        }
        return status;
    }
    status = matmul_raw(a, b, &out);
    if (status != TD_OK) {
        return status;
    }
    if (needs_state(ins, 2)) {
        st = state_if_needed(K_MATMUL, ins, 2);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "matmul: out of memory");
        }
        td_saved_init(&st->sv[0], a);
        td_saved_init(&st->sv[1], b);
    }
    return finish(st, ins, 2, out, out_p);
}

td_status_t
td_linear(td_tensor_t *x, td_tensor_t *w, td_tensor_t *bias,
          td_tensor_t **out_p)
{
    td_tensor_t *ins[3] = {x, w, bias}, *x2 = NULL, *out, *r;
    const td_kernels_t *kern;
    int64_t shape[TD_MAX_DIMS], n_rows, in, nout, ldw;
    op_state_t *st = NULL;
    int tw;
    td_status_t status = check_pair("linear", x, w);

    if (status == TD_OK && bias != NULL) {
        status = check_pair("linear", x, bias);
    }
    if (status != TD_OK) {
        return status;
    }
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1] ||
        (bias != NULL && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))) {
        return td_error(TD_ERR_SHAPE, "linear: input %s, weight %s, bias %s "
                        "do not fit (weight is [out, in])", TD_SHAPE_STR(x),
                        TD_SHAPE_STR(w), bias ? TD_SHAPE_STR(bias) : "none");
    }
    if (x->ndim != 2) {
        /* fold leading dims into rows; views keep autograd */
        int64_t s2[2] = {-1, x->shape[x->ndim - 1]};
        status = td_tensor_reshape(x, s2, 2, &x2);
        if (status == TD_OK) {
            status = td_linear(x2, w, bias, &r);
            td_tensor_release(x2);
        }
        if (status != TD_OK) {
            return status;
        }
        memcpy(shape, x->shape, sizeof(shape));
        shape[x->ndim - 1] = w->shape[0];
        status = td_tensor_reshape(r, shape, x->ndim, out_p);
        td_tensor_release(r);
        return status;
    }
    n_rows = x->shape[0];
    in = x->shape[1];
    nout = w->shape[0];
    status = td_tensor_contiguous(x, &x2);
    if (status != TD_OK) {
        return status;
    }
    shape[0] = n_rows;
    shape[1] = nout;
    status = td_tensor_empty(shape, 2, x->dtype, x->device, &out);
    if (status != TD_OK) {
        td_tensor_release(x2);
        return status;
    }
    kern = td_kernels_get(x->device);
    if (bias != NULL) {
        /* out = bias broadcast over rows, then gemm with beta = 1 */
        int64_t bst[2] = {0, bias->strides[0]};
        kern->copy(out->dtype, (td_operand_t){td_tensor_data(out), out->strides},
                   bias->dtype, (td_operand_t){td_tensor_data(bias), bst},
                   out->shape, 2);
    }
    if (!mat_layout(w, &tw, &ldw)) {
        td_tensor_t *wc;
        status = td_tensor_contiguous(w, &wc);
        if (status != TD_OK) {
            td_tensor_release(x2);
            td_tensor_release(out);
            return status;
        }
        td_tensor_release(x2);
        x2 = NULL;
        status = td_linear(x, wc, bias, out_p);
        td_tensor_release(wc);
        td_tensor_release(out);
        return status;
    }
    if (n_rows * nout > 0) {
        if (in > 0) {
            /* out[N, out] (+)= x[N, in] * w[out, in]^T: w read transposed */
            kern->gemm(x->dtype, 0, !tw, n_rows, nout, in, 1.0,
                       td_tensor_data(x2), in > 0 ? in : 1, td_tensor_data(w),
                       ldw, bias != NULL ? 1.0 : 0.0, td_tensor_data(out), nout);
        } else if (bias == NULL) {
            td_tensor_zero_(out);
        }
    }
    td_tensor_release(x2);
    if (needs_state(ins, 3)) {
        st = state_if_needed(K_LINEAR, ins, 3);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "linear: out of memory");
        }
        td_saved_init(&st->sv[0], x);
        td_saved_init(&st->sv[1], w);
    }
    return finish(st, ins, 3, out, out_p);
}

/* ---- softmax ---------------------------------------------------------- */

#define SOFTMAX_LOOP(T, EXP, LOG)                                           \
    do {                                                                    \
        const T *X = td_tensor_data(xc);                                    \
        T *Y = td_tensor_data(out);                                         \
        for (int64_t o = 0; o < outer; o++) {                               \
            for (int64_t i = 0; i < inner; i++) {                           \
                const T *x = X + o * mid * inner + i;                       \
                T *y = Y + o * mid * inner + i;                             \
                T mx = -INFINITY;                                           \
                double s = 0;                                               \
                for (int64_t m = 0; m < mid; m++)                           \
                    if (x[m * inner] > mx) mx = x[m * inner];               \
                for (int64_t m = 0; m < mid; m++)                           \
                    s += EXP(x[m * inner] - mx);                            \
                if (log_out) {                                              \
                    T lse = mx + (T)LOG(s);                                 \
                    for (int64_t m = 0; m < mid; m++)                       \
                        y[m * inner] = x[m * inner] - lse;                  \
                } else {                                                    \
                    T inv = (T)(1.0 / s);                                   \
                    for (int64_t m = 0; m < mid; m++)                       \
                        y[m * inner] = EXP(x[m * inner] - mx) * inv;        \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

static td_status_t
softmax_impl(td_tensor_t *a, int dim, int log_out, td_tensor_t **out_p)
{
    const char *name = log_out ? "log_softmax" : "softmax";
    int64_t outer = 1, inner = 1, mid;
    td_tensor_t *xc, *out;
    op_state_t *st = NULL;
    td_status_t status = check_float(name, a);

    if (status != TD_OK) {
        return status;
    }
    if (a->ndim == 0) {
        return td_error(TD_ERR_SHAPE, "%s: needs at least 1 dimension", name);
    }
    if (dim < 0) {
        dim += a->ndim;
    }
    if (dim < 0 || dim >= a->ndim) {
        return td_error(TD_ERR_RANGE, "%s: dim out of range for %s", name,
                        TD_SHAPE_STR(a));
    }
    for (int d = 0; d < dim; d++) {
        outer *= a->shape[d];
    }
    for (int d = dim + 1; d < a->ndim; d++) {
        inner *= a->shape[d];
    }
    mid = a->shape[dim];
    status = td_tensor_contiguous(a, &xc);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &out);
    if (status != TD_OK) {
        td_tensor_release(xc);
        return status;
    }
    if (a->dtype == TD_FLOAT32) {
        SOFTMAX_LOOP(float, expf, log);
    } else {
        SOFTMAX_LOOP(double, exp, log);
    }
    td_tensor_release(xc);
    if (needs_state(&a, 1)) {
        st = state_if_needed(log_out ? K_LOG_SOFTMAX : K_SOFTMAX, &a, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->dim = dim;
        td_saved_init(&st->sv[0], a);
    }
    return finish(st, &a, 1, out, out_p);
}

td_status_t td_softmax(td_tensor_t *a, int dim, td_tensor_t **o)
{ return softmax_impl(a, dim, 0, o); }
td_status_t td_log_softmax(td_tensor_t *a, int dim, td_tensor_t **o)
{ return softmax_impl(a, dim, 1, o); }

/* ---- indexing ---------------------------------------------------------- */

static td_status_t
check_index(const char *op, td_tensor_t *index, int64_t limit)
{
    const int64_t *ix;
    int64_t n = td_tensor_numel(index);

    if (index->dtype != TD_INT64) {
        return td_error(TD_ERR_DTYPE, "%s: index dtype is %s, not int64", op,
                        td_dtype_name(index->dtype));
    }
    if (!td_tensor_is_contiguous(index)) {
        return td_error(TD_ERR_INVALID, "%s: index %s is not contiguous", op,
                        TD_SHAPE_STR(index));
    }
    ix = td_tensor_data(index);
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= limit) {
            return td_error(TD_ERR_RANGE, "%s: index[%lld]=%lld is outside "
                            "[0, %lld)", op, (long long)i, (long long)ix[i],
                            (long long)limit);
        }
    }
    return TD_OK;
}

/* outer / inner element counts around DIM of SHAPE */
static void
around(const int64_t *shape, int ndim, int dim, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++) {
        *outer *= shape[d];
    }
    for (int d = dim + 1; d < ndim; d++) {
        *inner *= shape[d];
    }
}

/* Typed loops: out[o, j, i] = a[o, ix[j], i] (select) or
 * out[o, ix[j], i] += a[o, j, i] (add). Copies go through doubles only in
 * the two float types, which is exact. */
#define INDEX_LOOP(T)                                                       \
    do {                                                                    \
        const T *A = td_tensor_data(ac);                                    \
        T *O = td_tensor_data(out);                                         \
        for (int64_t o = 0; o < outer; o++)                                 \
            for (int64_t j = 0; j < nidx; j++) {                            \
                const T *sp_ = add ? A + (o * nidx + j) * inner             \
                                   : A + (o * amid + ix[j]) * inner;        \
                T *dp_ = add ? O + (o * omid + ix[j]) * inner               \
                             : O + (o * nidx + j) * inner;                  \
                if (add) for (int64_t i = 0; i < inner; i++) dp_[i] += sp_[i]; \
                else memcpy(dp_, sp_, (size_t)inner * sizeof(T));           \
            }                                                               \
    } while (0)

td_status_t
td_index_select(td_tensor_t *a, int dim, td_tensor_t *index,
                td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], outer, inner, nidx, amid, omid = 0;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    op_state_t *st = NULL;
    int add = 0;
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
    around(a->shape, a->ndim, dim, &outer, &inner);
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
    (void)omid;
    if (td_dtype_size(a->dtype) == 4) {
        INDEX_LOOP(float);
    } else {
        INDEX_LOOP(double);
    }
    td_tensor_release(ac);
    if (needs_state(&a, 1)) {
        st = state_if_needed(K_INDEX_SELECT, &a, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "index_select: out of memory");
        }
        st->dim = dim;
        st->ndim_a = a->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
        td_saved_init(&st->sv[0], index);
    }
    return finish(st, &a, 1, out, out_p);
}

td_status_t
td_index_add_new(const int64_t *shape, int ndim, int dim, td_tensor_t *index,
                 td_tensor_t *src, td_tensor_t **out_p)
{
    int64_t outer, inner, nidx, amid = 0, omid;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    op_state_t *st = NULL;
    int add = 1;
    td_status_t status = check_float("index_add", src);

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
                        td_shape_str(shape, ndim, (char[96]){0}, 96));
    }
    for (int d = 0; d < ndim; d++) {
        if (d != dim && shape[d] != src->shape[d]) {
            return td_error(TD_ERR_SHAPE, "index_add: source %s does not fit "
                            "%s outside dim %d", TD_SHAPE_STR(src),
                            td_shape_str(shape, ndim, (char[96]){0}, 96), dim);
        }
    }
    status = check_index("index_add", index, shape[dim]);
    if (status != TD_OK) {
        return status;
    }
    ix = td_tensor_data(index);
    nidx = td_tensor_numel(index);
    around(shape, ndim, dim, &outer, &inner);
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
    (void)amid;
    if (src->dtype == TD_FLOAT32) {
        INDEX_LOOP(float);
    } else {
        INDEX_LOOP(double);
    }
    td_tensor_release(ac);
    if (needs_state(&src, 1)) {
        st = state_if_needed(K_INDEX_ADD, &src, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "index_add: out of memory");
        }
        st->dim = dim;
        td_saved_init(&st->sv[0], index);
    }
    return finish(st, &src, 1, out, out_p);
}

/* gather/scatter along DIM with one index per (outer, inner) position */
#define GATHER_LOOP(T)                                                      \
    do {                                                                    \
        const T *A = td_tensor_data(ac);                                    \
        T *O = td_tensor_data(out);                                         \
        for (int64_t o = 0; o < outer; o++)                                 \
            for (int64_t i = 0; i < inner; i++) {                           \
                int64_t j = ix[o * inner + i];                              \
                if (scatter) O[(o * mid + j) * inner + i] += A[o * inner + i]; \
                else O[o * inner + i] = A[(o * mid + j) * inner + i];       \
            }                                                               \
    } while (0)

static td_status_t
gather_scatter(td_tensor_t *a, int dim, td_tensor_t *index, int64_t size,
               int scatter, td_tensor_t **out_p)
{
    const char *name = scatter ? "scatter" : "gather";
    int64_t shape[TD_MAX_DIMS], outer, inner, mid;
    const int64_t *ix;
    td_tensor_t *ac, *out;
    op_state_t *st = NULL;
    int nd = 0;
    td_status_t status = check_float(name, a);

    if (status != TD_OK) {
        return status;
    }
    if (scatter) {
        /* a has the index's shape; the result gets DIM of SIZE back */
        if (dim < 0) {
            dim += a->ndim + 1;
        }
        if (dim < 0 || dim > a->ndim || !td_shape_equal(a, index)) {
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
    around(scatter ? shape : a->shape, scatter ? nd : a->ndim, dim, &outer,
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
    if (a->dtype == TD_FLOAT32) {
        GATHER_LOOP(float);
    } else {
        GATHER_LOOP(double);
    }
    td_tensor_release(ac);
    if (needs_state(&a, 1)) {
        st = state_if_needed(scatter ? K_SCATTER : K_GATHER, &a, 1);
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->dim = dim;
        st->c = (double)mid;
        td_saved_init(&st->sv[0], index);
    }
    return finish(st, &a, 1, out, out_p);
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

#define MAX_LOOP(T)                                                         \
    do {                                                                    \
        const T *A = td_tensor_data(ac);                                    \
        for (int64_t o = 0; o < outer; o++)                                 \
            for (int64_t i = 0; i < inner; i++) {                           \
                const T *x = A + o * mid * inner + i;                       \
                int64_t best = 0;                                           \
                for (int64_t m = 1; m < mid; m++)                           \
                    if (x[m * inner] > x[best * inner] ||                   \
                        (isnan(x[m * inner]) && !isnan(x[best * inner])))   \
                        best = m;                                           \
                ix[o * inner + i] = best;                                   \
            }                                                               \
    } while (0)

td_status_t
td_max_dim(td_tensor_t *a, int dim, int keepdim, td_tensor_t **values,
           td_tensor_t **indices)
{
    int64_t shape[TD_MAX_DIMS], outer, inner, mid;
    td_tensor_t *ac, *idx, *v, *vk, *ik;
    int64_t *ix;
    int nd = 0;
    td_status_t status = check_float("max", a);

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
    around(a->shape, a->ndim, dim, &outer, &inner);
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
    ix = td_tensor_data(idx);
    if (a->dtype == TD_FLOAT32) {
        MAX_LOOP(float);
    } else {
        MAX_LOOP(double);
    }
    td_tensor_release(ac);
    status = td_gather_dim(a, dim, idx, &v);
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

/* ---- losses (compositions of the ops above) ----------------------------- */

static td_status_t
reduce(td_tensor_t *t, td_reduction_t reduction, td_tensor_t **out)
{
    switch (reduction) {
    case TD_REDUCTION_MEAN: return td_mean(t, out);
    case TD_REDUCTION_SUM: return td_sum(t, out);
    case TD_REDUCTION_NONE: *out = td_tensor_retain(t); return TD_OK;
    }
    return td_error(TD_ERR_INVALID, "loss: reduction=%d is unknown", reduction);
}

/* nll = -input[i, target[i]], reduced */
td_status_t
td_nll_loss(td_tensor_t *input, td_tensor_t *target, td_reduction_t reduction,
            td_tensor_t **out)
{
    td_tensor_t *picked, *r;
    td_status_t status;

    if (input->ndim != 2 || target->ndim != 1 ||
        target->shape[0] != input->shape[0]) {
        return td_error(TD_ERR_SHAPE, "nll_loss: input %s and target %s (need "
                        "[N, C] and [N])", TD_SHAPE_STR(input),
                        TD_SHAPE_STR(target));
    }
    status = td_gather_dim(input, 1, target, &picked);
    if (status != TD_OK) {
        return status;
    }
    status = reduce(picked, reduction, &r);
    td_tensor_release(picked);
    if (status != TD_OK) {
        return status;
    }
    status = td_neg(r, out);
    td_tensor_release(r);
    return status;
}

td_status_t
td_cross_entropy(td_tensor_t *logits, td_tensor_t *target,
                 td_reduction_t reduction, td_tensor_t **out)
{
    td_tensor_t *lp;
    td_status_t status;

    if (logits->ndim != 2) {
        return td_error(TD_ERR_SHAPE, "cross_entropy: logits %s are not "
                        "[N, C]", TD_SHAPE_STR(logits));
    }
    status = td_log_softmax(logits, 1, &lp);
    if (status != TD_OK) {
        return status;
    }
    status = td_nll_loss(lp, target, reduction, out);
    td_tensor_release(lp);
    return status;
}

td_status_t
td_mse_loss(td_tensor_t *a, td_tensor_t *b, td_reduction_t reduction,
            td_tensor_t **out)
{
    td_tensor_t *d, *sq;
    td_status_t status;

    if (!td_shape_equal(a, b)) {
        return td_error(TD_ERR_SHAPE, "mse_loss: input %s and target %s "
                        "differ", TD_SHAPE_STR(a), TD_SHAPE_STR(b));
    }
    status = td_sub(a, b, &d);
    if (status != TD_OK) {
        return status;
    }
    status = td_mul(d, d, &sq);
    td_tensor_release(d);
    if (status != TD_OK) {
        return status;
    }
    status = reduce(sq, reduction, out);
    td_tensor_release(sq);
    return status;
}

td_status_t
td_embedding(td_tensor_t *weight, td_tensor_t *indices, td_tensor_t **out)
{
    int64_t flat[1] = {td_tensor_numel(indices)}, shape[TD_MAX_DIMS];
    td_tensor_t *fi, *rows;
    td_status_t status;

    if (weight->ndim != 2 || indices->ndim >= TD_MAX_DIMS) {
        return td_error(TD_ERR_SHAPE, "embedding: weight %s is not [V, D]",
                        TD_SHAPE_STR(weight));
    }
    status = td_tensor_reshape(indices, flat, 1, &fi);
    if (status != TD_OK) {
        return status;
    }
    status = td_index_select(weight, 0, fi, &rows);
    td_tensor_release(fi);
    if (status != TD_OK) {
        return status;
    }
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof(int64_t));
    shape[indices->ndim] = weight->shape[1];
    status = td_tensor_reshape(rows, shape, indices->ndim + 1, out);
    td_tensor_release(rows);
    return status;
}

td_status_t
td_embedding_bag(td_tensor_t *weight, td_tensor_t *indices,
                 td_tensor_t *offsets, td_bag_mode_t mode, td_tensor_t **out)
{
    int64_t n = td_tensor_numel(indices), nb, shape[2], col[2];
    td_tensor_t *bag = NULL, *rows = NULL, *scale = NULL, *scaled = NULL;
    const int64_t *off;
    int64_t *bag_of;
    double *sc;
    td_status_t status;

    if (weight->ndim != 2 || indices->ndim != 1 || offsets->ndim != 1 ||
        offsets->dtype != TD_INT64 || !td_tensor_is_contiguous(offsets)) {
        return td_error(TD_ERR_SHAPE, "embedding_bag: weight %s, indices %s, "
                        "offsets %s (need [V, D], [n], int64 [B])",
                        TD_SHAPE_STR(weight), TD_SHAPE_STR(indices),
                        TD_SHAPE_STR(offsets));
    }
    nb = offsets->shape[0];
    off = td_tensor_data(offsets);
    for (int64_t b = 0; b < nb; b++) {
        if ((b == 0 && off[0] != 0) || (b > 0 && off[b] < off[b - 1]) ||
            off[b] > n) {
            return td_error(TD_ERR_RANGE, "embedding_bag: offsets[%lld]=%lld "
                            "(must start at 0, not decrease, stay <= %lld)",
                            (long long)b, (long long)off[b], (long long)n);
        }
    }
    status = td_tensor_empty(&n, 1, TD_INT64, TD_CPU, &bag);
    if (status == TD_OK) {
        col[0] = n;
        col[1] = 1;
        status = td_tensor_empty(col, 2, weight->dtype, TD_CPU, &scale);
    }
    if (status != TD_OK) {
        goto out;
    }
    bag_of = td_tensor_data(bag);
    for (int64_t b = 0; b < nb; b++) {
        int64_t end = b + 1 < nb ? off[b + 1] : n;
        for (int64_t j = off[b]; j < end; j++) {
            bag_of[j] = b;
        }
    }
    /* scale[j] = 1 / |bag of j| for mean, in double, converted once */
    {
        td_tensor_t *tmp;
        status = td_tensor_empty(col, 2, TD_FLOAT64, TD_CPU, &tmp);
        if (status != TD_OK) {
            goto out;
        }
        sc = td_tensor_data(tmp);
        for (int64_t b = 0; b < nb; b++) {
            int64_t end = b + 1 < nb ? off[b + 1] : n;
            for (int64_t j = off[b]; j < end; j++) {
                sc[j] = mode == TD_BAG_MEAN ? 1.0 / (double)(end - off[b]) : 1.0;
            }
        }
        status = td_tensor_copy_(scale, tmp);
        td_tensor_release(tmp);
        if (status != TD_OK) {
            goto out;
        }
    }
    status = td_index_select(weight, 0, indices, &rows);
    if (status == TD_OK) {
        status = td_mul(rows, scale, &scaled);
    }
    if (status == TD_OK) {
        shape[0] = nb;
        shape[1] = weight->shape[1];
        status = td_index_add_new(shape, 2, 0, bag, scaled, out);
    }
out:
    td_tensor_release(bag);
    td_tensor_release(rows);
    td_tensor_release(scale);
    td_tensor_release(scaled);
    return status;
}

td_status_t
td_dropout(td_tensor_t *a, double p, int training, uint64_t seed,
           td_tensor_t **out)
{
    td_tensor_t *mask, *u;
    td_status_t status;

    if (p < 0 || p > 1) {
        return td_error(TD_ERR_RANGE, "dropout: p=%g is outside [0, 1]", p);
    }
    if (!training || p == 0) {
        *out = td_tensor_retain(a);
        return TD_OK;
    }
    status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &u);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_uniform_(u, 0, 1, seed);
    if (status == TD_OK) {
        status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &mask);
    }
    if (status != TD_OK) {
        td_tensor_release(u);
        return status;
    }
    {
        /* mask = (u >= p) / (1 - p); p == 1 drops everything */
        int64_t n = td_tensor_numel(u);
        double keep = p < 1 ? 1.0 / (1.0 - p) : 0.0;
        for (int64_t i = 0; i < n; i++) {
            double ui = a->dtype == TD_FLOAT32 ? ((float *)td_tensor_data(u))[i]
                                               : ((double *)td_tensor_data(u))[i];
            double m = ui >= p ? keep : 0.0;
            if (a->dtype == TD_FLOAT32) {
                ((float *)td_tensor_data(mask))[i] = (float)m;
            } else {
                ((double *)td_tensor_data(mask))[i] = m;
            }
        }
    }
    td_tensor_release(u);
    status = td_mul(a, mask, out);
    td_tensor_release(mask);
    return status;
}

/* ---- backward formulas -------------------------------------------------- */

/* R = F(...) with TRY-style unwinding: every temporary is released at the
 * end of op_backward. */
#define T(expr)                                                             \
    do {                                                                    \
        status = (expr);                                                    \
        if (status != TD_OK) goto out;                                      \
    } while (0)

static td_status_t
op_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL, *b = NULL;
    td_tensor_t *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    td_status_t status = TD_OK;
    int dims[TD_MAX_DIMS], nd = 0;

    if (st->kind == K_MUL || st->kind == K_DIV || st->kind == K_POW ||
        (st->kind >= K_EXP && st->kind <= K_GELU_GRAD) ||
        (st->kind >= K_MATMUL && st->kind <= K_INDEX_ADD)) {
        T(td_saved_unpack(&st->sv[0], node, &a));
    }
    if (st->kind == K_MUL || st->kind == K_DIV || st->kind == K_MATMUL ||
        st->kind == K_LINEAR) {
        T(td_saved_unpack(&st->sv[1], node, &b));
    }
    switch (st->kind) {
    case K_ADD:
        T(td_sum_to(g, st->shape_a, st->ndim_a, &gout[0]));
        T(td_sum_to(g, st->shape_b, st->ndim_b, &gout[1]));
        break;
    case K_SUB:
        T(td_sum_to(g, st->shape_a, st->ndim_a, &gout[0]));
        T(td_neg(g, &t1));
        T(td_sum_to(t1, st->shape_b, st->ndim_b, &gout[1]));
        break;
    case K_MUL:
        if (node->next[0].node != NULL) {
            T(td_mul(g, b, &t1));
            T(td_sum_to(t1, st->shape_a, st->ndim_a, &gout[0]));
        }
        if (node->next[1].node != NULL) {
            T(td_mul(g, a, &t2));
            T(td_sum_to(t2, st->shape_b, st->ndim_b, &gout[1]));
        }
        break;
    case K_DIV:      /* d(a/b) = g/b, -(g/b)(a/b) */
        T(td_div(g, b, &t1));
        T(td_sum_to(t1, st->shape_a, st->ndim_a, &gout[0]));
        if (node->next[1].node != NULL) {
            T(td_div(a, b, &t2));
            T(td_mul(t1, t2, &t3));
            T(td_neg(t3, &t4));
            T(td_sum_to(t4, st->shape_b, st->ndim_b, &gout[1]));
        }
        break;
    case K_NEG:
        T(td_neg(g, &gout[0]));
        break;
    case K_POW:      /* g * c * x^(c-1) */
        T(td_pow_scalar(a, st->c - 1, &t1));
        T(td_mul_scalar(t1, st->c, &t2));
        T(td_mul(g, t2, &gout[0]));
        break;
    case K_MULS:
        T(td_mul_scalar(g, st->c, &gout[0]));
        break;
    case K_ADDS:
        gout[0] = td_tensor_retain(g);
        break;
    case K_EXP:
        T(td_exp(a, &t1));
        T(td_mul(g, t1, &gout[0]));
        break;
    case K_LOG:
        T(td_div(g, a, &gout[0]));
        break;
    case K_SQRT:     /* g / (2 sqrt(x)) */
        T(td_sqrt(a, &t1));
        T(td_mul_scalar(t1, 2.0, &t2));
        T(td_div(g, t2, &gout[0]));
        break;
    case K_ABS:
        T(constant(TD_UN_SIGN, a, &t1));
        T(td_mul(g, t1, &gout[0]));
        break;
    case K_TANH:     /* g (1 - tanh^2) */
        T(td_tanh(a, &t1));
        T(td_mul(t1, t1, &t2));
        T(td_mul_scalar(t2, -1.0, &t3));
        T(td_add_scalar(t3, 1.0, &t4));
        T(td_mul(g, t4, &gout[0]));
        break;
    case K_SIGMOID:  /* g s (1 - s) */
        T(td_sigmoid(a, &t1));
        T(td_mul_scalar(t1, -1.0, &t2));
        T(td_add_scalar(t2, 1.0, &t3));
        T(td_mul(t1, t3, &t4));
        T(td_mul(g, t4, &gout[0]));
        break;
    case K_RELU:
        if (!td_grad_enabled()) {
            /* first order only: one fused pass g * (x > 0) */
            T(relu_mask(g, a, &gout[0]));
            break;
        }
        T(constant(TD_UN_STEP, a, &t1));
        T(td_mul(g, t1, &gout[0]));
        break;
    case K_GELU:
        T(gelu_grad(a, &t1));
        T(td_mul(g, t1, &gout[0]));
        break;
    case K_GELU_GRAD:
        T(constant(TD_UN_GELU_GRAD2, a, &t1));
        T(td_mul(g, t1, &gout[0]));
        break;
    case K_SUM: {    /* broadcast g back over the reduced dims, scaled */
        int64_t kshape[TD_MAX_DIMS];
        for (int d = 0; d < st->ndim_a; d++) {
            kshape[d] = (st->mask & (1u << d)) ? 1 : st->shape_a[d];
        }
        T(td_tensor_reshape(g, kshape, st->ndim_a, &t1));
        if (st->c != 1.0) {
            T(td_mul_scalar(t1, st->c, &t2));
        } else {
            t2 = td_tensor_retain(t1);
        }
        T(td_tensor_expand(t2, st->shape_a, st->ndim_a, &gout[0]));
        break;
    }
    case K_MATMUL:   /* ga = g b^T, gb = a^T g, summed over broadcast batch */
        if (node->next[0].node != NULL) {
            T(td_tensor_transpose(b, -1, -2, &t1));
            T(td_matmul(g, t1, &t2));
            T(td_sum_to(t2, a->shape, a->ndim, &gout[0]));
        }
        if (node->next[1].node != NULL) {
            T(td_tensor_transpose(a, -1, -2, &t3));
            T(td_matmul(t3, g, &t4));
            T(td_sum_to(t4, b->shape, b->ndim, &gout[1]));
        }
        break;
    case K_LINEAR:   /* gx = g W, gW = g^T x, gb = sum_rows(g) */
        if (node->next[0].node != NULL) {
            T(td_matmul(g, b, &gout[0]));
        }
        if (node->next[1].node != NULL) {
            T(td_tensor_transpose(g, 0, 1, &t1));
            T(td_matmul(t1, a, &gout[1]));
        }
        if (node->n_next > 2 && node->next[2].node != NULL) {
            dims[nd++] = 0;
            T(td_sum_dims(g, dims, nd, 0, &gout[2]));
        }
        break;
    case K_SOFTMAX:  /* y (g - sum(g y)) */
        dims[nd++] = st->dim;
        T(td_softmax(a, st->dim, &t1));
        T(td_mul(g, t1, &t2));
        T(td_sum_dims(t2, dims, nd, 1, &t3));
        T(td_sub(g, t3, &t4));
        T(td_mul(t1, t4, &gout[0]));
        break;
    case K_LOG_SOFTMAX:  /* g - softmax(x) sum(g) */
        dims[nd++] = st->dim;
        T(td_softmax(a, st->dim, &t1));
        T(td_sum_dims(g, dims, nd, 1, &t2));
        T(td_mul(t1, t2, &t3));
        T(td_sub(g, t3, &gout[0]));
        break;
    case K_GATHER:
        T(td_scatter_dim_new(g, st->dim, a, (int64_t)st->c, &gout[0]));
        break;
    case K_SCATTER:
        T(td_gather_dim(g, st->dim, a, &gout[0]));
        break;
    case K_INDEX_SELECT:
        T(td_index_add_new(st->shape_a, st->ndim_a, st->dim, a, g, &gout[0]));
        break;
    case K_INDEX_ADD:
        T(td_index_select(g, st->dim, a, &gout[0]));
        break;
    }
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    if (status != TD_OK) {
        for (int i = 0; i < node->n_next; i++) {
            td_tensor_release(gout[i]);
            gout[i] = NULL;
        }
    }
    return status;
}
