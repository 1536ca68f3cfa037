/* runtime/tensor/ops_elementwise.c: the elementwise ops (add, sub, mul,
 * div with broadcasting; neg, pow, exp, log, sqrt, abs, tanh, sigmoid,
 * relu, gelu and the scalar ops), each forward one call of the device's
 * binary/unary kernel and each backward right after it. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/ops_internal.h"
#include "todist/device.h"
#include <todist/ops.h>

/* ---- binary ops (broadcasting) ---------------------------------------- */

static const char *bin_names[] = {"add", "sub", "mul", "div"};

/* OUT = A BOP B; records OPS (saving A and B when SAVE_INPUTS) */
static td_status_t
binary(const td_node_ops_t *ops, int save_inputs, td_binary_op_t bop,
       td_tensor_t *a, td_tensor_t *b, td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], sa[TD_MAX_DIMS], sb[TD_MAX_DIMS];
    td_tensor_t *ins[2] = {a, b}, *out;
    td_op_state_t *st = NULL;
    int nd;
    td_status_t status;

    status = td__op_check_pair(bin_names[bop], a, b);
    if (status == TD_OK) {
        status = td__op_broadcast_shape(bin_names[bop], a, b, shape, &nd, sa,
                                       sb);
    }
    if (status == TD_OK) {
        status = td_tensor_empty(shape, nd, a->dtype, a->device, &out);
    }
    if (status != TD_OK) {
        return status;
    }
    td__kernels_get(a->device)->binary(bop, a->dtype, td_tensor_data(out),
                                      (td_operand_t){td_tensor_data(a), sa},
                                      (td_operand_t){td_tensor_data(b), sb},
                                      shape, nd);
    if (td__op_needs_state(ins, 2)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory",
                            bin_names[bop]);
        }
        st->ndim_a = a->ndim;
        st->ndim_b = b->ndim;
        memcpy(st->shape_a, a->shape, sizeof(st->shape_a));
        memcpy(st->shape_b, b->shape, sizeof(st->shape_b));
        if (save_inputs) {
            td_saved_init(&st->sv[0], a);
            td_saved_init(&st->sv[1], b);
        }
    }
    return td__op_finish(ops, st, ins, 2, out, out_p);
}

/* d(a+b) = g, g (each summed back to its operand's shape) */
static td_status_t
add_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0];
    td_status_t status;

    TD_OP_TRY(td__sum_to(g, st->shape_a, st->ndim_a, &gout[0]));
    TD_OP_TRY(td__sum_to(g, st->shape_b, st->ndim_b, &gout[1]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t add_ops = TD_OP_NODE("AddBackward", add_backward);

td_status_t
td_add(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    return binary(&add_ops, 0, TD_BIN_ADD, a, b, out);
}

/* d(a-b) = g, -g */
static td_status_t
sub_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *t1 = NULL;
    td_status_t status;

    TD_OP_TRY(td__sum_to(g, st->shape_a, st->ndim_a, &gout[0]));
    TD_OP_TRY(td_neg(g, &t1));
    TD_OP_TRY(td__sum_to(t1, st->shape_b, st->ndim_b, &gout[1]));
out:
    td_tensor_release(t1);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t sub_ops = TD_OP_NODE("SubBackward", sub_backward);

td_status_t
td_sub(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    return binary(&sub_ops, 0, TD_BIN_SUB, a, b, out);
}

/* d(ab) = g b, g a (only for the inputs that need it) */
static td_status_t
mul_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL, *b = NULL, *t1 = NULL, *t2 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_saved_unpack(&st->sv[1], node, &b));
    if (node->next[0].node != NULL) {
        TD_OP_TRY(td_mul(g, b, &t1));
        TD_OP_TRY(td__sum_to(t1, st->shape_a, st->ndim_a, &gout[0]));
    }
    if (node->next[1].node != NULL) {
        TD_OP_TRY(td_mul(g, a, &t2));
        TD_OP_TRY(td__sum_to(t2, st->shape_b, st->ndim_b, &gout[1]));
    }
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t mul_ops = TD_OP_NODE("MulBackward", mul_backward);

td_status_t
td_mul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    return binary(&mul_ops, 1, TD_BIN_MUL, a, b, out);
}

/* d(a/b) = g/b, -(g/b)(a/b) */
static td_status_t
div_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL, *b = NULL;
    td_tensor_t *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_saved_unpack(&st->sv[1], node, &b));
    TD_OP_TRY(td_div(g, b, &t1));
    TD_OP_TRY(td__sum_to(t1, st->shape_a, st->ndim_a, &gout[0]));
    if (node->next[1].node != NULL) {
        TD_OP_TRY(td_div(a, b, &t2));
        TD_OP_TRY(td_mul(t1, t2, &t3));
        TD_OP_TRY(td_neg(t3, &t4));
        TD_OP_TRY(td__sum_to(t4, st->shape_b, st->ndim_b, &gout[1]));
    }
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t div_ops = TD_OP_NODE("DivBackward", div_backward);

td_status_t
td_div(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    return binary(&div_ops, 1, TD_BIN_DIV, a, b, out);
}

/* ---- unary ops ---------------------------------------------------------- */

/* OUT = UOP(A, C); records OPS when non-NULL (saving A when SAVE_INPUT).
 * OPS NULL: a constant inside a backward formula (the relu mask). */
static td_status_t
unary(const td_node_ops_t *ops, int save_input, td_unary_op_t uop,
      const char *name, td_tensor_t *a, double c, td_tensor_t **out_p)
{
    td_tensor_t *out;
    td_op_state_t *st = NULL;
    td_status_t status = td__op_check_float(name, a);

    if (status == TD_OK) {
        status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &out);
    }
    if (status != TD_OK) {
        return status;
    }
    td__kernels_get(a->device)->unary(uop, a->dtype, td_tensor_data(out),
                                     (td_operand_t){td_tensor_data(a), a->strides},
                                     c, a->shape, a->ndim);
    if (ops != NULL && td__op_needs_state(&a, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->c = c;
        if (save_input) {
            td_saved_init(&st->sv[0], a);
        }
    }
    return td__op_finish(ops, st, &a, 1, out, out_p);
}

/* g * F(a), F one of the ops (so the product stays differentiable) */
static td_status_t
times_of_input(td_node_t *node, td_tensor_t *g,
               td_status_t (*f)(td_tensor_t *, td_tensor_t **),
               td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL, *t1 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(f(a, &t1));
    TD_OP_TRY(td_mul(g, t1, &gout[0]));
out:
    td_tensor_release(t1);
    return td_op_backward_done(status, node, gout);
}

static td_status_t
neg_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    return td_op_backward_done(td_neg(gin[0], &gout[0]), node, gout);
}

static const td_node_ops_t neg_ops = TD_OP_NODE("NegBackward", neg_backward);

td_status_t
td_neg(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&neg_ops, 0, TD_UN_NEG, "neg", a, 0, out);
}

/* d x^c = g c x^(c-1) */
static td_status_t
pow_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL, *t1 = NULL, *t2 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_pow_scalar(a, st->c - 1, &t1));
    TD_OP_TRY(td_mul_scalar(t1, st->c, &t2));
    TD_OP_TRY(td_mul(gin[0], t2, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t pow_ops = TD_OP_NODE("PowBackward", pow_backward);

td_status_t
td_pow_scalar(td_tensor_t *a, double e, td_tensor_t **out)
{
    return unary(&pow_ops, 1, TD_UN_POW, "pow", a, e, out);
}

static td_status_t
mul_scalar_backward(td_node_t *node, td_tensor_t *const *gin,
                    td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);

    return td_op_backward_done(td_mul_scalar(gin[0], st->c, &gout[0]), node,
                               gout);
}

static const td_node_ops_t mul_scalar_ops =
    TD_OP_NODE("MulScalarBackward", mul_scalar_backward);

td_status_t
td_mul_scalar(td_tensor_t *a, double c, td_tensor_t **out)
{
    return unary(&mul_scalar_ops, 0, TD_UN_MUL_SCALAR, "mul", a, c, out);
}

static td_status_t
add_scalar_backward(td_node_t *node, td_tensor_t *const *gin,
                    td_tensor_t **gout)
{
    gout[0] = td_tensor_retain(gin[0]);
    return TD_OK;
}

static const td_node_ops_t add_scalar_ops =
    TD_OP_NODE("AddScalarBackward", add_scalar_backward);

td_status_t
td_add_scalar(td_tensor_t *a, double c, td_tensor_t **out)
{
    return unary(&add_scalar_ops, 0, TD_UN_ADD_SCALAR, "add", a, c, out);
}

/* d exp(x) = g exp(x) */
static td_status_t
exp_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    return times_of_input(node, gin[0], td_exp, gout);
}

static const td_node_ops_t exp_ops = TD_OP_NODE("ExpBackward", exp_backward);

td_status_t
td_exp(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&exp_ops, 1, TD_UN_EXP, "exp", a, 0, out);
}

/* d log(x) = g / x */
static td_status_t
log_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_div(gin[0], a, &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t log_ops = TD_OP_NODE("LogBackward", log_backward);

td_status_t
td_log(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&log_ops, 1, TD_UN_LOG, "log", a, 0, out);
}

/* d sqrt(x) = g / (2 sqrt(x)) */
static td_status_t
sqrt_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL, *t1 = NULL, *t2 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_sqrt(a, &t1));
    TD_OP_TRY(td_mul_scalar(t1, 2.0, &t2));
    TD_OP_TRY(td_div(gin[0], t2, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t sqrt_ops = TD_OP_NODE("SqrtBackward", sqrt_backward);

td_status_t
td_sqrt(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&sqrt_ops, 1, TD_UN_SQRT, "sqrt", a, 0, out);
}

/* sign(x), step(x), gelu''(x): constants of a backward (no node) */
static td_status_t
sign_of(td_tensor_t *a, td_tensor_t **out)
{
    return unary(NULL, 0, TD_UN_SIGN, "backward", a, 0, out);
}

static td_status_t
step_of(td_tensor_t *a, td_tensor_t **out)
{
    return unary(NULL, 0, TD_UN_STEP, "backward", a, 0, out);
}

static td_status_t
gelu_grad2_of(td_tensor_t *a, td_tensor_t **out)
{
    return unary(NULL, 0, TD_UN_GELU_GRAD2, "backward", a, 0, out);
}

/* d |x| = g sign(x) */
static td_status_t
abs_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    return times_of_input(node, gin[0], sign_of, gout);
}

static const td_node_ops_t abs_ops = TD_OP_NODE("AbsBackward", abs_backward);

td_status_t
td_abs(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&abs_ops, 1, TD_UN_ABS, "abs", a, 0, out);
}

/* d tanh(x) = g (1 - tanh^2 x) */
static td_status_t
tanh_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_tanh(a, &t1));
    TD_OP_TRY(td_mul(t1, t1, &t2));
    TD_OP_TRY(td_mul_scalar(t2, -1.0, &t3));
    TD_OP_TRY(td_add_scalar(t3, 1.0, &t4));
    TD_OP_TRY(td_mul(gin[0], t4, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t tanh_ops = TD_OP_NODE("TanhBackward", tanh_backward);

td_status_t
td_tanh(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&tanh_ops, 1, TD_UN_TANH, "tanh", a, 0, out);
}

/* d sigmoid(x) = g s (1 - s) */
static td_status_t
sigmoid_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_sigmoid(a, &t1));
    TD_OP_TRY(td_mul_scalar(t1, -1.0, &t2));
    TD_OP_TRY(td_add_scalar(t2, 1.0, &t3));
    TD_OP_TRY(td_mul(t1, t3, &t4));
    TD_OP_TRY(td_mul(gin[0], t4, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t sigmoid_ops =
    TD_OP_NODE("SigmoidBackward", sigmoid_backward);

td_status_t
td_sigmoid(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&sigmoid_ops, 1, TD_UN_SIGMOID, "sigmoid", a, 0, out);
}

/* g * (x > 0) in one pass, recording nothing (g and x have one shape) */
static td_status_t
relu_mask(td_tensor_t *g, td_tensor_t *x, td_tensor_t **out)
{
    td_status_t status = td_tensor_empty(x->shape, x->ndim, x->dtype,
                                         x->device, out);

    if (status == TD_OK) {
        td__kernels_get(x->device)->binary(
            TD_BIN_RELU_MASK, x->dtype, td_tensor_data(*out),
            (td_operand_t){td_tensor_data(g), g->strides},
            (td_operand_t){td_tensor_data(x), x->strides}, x->shape, x->ndim);
    }
    return status;
}

/* d relu(x) = g (x > 0); first order: one fused pass */
static td_status_t
relu_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *a = NULL;
    td_status_t status;

    if (td_grad_enabled()) {
        return times_of_input(node, gin[0], step_of, gout);
    }
    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(relu_mask(gin[0], a, &gout[0]));
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t relu_ops = TD_OP_NODE("ReluBackward", relu_backward);

td_status_t
td_relu(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&relu_ops, 1, TD_UN_RELU, "relu", a, 0, out);
}

/* d gelu'(x) = g gelu''(x) */
static td_status_t
gelu_grad_backward(td_node_t *node, td_tensor_t *const *gin,
                   td_tensor_t **gout)
{
    return times_of_input(node, gin[0], gelu_grad2_of, gout);
}

static const td_node_ops_t gelu_grad_ops =
    TD_OP_NODE("GeluBackwardBackward", gelu_grad_backward);

/* gelu'(x), itself differentiable (for create_graph through gelu) */
static td_status_t
gelu_grad(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&gelu_grad_ops, 1, TD_UN_GELU_GRAD, "gelu", a, 0, out);
}

/* d gelu(x) = g gelu'(x) */
static td_status_t
gelu_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    return times_of_input(node, gin[0], gelu_grad, gout);
}

static const td_node_ops_t gelu_ops = TD_OP_NODE("GeluBackward", gelu_backward);

td_status_t
td_gelu(td_tensor_t *a, td_tensor_t **out)
{
    return unary(&gelu_ops, 1, TD_UN_GELU, "gelu", a, 0, out);
}
