/* test_kernels: the CPU row of the kernel table (kernels/kernels.h) called
 * directly with raw pointers, each entry against a naive loop written here,
 * including sizes 0 and 1 and strided operands; then, through the ops, that
 * the fused first-order softmax backward, the kernel-valued max and the
 * dropout mask give exactly what the composed formulas gave before. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#include "kernels/kernels.h"          /* TD_CPU_REDUCE_ANY_SRC */
#include "tests/tap.h"

static const td_kernels_t *K;

/* deterministic data in [-2, 2) */
static uint64_t rng_state = 12345;

static double
rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53 * 4.0 - 2.0;
}

static void
fill_d(double *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        p[i] = rnd();
    }
}

static double
max_abs_diff(const double *a, const double *b, int64_t n)
{
    double m = 0;

    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) {
            m = d;
        }
    }
    return m;
}

/* ---- reductions ------------------------------------------------------- */

static void
naive_softmax(int log_out, double *y, const double *x, int64_t outer,
              int64_t mid, int64_t inner)
{
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, s = 0;
            for (int64_t m = 0; m < mid; m++) {
                mx = fmax(mx, x[(o * mid + m) * inner + i]);
            }
            for (int64_t m = 0; m < mid; m++) {
                s += exp(x[(o * mid + m) * inner + i] - mx);
            }
            for (int64_t m = 0; m < mid; m++) {
                double v = x[(o * mid + m) * inner + i] - mx;
                y[(o * mid + m) * inner + i] = log_out ? v - log(s)
                                                       : exp(v) / s;
            }
        }
    }
}

static void
naive_softmax_backward(int log_out, double *gx, const double *y,
                       const double *g, int64_t outer, int64_t mid,
                       int64_t inner)
{
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t m = 0; m < mid; m++) {
                int64_t k = (o * mid + m) * inner + i;
                s += log_out ? g[k] : g[k] * y[k];
            }
            for (int64_t m = 0; m < mid; m++) {
                int64_t k = (o * mid + m) * inner + i;
                gx[k] = log_out ? g[k] - y[k] * s : y[k] * (g[k] - s);
            }
        }
    }
}

static const int64_t shapes3[][3] = {
    {2, 5, 3}, {3, 7, 1}, {1, 1, 1}, {4, 1, 2}, {1, 9, 4}, {0, 3, 2},
    {2, 3, 0},
};
#define N_SHAPES3 (int)(sizeof(shapes3) / sizeof(shapes3[0]))

static void
test_softmax(void)
{
    double x[256], y[256], want[256], g[256], gx[256], gwant[256];

    for (int s = 0; s < N_SHAPES3; s++) {
        int64_t o = shapes3[s][0], m = shapes3[s][1], i = shapes3[s][2];
        int64_t n = o * m * i;
        for (int log_out = 0; log_out <= 1; log_out++) {
            fill_d(x, n);
            fill_d(g, n);
            y[0] = gx[0] = 42;      /* an empty shape writes nothing */
            K->softmax(TD_FLOAT64, log_out, y, x, o, m, i);
            naive_softmax(log_out, want, x, o, m, i);
            ok(n == 0 ? y[0] == 42 : max_abs_diff(y, want, n) < 1e-14,
               "%s [%lld, %lld, %lld] matches the naive loop",
               log_out ? "log_softmax" : "softmax", (long long)o,
               (long long)m, (long long)i);
            /* the backward takes y = softmax(x) for both */
            naive_softmax(0, y, x, o, m, i);
            K->softmax_backward(TD_FLOAT64, log_out, gx, y, g, o, m, i);
            naive_softmax_backward(log_out, gwant, y, g, o, m, i);
            ok(n == 0 ? gx[0] == 42 : max_abs_diff(gx, gwant, n) < 1e-14,
               "%s backward [%lld, %lld, %lld] matches the naive loop",
               log_out ? "log_softmax" : "softmax", (long long)o,
               (long long)m, (long long)i);
        }
    }
    /* float32: large logits stay finite (max subtracted first) */
    {
        float xf[3] = {1000.f, 1001.f, 999.f}, yf[3];
        K->softmax(TD_FLOAT32, 0, yf, xf, 1, 3, 1);
        is_double(yf[0] + yf[1] + yf[2], 1.0, 1e-6,
                  "float32 softmax of [1000, 1001, 999] sums to 1");
        K->softmax(TD_FLOAT32, 1, yf, xf, 1, 3, 1);
        is_double(yf[1], 1001.0 - (1001.0 + log(1 + exp(-1.0) + exp(-2.0))),
                  1e-4, "float32 log_softmax stays finite");
    }
}

static void
test_max_dim(void)
{
    double x[6] = {1, 3, 3, -1, NAN, 2}, v[3];
    int64_t ix[3];

    /* [2, 3] along mid = 3 (inner 1): ties keep the first, NaN wins */
    K->max_dim(TD_FLOAT64, v, ix, x, 2, 3, 1);
    is_int(ix[0], 1, "max: ties keep the first maximum");
    is_double(v[0], 3, 0, "max: the value at the first maximum");
    is_int(ix[1], 1, "max: a NaN wins (as torch)");
    ok(isnan(v[1]), "max: its value is NaN");
    /* [1, 2, 3] along mid = 2 (inner 3, strided reads) */
    K->max_dim(TD_FLOAT64, v, ix, x, 1, 2, 3);
    ok(ix[0] == 0 && ix[1] == 1 && ix[2] == 0 && v[0] == 1 && isnan(v[1]) &&
       v[2] == 3, "max along a strided mid: indices %lld %lld %lld",
       (long long)ix[0], (long long)ix[1], (long long)ix[2]);
    /* mid 1: everything is its own maximum; values may be NULL */
    {
        float xf[4] = {4, -3, 2, 1};
        int64_t i4[4] = {9, 9, 9, 9};
        K->max_dim(TD_FLOAT32, NULL, i4, xf, 4, 1, 1);
        ok(i4[0] == 0 && i4[1] == 0 && i4[2] == 0 && i4[3] == 0,
           "max over a dim of size 1 is index 0 (values NULL)");
    }
    /* random [3, 5, 4] against the naive argmax */
    {
        double a[60], vals[12];
        int64_t idx[12];
        int good = 1;
        fill_d(a, 60);
        K->max_dim(TD_FLOAT64, vals, idx, a, 3, 5, 4);
        for (int o = 0; o < 3; o++) {
            for (int i = 0; i < 4; i++) {
                int best = 0;
                for (int m = 1; m < 5; m++) {
                    if (a[(o * 5 + m) * 4 + i] > a[(o * 5 + best) * 4 + i]) {
                        best = m;
                    }
                }
                good &= idx[o * 4 + i] == best &&
                        vals[o * 4 + i] == a[(o * 5 + best) * 4 + i];
            }
        }
        ok(good, "max [3, 5, 4] along dim 1 matches the naive argmax");
    }
}

/* ---- indexing -------------------------------------------------------- */

static void
test_index(void)
{
    int64_t ix[5] = {2, 0, 2, 1, 3};
    double a[2 * 4 * 3], out[2 * 5 * 3], want[2 * 5 * 3];
    int good;

    is_int(K->index_check(ix, 5, 4), -1, "index_check: all inside [0, 4)");
    is_int(K->index_check(ix, 5, 3), 4, "index_check: the first outside "
           "[0, 3) is position 4");
    is_int(K->index_check((int64_t[]){0, -1}, 2, 3), 1,
           "index_check: a negative index is outside");
    is_int(K->index_check(NULL, 0, 0), -1, "index_check of no indices");

    /* select [2, 4, 3] along dim 1 with 5 indices (repeats) */
    fill_d(a, 24);
    K->index_select(TD_FLOAT64, out, a, ix, 5, 2, 4, 3);
    for (int o = 0; o < 2; o++) {
        for (int j = 0; j < 5; j++) {
            for (int i = 0; i < 3; i++) {
                want[(o * 5 + j) * 3 + i] = a[(o * 4 + ix[j]) * 3 + i];
            }
        }
    }
    is_double(max_abs_diff(out, want, 30), 0, 0,
              "index_select [2, 4, 3] dim 1 by 5 indices");
    /* any dtype: int64 and uint8 rows move as bytes */
    {
        int64_t src[4] = {10, 11, 12, 13}, dst[3];
        uint8_t s8[6] = {1, 2, 3, 4, 5, 6}, d8[4];
        K->index_select(TD_INT64, dst, src, (int64_t[]){3, 3, 0}, 3, 1, 4, 1);
        ok(dst[0] == 13 && dst[1] == 13 && dst[2] == 10,
           "index_select of int64: %lld %lld %lld", (long long)dst[0],
           (long long)dst[1], (long long)dst[2]);
        K->index_select(TD_UINT8, d8, s8, (int64_t[]){2, 0}, 2, 1, 3, 2);
        ok(d8[0] == 5 && d8[1] == 6 && d8[2] == 1 && d8[3] == 2,
           "index_select of uint8 rows of 2");
    }
    /* index_add: repeated indices accumulate */
    {
        double src[2 * 5 * 3], acc[2 * 4 * 3] = {0}, wacc[2 * 4 * 3] = {0};
        fill_d(src, 30);
        K->index_add(TD_FLOAT64, acc, src, ix, 5, 2, 4, 3);
        for (int o = 0; o < 2; o++) {
            for (int j = 0; j < 5; j++) {
                for (int i = 0; i < 3; i++) {
                    wacc[(o * 4 + ix[j]) * 3 + i] += src[(o * 5 + j) * 3 + i];
                }
            }
        }
        is_double(max_abs_diff(acc, wacc, 24), 0, 1e-15,
                  "index_add with a repeated index accumulates");
        K->index_add(TD_FLOAT64, acc, src, ix, 0, 2, 4, 3);
        is_double(max_abs_diff(acc, wacc, 24), 0, 1e-15,
                  "index_add of 0 indices changes nothing");
    }
    /* gather / scatter_add with one index per position, [2, 3, 4] dim 1 */
    {
        double g[24], got[8], sc[24] = {0}, wsc[24] = {0}, src[8];
        int64_t gi[8] = {0, 2, 1, 1, 2, 2, 0, 1};
        fill_d(g, 24);
        fill_d(src, 8);
        K->gather(TD_FLOAT64, got, g, gi, 2, 3, 4);
        good = 1;
        for (int o = 0; o < 2; o++) {
            for (int i = 0; i < 4; i++) {
                good &= got[o * 4 + i] == g[(o * 3 + gi[o * 4 + i]) * 4 + i];
                wsc[(o * 3 + gi[o * 4 + i]) * 4 + i] += src[o * 4 + i];
            }
        }
        ok(good, "gather [2, 3, 4] along dim 1");
        K->scatter_add(TD_FLOAT64, sc, src, gi, 2, 3, 4);
        is_double(max_abs_diff(sc, wsc, 24), 0, 0,
                  "scatter_add [2, 3, 4] along dim 1");
        float gf[3] = {1, 2, 3}, of[1];
        K->gather(TD_FLOAT32, of, gf, (int64_t[]){2}, 1, 3, 1);
        is_double(of[0], 3, 0, "gather float32, one position");
    }
}

static void
test_bag_plan(void)
{
    int64_t bag[6];
    double scale[6];

    is_int(K->bag_plan((int64_t[]){0, 2, 2, 5}, 4, 6, 1, bag, scale), -1,
           "bag_plan: offsets 0 2 2 5 over 6 indices are valid");
    ok(bag[0] == 0 && bag[1] == 0 && bag[2] == 2 && bag[4] == 2 &&
       bag[5] == 3, "bag_plan: bags 0 0 2 2 2 3 (bag 1 is empty)");
    ok(scale[0] == 0.5 && fabs(scale[3] - 1.0 / 3) < 1e-16 && scale[5] == 1,
       "bag_plan mean: scales 1/2, 1/3, 1");
    K->bag_plan((int64_t[]){0, 2, 2, 5}, 4, 6, 0, bag, scale);
    ok(scale[0] == 1 && scale[3] == 1, "bag_plan sum: scales 1");
    is_int(K->bag_plan((int64_t[]){1, 2}, 2, 6, 0, bag, scale), 0,
           "bag_plan: offsets must start at 0");
    is_int(K->bag_plan((int64_t[]){0, 3, 2}, 3, 6, 0, bag, scale), 2,
           "bag_plan: a decreasing offset is named");
    is_int(K->bag_plan((int64_t[]){0, 7}, 2, 6, 0, bag, scale), 1,
           "bag_plan: an offset past n is named");
    is_int(K->bag_plan(NULL, 0, 0, 1, bag, scale), -1,
           "bag_plan of no bags");
}

static void
test_batch_u8(void)
{
    uint8_t images[4 * 3] = {0, 255, 10, 1, 2, 3, 4, 5, 6, 200, 100, 50};
    uint8_t labels[4] = {7, 1, 9, 0};
    int64_t rows[3] = {3, 0, 3}, y[3] = {-1, -1, -1};
    float x[9], scale = 1.0f / 255, shift = -0.5f;
    int good = 1;

    K->batch_u8(x, y, images, labels, rows, 3, 3, scale, shift);
    for (int r = 0; r < 3; r++) {
        for (int j = 0; j < 3; j++) {
            good &= x[r * 3 + j] ==
                    (float)images[rows[r] * 3 + j] * scale + shift;
        }
    }
    ok(good, "batch_u8: rows 3, 0, 3 normalised as x * scale + shift");
    ok(y[0] == 0 && y[1] == 7 && y[2] == 0, "batch_u8: their labels");
    y[0] = -1;
    K->batch_u8(x, y, images, labels, rows, 0, 3, scale, shift);
    is_int(y[0], -1, "batch_u8 of 0 rows writes nothing");
}

/* ---- random ---------------------------------------------------------- */

static void
test_random(void)
{
    double u[1000], u10[10], nrm[1000], mean = 0, var = 0;
    float uf[1000], mf[1000];
    double md[1000];
    int in_range = 1, same = 1, kept = 0, mask_ok = 1;

    K->random(TD_FLOAT64, u, 1000, 0, -1.0, 3.0, 7);
    K->random(TD_FLOAT64, u10, 10, 0, -1.0, 3.0, 7);
    for (int i = 0; i < 1000; i++) {
        in_range &= u[i] >= -1.0 && u[i] < 3.0;
        mean += u[i] / 1000;
    }
    ok(in_range, "uniform(-1, 3) stays in [-1, 3)");
    is_double(mean, 1.0, 0.15, "uniform(-1, 3) has mean ~1");
    ok(memcmp(u, u10, sizeof(u10)) == 0,
       "element i depends on (seed, i) only: 10 draws = the first 10 of 1000");
    K->random(TD_FLOAT64, u10, 10, 0, -1.0, 3.0, 8);
    ok(memcmp(u, u10, sizeof(u10)) != 0, "another seed, another stream");
    K->random(TD_FLOAT32, uf, 1000, 0, -1.0, 3.0, 7);
    for (int i = 0; i < 1000; i++) {
        same &= uf[i] == (float)u[i];
    }
    ok(same, "float32 draws are the float64 draws rounded once");
    K->random(TD_FLOAT64, nrm, 1000, 1, 2.0, 0.5, 3);
    mean = 0;
    for (int i = 0; i < 1000; i++) {
        mean += nrm[i] / 1000;
    }
    for (int i = 0; i < 1000; i++) {
        var += (nrm[i] - mean) * (nrm[i] - mean) / 999;
    }
    is_double(mean, 2.0, 0.1, "normal(2, 0.5): mean ~2");
    is_double(sqrt(var), 0.5, 0.05, "normal(2, 0.5): std ~0.5");

    /* dropout mask = (uniform(0, 1) of the same seed >= p) / (1 - p) */
    K->random(TD_FLOAT32, uf, 1000, 0, 0.0, 1.0, 11);
    K->dropout_mask(TD_FLOAT32, mf, 1000, 0.3, 11);
    for (int i = 0; i < 1000; i++) {
        mask_ok &= mf[i] == ((double)uf[i] >= 0.3 ? (float)(1 / 0.7) : 0.f);
        kept += mf[i] != 0;
    }
    ok(mask_ok, "dropout_mask is uniform_(0, 1) >= p, scaled by 1/(1-p)");
    ok(kept > 620 && kept < 780, "dropout p=0.3 keeps ~700 of 1000 (%d)",
       kept);
    K->dropout_mask(TD_FLOAT64, md, 1000, 1.0, 11);
    mask_ok = 1;
    for (int i = 0; i < 1000; i++) {
        mask_ok &= md[i] == 0;
    }
    ok(mask_ok, "dropout p=1 drops everything");
    K->dropout_mask(TD_FLOAT64, md, 1000, 0.0, 11);
    mask_ok = 1;
    for (int i = 0; i < 1000; i++) {
        mask_ok &= md[i] == 1;
    }
    ok(mask_ok, "dropout p=0 keeps everything at scale 1");
}

/* ---- optimizer updates ----------------------------------------------- */

static void
test_sgd(void)
{
    /* three steps of every option mix in float64 against the rule */
    static const td_sgd_args_t cases[] = {
        {0.1, 0.0, 0.0, 0.0, 0, 0},
        {0.1, 0.0, 0.0, 0.01, 0, 0},
        {0.05, 0.9, 0.0, 0.0, 0, 0},
        {0.05, 0.9, 0.1, 0.01, 0, 0},
        {0.05, 0.9, 0.0, 0.01, 1, 0},
    };
    for (int c = 0; c < 5; c++) {
        double p[7], g[7], buf[7], wp[7], wbuf[7];
        td_sgd_args_t a = cases[c];
        fill_d(p, 7);
        memcpy(wp, p, sizeof(p));
        for (int step = 0; step < 3; step++) {
            fill_d(g, 7);
            a.first = step == 0;
            K->sgd_step(TD_FLOAT64, p, g, a.momentum != 0 ? buf : NULL, 7, &a);
            for (int i = 0; i < 7; i++) {
                double d = g[i] + a.weight_decay * wp[i];
                if (a.momentum != 0) {
                    wbuf[i] = step == 0 ? d : a.momentum * wbuf[i] +
                                              (1 - a.dampening) * d;
                    d = a.nesterov ? d + a.momentum * wbuf[i] : wbuf[i];
                }
                wp[i] -= a.lr * d;
            }
        }
        is_double(max_abs_diff(p, wp, 7), 0, 1e-15,
                  "sgd lr=%g momentum=%g dampening=%g wd=%g nesterov=%d: "
                  "3 steps", a.lr, a.momentum, a.dampening, a.weight_decay,
                  a.nesterov);
    }
    {
        td_sgd_args_t a = {0.1, 0.9, 0, 0, 0, 1};
        float pf[1] = {1}, gf[1] = {2};
        K->sgd_step(TD_FLOAT32, pf, gf, NULL, 0, &a);
        is_double(pf[0], 1, 0, "sgd over 0 elements changes nothing");
    }
}

static void
test_adam(void)
{
    for (int c = 0; c < 4; c++) {
        int decoupled = c & 1, ams = c >> 1;
        double p[5], g[5], m[5] = {0}, v[5] = {0}, vmax[5] = {0};
        double wp[5], wm[5] = {0}, wv[5] = {0}, wvmax[5] = {0};
        td_adam_args_t a = {1e-2, 0.9, 0.999, 1e-8, 0.05, 0, 0, decoupled};
        fill_d(p, 5);
        memcpy(wp, p, sizeof(p));
        for (int step = 1; step <= 3; step++) {
            fill_d(g, 5);
            a.bc1 = 1 - pow(a.beta1, step);
            a.bc2 = 1 - pow(a.beta2, step);
            K->adam_step(TD_FLOAT64, p, g, m, v, ams ? vmax : NULL, 5, &a);
            for (int i = 0; i < 5; i++) {
                double gi = g[i], vi;
                if (decoupled) {
                    wp[i] *= 1 - a.lr * a.weight_decay;
                } else {
                    gi += a.weight_decay * wp[i];
                }
                wm[i] = a.beta1 * wm[i] + (1 - a.beta1) * gi;
                wv[i] = a.beta2 * wv[i] + (1 - a.beta2) * gi * gi;
                wvmax[i] = fmax(wvmax[i], wv[i]);
                vi = ams ? wvmax[i] : wv[i];
                wp[i] -= a.lr / a.bc1 * wm[i] /
                         (sqrt(vi) / sqrt(a.bc2) + a.eps);
            }
        }
        is_double(max_abs_diff(p, wp, 5), 0, 1e-14,
                  "%s%s: 3 steps match the rule", decoupled ? "adamw" : "adam",
                  ams ? " amsgrad" : "");
        is_double(max_abs_diff(m, wm, 5) + max_abs_diff(v, wv, 5), 0, 1e-15,
                  "%s%s: exp_avg and exp_avg_sq", decoupled ? "adamw" : "adam",
                  ams ? " amsgrad" : "");
    }
}

/* ---- existing entries at the edges ------------------------------------ */

static void
test_elementwise_edges(void)
{
    /* a [2, 3] (row stride 4: a view of a wider buffer) + b [3] broadcast */
    double a[8] = {1, 2, 3, -9, 4, 5, 6, -9}, b[3] = {10, 20, 30}, out[6];
    int64_t shape[2] = {2, 3}, sa[2] = {4, 1}, sb[2] = {0, 1};
    double want[6] = {11, 22, 33, 14, 25, 36};

    K->binary(TD_BIN_ADD, TD_FLOAT64, out, (td_operand_t){a, sa},
              (td_operand_t){b, sb}, shape, 2);
    is_double(max_abs_diff(out, want, 6), 0, 0,
              "binary add: strided rows + a broadcast row");
    out[0] = 42;
    K->binary(TD_BIN_MUL, TD_FLOAT64, out, (td_operand_t){a, sa},
              (td_operand_t){b, sb}, (int64_t[]){0, 3}, 2);
    is_double(out[0], 42, 0, "binary over a [0, 3] shape writes nothing");
    K->unary(TD_UN_NEG, TD_FLOAT64, out, (td_operand_t){a, sa}, 0,
             (int64_t[]){1, 1}, 2);
    is_double(out[0], -1, 0, "unary over a [1, 1] shape");
}

/* ---- through the ops: fused paths give the composed results ---------- */

static td_tensor_t *
tensor_of(const float *v, const int64_t *shape, int ndim)
{
    td_tensor_t *t = NULL;

    td_tensor_from_data(v, shape, ndim, TD_FLOAT32, &t);
    return t;
}

static void
test_ops_fused(void)
{
    float xv[4 * 6], gv[4 * 6];
    int64_t shape[2] = {4, 6};

    for (int i = 0; i < 24; i++) {
        xv[i] = (float)rnd();
        gv[i] = (float)rnd();
    }
    for (int dim = 0; dim <= 1; dim++) {
        for (int log_out = 0; log_out <= 1; log_out++) {
            td_tensor_t *x = tensor_of(xv, shape, 2);
            td_tensor_t *g = tensor_of(gv, shape, 2), *y = NULL, *gx1 = NULL, *gx2 = NULL;
            td_tensor_set_requires_grad(x, 1);
            (log_out ? td_log_softmax : td_softmax)(x, dim, &y);
            /* create_graph = 0: the fused kernel; 1: the composed ops */
            td_grad(&y, &g, 1, &x, 1, 1, 0, 0, &gx1);
            td_grad(&y, &g, 1, &x, 1, 1, 1, 0, &gx2);
            ok(gx1 != NULL && gx2 != NULL &&
               memcmp(td_tensor_data(gx1), td_tensor_data(gx2),
                      24 * sizeof(float)) == 0,
               "%s dim %d float32: fused first-order backward has the bits "
               "of the composed one", log_out ? "log_softmax" : "softmax",
               dim);
            td_tensor_release(gx1);
            td_tensor_release(gx2);
            td_tensor_release(y);
            td_tensor_release(x);
            td_tensor_release(g);
        }
    }
    /* max: kernel values (no grad) = gathered values (grad) */
    {
        td_tensor_t *x = tensor_of(xv, shape, 2), *v1, *v2, *i1, *i2;
        td_max_dim(x, 1, 0, &v1, &i1);
        td_tensor_set_requires_grad(x, 1);
        td_max_dim(x, 1, 0, &v2, &i2);
        ok(memcmp(td_tensor_data(v1), td_tensor_data(v2), 4 * sizeof(float))
           == 0 && memcmp(td_tensor_data(i1), td_tensor_data(i2),
                          4 * sizeof(int64_t)) == 0,
           "max_dim: kernel values without grad = gathered values with grad");
        ok(td_tensor_grad_fn(v2) != NULL && td_tensor_grad_fn(v1) == NULL,
           "max_dim records a node only when grad is needed");
        td_tensor_release(v1);
        td_tensor_release(v2);
        td_tensor_release(i1);
        td_tensor_release(i2);
        td_tensor_release(x);
    }
    /* dropout = a * ((uniform_(seed) >= p) / (1 - p)) */
    {
        float ones[24];
        td_tensor_t *a, *u = NULL, *d = NULL;
        int good = 1;
        for (int i = 0; i < 24; i++) {
            ones[i] = 1;
        }
        a = tensor_of(ones, shape, 2);
        td_tensor_empty(shape, 2, TD_FLOAT32, TD_CPU, &u);
        td_tensor_uniform_(u, 0, 1, 99);
        is_int(td_dropout(a, 0.25, 1, 99, &d), TD_OK, "dropout runs");
        for (int i = 0; d != NULL && i < 24; i++) {
            float ui = ((float *)td_tensor_data(u))[i];
            float m = ui >= 0.25 ? (float)(1 / 0.75) : 0.f;
            good &= ((float *)td_tensor_data(d))[i] == m;
        }
        ok(d != NULL && good, "dropout's mask is uniform_ of its seed >= p");
        td_tensor_release(a);
        td_tensor_release(u);
        td_tensor_release(d);
    }
}

/* ---- the collectives' reductions --------------------------------------- */

/* reduce_to (dst = a op src, one pass) gives the bits of a copy of A then
 * reduce_into from SRC, for every dtype and op of the collectives, at
 * sizes around the vector widths (the clones' tails), A and SRC with
 * NaNs and ties for MIN/MAX; neither operand is written. */
static void
test_reduce_to(void)
{
    static const td_dtype_t dts[] = { TD_FLOAT32, TD_FLOAT64, TD_INT32,
                                      TD_INT64, TD_UINT8 };
    static const size_t ns[] = { 0, 1, 7, 16, 63, 64, 65, 1023 };
    int bad = 0, cases = 0, bad_u = 0;

    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        size_t es = td_dtype_size(dts[d]);
        int ints = dts[d] != TD_FLOAT32 && dts[d] != TD_FLOAT64;

        for (int op = TD_ACC_SUM; op <= TD_ACC_BXOR; op++) {
            if (!ints && op >= TD_ACC_BAND) {
                continue;
            }
            for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
                size_t n = ns[k], bytes = n * es + 1;
                uint8_t *a = malloc(bytes), *b = malloc(bytes);
                uint8_t *want = malloc(bytes), *got = malloc(bytes);
                uint8_t *a0 = malloc(bytes), *b0 = malloc(bytes);

                for (size_t i = 0; i < n; i++) {
                    double x = rnd() * 100, y = i % 5 == 0 ? x : rnd() * 100;

                    if (i % 11 == 3 && !ints) {
                        x = NAN;
                    }
                    switch (dts[d]) {
                    case TD_FLOAT32:
                        ((float *)a)[i] = (float)x;
                        ((float *)b)[i] = (float)y;
                        break;
                    case TD_FLOAT64:
                        ((double *)a)[i] = x;
                        ((double *)b)[i] = y;
                        break;
                    case TD_INT32:
                        ((int32_t *)a)[i] = (int32_t)x;
                        ((int32_t *)b)[i] = (int32_t)y;
                        break;
                    case TD_INT64:
                        ((int64_t *)a)[i] = (int64_t)(x * 1e12);
                        ((int64_t *)b)[i] = (int64_t)(y * 1e12);
                        break;
                    default:
                        a[i] = (uint8_t)(int)(x + 200);
                        b[i] = (uint8_t)(int)(y + 200);
                        break;
                    }
                }
                memcpy(a0, a, n * es);
                memcpy(b0, b, n * es);
                memcpy(want, a, n * es);
                K->reduce_into(dts[d], (td_accumulate_op_t)op, want, b, n);
                memset(got, 0xa5, bytes);
                K->reduce_to(dts[d], (td_accumulate_op_t)op, got, a, b, n);
                cases++;
                if (memcmp(got, want, n * es) != 0 || got[n * es] != 0xa5 ||
                    memcmp(a, a0, n * es) != 0 || memcmp(b, b0, n * es) != 0) {
                    bad++;
                    diag("reduce_to %s op %d n %zu differs",
                         td_dtype_name(dts[d]), op, n);
                }
                /* sources at an odd byte, as a body where the transport
                 * received it (runtime/coll/ring.c R4): the same bits
                 * (UBSan: no misaligned load) */
                if (TD_CPU_REDUCE_ANY_SRC) {
                    uint8_t *ua = malloc(bytes + 3), *ub = malloc(bytes + 3);

                    memcpy(ua + 3, a0, n * es);
                    memcpy(ub + 3, b0, n * es);
                    memcpy(got, a0, n * es);
                    K->reduce_into(dts[d], (td_accumulate_op_t)op, got,
                                   ub + 3, n);
                    bad_u += memcmp(got, want, n * es) != 0;
                    memset(got, 0xa5, bytes);
                    K->reduce_to(dts[d], (td_accumulate_op_t)op, got, ua + 3,
                                 ub + 3, n);
                    bad_u += memcmp(got, want, n * es) != 0;
                    free(ua);
                    free(ub);
                }
                free(a);
                free(b);
                free(want);
                free(got);
                free(a0);
                free(b0);
            }
        }
    }
    ok(bad == 0, "reduce_to gives reduce_into's bits on a copy (%d cases, "
       "%d differ), and writes only DST", cases, bad);
    ok(bad_u == 0, "reduce_into and reduce_to read sources at an odd byte "
       "(%d cases each, %d differ)%s", TD_CPU_REDUCE_ANY_SRC ? cases : 0,
       bad_u, TD_CPU_REDUCE_ANY_SRC ? "" : ": not on this compiler");
}

int
main(void)
{
    plan(99);
    K = td__kernels_get(TD_CPU);
    ok(K == &td_cpu_kernels && K->softmax && K->softmax_backward &&
       K->max_dim && K->index_check && K->index_select && K->index_add &&
       K->gather && K->scatter_add && K->bag_plan && K->batch_u8 &&
       K->random &&
       K->dropout_mask && K->sgd_step && K->adam_step && K->bn_sums &&
       K->bn_apply && K->bn_backward_reduce && K->bn_backward_elemt &&
       K->reduce_into && K->reduce_to && K->divide,
       "the CPU row fills every entry of the table");
    test_softmax();
    test_max_dim();
    test_index();
    test_bag_plan();
    test_batch_u8();
    test_random();
    test_sgd();
    test_adam();
    test_elementwise_edges();
    test_ops_fused();
    test_reduce_to();
    return exit_status();
}
