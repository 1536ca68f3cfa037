/* test_reference: forward results and gradients of every op against
 * PyTorch 1.13 (tests/data/reference.safetensors, made by
 * tests/data/gen_reference.py), in float64 (relative error < 1e-5) and
 * float32 (< 1e-4); grad of grad; a 5-step MetaSGD meta-gradient; and
 * 10-step trajectories of SGD (momentum, dampening, nesterov, weight
 * decay), Adam (weight decay, amsgrad) and AdamW; BatchNorm1d's running
 * statistics over 3 train steps and an eval step. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/tap.h"
#include <todist/todist.h>

static char ref_path[4096];
static td_tensor_t *idx_t, *bag_idx, *bag_off;

static td_tensor_t *
get(const char *fmt, ...)
{
    char name[256];
    va_list ap;
    td_tensor_t *t = NULL;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    if (td_safetensors_get(ref_path, name, &t) != TD_OK) {
        diag("missing %s: %s", name, td_last_error());
    }
    return t;
}

/* max |a - b| / max(max |b|, 1e-30); a and b may differ in strides */
static double
rel_err(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *ac, *bc;
    double num = 0, den = 1e-30;
    int64_t n;

    if (a == NULL || b == NULL || td_tensor_numel(a) != td_tensor_numel(b)) {
        return INFINITY;
    }
    td_tensor_to_dtype(a, TD_FLOAT64, &ac);
    td_tensor_to_dtype(b, TD_FLOAT64, &bc);
    n = td_tensor_numel(ac);
    for (int64_t i = 0; i < n; i++) {
        double x = ((double *)td_tensor_data(ac))[i];
        double y = ((double *)td_tensor_data(bc))[i];
        if (fabs(x - y) > num || isnan(x)) {
            num = isnan(x) ? INFINITY : fabs(x - y);
        }
        if (fabs(y) > den) {
            den = fabs(y);
        }
    }
    td_tensor_release(ac);
    td_tensor_release(bc);
    return num / den;
}

typedef td_status_t (*op_fn)(td_tensor_t **in, td_tensor_t **out);
#define F1(name, call)                                                      \
    static td_status_t name(td_tensor_t **in, td_tensor_t **out)            \
    { return call; }

F1(f_add, td_add(in[0], in[1], out))
F1(f_sub, td_sub(in[0], in[1], out))
F1(f_mul, td_mul(in[0], in[1], out))
F1(f_div, td_div(in[0], in[1], out))
F1(f_neg, td_neg(in[0], out))
F1(f_pow3, td_pow_scalar(in[0], 3.0, out))
F1(f_pow15, td_pow_scalar(in[0], 1.5, out))
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
F1(f_max, td_max_dim(in[0], 1, 0, out, NULL))
F1(f_mm, td_matmul(in[0], in[1], out))
F1(f_linear, td_linear(in[0], in[1], in[2], out))
F1(f_softmax, td_softmax(in[0], 1, out))
F1(f_logsoftmax, td_log_softmax(in[0], -1, out))
F1(f_ce_mean, td_cross_entropy(in[0], idx_t, TD_REDUCTION_MEAN, out))
F1(f_ce_sum, td_cross_entropy(in[0], idx_t, TD_REDUCTION_SUM, out))
F1(f_nll, td_nll_loss(in[0], idx_t, TD_REDUCTION_MEAN, out))
F1(f_mse, td_mse_loss(in[0], in[1], TD_REDUCTION_MEAN, out))
F1(f_embedding, td_embedding(in[0], idx_t, out))
F1(f_bag_sum, td_embedding_bag(in[0], bag_idx, bag_off, TD_BAG_SUM, out))
F1(f_bag_mean, td_embedding_bag(in[0], bag_idx, bag_off, TD_BAG_MEAN, out))
F1(f_index_select, td_index_select(in[0], 1, idx_t, out))
F1(f_cat, td_tensor_cat(in, 2, 1, out))

static td_status_t
f_transpose_reshape(td_tensor_t **in, td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t st = td_tensor_transpose(in[0], 0, 1, &t);

    if (st == TD_OK) {
        st = td_tensor_reshape(t, (int64_t[]){-1}, 1, out);
        td_tensor_release(t);
    }
    return st;
}

F1(f_bn_train, td_batch_norm(in[0], NULL, NULL, in[1], in[2], 1, 0.1, 1e-5,
                             out))
F1(f_bn_noaffine, td_batch_norm(in[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5,
                                out))

static const struct {
    const char *name;
    op_fn       fn;
    int         n;
} cases[] = {
    {"add", f_add, 2}, {"sub", f_sub, 2}, {"mul", f_mul, 2},
    {"div", f_div, 2}, {"neg", f_neg, 1}, {"pow3", f_pow3, 1},
    {"pow1_5", f_pow15, 1}, {"exp", f_exp, 1}, {"log", f_log, 1},
    {"sqrt", f_sqrt, 1}, {"abs", f_abs, 1}, {"tanh", f_tanh, 1},
    {"sigmoid", f_sigmoid, 1}, {"relu", f_relu, 1}, {"gelu", f_gelu, 1},
    {"sum", f_sum, 1}, {"mean", f_mean, 1}, {"sum_dim1_keep", f_sum1k, 1},
    {"mean_dims02", f_mean02, 1}, {"max_dim1", f_max, 1},
    {"matmul", f_mm, 2}, {"matmul_bcast", f_mm, 2},
    {"matmul_batched", f_mm, 2}, {"matmul_vec", f_mm, 2},
    {"linear", f_linear, 3}, {"softmax", f_softmax, 1},
    {"log_softmax", f_logsoftmax, 1}, {"ce_mean", f_ce_mean, 1},
    {"ce_sum", f_ce_sum, 1}, {"nll", f_nll, 1}, {"mse", f_mse, 2},
    {"embedding", f_embedding, 1}, {"bag_sum", f_bag_sum, 1},
    {"bag_mean", f_bag_mean, 1}, {"index_select", f_index_select, 1},
    {"cat", f_cat, 2}, {"transpose_reshape", f_transpose_reshape, 1},
    {"bn_train", f_bn_train, 3}, {"bn_train_noaffine", f_bn_noaffine, 1},
};

/* forward + all input gradients of one case in one dtype; returns the
 * worst relative error, +inf on failure */
static double
check_case(int c, const char *tag)
{
    td_tensor_t *in[3], *g[3], *out = NULL, *w, *ref, *p, *s;
    double worst = 0, e;
    int n = cases[c].n;

    for (int i = 0; i < n; i++) {
        in[i] = get("%s.%s.in%d", tag, cases[c].name, i);
        if (in[i] == NULL) {
            return INFINITY;
        }
        td_tensor_set_requires_grad(in[i], 1);
    }
    if (cases[c].fn(in, &out) != TD_OK) {
        diag("%s %s: %s", tag, cases[c].name, td_last_error());
        return INFINITY;
    }
    ref = get("%s.%s.out", tag, cases[c].name);
    e = rel_err(out, ref);
    worst = e > worst ? e : worst;
    td_tensor_release(ref);
    w = get("%s.%s.w", tag, cases[c].name);
    if (w == NULL || td_mul(out, w, &p) != TD_OK || td_sum(p, &s) != TD_OK ||
        td_grad(&s, NULL, 1, in, n, 0, 0, 0, g) != TD_OK) {
        diag("%s %s backward: %s", tag, cases[c].name, td_last_error());
        return INFINITY;
    }
    for (int i = 0; i < n; i++) {
        ref = get("%s.%s.grad%d", tag, cases[c].name, i);
        e = rel_err(g[i], ref);
        if (e > worst) {
            worst = e;
        }
        td_tensor_release(ref);
        td_tensor_release(g[i]);
        td_tensor_release(in[i]);
    }
    td_tensor_release(p);
    td_tensor_release(s);
    td_tensor_release(w);
    td_tensor_release(out);
    return worst;
}

/* BatchNorm1d over 3 train steps and 1 eval step: output, gradients of x,
 * weight and bias, running mean and variance after every step. */
static void
test_bn1d(const char *tag, double tol)
{
    td_batchnorm1d_t bn = {0};
    td_tensor_t *w0 = get("%s.bn1d.weight", tag), *b0 = get("%s.bn1d.bias", tag);
    double worst = 0;
    int failed = w0 == NULL || b0 == NULL ||
                 td_batchnorm1d_init(&bn, 5, td_tensor_dtype(w0)) != TD_OK;

    if (!failed) {
        td_tensor_copy_(bn.weight, w0);
        td_tensor_copy_(bn.bias, b0);
    }
    for (int step = 0; step < 4 && !failed; step++) {
        td_tensor_t *x = get("%s.bn1d.%d.x", tag, step);
        td_tensor_t *w = get("%s.bn1d.%d.w", tag, step);
        td_tensor_t *ins[3], *g[3] = {0}, *out = NULL, *p = NULL, *s = NULL;
        const char *names[] = {"out", "gx", "gw", "gb", "rm", "rv"};
        td_tensor_t *mine[6];

        bn.training = step < 3;
        td_tensor_set_requires_grad(x, 1);
        ins[0] = x;
        ins[1] = bn.weight;
        ins[2] = bn.bias;
        if (td_batchnorm1d_forward(&bn, x, &out) != TD_OK ||
            td_mul(out, w, &p) != TD_OK || td_sum(p, &s) != TD_OK ||
            td_grad(&s, NULL, 1, ins, 3, 0, 0, 0, g) != TD_OK) {
            diag("%s bn1d step %d: %s", tag, step, td_last_error());
            failed = 1;
        } else {
            mine[0] = out;
            mine[1] = g[0];
            mine[2] = g[1];
            mine[3] = g[2];
            mine[4] = bn.running_mean;
            mine[5] = bn.running_var;
            for (int i = 0; i < 6; i++) {
                td_tensor_t *ref = get("%s.bn1d.%d.%s", tag, step, names[i]);
                double e = rel_err(mine[i], ref);
                if (e > worst) {
                    worst = e;
                    if (e >= tol) {
                        diag("%s bn1d step %d %s: rel err %.2g", tag, step,
                             names[i], e);
                    }
                }
                td_tensor_release(ref);
            }
        }
        for (int i = 0; i < 3; i++) {
            td_tensor_release(g[i]);
        }
        td_tensor_release(out);
        td_tensor_release(p);
        td_tensor_release(s);
        td_tensor_release(x);
        td_tensor_release(w);
    }
    ok(!failed && worst < tol && bn.num_batches_tracked == 3,
       "%s BatchNorm1d: 3 train steps (running stats) + eval vs torch "
       "(rel err %.2g)", tag, worst);
    td_batchnorm1d_destroy(&bn);
    td_tensor_release(w0);
    td_tensor_release(b0);
}

static void
test_gradgrad(void)
{
    td_tensor_t *x = get("gg.x"), *W = get("gg.W"), *b = get("gg.b");
    td_tensor_t *lin, *th, *loss, *g[2], *sq[2], *ss[2], *h, *hh[2];
    td_tensor_t *ref;

    td_tensor_set_requires_grad(W, 1);
    td_tensor_set_requires_grad(b, 1);
    td_linear(x, W, b, &lin);
    td_tanh(lin, &th);
    td_cross_entropy(th, idx_t, TD_REDUCTION_MEAN, &loss);
    td_grad(&loss, NULL, 1, (td_tensor_t *[]){W, b}, 2, 1, 1, 0, g);
    for (int i = 0; i < 2; i++) {
        td_pow_scalar(g[i], 2, &sq[i]);
        td_sum(sq[i], &ss[i]);
    }
    td_add(ss[0], ss[1], &h);
    ref = get("gg.h");
    ok(rel_err(h, ref) < 1e-10, "grad-of-grad: h = |dL/dW|^2 + |dL/db|^2 "
       "matches torch (%.2g)", rel_err(h, ref));
    td_tensor_release(ref);
    is_int(td_grad(&h, NULL, 1, (td_tensor_t *[]){W, b}, 2, 0, 0, 0, hh),
           TD_OK, "grad-of-grad: backward through the gradient graph");
    ref = get("gg.hW");
    ok(rel_err(hh[0], ref) < 1e-10, "d h / d W matches torch (%.2g)",
       rel_err(hh[0], ref));
    td_tensor_release(ref);
    ref = get("gg.hb");
    ok(rel_err(hh[1], ref) < 1e-10, "d h / d b matches torch (%.2g)",
       rel_err(hh[1], ref));
    td_tensor_release(ref);
    for (int i = 0; i < 2; i++) {
        td_tensor_release(g[i]);
        td_tensor_release(sq[i]);
        td_tensor_release(ss[i]);
        td_tensor_release(hh[i]);
    }
    td_tensor_release(h);
    td_tensor_release(loss);
    td_tensor_release(th);
    td_tensor_release(lin);
    td_tensor_release(x);
    td_tensor_release(W);
    td_tensor_release(b);
}

static td_status_t
maml_mlp(td_tensor_t *const *ps, td_tensor_t *x, td_tensor_t **out)
{
    td_tensor_t *h, *a;
    td_status_t st = td_linear(x, ps[0], ps[1], &h);

    if (st != TD_OK) {
        return st;
    }
    st = td_tanh(h, &a);
    td_tensor_release(h);
    if (st != TD_OK) {
        return st;
    }
    st = td_linear(a, ps[2], ps[3], out);
    td_tensor_release(a);
    return st;
}

static void
test_maml(void)
{
    td_tensor_t *xs = get("maml.xs"), *ys = get("maml.ys");
    td_tensor_t *xq = get("maml.xq"), *yq = get("maml.yq");
    td_tensor_t *p[4], *fast[4], *nf[4], *logits, *loss, *meta[4], *ref;
    double worst = 0;
    int okk = 1;

    for (int i = 0; i < 4; i++) {
        p[i] = get("maml.p%d", i);
        td_tensor_set_requires_grad(p[i], 1);
        fast[i] = td_tensor_retain(p[i]);
    }
    for (int step = 0; step < 5 && okk; step++) {
        okk = maml_mlp(fast, xs, &logits) == TD_OK &&
              td_cross_entropy(logits, ys, TD_REDUCTION_MEAN, &loss) == TD_OK &&
              td_meta_sgd_step(loss, fast, 4, 0.3, nf) == TD_OK;
        if (!okk) {
            break;
        }
        td_tensor_release(logits);
        td_tensor_release(loss);
        for (int i = 0; i < 4; i++) {
            td_tensor_release(fast[i]);
            fast[i] = nf[i];
        }
    }
    ok(okk, "MetaSGD: 5 differentiable inner steps");
    okk = okk && maml_mlp(fast, xq, &logits) == TD_OK &&
          td_cross_entropy(logits, yq, TD_REDUCTION_MEAN, &loss) == TD_OK;
    ref = get("maml.outer");
    ok(okk && rel_err(loss, ref) < 1e-10, "MetaSGD: outer loss matches torch");
    td_tensor_release(ref);
    okk = okk && td_grad(&loss, NULL, 1, p, 4, 0, 0, 0, meta) == TD_OK;
    for (int i = 0; okk && i < 4; i++) {
        double e;
        ref = get("maml.meta%d", i);
        e = rel_err(meta[i], ref);
        worst = e > worst ? e : worst;
        td_tensor_release(ref);
        td_tensor_release(meta[i]);
    }
    ok(okk && worst < 1e-8, "MetaSGD: meta-gradient through 5 steps matches "
       "torch (rel err %.2g)", worst);
    if (okk) {
        td_tensor_release(logits);
        td_tensor_release(loss);
    }
    for (int i = 0; i < 4; i++) {
        td_tensor_release(fast[i]);
        td_tensor_release(p[i]);
    }
    td_tensor_release(xs);
    td_tensor_release(ys);
    td_tensor_release(xq);
    td_tensor_release(yq);
}

static td_status_t
opt_mlp(td_tensor_t *const *ps, td_tensor_t *x, td_tensor_t **out)
{
    td_tensor_t *h, *a;
    td_status_t st = td_linear(x, ps[0], ps[1], &h);

    if (st != TD_OK) {
        return st;
    }
    st = td_relu(h, &a);
    td_tensor_release(h);
    if (st != TD_OK) {
        return st;
    }
    st = td_linear(a, ps[2], ps[3], out);
    td_tensor_release(a);
    return st;
}

static void
test_optim(const char *name)
{
    td_tensor_t *x = get("opt.x"), *y = get("opt.y"), *p[4], *ref;
    td_tensor_t *logits, *loss;
    td_optim_t *opt = NULL;
    td_status_t st;
    double worst_loss = 0, worst_p = 0, losses[10];

    for (int i = 0; i < 4; i++) {
        p[i] = get("opt.p%d", i);
        td_tensor_set_requires_grad(p[i], 1);
    }
    if (strcmp(name, "sgd") == 0) {
        td_sgd_opts_t o = {0.1, 0, 0, 0, 0};
        st = td_optim_sgd(p, 4, &o, &opt);
    } else if (strcmp(name, "sgd_mom") == 0) {
        td_sgd_opts_t o = {0.05, 0.9, 0.1, 0.01, 0};
        st = td_optim_sgd(p, 4, &o, &opt);
    } else if (strcmp(name, "sgd_nesterov") == 0) {
        td_sgd_opts_t o = {0.05, 0.9, 0, 0, 1};
        st = td_optim_sgd(p, 4, &o, &opt);
    } else if (strcmp(name, "adam") == 0) {
        td_adam_opts_t o = td_adam_defaults();
        o.lr = 0.01;
        st = td_optim_adam(p, 4, &o, &opt);
    } else if (strcmp(name, "adam_wd_ams") == 0) {
        td_adam_opts_t o = td_adam_defaults();
        o.lr = 0.01;
        o.weight_decay = 0.1;
        o.amsgrad = 1;
        st = td_optim_adam(p, 4, &o, &opt);
    } else {
        td_adam_opts_t o = td_adamw_defaults();
        o.lr = 0.01;
        o.weight_decay = 0.1;
        st = td_optim_adamw(p, 4, &o, &opt);
    }
    for (int s = 0; st == TD_OK && s < 10; s++) {
        for (int i = 0; i < 4; i++) {
            td_tensor_set_grad(p[i], NULL);   /* torch's zero_grad(None) */
        }
        st = opt_mlp(p, x, &logits);
        if (st == TD_OK) {
            st = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss);
            td_tensor_release(logits);
        }
        if (st == TD_OK) {
            st = td_backward(&loss, NULL, 1, 0, 0);
            td_tensor_item(loss, &losses[s]);
            td_tensor_release(loss);
        }
        if (st == TD_OK) {
            st = td_optim_step(opt);
        }
    }
    if (st == TD_OK) {
        ref = get("opt.%s.losses", name);
        for (int s = 0; s < 10; s++) {
            int64_t k = s;
            double r = td_tensor_get(ref, &k), e = fabs(losses[s] - r) / fabs(r);
            worst_loss = e > worst_loss ? e : worst_loss;
        }
        td_tensor_release(ref);
        for (int i = 0; i < 4; i++) {
            double e;
            ref = get("opt.%s.final%d", name, i);
            e = rel_err(p[i], ref);
            worst_p = e > worst_p ? e : worst_p;
            td_tensor_release(ref);
        }
    } else {
        diag("%s: %s", name, td_last_error());
    }
    ok(st == TD_OK && worst_loss < 1e-4, "%s: 10 losses match torch (worst "
       "rel err %.2g)", name, worst_loss);
    ok(st == TD_OK && worst_p < 1e-4, "%s: final parameters match torch "
       "(rel err %.2g)", name, worst_p);
    td_optim_free(opt);
    for (int i = 0; i < 4; i++) {
        td_tensor_release(p[i]);
    }
    td_tensor_release(x);
    td_tensor_release(y);
}

/* State is per parameter, as in torch: B gets its first gradient at step
 * 2, so its momentum buffer starts there as that gradient (not from zero
 * with dampening) and its Adam step count is 1 (values from torch 1.13:
 * a.sum() at step 1, (a + b).sum() at step 2, float64). */
static void
test_optim_late_param(void)
{
    static const double want[2][2] = {{0.76, 1.9},
                                      {0.9800000002000001, 1.9900000001}};
    static const char *what[2] = {"SGD momentum 0.9 dampening 0.5",
                                  "Adam lr 0.01"};

    for (int k = 0; k < 2; k++) {
        int64_t one = 1;
        td_tensor_t *a = NULL, *b = NULL, *sum = NULL, *loss = NULL;
        td_optim_t *opt = NULL;
        td_status_t st;
        double av = 0, bv = 0;

        td_tensor_full(&one, 1, TD_FLOAT64, 1.0, &a);
        td_tensor_full(&one, 1, TD_FLOAT64, 2.0, &b);
        td_tensor_set_requires_grad(a, 1);
        td_tensor_set_requires_grad(b, 1);
        if (k == 0) {
            td_sgd_opts_t o = {0.1, 0.9, 0.5, 0, 0};
            st = td_optim_sgd((td_tensor_t *[]){a, b}, 2, &o, &opt);
        } else {
            td_adam_opts_t o = td_adam_defaults();
            o.lr = 0.01;
            st = td_optim_adam((td_tensor_t *[]){a, b}, 2, &o, &opt);
        }
        for (int s = 0; st == TD_OK && s < 2; s++) {
            td_tensor_set_grad(a, NULL);
            td_tensor_set_grad(b, NULL);
            st = s == 0 ? td_sum(a, &loss) : td_add(a, b, &sum);
            if (st == TD_OK && s == 1) {
                st = td_sum(sum, &loss);
                td_tensor_release(sum);
            }
            if (st == TD_OK) {
                st = td_backward(&loss, NULL, 1, 0, 0);
                td_tensor_release(loss);
            }
            if (st == TD_OK) {
                st = td_optim_step(opt);
            }
        }
        td_tensor_item(a, &av);
        td_tensor_item(b, &bv);
        ok(st == TD_OK && fabs(av - want[k][0]) < 1e-12 &&
           fabs(bv - want[k][1]) < 1e-12, "%s: a parameter first given a "
           "gradient at step 2 gets its own state (a %.10g, b %.10g; torch "
           "%.10g, %.10g)", what[k], av, bv, want[k][0], want[k][1]);
        td_optim_free(opt);
        td_tensor_release(a);
        td_tensor_release(b);
    }
}

int
main(void)
{
    const char *src = getenv("top_srcdir");
    int ncase = (int)(sizeof(cases) / sizeof(cases[0]));
    const char *opts[] = {"sgd", "sgd_mom", "sgd_nesterov", "adam",
                          "adam_wd_ams", "adamw"};

    snprintf(ref_path, sizeof(ref_path), "%s/tests/data/reference.safetensors",
             src ? src : ".");
    plan(2 * ncase + 4 + 3 + 12 + 2 + 2);
    idx_t = get("ce.idx");
    bag_idx = get("bag.idx");
    bag_off = get("bag.off");
    if (idx_t == NULL) {
        diag("cannot read %s", ref_path);
    }
    for (int c = 0; c < ncase; c++) {
        double e64 = check_case(c, "f64"), e32 = check_case(c, "f32");
        ok(e64 < 1e-5, "%s float64 forward+grad vs torch (rel err %.2g)",
           cases[c].name, e64);
        ok(e32 < 1e-4, "%s float32 forward+grad vs torch (rel err %.2g)",
           cases[c].name, e32);
    }
    test_gradgrad();
    test_maml();
    test_bn1d("f64", 1e-10);
    test_bn1d("f32", 1e-4);
    for (int i = 0; i < 6; i++) {
        test_optim(opts[i]);
    }
    test_optim_late_param();
    td_tensor_release(idx_t);
    td_tensor_release(bag_idx);
    td_tensor_release(bag_off);
    return exit_status();
}
