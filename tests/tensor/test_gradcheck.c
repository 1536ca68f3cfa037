/* test_gradcheck: every op's gradient against central finite differences
 * in float64, and second derivatives (gradgradcheck) for the ops MAML
 * needs twice differentiable. */
#include "config.h"

#include "tests/tap.h"
#include "tests/tensor/gradcheck.h"

static td_tensor_t *idx_t;     /* shared int64 index for indexing ops */
static td_tensor_t *offs_t;     /* embedding_bag offsets */

#define F1(name, call)                                                      \
    static td_status_t name(td_tensor_t **in, td_tensor_t **out)            \
    { return call; }

F1(f_add, td_add(in[0], in[1], out))
F1(f_sub, td_sub(in[0], in[1], out))
F1(f_mul, td_mul(in[0], in[1], out))
F1(f_div, td_div(in[0], in[1], out))
F1(f_neg, td_neg(in[0], out))
F1(f_pow, td_pow_scalar(in[0], 3.0, out))
F1(f_powf, td_pow_scalar(in[0], 1.5, out))
F1(f_exp, td_exp(in[0], out))
F1(f_log, td_log(in[0], out))
F1(f_sqrt, td_sqrt(in[0], out))
F1(f_abs, td_abs(in[0], out))
F1(f_tanh, td_tanh(in[0], out))
F1(f_sigmoid, td_sigmoid(in[0], out))
F1(f_relu, td_relu(in[0], out))
F1(f_gelu, td_gelu(in[0], out))
F1(f_sum, td_sum(in[0], out))
F1(f_mean, td_mean(in[0], out))
F1(f_sum1k, td_sum_dims(in[0], (int[]){1}, 1, 1, out))
F1(f_mean02, td_mean_dims(in[0], (int[]){0, 2}, 2, 0, out))
F1(f_mm, td_matmul(in[0], in[1], out))
F1(f_linear, td_linear(in[0], in[1], in[2], out))
F1(f_softmax, td_softmax(in[0], 1, out))
F1(f_logsoftmax, td_log_softmax(in[0], -1, out))
F1(f_softmax0, td_softmax(in[0], 0, out))
static td_tensor_t *bn_rm, *bn_rv;   /* fixed running statistics (eval) */
F1(f_bn_train, td_batch_norm(in[0], NULL, NULL, in[1], in[2], 1, 0.1, 1e-5,
                             out))
F1(f_bn_noaffine, td_batch_norm(in[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5,
                                out))
F1(f_bn_eval, td_batch_norm(in[0], bn_rm, bn_rv, in[1], in[2], 0, 0.1, 1e-5,
                            out))
F1(f_ce_mean, td_cross_entropy(in[0], idx_t, TD_REDUCTION_MEAN, out))
F1(f_ce_sum, td_cross_entropy(in[0], idx_t, TD_REDUCTION_SUM, out))
F1(f_nll, td_nll_loss(in[0], idx_t, TD_REDUCTION_MEAN, out))
F1(f_mse, td_mse_loss(in[0], in[1], TD_REDUCTION_MEAN, out))
F1(f_embedding, td_embedding(in[0], idx_t, out))
F1(f_bag_sum, td_embedding_bag(in[0], idx_t, offs_t, TD_BAG_SUM, out))
F1(f_bag_mean, td_embedding_bag(in[0], idx_t, offs_t, TD_BAG_MEAN, out))
F1(f_index_select, td_index_select(in[0], 1, idx_t, out))
F1(f_dropout, td_dropout(in[0], 0.3, 1, 7, out))
F1(f_transpose, td_tensor_transpose(in[0], 0, 1, out))
F1(f_permute, td_tensor_permute(in[0], (int[]){2, 0, 1}, out))
F1(f_narrow, td_tensor_narrow(in[0], 1, 1, 2, out))
F1(f_select, td_tensor_select(in[0], 0, 1, out))
F1(f_expand, td_tensor_expand(in[0], (int64_t[]){2, 3, 4}, 3, out))
F1(f_unsqueeze, td_tensor_unsqueeze(in[0], 1, out))
F1(f_to32, td_tensor_clone(in[0], out))

static td_status_t
f_max(td_tensor_t **in, td_tensor_t **out)
{
    return td_max_dim(in[0], 1, 0, out, NULL);
}

static td_status_t
f_reshape_t(td_tensor_t **in, td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t st = td_tensor_transpose(in[0], 0, 1, &t);

    if (st == TD_OK) {
        st = td_tensor_reshape(t, (int64_t[]){-1}, 1, out);
        td_tensor_release(t);
    }
    return st;
}

static td_status_t
f_mm_t(td_tensor_t **in, td_tensor_t **out)     /* a^T b through views */
{
    td_tensor_t *t;
    td_status_t st = td_tensor_transpose(in[0], 0, 1, &t);

    if (st == TD_OK) {
        st = td_matmul(t, in[1], out);
        td_tensor_release(t);
    }
    return st;
}

static td_status_t
f_cat(td_tensor_t **in, td_tensor_t **out)
{
    return td_tensor_cat(in, 2, 1, out);
}

static td_status_t
f_stack(td_tensor_t **in, td_tensor_t **out)
{
    return td_tensor_stack(in, 2, 0, out);
}

static td_status_t
f_split(td_tensor_t **in, td_tensor_t **out)   /* pieces recombined */
{
    td_tensor_t *p[4], *q;
    int n;
    td_status_t st = td_tensor_split(in[0], 2, 1, p, 4, &n);

    if (st != TD_OK) {
        return st;
    }
    st = td_mul(p[0], p[1], &q);       /* [3,2]*[3,2] */
    if (st == TD_OK) {
        st = td_tensor_cat((td_tensor_t *[]){q, p[2]}, 2, 1, out);
        td_tensor_release(q);
    }
    for (int i = 0; i < n; i++) {
        td_tensor_release(p[i]);
    }
    return st;
}

/* an MLP-like composition: tanh(x W^T + b) then log_softmax, as MAML uses */
static td_status_t
f_mlp(td_tensor_t **in, td_tensor_t **out)
{
    td_tensor_t *h, *a;
    td_status_t st = td_linear(in[0], in[1], in[2], &h);

    if (st != TD_OK) {
        return st;
    }
    st = td_tanh(h, &a);
    td_tensor_release(h);
    if (st != TD_OK) {
        return st;
    }
    st = td_cross_entropy(a, idx_t, TD_REDUCTION_MEAN, out);
    td_tensor_release(a);
    return st;
}

static td_tensor_t *
rnd(const int64_t *shape, int nd, uint64_t seed, int positive)
{
    td_tensor_t *t;

    td_tensor_empty(shape, nd, TD_FLOAT64, TD_CPU, &t);
    td_tensor_normal_(t, 0, 1, seed);
    if (positive) {
        double *p = td_tensor_data(t);
        for (int64_t i = 0; i < td_tensor_numel(t); i++) {
            p[i] = fabs(p[i]) + 0.5;
        }
    } else {
        /* keep away from the kinks of abs/relu at 0 */
        double *p = td_tensor_data(t);
        for (int64_t i = 0; i < td_tensor_numel(t); i++) {
            if (fabs(p[i]) < 0.05) {
                p[i] = 0.1;
            }
        }
    }
    td_tensor_set_requires_grad(t, 1);
    return t;
}

typedef struct {
    const char *name;
    gc_fn       fn;
    int         n;
    int64_t     shapes[3][4];
    int         ndims[3];
    int         positive;
    int         second;     /* also check second order */
} gc_case_t;

static const gc_case_t cases[] = {
    {"add broadcast", f_add, 2, {{3, 4}, {4}}, {2, 1}, 0, 1},
    {"sub broadcast", f_sub, 2, {{3, 1}, {1, 4}}, {2, 2}, 0, 1},
    {"mul broadcast", f_mul, 2, {{2, 3, 4}, {3, 1}}, {3, 2}, 0, 1},
    {"div broadcast", f_div, 2, {{3, 4}, {4}}, {2, 1}, 1, 1},
    {"neg", f_neg, 1, {{3, 4}}, {2}, 0, 1},
    {"pow 3", f_pow, 1, {{3, 4}}, {2}, 0, 1},
    {"pow 1.5", f_powf, 1, {{3, 4}}, {2}, 1, 1},
    {"exp", f_exp, 1, {{3, 4}}, {2}, 0, 1},
    {"log", f_log, 1, {{3, 4}}, {2}, 1, 1},
    {"sqrt", f_sqrt, 1, {{3, 4}}, {2}, 1, 1},
    {"abs", f_abs, 1, {{3, 4}}, {2}, 0, 1},
    {"tanh", f_tanh, 1, {{3, 4}}, {2}, 0, 1},
    {"sigmoid", f_sigmoid, 1, {{3, 4}}, {2}, 0, 1},
    {"relu", f_relu, 1, {{3, 4}}, {2}, 0, 1},
    {"gelu", f_gelu, 1, {{3, 4}}, {2}, 0, 1},
    {"sum", f_sum, 1, {{3, 4}}, {2}, 0, 0},
    {"mean", f_mean, 1, {{3, 4}}, {2}, 0, 0},
    {"sum dim 1 keepdim", f_sum1k, 1, {{2, 3, 4}}, {3}, 0, 0},
    {"mean dims 0,2", f_mean02, 1, {{2, 3, 4}}, {3}, 0, 0},
    {"max dim", f_max, 1, {{3, 5}}, {2}, 0, 0},
    {"matmul 2-D", f_mm, 2, {{3, 4}, {4, 5}}, {2, 2}, 0, 1},
    {"matmul batched broadcast", f_mm, 2, {{2, 3, 4}, {4, 2}}, {3, 2}, 0, 1},
    {"matmul batched both", f_mm, 2, {{2, 3, 4}, {2, 4, 2}}, {3, 3}, 0, 1},
    {"matmul vector", f_mm, 2, {{4}, {4, 3}}, {1, 2}, 0, 1},
    {"matmul transposed view", f_mm_t, 2, {{4, 3}, {4, 2}}, {2, 2}, 0, 1},
    {"linear", f_linear, 3, {{5, 4}, {3, 4}, {3}}, {2, 2, 1}, 0, 1},
    {"softmax", f_softmax, 1, {{3, 5}}, {2}, 0, 1},
    {"softmax dim 0", f_softmax0, 1, {{3, 5}}, {2}, 0, 1},
    {"log_softmax", f_logsoftmax, 1, {{3, 5}}, {2}, 0, 1},
    {"cross_entropy mean", f_ce_mean, 1, {{4, 5}}, {2}, 0, 1},
    {"cross_entropy sum", f_ce_sum, 1, {{4, 5}}, {2}, 0, 1},
    {"nll_loss", f_nll, 1, {{4, 5}}, {2}, 0, 1},
    {"mse_loss", f_mse, 2, {{3, 4}, {3, 4}}, {2, 2}, 0, 1},
    {"embedding", f_embedding, 1, {{6, 3}}, {2}, 0, 0},
    {"embedding_bag sum", f_bag_sum, 1, {{6, 3}}, {2}, 0, 0},
    {"embedding_bag mean", f_bag_mean, 1, {{6, 3}}, {2}, 0, 0},
    {"index_select dim 1", f_index_select, 1, {{2, 6}}, {2}, 0, 0},
    {"dropout", f_dropout, 1, {{4, 5}}, {2}, 0, 0},
    {"transpose", f_transpose, 1, {{3, 4}}, {2}, 0, 0},
    {"permute", f_permute, 1, {{2, 3, 4}}, {3}, 0, 0},
    {"narrow", f_narrow, 1, {{3, 4}}, {2}, 0, 1},
    {"select", f_select, 1, {{3, 4}}, {2}, 0, 1},
    {"expand", f_expand, 1, {{3, 1}}, {2}, 0, 0},
    {"unsqueeze", f_unsqueeze, 1, {{3, 4}}, {2}, 0, 0},
    {"reshape of a transpose", f_reshape_t, 1, {{3, 4}}, {2}, 0, 0},
    {"clone", f_to32, 1, {{3, 4}}, {2}, 0, 0},
    {"cat", f_cat, 2, {{3, 2}, {3, 3}}, {2, 2}, 0, 0},
    {"stack", f_stack, 2, {{3, 2}, {3, 2}}, {2, 2}, 0, 0},
    {"split", f_split, 1, {{3, 5}}, {2}, 0, 1},
    {"batch_norm train", f_bn_train, 3, {{6, 4}, {4}, {4}}, {2, 1, 1}, 0, 1},
    {"batch_norm train no affine", f_bn_noaffine, 1, {{5, 3}}, {2}, 0, 1},
    {"batch_norm eval", f_bn_eval, 3, {{6, 4}, {4}, {4}}, {2, 1, 1}, 0, 1},
    {"linear+tanh+cross_entropy", f_mlp, 3, {{4, 3}, {5, 3}, {5}}, {2, 2, 1}, 0, 1},
};

int
main(void)
{
    int ncase = (int)(sizeof(cases) / sizeof(cases[0])), nsecond = 0;
    int64_t ix[4] = {1, 4, 0, 4}, off[3] = {0, 1, 1};   /* bag 1 empty */

    for (int c = 0; c < ncase; c++) {
        nsecond += cases[c].second;
    }
    plan(ncase + nsecond);
    td_tensor_from_data(ix, (int64_t[]){4}, 1, TD_INT64, &idx_t);
    td_tensor_from_data(off, (int64_t[]){3}, 1, TD_INT64, &offs_t);
    td_tensor_from_data((double[]){0.3, -0.2, 0.1, 1.5}, (int64_t[]){4}, 1,
                        TD_FLOAT64, &bn_rm);
    td_tensor_from_data((double[]){0.8, 1.3, 0.5, 2.0}, (int64_t[]){4}, 1,
                        TD_FLOAT64, &bn_rv);
    for (int c = 0; c < ncase; c++) {
        const gc_case_t *k = &cases[c];
        td_tensor_t *in[3];
        double e1, e2;

        for (int i = 0; i < k->n; i++) {
            in[i] = rnd(k->shapes[i], k->ndims[i], 1000 + 10 * (uint64_t)c + (uint64_t)i,
                        k->positive);
        }
        e1 = gradcheck(k->fn, in, k->n, 77 + (uint64_t)c);
        ok(e1 >= 0 && e1 <= 1, "gradcheck %s (error ratio %.3g)", k->name, e1);
        if (k->second) {
            e2 = gradgradcheck(k->fn, in, k->n, 99 + (uint64_t)c);
            ok(e2 >= 0 && e2 <= 1, "gradgradcheck %s (error ratio %.3g)",
               k->name, e2);
        }
        for (int i = 0; i < k->n; i++) {
            td_tensor_release(in[i]);
        }
    }
    td_tensor_release(idx_t);
    td_tensor_release(offs_t);
    td_tensor_release(bn_rm);
    td_tensor_release(bn_rv);
    return exit_status();
}
