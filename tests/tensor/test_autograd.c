/* test_autograd: the engine's contract: leaf accumulation, sinks, extra
 * root nodes built outside the engine, hooks, version checks, errors, and
 * independent backward passes in parallel threads. */
#include "config.h"

#include <pthread.h>

#include "tests/tap.h"
#include <todist/todist.h>

static td_tensor_t *
vec(const double *v, int64_t n, int rg)
{
    td_tensor_t *t;

    td_tensor_from_data(v, &n, 1, TD_FLOAT64, &t);
    if (rg) {
        td_tensor_set_requires_grad(t, 1);
    }
    return t;
}

static double
at(td_tensor_t *t, int64_t i)
{
    return t ? td_tensor_get(t, &i) : NAN;
}

/* ---- a "send"-like node defined here, outside the engine: it forwards its
 * two incoming gradients (scaled by its state) to its two next edges. */
static td_status_t
relay_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    double *scale = td_node_state(node);

    for (int i = 0; i < 2; i++) {
        gout[i] = NULL;
        if (gin[i] != NULL && td_mul_scalar(gin[i], *scale, &gout[i]) != TD_OK) {
            return TD_ERR_NO_MEMORY;
        }
    }
    return TD_OK;
}

static const td_node_ops_t relay_ops = {"RelayBackward", relay_backward, NULL,
                                        free};

typedef struct {
    td_tensor_t *leaf[4];
    td_tensor_t *grad[4];
    int          n, calls;
} sink_t;

static td_status_t
sink_fn(void *arg, td_tensor_t *leaf, td_tensor_t *grad)
{
    sink_t *s = arg;

    s->calls++;
    for (int i = 0; i < s->n; i++) {
        if (s->leaf[i] == leaf) {
            s->grad[i] = td_tensor_retain(grad);
        }
    }
    return TD_OK;
}

static td_status_t
double_hook(void *arg, td_tensor_t *grad, td_tensor_t **new_grad)
{
    (*(int *)arg)++;
    return td_mul_scalar(grad, 2.0, new_grad);
}

static td_status_t
post_hook(void *arg, td_tensor_t *leaf)
{
    *(double *)arg = at(td_tensor_grad(leaf), 0);
    return TD_OK;
}

/* ---- threads: each runs its own forward + backward many times on a
 * shared weight with retain_graph over a shared graph part. */
typedef struct {
    td_tensor_t *w;
    td_tensor_t *shared_h;     /* w*w, built once, used by all */
    int          ok;
} thr_t;

static void *
thr_main(void *p)
{
    thr_t *t = p;

    t->ok = 1;
    for (int it = 0; it < 200; it++) {
        td_tensor_t *y, *s, *g;
        double k = 1 + it % 3;
        if (td_mul_scalar(t->shared_h, k, &y) != TD_OK ||
            td_sum(y, &s) != TD_OK ||
            td_grad(&s, NULL, 1, &t->w, 1, 1, 0, 0, &g) != TD_OK) {
            t->ok = 0;
            return NULL;
        }
        /* d/dw sum(k w^2) = 2 k w */
        for (int i = 0; i < 3; i++) {
            if (fabs(at(g, i) - 2 * k * at(t->w, i)) > 1e-12) {
                t->ok = 0;
            }
        }
        td_tensor_release(y);
        td_tensor_release(s);
        td_tensor_release(g);
    }
    return NULL;
}

int
main(void)
{
    double xv[3] = {1, 2, 3}, yv[3] = {4, 5, 6};
    td_tensor_t *x, *y, *z, *s, *s2, *g[2];
    td_status_t st;

    plan(43);

    /* accumulation into .grad and summing of partial gradients */
    x = vec(xv, 3, 1);
    y = vec(yv, 3, 1);
    td_mul(x, y, &z);                 /* z = x*y, s = sum(z + x) */
    td_add(z, x, &s2);
    td_sum(s2, &s);
    is_int(td_backward(&s, NULL, 1, 0, 0), TD_OK, "backward of sum(x*y + x)");
    is_double(at(td_tensor_grad(x), 1), 6.0, 1e-12, "x.grad = y + 1 (two "
              "paths summed)");
    is_double(at(td_tensor_grad(y), 2), 3.0, 1e-12, "y.grad = x");
    st = td_backward(&s, NULL, 1, 0, 0);
    is_int(st, TD_ERR_STATE, "backward twice without retain_graph fails");
    like(td_last_error(), "second time", "the error says why");
    td_tensor_release(s);
    td_tensor_release(s2);
    td_tensor_release(z);

    /* accumulation across passes, retain_graph */
    td_mul(x, x, &z);
    td_sum(z, &s);
    td_tensor_set_grad(x, NULL);
    td_backward(&s, NULL, 1, 1, 0);
    is_int(td_backward(&s, NULL, 1, 0, 0), TD_OK, "retain_graph allows a "
           "second pass");
    is_double(at(td_tensor_grad(x), 2), 12.0, 1e-12, "two passes accumulate "
              "2 * 2x");
    td_tensor_release(s);
    td_tensor_release(z);

    /* non-scalar root without gradient; gradient shape mismatch */
    td_mul(x, y, &z);
    is_int(td_backward(&z, NULL, 1, 0, 0), TD_ERR_SHAPE, "non-scalar root "
           "needs a gradient");
    like(td_last_error(), "\\[3\\]", "error names the root's shape");
    {
        td_tensor_t *bad = vec(xv, 2, 0);
        is_int(td_backward(&z, &bad, 1, 0, 0), TD_ERR_SHAPE,
               "root gradient of the wrong shape");
        like(td_last_error(), "\\[2\\].*\\[3\\]", "both shapes named");
        td_tensor_release(bad);
    }
    td_tensor_release(z);

    /* op errors name op and shapes */
    {
        td_tensor_t *a2 = vec(xv, 2, 0), *f32, *r = NULL;
        is_int(td_add(x, a2, &r), TD_ERR_SHAPE, "add [3] + [2] fails");
        like(td_last_error(), "add.*\\[3\\].*\\[2\\]", "message names op and "
             "shapes");
        td_tensor_zeros((int64_t[]){3}, 1, TD_FLOAT32, &f32);
        is_int(td_mul(x, f32, &r), TD_ERR_DTYPE, "float64 * float32 fails");
        like(td_last_error(), "mul.*float64.*float32", "dtypes named");
        td_tensor_release(a2);
        td_tensor_release(f32);
    }
    {
        td_tensor_t *logits, *tgt, *r = NULL, *m2;
        td_tensor_zeros((int64_t[]){2, 5}, 2, TD_FLOAT64, &logits);
        td_tensor_from_data((int64_t[]){1, 7}, (int64_t[]){2}, 1, TD_INT64, &tgt);
        is_int(td_cross_entropy(logits, tgt, TD_REDUCTION_MEAN, &r),
               TD_ERR_RANGE, "cross_entropy with target 7 of 5 classes fails");
        like(td_last_error(), "index\\[1\\]=7 is outside \\[0, 5\\)",
             "the bad target is named");
        td_tensor_zeros((int64_t[]){3, 4}, 2, TD_FLOAT64, &m2);
        is_int(td_matmul(logits, m2, &r), TD_ERR_SHAPE, "matmul [2, 5] @ [3, 4]");
        like(td_last_error(), "matmul.*\\[2, 5\\].*\\[3, 4\\]", "names both shapes");
        td_tensor_release(m2);
        td_tensor_release(logits);
        td_tensor_release(tgt);
    }

    /* saved tensor modified in place */
    {
        td_tensor_t *w = vec(xv, 3, 1), *e, *se;
        td_tensor_t *c;
        td_tensor_clone(w, &c);          /* non-leaf copy, then exp(c) */
        td_exp(c, &e);
        td_sum(e, &se);
        td_tensor_fill_(c, 0.5);         /* bumps the version */
        is_int(td_backward(&se, NULL, 1, 0, 0), TD_ERR_STATE,
               "in-place change of a saved tensor is an error");
        like(td_last_error(), "ExpBackward.*modified in place", "names the op");
        ok(td_tensor_grad(w) == NULL, "and no wrong gradient was written");
        td_tensor_release(se);
        td_tensor_release(e);
        td_tensor_release(c);
        td_tensor_release(w);
    }

    /* no-grad mode records nothing */
    {
        int was = td_grad_set_enabled(0);
        td_mul(x, y, &z);
        ok(!td_tensor_requires_grad(z) && td_tensor_grad_fn(z) == NULL,
           "no-grad mode: result has no grad_fn");
        td_grad_set_enabled(was);
        td_tensor_release(z);
    }

    /* grad(): leaves untouched, allow_unused */
    {
        td_tensor_t *u = vec(yv, 3, 1), *gu[2];
        td_tensor_set_grad(x, NULL);
        td_mul(x, x, &z);
        td_sum(z, &s);
        is_int(td_grad(&s, NULL, 1, (td_tensor_t *[]){x, u}, 2, 1, 0, 0, gu),
               TD_ERR_STATE, "grad of an unused input fails");
        is_int(td_grad(&s, NULL, 1, (td_tensor_t *[]){x, u}, 2, 0, 0, 1, gu),
               TD_OK, "allow_unused");
        ok(gu[1] == NULL && fabs(at(gu[0], 1) - 4.0) < 1e-12 &&
           td_tensor_grad(x) == NULL, "grad() returns 2x, NULL, leaves .grad");
        td_tensor_release(gu[0]);
        td_tensor_release(z);
        td_tensor_release(s);
        td_tensor_release(u);
    }

    /* hooks: tensor hook on a non-leaf and a leaf; post-accumulate hook */
    {
        int calls = 0;
        double seen = 0;
        td_tensor_t *h;
        td_tensor_set_grad(x, NULL);
        td_mul(x, y, &h);
        td_tensor_register_hook(h, double_hook, &calls);
        td_tensor_register_hook(x, double_hook, &calls);
        td_tensor_register_post_accumulate_hook(x, post_hook, &seen);
        td_sum(h, &s);
        td_backward(&s, NULL, 1, 0, 0);
        is_int(calls, 2, "both hooks ran once");
        is_double(at(td_tensor_grad(x), 0), 16.0, 1e-12, "x.grad = 2*2*y "
                  "(non-leaf and leaf hook doubled it)");
        is_double(seen, 16.0, 1e-12, "post-accumulate hook saw the final grad");
        td_tensor_release(h);
        td_tensor_release(s);
    }

    /* sink + extra root node built outside the engine: relay(x*y, x) */
    {
        td_tensor_t *a = vec(xv, 3, 1), *b = vec(yv, 3, 1), *ab, *loss;
        td_tensor_t *one = vec((double[]){1, 1, 1}, 3, 0);
        td_tensor_t *gr[2];
        td_edge_t next[2];
        td_node_t *relay;
        double *scale = malloc(sizeof(double));
        sink_t sk = {{a, b}, {NULL, NULL}, 2, 0};
        td_backward_opts_t o = {0};

        *scale = 10;
        td_mul(a, b, &ab);
        next[0] = td_tensor_gradient_edge(ab);
        next[1] = td_tensor_gradient_edge(a);
        is_int(td_node_create(&relay_ops, scale, 2, next, 2, &relay), TD_OK,
               "an outside module builds a node with two inputs");
        /* the local loss also uses a: loss = sum(a) */
        td_sum(a, &loss);
        gr[0] = one;
        gr[1] = one;
        o.roots = &loss;
        o.n_roots = 1;
        o.extra_roots = &relay;
        o.extra_root_grads = (td_tensor_t *const *const[]){gr};
        o.n_extra_roots = 1;
        o.sink = sink_fn;
        o.sink_arg = &sk;
        is_int(td_autograd_run(&o), TD_OK, "backward with an extra root and "
               "a sink");
        /* a gets: 1 (loss) + 10*b (via a*b) + 10 (direct) */
        is_double(at(sk.grad[0], 1), 1 + 10 * 5 + 10, 1e-12, "a's gradient "
                  "sums the loss and both relay paths");
        is_double(at(sk.grad[1], 2), 10 * 3, 1e-12, "b's gradient via a*b");
        is_int(sk.calls, 2, "each leaf delivered once");
        ok(td_tensor_grad(a) == NULL && td_tensor_grad(b) == NULL,
           "the sink kept .grad untouched");
        td_tensor_release(sk.grad[0]);
        td_tensor_release(sk.grad[1]);
        td_node_release(relay);
        td_tensor_release(ab);
        td_tensor_release(loss);
        td_tensor_release(one);
        td_tensor_release(a);
        td_tensor_release(b);
    }

    /* a leaf freed while its graph lives: backward still runs */
    {
        td_tensor_t *a = vec(xv, 3, 1), *b = vec(yv, 3, 1), *ab, *ls;
        td_mul(a, b, &ab);
        td_sum(ab, &ls);
        td_tensor_release(a);
        is_int(td_backward(&ls, NULL, 1, 0, 0), TD_OK, "backward after a leaf "
               "was released");
        is_double(at(td_tensor_grad(b), 0), 1.0, 1e-12, "the living leaf got "
                  "its gradient");
        td_tensor_release(ls);
        td_tensor_release(ab);
        td_tensor_release(b);
    }

    /* independent passes in parallel threads over a shared graph part */
    {
        pthread_t th[4];
        thr_t ts[4];
        td_tensor_t *w = vec(xv, 3, 1), *h;
        td_mul(w, w, &h);
        for (int i = 0; i < 4; i++) {
            ts[i].w = w;
            ts[i].shared_h = h;
            pthread_create(&th[i], NULL, thr_main, &ts[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
        }
        ok(ts[0].ok && ts[1].ok && ts[2].ok && ts[3].ok, "4 threads x 200 "
           "backward passes give exact gradients");
        td_tensor_release(h);
        td_tensor_release(w);
    }

    /* create_graph: .grad keeps a graph; grad of grad */
    {
        td_tensor_t *a = vec(xv, 3, 1), *c, *sc, *ga, *sg, *gga;
        td_pow_scalar(a, 3, &c);
        td_sum(c, &sc);
        td_grad(&sc, NULL, 1, &a, 1, 1, 1, 0, &ga);   /* 3a^2 */
        ok(td_tensor_requires_grad(ga), "create_graph: gradient has a graph");
        td_sum(ga, &sg);
        td_grad(&sg, NULL, 1, &a, 1, 0, 0, 0, &gga);  /* 6a */
        is_double(at(gga, 2), 18.0, 1e-12, "d2/da2 sum(a^3) = 6a");
        td_tensor_release(gga);
        td_tensor_release(sg);
        td_tensor_release(ga);
        td_tensor_release(sc);
        td_tensor_release(c);
        td_tensor_release(a);
    }
    /* a 50000-op chain (an unrolled loop): backward, grad() and freeing the
     * graph must not recurse once per op */
    {
        const int N = 50000;
        td_tensor_t *x0 = vec((double[]){1.0}, 1, 1), *c = vec((double[]){1.00002}, 1, 0);
        td_tensor_t *cur = td_tensor_retain(x0), *nx, *gx = NULL;
        int okc = 1;
        for (int i = 0; i < N && okc; i++) {
            okc = td_mul(cur, c, &nx) == TD_OK;
            td_tensor_release(cur);
            cur = nx;
        }
        if (okc && td_grad(&cur, NULL, 1, &x0, 1, 1, 0, 0, &gx) != TD_OK) {
            diag("grad: %s", td_last_error());
        }
        ok(okc && gx != NULL &&
           fabs(at(gx, 0) - pow(1.00002, N)) < 1e-9 * pow(1.00002, N),
           "grad() through a %d-op chain: c^N = %.6f", N, at(gx, 0));
        td_tensor_release(gx);
        is_int(td_backward(&cur, NULL, 1, 0, 0), TD_OK, "backward through the "
               "chain");
        td_tensor_release(cur);   /* frees 50000 nodes without recursion */
        ok(td_tensor_grad(x0) != NULL, "leaf reached; graph freed");
        td_tensor_release(x0);
        td_tensor_release(c);
    }
    (void)g;
    td_tensor_release(x);
    td_tensor_release(y);
    return exit_status();
}
