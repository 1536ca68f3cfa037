/* gradcheck.h: finite-difference checks of first and second derivatives
 * in float64, as torch.autograd.gradcheck / gradgradcheck do. */
#ifndef TD_TESTS_GRADCHECK_H
#define TD_TESTS_GRADCHECK_H

#include <math.h>
#include <todist/todist.h>

typedef td_status_t (*gc_fn)(td_tensor_t **in, td_tensor_t **out);

/* loss = sum(f(in) * w) for a fixed random W of f's output shape */
static td_status_t
gc_loss(gc_fn f, td_tensor_t **in, td_tensor_t *w, td_tensor_t **loss)
{
    td_tensor_t *out, *p;
    td_status_t st = f(in, &out);

    if (st != TD_OK) {
        return st;
    }
    st = td_mul(out, w, &p);
    td_tensor_release(out);
    if (st != TD_OK) {
        return st;
    }
    st = td_sum(p, loss);
    td_tensor_release(p);
    return st;
}

static double
gc_scalar(td_tensor_t *t)
{
    double v = NAN;

    td_tensor_item(t, &v);
    return v;
}

/* Max error |analytic - numeric| / (atol + rtol |numeric|) over all
 * inputs (<= 1 passes); -1 on an error. */
static double
gradcheck(gc_fn f, td_tensor_t **in, int n_in, uint64_t seed)
{
    td_tensor_t *out, *w, *loss, *grads[8];
    double worst = 0, eps = 1e-6;
    int was = td_grad_set_enabled(1);

    if (f(in, &out) != TD_OK) {
        diag("forward failed: %s", td_last_error());
        return -1;
    }
    td_tensor_empty(td_tensor_shape(out), td_tensor_ndim(out), TD_FLOAT64,
                    TD_CPU, &w);
    td_tensor_normal_(w, 0, 1, seed);
    td_tensor_release(out);
    if (gc_loss(f, in, w, &loss) != TD_OK ||
        td_grad(&loss, NULL, 1, in, n_in, 0, 0, 1, grads) != TD_OK) {
        diag("backward failed: %s", td_last_error());
        return -1;
    }
    td_tensor_release(loss);
    td_grad_set_enabled(0);
    for (int i = 0; i < n_in; i++) {
        double *x = td_tensor_data(in[i]);
        int64_t n = td_tensor_numel(in[i]);
        for (int64_t j = 0; j < n; j++) {
            double keep = x[j], lp, lm, num, ana;
            x[j] = keep + eps;
            gc_loss(f, in, w, &loss);
            lp = gc_scalar(loss);
            td_tensor_release(loss);
            x[j] = keep - eps;
            gc_loss(f, in, w, &loss);
            lm = gc_scalar(loss);
            td_tensor_release(loss);
            x[j] = keep;
            num = (lp - lm) / (2 * eps);
            ana = grads[i] ? td_tensor_get(grads[i], (int64_t[TD_MAX_DIMS]){0}) : 0;
            if (grads[i]) {
                /* element j of a possibly strided gradient */
                int64_t idx[TD_MAX_DIMS], rem = j;
                const int64_t *sh = td_tensor_shape(grads[i]);
                for (int d = td_tensor_ndim(grads[i]) - 1; d >= 0; d--) {
                    idx[d] = rem % sh[d];
                    rem /= sh[d];
                }
                ana = td_tensor_get(grads[i], idx);
            }
            double err = fabs(ana - num) / (1e-5 + 1e-3 * fabs(num));
            if (err > worst) {
                worst = err;
            }
        }
        td_tensor_release(grads[i]);
    }
    td_tensor_release(w);
    td_grad_set_enabled(was);
    return worst;
}

/* Second order: h(x) = sum(grad(loss, x, create_graph) * v); compare
 * grad(h, x) with finite differences of h. */
static double
gradgradcheck(gc_fn f, td_tensor_t **in, int n_in, uint64_t seed)
{
    td_tensor_t *out, *w, *v[8], *gg[8];
    double worst = 0, eps = 1e-6;
    int was = td_grad_set_enabled(1);

    if (f(in, &out) != TD_OK) {
        return -1;
    }
    td_tensor_empty(td_tensor_shape(out), td_tensor_ndim(out), TD_FLOAT64,
                    TD_CPU, &w);
    td_tensor_normal_(w, 0, 1, seed);
    td_tensor_release(out);
    for (int i = 0; i < n_in; i++) {
        td_tensor_empty(td_tensor_shape(in[i]), td_tensor_ndim(in[i]),
                        TD_FLOAT64, TD_CPU, &v[i]);
        td_tensor_normal_(v[i], 0, 1, seed + 100 + (uint64_t)i);
    }
#define GG_H(hp)                                                            \
    do {                                                                    \
        td_tensor_t *loss_, *g_[8], *acc_ = NULL;                           \
        if (gc_loss(f, in, w, &loss_) != TD_OK ||                           \
            td_grad(&loss_, NULL, 1, in, n_in, 1, 1, 1, g_) != TD_OK) {     \
            diag("grad failed: %s", td_last_error());                       \
            return -1;                                                      \
        }                                                                   \
        td_tensor_release(loss_);                                           \
        for (int k_ = 0; k_ < n_in; k_++) {                                 \
            td_tensor_t *p_, *s_, *t_;                                      \
            if (g_[k_] == NULL) continue;                                   \
            td_mul(g_[k_], v[k_], &p_);                                     \
            td_sum(p_, &s_);                                                \
            td_tensor_release(p_);                                          \
            td_tensor_release(g_[k_]);                                      \
            if (acc_ == NULL) { acc_ = s_; continue; }                      \
            td_add(acc_, s_, &t_);                                          \
            td_tensor_release(acc_);                                        \
            td_tensor_release(s_);                                          \
            acc_ = t_;                                                      \
        }                                                                   \
        *(hp) = acc_;                                                       \
    } while (0)
    td_tensor_t *h;
    GG_H(&h);
    if (h == NULL || !td_tensor_requires_grad(h)) {
        /* first derivative does not depend on x: second order is zero */
        td_tensor_release(h);
        for (int i = 0; i < n_in; i++) {
            gg[i] = NULL;
        }
    } else if (td_grad(&h, NULL, 1, in, n_in, 0, 0, 1, gg) != TD_OK) {
        diag("second grad failed: %s", td_last_error());
        return -1;
    } else {
        td_tensor_release(h);
    }
    for (int i = 0; i < n_in; i++) {
        double *x = td_tensor_data(in[i]);
        int64_t n = td_tensor_numel(in[i]);
        for (int64_t j = 0; j < n; j++) {
            double keep = x[j], hp, hm, num, ana = 0;
            x[j] = keep + eps;
            GG_H(&h);
            hp = h ? gc_scalar(h) : 0;
            td_tensor_release(h);
            x[j] = keep - eps;
            GG_H(&h);
            hm = h ? gc_scalar(h) : 0;
            td_tensor_release(h);
            x[j] = keep;
            num = (hp - hm) / (2 * eps);
            if (gg[i]) {
                int64_t idx[TD_MAX_DIMS], rem = j;
                const int64_t *sh = td_tensor_shape(gg[i]);
                for (int d = td_tensor_ndim(gg[i]) - 1; d >= 0; d--) {
                    idx[d] = rem % sh[d];
                    rem /= sh[d];
                }
                ana = td_tensor_get(gg[i], idx);
            }
            double err = fabs(ana - num) / (1e-4 + 1e-3 * fabs(num));
            if (err > worst) {
                worst = err;
            }
        }
        td_tensor_release(gg[i]);
    }
    for (int i = 0; i < n_in; i++) {
        td_tensor_release(v[i]);
    }
#undef GG_H
    td_tensor_release(w);
    td_grad_set_enabled(was);
    return worst;
}

#endif /* TD_TESTS_GRADCHECK_H */
