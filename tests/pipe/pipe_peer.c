/* pipe_peer.c: one rank of the pipeline tests (tests/pipe/test_pipe.sh),
 * over real point-to-point and UCX. Run as `todist-run -n N pipe_peer MODE`.
 *
 * The model: 6 linear layers 5-7-7-7-7-7-3 with tanh between, an MSE loss;
 * stage s of S owns layers [6s/S, 6(s+1)/S). Every rank also builds the
 * whole model (same values, its own tensors) and computes the reference:
 * single-process gradient accumulation over the same micro-batches, in
 * order, of loss / M.
 *
 * Modes (world size S, or S x R for hybrid):
 *   grad         every schedule x M in {1, 4, 7} x {float64, float32}, two
 *                steps each (the second without shape messages): .grad of
 *                the stage's layers equals the reference (1e-12 / 1e-5),
 *                the loss too, and the micro-batches in flight stay within
 *                the schedule's bound (P3), and the second step allocates
                no receive buffer (P6). Rank 0 prints PASS/FAIL lines.
 *   gradlin      S = size stages (L % S == 0) ending in linear layers (no
 *                tanh), 1F1B and ZB, M = 4, float64: as grad (ZB's W of
 *                those layers reads the received gradient: P6 keeps it).
 *   hybrid R     S = size / R stages x R replicas, 1F1B and ZB, M = 4: the
 *                gradients equal the average over the replicas' batches.
 *   error        stage 1's forward fails at micro-batch 2: every rank's
 *                step fails naming stage 1 (rank 1); the next step fails
 *                at once (broken).
 *   kill         stage 1 SIGKILLs itself at micro-batch 2 of the second
 *                step: every other rank's step fails naming it, within 2 s.
 *   trace        S = 2, M = 4, every schedule, two steps: each stage's trace
 *                (P7) holds its ops in the order written out below from
 *                the schedules' definitions (not from schedule.c), a wait
 *                before each op that needs a message and a send after each
 *                op that makes one, in time order without overlap; and
 *                stage 1 never ends a wait for activation m before stage 0
 *                began sending it (the ranks' clocks line up).
 *   spin         S = 2, M = 1: stage 0 starts its second step 0.4 s late; stage 1's
 *                wait for it never goes to sleep because its spin is over
 *                with TODIST_PIPE_SPIN_MS=60000 (it drives the transport,
 *                P8), and does with 0 (it sleeps after the runtime's 2 ms):
 *                coll_wait_spin_sleeps, the wait's own decisions, not time
 *                nor context switches.
 *   spinbound    under TODIST_BIND=closest with a core per rank: each rank
 *                is bound to one core and makes a pipe with
 *                TODIST_PIPE_SPIN_MS unset; under TODIST_LOG=debug it logs
 *                P8's choice, which the script reads (50 ms: the cores
 *                counted are those before placement).
 *   ingrad       S = size, M = 4, float64, every schedule: stage 0's first
 *                op is the test's own node (x * v, v a parameter) whose
 *                backward computes each product only where the pass needs
 *                it, as the library's ops do, counting the input
 *                gradient's: with an INPUT that requires grad, by default
 *                never (P9: stage 0 leaves the data's gradient out, and
 *                INPUT's .grad stays unset), with opts.input_grad M times
 *                a step, each micro-batch given to stage 0's forward a
 *                leaf (no edge into INPUT), INPUT's .grad (set before the
 *                step: it is added to) equal to single-process
 *                accumulation (1e-12); .grad of every parameter equal to
 *                it in both. input_grad with an INPUT that does not
 *                require grad fails every stage's step naming it.
 *   badargs      M = 0, more stages than ranks, a batch M does not divide,
 *                an output whose shape changes between micro-batches (and
 *                between mini-batches): clear errors on every rank. */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include <todist/todist.h>
#include "tests/peer_agree.h"
#include "runtime/coll/wait.h"    /* coll_wait_spin_sleeps */
#include "runtime/tensor/tensor_internal.h"   /* td__autograd_output_needed */

#define L      6
#define ROWS   3          /* rows per micro-batch */
#define NIN    5
#define NOUT   3

static const int64_t width[L + 1] = {NIN, 7, 7, 7, 7, 7, NOUT};
static int rank, size;
/* gradlin: no tanh after a stage's last layer, so every stage's output
 * is a linear layer's and its W reads the received gradient itself */
static int linear_ends = 0;

typedef struct {
    td_tensor_t *w[L], *b[L];
} model_t;

typedef struct {
    model_t *m;
    int      lo, hi;       /* layers of this stage */
    int      stage;
    int      fail_micro;   /* error mode: fail at this micro-batch */
    int      kill_micro;   /* kill mode */
    int      kill_step, step;
    int      shape_bug;    /* badargs: micro-batch 1 narrower */
    td_tensor_t *v;        /* ingrad: stage 0's x * v first */
} stage_arg_t;

static td_status_t counted_mul(td_tensor_t *x, td_tensor_t *v,
                               td_tensor_t **out);

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
model_init(model_t *m, td_dtype_t dt)
{
    for (int l = 0; l < L; l++) {
        int64_t ws[2] = {width[l + 1], width[l]}, bs[1] = {width[l + 1]};
        td_tensor_empty(ws, 2, dt, TD_CPU, &m->w[l]);
        td_tensor_empty(bs, 1, dt, TD_CPU, &m->b[l]);
        td_tensor_uniform_(m->w[l], -0.6, 0.6, 100 + l);
        td_tensor_uniform_(m->b[l], -0.2, 0.2, 200 + l);
        td_tensor_set_requires_grad(m->w[l], 1);
        td_tensor_set_requires_grad(m->b[l], 1);
    }
}

static void
model_free(model_t *m)
{
    for (int l = 0; l < L; l++) {
        td_tensor_release(m->w[l]);
        td_tensor_release(m->b[l]);
    }
}

static void
zero_grads(model_t *m)
{
    for (int l = 0; l < L; l++) {
        td_tensor_set_grad(m->w[l], NULL);
        td_tensor_set_grad(m->b[l], NULL);
    }
}

/* layers LO..HI-1 of M on X; the loss against T when HI == L */
static td_status_t
run_layers(model_t *m, int lo, int hi, td_tensor_t *x, td_tensor_t *t,
           td_tensor_t **out)
{
    td_tensor_t *h = td_tensor_retain(x), *n;
    td_status_t st = TD_OK;

    for (int l = lo; l < hi && st == TD_OK; l++) {
        st = td_linear(h, m->w[l], m->b[l], &n);
        td_tensor_release(h);
        h = st == TD_OK ? n : NULL;
        if (st == TD_OK && l < L - 1 &&
            !(linear_ends && (l + 1) * size % L == 0)) {
            st = td_tanh(h, &n);
            td_tensor_release(h);
            h = st == TD_OK ? n : NULL;
        }
    }
    if (st == TD_OK && hi == L) {
        st = td_mse_loss(h, t, TD_REDUCTION_MEAN, &n);
        td_tensor_release(h);
        h = st == TD_OK ? n : NULL;
    }
    if (st == TD_OK) {
        *out = h;
    }
    return st;
}

/* stage 0's forwards (ingrad) given a micro-batch that is not a leaf: an
 * autograd edge into INPUT, whose backward (a narrow's) builds a zero
 * tensor of INPUT's whole size each micro-batch (P9 gives a leaf) */
static int ingrad_nonleaf;

static td_status_t
stage_forward(void *arg, td_tensor_t *x, td_tensor_t *target, int micro,
              td_tensor_t **out)
{
    stage_arg_t *a = arg;
    td_status_t st;

    if (micro == a->fail_micro) {
        return td_error(TD_ERR_INVALID, "injected failure in the test's "
                        "forward");
    }
    if (micro == a->kill_micro && a->step == a->kill_step) {
        fflush(stdout);
        raise(SIGKILL);
    }
    if (a->v != NULL) {
        td_tensor_t *h;
        ingrad_nonleaf += !td_tensor_is_leaf(x);
        st = counted_mul(x, a->v, &h);
        if (st == TD_OK) {
            st = run_layers(a->m, a->lo, a->hi, h, target, out);
            td_tensor_release(h);
        }
    } else {
        st = run_layers(a->m, a->lo, a->hi, x, target, out);
    }
    if (st == TD_OK && a->shape_bug && micro == 1) {
        td_tensor_t *n;
        st = td_tensor_narrow(*out, 0, 0, ROWS - 1, &n);
        td_tensor_release(*out);
        *out = st == TD_OK ? n : NULL;
    }
    return st;
}

static void
make_batch(int n_micro, td_dtype_t dt, int seed, td_tensor_t **x,
           td_tensor_t **t)
{
    int64_t xs[2] = {n_micro * ROWS, NIN}, ts[2] = {n_micro * ROWS, NOUT};

    td_tensor_empty(xs, 2, dt, TD_CPU, x);
    td_tensor_empty(ts, 2, dt, TD_CPU, t);
    td_tensor_uniform_(*x, -1, 1, 1000 + seed);
    td_tensor_uniform_(*t, -1, 1, 2000 + seed);
}

/* Single-process accumulation of loss_m / M over the micro-batches; the
 * mean loss. */
static double
reference(model_t *m, td_tensor_t *x, td_tensor_t *t, int n_micro)
{
    double sum = 0;

    for (int k = 0; k < n_micro; k++) {
        td_tensor_t *xs, *ts, *loss, *g;
        double v;
        td_tensor_narrow(x, 0, k * ROWS, ROWS, &xs);
        td_tensor_narrow(t, 0, k * ROWS, ROWS, &ts);
        run_layers(m, 0, L, xs, ts, &loss);
        td_tensor_item(loss, &v);
        sum += v;
        td_tensor_full(td_tensor_shape(loss), td_tensor_ndim(loss),
                       td_tensor_dtype(loss), 1.0 / n_micro, &g);
        td_backward(&loss, &g, 1, 0, 0);
        td_tensor_release(g);
        td_tensor_release(loss);
        td_tensor_release(xs);
        td_tensor_release(ts);
    }
    return sum / n_micro;
}

static double
max_diff(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *a64, *b64;
    double d = 0;

    if (a == NULL || b == NULL) {
        return a == b ? 0 : INFINITY;
    }
    td_tensor_to_dtype(a, TD_FLOAT64, &a64);
    td_tensor_to_dtype(b, TD_FLOAT64, &b64);
    for (int64_t i = 0; i < td_tensor_numel(a64); i++) {
        double e = fabs(((double *)td_tensor_data(a64))[i] -
                        ((double *)td_tensor_data(b64))[i]);
        if (!(e <= d)) {
            d = e;
        }
    }
    td_tensor_release(a64);
    td_tensor_release(b64);
    return d;
}

static void
scale_(td_tensor_t *t, double c)
{
    td_tensor_t *n;

    td_mul_scalar(t, c, &n);
    td_tensor_copy_(t, n);
    td_tensor_release(n);
}

static void
stage_of(int S, int s, stage_arg_t *a, model_t *m)
{
    memset(a, 0, sizeof(*a));
    a->m = m;
    a->stage = s;
    a->lo = s * L / S;
    a->hi = (s + 1) * L / S;
    a->fail_micro = a->kill_micro = -1;
}

static td_status_t
make_pipe(int S, int R, int M, td_pipe_schedule_t sched, stage_arg_t *a,
          td_pipe_t **p)
{
    td_tensor_t *params[2 * L];
    td_pipe_opts_t o = {0};
    int n = 0;

    for (int l = a->lo; l < a->hi; l++) {
        params[n++] = a->m->w[l];
        params[n++] = a->m->b[l];
    }
    o.n_stages = S;
    o.n_replicas = R;
    o.n_micro = M;
    o.schedule = sched;
    o.forward = stage_forward;
    o.arg = a;
    o.params = params;
    o.n_params = n;
    return td_pipe_create(&o, p);
}

/* Two steps of one configuration; returns 1 when every check held. */
static int
one_config(int S, int R, int M, td_pipe_schedule_t sched, td_dtype_t dt,
           double tol)
{
    model_t m, ref;
    stage_arg_t a;
    td_pipe_t *p = NULL;
    int s = rank % S, rep = rank / S, good = 1;
    td_status_t st;

    model_init(&m, dt);
    model_init(&ref, dt);
    stage_of(S, s, &a, &m);
    st = make_pipe(S, R, M, sched, &a, &p);
    if (st != TD_OK) {
        fail_detail("create: %s", td_last_error());
        good = 0;
    }
    for (int step = 0; step < 2 && good; step++) {
        td_tensor_t *x, *t, *rx, *rt;
        td_pipe_stats_t stats;
        double loss = 0, want = 0, d = 0;

        zero_grads(&m);
        zero_grads(&ref);
        make_batch(M, dt, 10 * step + rep, &x, &t);
        st = td_pipe_step(p, s == 0 ? x : NULL, s == S - 1 ? t : NULL, &loss);
        if (st != TD_OK) {
            fail_detail("step %d: %s", step, td_last_error());
            good = 0;
        }
        /* reference: every replica's batch, averaged over replicas (the
         * mean of the per-replica means) */
        for (int r = 0; r < R && good; r++) {
            double l;
            make_batch(M, dt, 10 * step + r, &rx, &rt);
            l = reference(&ref, rx, rt, M);
            if (r == rep) {
                want = l;
            }
            td_tensor_release(rx);
            td_tensor_release(rt);
        }
        for (int l = a.lo; l < a.hi && good; l++) {
            td_tensor_t *gw = td_tensor_grad(ref.w[l]);
            td_tensor_t *gb = td_tensor_grad(ref.b[l]);
            double e;
            if (R > 1) {
                scale_(gw, 1.0 / R);
                scale_(gb, 1.0 / R);
            }
            e = max_diff(td_tensor_grad(m.w[l]), gw);
            d = e > d ? e : d;
            e = max_diff(td_tensor_grad(m.b[l]), gb);
            d = e > d ? e : d;
        }
        if (good && !(d <= tol)) {
            fail_detail("stage %d step %d: max |grad - reference| = %g > %g",
                        s, step, d, tol);
            good = 0;
        }
        if (good && s == S - 1 && !(fabs(loss - want) <= tol)) {
            fail_detail("stage %d step %d: loss %.17g, reference %.17g", s,
                        step, loss, want);
            good = 0;
        }
        if (good) {
            int cap = sched == TD_PIPE_GPIPE ? M
                    : sched == TD_PIPE_1F1B ? (S - s < M ? S - s : M)
                    : (S < M ? S : M);
            td_pipe_stats(p, &stats);
            if (stats.peak_in_flight > cap ||
                (sched == TD_PIPE_GPIPE && stats.peak_in_flight != M)) {
                fail_detail("stage %d: %d micro-batches in flight, bound %d",
                            s, stats.peak_in_flight, cap);
                good = 0;
            }
            /* P6: the second step receives into the first step's buffers */
            if (step == 1 ? stats.recv_allocs != 0
                          : (S > 1) != (stats.recv_allocs > 0)) {
                fail_detail("stage %d step %d: %d receive buffers allocated "
                            "(the second step must reuse the first's)", s,
                            step, stats.recv_allocs);
                good = 0;
            }
        }
        if (good && rank == 0 && step == 1) {
            printf("# S=%d R=%d M=%d %s %s: max diff %g\n", S, R, M,
                   td_pipe_schedule_name(sched), td_dtype_name(dt), d);
        }
        td_tensor_release(x);
        td_tensor_release(t);
    }
    td_pipe_destroy(p);
    model_free(&m);
    model_free(&ref);
    return good;
}

static int
mode_grad(void)
{
    static const int Ms[3] = {1, 4, 7};
    char name[96];

    for (int sc = 0; sc < 3; sc++) {
        for (int i = 0; i < 3; i++) {
            for (int f = 0; f < 2; f++) {
                td_dtype_t dt = f ? TD_FLOAT32 : TD_FLOAT64;
                snprintf(name, sizeof(name), "grad_S%d_M%d_%s_%s", size,
                         Ms[i], td_pipe_schedule_name((td_pipe_schedule_t)sc),
                         f ? "f32" : "f64");
                agree(one_config(size, 1, Ms[i], (td_pipe_schedule_t)sc, dt,
                                 f ? 1e-5 : 1e-12), name);
            }
        }
    }
    return 0;
}

/* 1F1B and ZB, M = 4, float64, stages ending in linear layers: the
 * weight pass of a stage's last layer reads the received gradient (P6:
 * kept until W, not reused by the next receive). */
static int
mode_gradlin(void)
{
    char name[96];

    linear_ends = 1;
    for (int sc = 1; sc < 3; sc++) {
        snprintf(name, sizeof(name), "gradlin_S%d_M4_%s", size,
                 td_pipe_schedule_name((td_pipe_schedule_t)sc));
        agree(one_config(size, 1, 4, (td_pipe_schedule_t)sc, TD_FLOAT64,
                         1e-12), name);
    }
    return 0;
}

static int
mode_hybrid(int R)
{
    char name[64];

    for (int sc = 1; sc < 3; sc++) {
        snprintf(name, sizeof(name), "hybrid_S%d_R%d_%s", size / R, R,
                 td_pipe_schedule_name((td_pipe_schedule_t)sc));
        agree(one_config(size / R, R, 4, (td_pipe_schedule_t)sc, TD_FLOAT64,
                         1e-12), name);
    }
    return 0;
}

/* ---- ingrad (P9) ---- */

/* Input-gradient products computed by counted_mul's backward. */
static int ingrad_calls;

typedef struct {
    td_saved_t x, v;
} cmul_state_t;

/* gx = g v, gv = g x, each only where the pass needs it (as the
 * library's ops decide, td__autograd_output_needed): gx counted. */
static td_status_t
cmul_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    cmul_state_t *cs = td_node_state(node);
    td_tensor_t *x = NULL, *v = NULL;
    td_status_t st = td_saved_unpack(&cs->x, node, &x);

    if (st == TD_OK) {
        st = td_saved_unpack(&cs->v, node, &v);
    }
    if (st == TD_OK && gin[0] != NULL && td__autograd_output_needed(node, 0)) {
        ingrad_calls++;
        st = td_mul(gin[0], v, &gout[0]);
    }
    if (st == TD_OK && gin[0] != NULL && td__autograd_output_needed(node, 1)) {
        st = td_mul(gin[0], x, &gout[1]);
    }
    return st;
}

static void
cmul_release(td_node_t *node)
{
    cmul_state_t *cs = td_node_state(node);

    td_saved_release(&cs->x);
    td_saved_release(&cs->v);
}

static void
cmul_destroy(void *state)
{
    cmul_state_t *cs = state;

    td_saved_release(&cs->x);
    td_saved_release(&cs->v);
    free(cs);
}

static const td_node_ops_t cmul_ops = {"CountedMulBackward", cmul_backward,
                                       cmul_release, cmul_destroy};

/* X * V (same shape) through the node above. */
static td_status_t
counted_mul(td_tensor_t *x, td_tensor_t *v, td_tensor_t **out)
{
    td_edge_t next[2] = {td_tensor_gradient_edge(x),
                         td_tensor_gradient_edge(v)};
    int was = td_grad_set_enabled(0);
    td_status_t st = td_mul(x, v, out);
    cmul_state_t *cs;
    td_node_t *node;

    td_grad_set_enabled(was);
    if (st != TD_OK || !was || (next[0].node == NULL && next[1].node == NULL)) {
        return st;
    }
    cs = calloc(1, sizeof(*cs));
    if (cs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "counted_mul: out of memory");
    }
    td_saved_init(&cs->x, x);
    td_saved_init(&cs->v, v);
    st = td_node_create(&cmul_ops, cs, 1, next, 2, &node);
    if (st != TD_OK) {
        cmul_destroy(cs);
        return st;
    }
    st = td_tensor_set_grad_fn(*out, node, 0);
    td_node_release(node);
    return st;
}

/* One step of SCHED with stage 0's input requiring grad, input_grad
 * ASKED: the input-gradient products counted, every .grad (the input's
 * too) against single-process accumulation. 1 when all held. */
static int
ingrad_config(td_pipe_schedule_t sched, int asked)
{
    const int M = 4;
    int64_t vs[2] = {ROWS, NIN};
    model_t m, ref;
    stage_arg_t a;
    td_tensor_t *params[2 * L + 1], *x, *t, *rx, *rt, *vref;
    td_pipe_opts_t o = {0};
    td_pipe_t *p = NULL;
    int n = 0, good = 1, calls;
    double loss, d = 0;
    td_status_t st;

    model_init(&m, TD_FLOAT64);
    model_init(&ref, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    td_tensor_empty(vs, 2, TD_FLOAT64, TD_CPU, &vref);
    td_tensor_uniform_(vref, 0.5, 1.5, 77);
    td_tensor_clone(vref, &a.v);
    td_tensor_set_requires_grad(vref, 1);
    if (rank == 0) {
        td_tensor_set_requires_grad(a.v, 1);
        params[n++] = a.v;
    } else {
        td_tensor_release(a.v);
        a.v = NULL;
    }
    for (int l = a.lo; l < a.hi; l++) {
        params[n++] = m.w[l];
        params[n++] = m.b[l];
    }
    o.n_stages = size;
    o.n_micro = M;
    o.schedule = sched;
    o.forward = stage_forward;
    o.arg = &a;
    o.params = params;
    o.n_params = n;
    o.input_grad = asked;
    make_batch(M, TD_FLOAT64, 3, &x, &t);
    td_tensor_set_requires_grad(x, 1);
    if (asked) {
        /* .grad is added to (the reference's starts the same) */
        td_tensor_t *g0;
        td_tensor_full(td_tensor_shape(x), td_tensor_ndim(x), TD_FLOAT64,
                       0.25, &g0);
        td_tensor_set_grad(x, g0);
        td_tensor_release(g0);
    }
    ingrad_calls = 0;
    ingrad_nonleaf = 0;
    st = td_pipe_create(&o, &p);
    if (st == TD_OK) {
        st = td_pipe_step(p, rank == 0 ? x : NULL,
                          rank == size - 1 ? t : NULL, &loss);
    }
    calls = ingrad_calls;
    if (st != TD_OK) {
        fail_detail("rank %d: %s", rank, td_last_error());
        good = 0;
    }
    if (good && rank == 0 && calls != (asked ? M : 0)) {
        fail_detail("stage 0 computed its input's gradient %d times, not %d",
                    calls, asked ? M : 0);
        good = 0;
    }
    if (good && rank == 0 && ingrad_nonleaf != 0) {
        fail_detail("stage 0's forward got %d of %d micro-batches with an "
                    "autograd edge into the input (not leaves)",
                    ingrad_nonleaf, M);
        good = 0;
    }
    /* the reference: the whole model, x * v first, over the same
     * micro-batches, the input's gradient accumulated too */
    make_batch(M, TD_FLOAT64, 3, &rx, &rt);
    td_tensor_set_requires_grad(rx, 1);
    if (asked) {
        td_tensor_t *g0;
        td_tensor_full(td_tensor_shape(rx), td_tensor_ndim(rx), TD_FLOAT64,
                       0.25, &g0);
        td_tensor_set_grad(rx, g0);
        td_tensor_release(g0);
    }
    for (int k = 0; k < M && good; k++) {
        td_tensor_t *xs, *ts, *h, *ls, *g;
        td_tensor_narrow(rx, 0, k * ROWS, ROWS, &xs);
        td_tensor_narrow(rt, 0, k * ROWS, ROWS, &ts);
        counted_mul(xs, vref, &h);
        run_layers(&ref, 0, L, h, ts, &ls);
        td_tensor_full(td_tensor_shape(ls), td_tensor_ndim(ls),
                       td_tensor_dtype(ls), 1.0 / M, &g);
        st = td_backward(&ls, &g, 1, 0, 0);
        td_tensor_release(g);
        td_tensor_release(ls);
        td_tensor_release(h);
        td_tensor_release(xs);
        td_tensor_release(ts);
        if (st != TD_OK) {
            fail_detail("reference: %s", td_last_error());
            good = 0;
        }
    }
    for (int l = a.lo; l < a.hi && good; l++) {
        double e = max_diff(td_tensor_grad(m.w[l]), td_tensor_grad(ref.w[l]));
        d = e > d ? e : d;
        e = max_diff(td_tensor_grad(m.b[l]), td_tensor_grad(ref.b[l]));
        d = e > d ? e : d;
    }
    if (good && rank == 0) {
        double e = max_diff(td_tensor_grad(a.v), td_tensor_grad(vref));
        d = e > d ? e : d;
        if (!asked && td_tensor_grad(x) != NULL) {
            fail_detail("stage 0's input got a .grad it did not ask for");
            good = 0;
        }
        e = asked ? max_diff(td_tensor_grad(x), td_tensor_grad(rx)) : 0;
        d = e > d ? e : d;
    }
    if (good && !(d <= 1e-12)) {
        fail_detail("stage %d: max |grad - reference| = %g", rank, d);
        good = 0;
    }
    if (good && rank == 0) {
        printf("# S=%d %s input_grad=%d: %d input-gradient products, max "
               "diff %g\n", size, td_pipe_schedule_name(sched), asked, calls,
               d);
    }
    td_pipe_destroy(p);
    td_tensor_release(x);
    td_tensor_release(t);
    td_tensor_release(rx);
    td_tensor_release(rt);
    td_tensor_release(vref);
    td_tensor_release(a.v);
    model_free(&m);
    model_free(&ref);
    return good;
}

static int
mode_ingrad(void)
{
    char name[96];
    model_t m;
    stage_arg_t a;
    td_pipe_opts_t o = {0};
    td_tensor_t *params[2 * L], *x, *t;
    td_pipe_t *p = NULL;
    td_status_t st;
    double loss;
    int n = 0;

    for (int sc = 0; sc < 3; sc++) {
        for (int asked = 0; asked < 2; asked++) {
            snprintf(name, sizeof(name), "ingrad_S%d_%s_%s", size,
                     td_pipe_schedule_name((td_pipe_schedule_t)sc),
                     asked ? "asked" : "not_asked");
            agree(ingrad_config((td_pipe_schedule_t)sc, asked), name);
        }
    }
    /* asked for, but the input does not require grad: every stage fails */
    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    for (int l = a.lo; l < a.hi; l++) {
        params[n++] = m.w[l];
        params[n++] = m.b[l];
    }
    o.n_stages = size;
    o.n_micro = 4;
    o.schedule = TD_PIPE_1F1B;
    o.forward = stage_forward;
    o.arg = &a;
    o.params = params;
    o.n_params = n;
    o.input_grad = 1;
    make_batch(4, TD_FLOAT64, 0, &x, &t);
    st = td_pipe_create(&o, &p);
    if (st == TD_OK) {
        st = td_pipe_step(p, rank == 0 ? x : NULL,
                          rank == size - 1 ? t : NULL, &loss);
    }
    fail_detail("rank %d: status %d: %s", rank, st, td_last_error());
    agree(st != TD_OK && strstr(td_last_error(), "stage 0 (rank 0)") != NULL &&
          strstr(td_last_error(), "input_grad is set but the input is a "
                 "tensor that does not require grad") != NULL,
          "ingrad_needs_an_input_that_requires_grad");
    td_pipe_destroy(p);
    td_tensor_release(x);
    td_tensor_release(t);
    model_free(&m);
    return 0;
}

/* Every rank's step fails naming stage 1 (rank 1). */
static int
mode_error(void)
{
    model_t m;
    stage_arg_t a;
    td_pipe_t *p = NULL;
    td_tensor_t *x, *t;
    td_status_t st;
    double loss;
    int M = 4;

    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    if (rank == 1) {
        a.fail_micro = 2;
    }
    make_pipe(size, 1, M, TD_PIPE_1F1B, &a, &p);
    make_batch(M, TD_FLOAT64, 0, &x, &t);
    st = td_pipe_step(p, rank == 0 ? x : NULL, rank == size - 1 ? t : NULL,
                      &loss);
    fail_detail("status %d: %s", st, td_last_error());
    agree(st != TD_OK && strstr(td_last_error(), "stage 1 (rank 1) failed "
                                "in the forward of micro-batch 2") != NULL &&
          strstr(td_last_error(), "injected failure") != NULL,
          "error_fails_every_stage_naming_it");
    printf("# rank %d: %s\n", rank, td_last_error());
    st = td_pipe_step(p, rank == 0 ? x : NULL, rank == size - 1 ? t : NULL,
                      &loss);
    fail_detail("status %d: %s", st, td_last_error());
    agree(st == TD_ERR_STATE && strstr(td_last_error(), "broken") != NULL,
          "error_next_step_fails_at_once");
    td_pipe_destroy(p);
    td_tensor_release(x);
    td_tensor_release(t);
    model_free(&m);
    return 0;
}

/* Stage 1 dies in its second step; the others print KILL lines (no
 * agreement is possible any more: the test script checks each). */
static int
mode_kill(void)
{
    model_t m;
    stage_arg_t a;
    td_pipe_t *p = NULL;
    td_tensor_t *x, *t;
    td_status_t st = TD_OK;
    double loss, t0 = 0;
    int M = 4;

    signal(SIGTERM, SIG_IGN);   /* todist-run stops us: finish the checks */
    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    if (rank == 1) {
        a.kill_micro = 2;
        a.kill_step = 1;
    }
    make_pipe(size, 1, M, TD_PIPE_1F1B, &a, &p);
    make_batch(M, TD_FLOAT64, 0, &x, &t);
    for (a.step = 0; a.step < 2; a.step++) {
        /* the second step cannot end before rank 1 started it, and rank 1
         * dies early in it: time from its start bounds the detection */
        t0 = now_s();
        st = td_pipe_step(p, rank == 0 ? x : NULL,
                          rank == size - 1 ? t : NULL, &loss);
        if (st != TD_OK) {
            break;
        }
    }
    printf("KILL rank=%d step=%d failed=%d after=%.3f msg=%s\n", rank, a.step,
           st != TD_OK, now_s() - t0, st != TD_OK ? td_last_error() : "");
    fflush(stdout);
    td_pipe_destroy(p);
    td_tensor_release(x);
    td_tensor_release(t);
    model_free(&m);
    return 0;
}

/* The compute ops of stage S of 2 at M = 4, written out from the
 * schedules' definitions (todist/pipe.h; ZB-H1: stage s runs W(j) right
 * after B(j + s)). */
static const char *const trace_want[3][2] = {
    {"F0 F1 F2 F3 BW0 BW1 BW2 BW3", "F0 F1 F2 F3 BW0 BW1 BW2 BW3"},
    {"F0 F1 BW0 F2 BW1 F3 BW2 BW3", "F0 BW0 F1 BW1 F2 BW2 F3 BW3"},
    {"F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3",
     "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3"}};

/* 1 when EV[0..N) of stage S is well formed (see trace above); SENT[m]
 * gets stage 0's send_act times. */
static int
trace_check(const td_pipe_event_t *ev, int n, int s, int sc, double *sent)
{
    char ops[128] = "", *o = ops;
    td_pipe_event_kind_t need = s == 0 ? TD_PIPE_EV_WAIT_GRAD
                                       : TD_PIPE_EV_WAIT_ACT;
    td_pipe_event_kind_t make = s == 0 ? TD_PIPE_EV_SEND_ACT
                                       : TD_PIPE_EV_SEND_GRAD;

    for (int i = 0; i < n; i++) {
        td_pipe_event_kind_t k = ev[i].kind;
        int needs = s == 0 ? k == TD_PIPE_EV_B || k == TD_PIPE_EV_BW
                           : k == TD_PIPE_EV_F;
        int makes = s == 0 ? k == TD_PIPE_EV_F
                           : k == TD_PIPE_EV_B || k == TD_PIPE_EV_BW;

        if (!(ev[i].t0 <= ev[i].t1) || (i > 0 && ev[i].t0 < ev[i - 1].t1)) {
            fail_detail("stage %d event %d (%s) at %.9f..%.9f overlaps or "
                        "runs backwards", s, i, td_pipe_event_name(k),
                        ev[i].t0, ev[i].t1);
            return 0;
        }
        if (k <= TD_PIPE_EV_W) {
            o += snprintf(o, sizeof(ops) - (size_t)(o - ops), "%s%s%d",
                          o > ops ? " " : "", td_pipe_event_name(k),
                          ev[i].micro);
        }
        if (needs && (i == 0 || ev[i - 1].kind != need ||
                      ev[i - 1].micro != ev[i].micro)) {
            fail_detail("stage %d: %s%d has no wait for its message right "
                        "before it", s, td_pipe_event_name(k), ev[i].micro);
            return 0;
        }
        if (makes && (i + 1 == n || ev[i + 1].kind != make ||
                      ev[i + 1].micro != ev[i].micro)) {
            fail_detail("stage %d: %s%d has no send right after it", s,
                        td_pipe_event_name(k), ev[i].micro);
            return 0;
        }
        if (k == TD_PIPE_EV_SEND_ACT && ev[i].micro >= 0 && ev[i].micro < 4) {
            sent[ev[i].micro] = ev[i].t0;
        }
    }
    if (strcmp(ops, trace_want[sc][s]) != 0) {
        fail_detail("stage %d %s: ops '%s', want '%s'", s,
                    td_pipe_schedule_name((td_pipe_schedule_t)sc), ops,
                    trace_want[sc][s]);
        return 0;
    }
    return 1;
}

static int
mode_trace(void)
{
    model_t m;
    stage_arg_t a;
    char name[64];

    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    for (int sc = 0; sc < 3; sc++) {
        td_pipe_t *p = NULL;
        int good = size == 2;
        td_status_t st = make_pipe(size, 1, 4, (td_pipe_schedule_t)sc, &a, &p);

        if (st != TD_OK) {
            fail_detail("create: %s", td_last_error());
            good = 0;
        }
        for (int step = 0; step < 2 && good; step++) {
            const td_pipe_event_t *ev;
            td_tensor_t *x, *t, *times;
            double loss, *sent;
            int64_t four = 4;
            int n;

            make_batch(4, TD_FLOAT64, step, &x, &t);
            st = td_pipe_step(p, rank == 0 ? x : NULL, rank == 1 ? t : NULL,
                              &loss);
            td_tensor_release(x);
            td_tensor_release(t);
            if (st != TD_OK || td_pipe_trace(p, &ev, &n) != TD_OK) {
                fail_detail("step %d: %s", step, td_last_error());
                good = 0;
                break;
            }
            td_tensor_zeros(&four, 1, TD_FLOAT64, &times);
            sent = td_tensor_data(times);
            good = trace_check(ev, n, rank, sc, sent);
            /* stage 0's send times to stage 1: a message is never in
             * before it was sent, on one clock */
            if (rank == 0) {
                st = td_send(td_group_world(), times, 1, 77);
            } else {
                st = td_recv(td_group_world(), times, 0, 77, NULL);
                for (int i = 0; i < n && good && st == TD_OK; i++) {
                    if (ev[i].kind == TD_PIPE_EV_WAIT_ACT &&
                        !(ev[i].t1 >= sent[ev[i].micro] &&
                          sent[ev[i].micro] > 0)) {
                        fail_detail("stage 1: activation %d in at %.9f, "
                                    "sent at %.9f", ev[i].micro, ev[i].t1,
                                    sent[ev[i].micro]);
                        good = 0;
                    }
                }
            }
            td_tensor_release(times);
            if (st != TD_OK) {
                fail_detail("send times: %s", td_last_error());
                good = 0;
            }
        }
        td_pipe_destroy(p);
        snprintf(name, sizeof(name), "trace_S2_M4_%s",
                 td_pipe_schedule_name((td_pipe_schedule_t)sc));
        agree(good, name);
    }
    model_free(&m);
    return 0;
}

/* Stage 1's waits that slept because their spin was over, in one step
 * while stage 0 starts 0.4 s late, TODIST_PIPE_SPIN_MS=SPIN, and its
 * voluntary context switches into *NV (shown, not judged: under load a
 * driver also sleeps while another thread holds the transport); -1 on
 * failure. */
static long
spin_sleeps(const char *spin, long *nv)
{
    model_t m;
    stage_arg_t a;
    td_pipe_t *p = NULL;
    td_tensor_t *x, *t;
    struct rusage r0, r1;
    long sleeps = -1;
    unsigned long s0;
    double loss;

    setenv("TODIST_PIPE_SPIN_MS", spin, 1);
    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    if (make_pipe(size, 1, 1, TD_PIPE_GPIPE, &a, &p) != TD_OK) {
        fail_detail("create: %s", td_last_error());
        model_free(&m);
        return -1;
    }
    make_batch(1, TD_FLOAT64, 0, &x, &t);
    /* a first step agrees on the shapes (a blocking receive of its own) */
    if (td_pipe_step(p, rank == 0 ? x : NULL, rank == 1 ? t : NULL,
                     &loss) != TD_OK) {
        fail_detail("first step: %s", td_last_error());
    }
    td_group_barrier(td_group_world());
    if (rank == 0) {
        struct timespec d = {0, 400000000L};
        nanosleep(&d, NULL);
    }
    *nv = -1;
    getrusage(RUSAGE_THREAD, &r0);
    s0 = coll_wait_spin_sleeps();
    if (td_pipe_step(p, rank == 0 ? x : NULL, rank == 1 ? t : NULL,
                     &loss) == TD_OK) {
        sleeps = (long)(coll_wait_spin_sleeps() - s0);
        getrusage(RUSAGE_THREAD, &r1);
        *nv = r1.ru_nvcsw - r0.ru_nvcsw;
    } else {
        fail_detail("step: %s", td_last_error());
    }
    td_tensor_release(x);
    td_tensor_release(t);
    td_pipe_destroy(p);
    model_free(&m);
    unsetenv("TODIST_PIPE_SPIN_MS");
    return sleeps;
}

/* Run under TODIST_BIND=closest with a core per rank and TODIST_LOG=debug:
 * each rank is bound to its own core, and the pipe it makes logs P8's
 * choice (the script reads it: the default still drives, the cores
 * counted being those before placement). No timing. */
static int
mode_spinbound(void)
{
    cpu_set_t set;
    int mine = sched_getaffinity(0, sizeof(set), &set) == 0
               ? CPU_COUNT(&set) : -1;
    model_t m;
    stage_arg_t a;
    td_pipe_t *p = NULL;

    unsetenv("TODIST_PIPE_SPIN_MS");
    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    fail_detail("rank %d: bound to %d cpus", rank, mine);
    agree(mine == 1, "spinbound_each_rank_bound_to_one_core");
    if (make_pipe(size, 1, 1, TD_PIPE_GPIPE, &a, &p) != TD_OK) {
        fail_detail("create: %s", td_last_error());
    }
    agree(p != NULL, "spinbound_pipe_made");
    td_pipe_destroy(p);
    model_free(&m);
    return 0;
}

static int
mode_spin(void)
{
    long nv_sleep, nv_drive;
    long sleeps = spin_sleeps("0", &nv_sleep);
    long spins = spin_sleeps("60000", &nv_drive);

    if (rank == 1) {
        printf("# stage 1 waiting 0.4 s: %ld sleeps after its spin was over "
               "(%ld voluntary switches) with the runtime's 2 ms, %ld (%ld) "
               "driving for 60 s\n", sleeps, nv_sleep, spins, nv_drive);
        fail_detail("stage 1: %ld sleeps after the spin with 60000 ms of "
                    "spin, %ld without", spins, sleeps);
    }
    /* Decisions, not the scheduler's switches: a driver whose spin is not
     * over never sleeps for that reason, however loaded the machine (a
     * count of voluntary switches also took in its sleeps while the
     * progress thread held the transport: 10 against 24 in a loaded
     * check) */
    agree(rank != 1 || (spins == 0 && sleeps >= 1),
          "spin_drives_instead_of_sleeping");
    return 0;
}

static int
mode_badargs(void)
{
    model_t m;
    stage_arg_t a;
    td_pipe_t *p = NULL;
    td_tensor_t *x, *t, *x2, *t2;
    td_status_t st;
    double loss;

    model_init(&m, TD_FLOAT64);
    stage_of(size, rank, &a, &m);
    st = make_pipe(size, 1, 0, TD_PIPE_1F1B, &a, &p);
    fail_detail("status %d: %s", st, td_last_error());
    agree(st == TD_ERR_INVALID && strstr(td_last_error(), "n_micro=0") != NULL,
          "bad_zero_microbatches");
    st = make_pipe(size + 1, 1, 2, TD_PIPE_1F1B, &a, &p);
    fail_detail("status %d: %s", st, td_last_error());
    agree(st == TD_ERR_INVALID && strstr(td_last_error(), "more stages than "
                                         "ranks") != NULL,
          "bad_more_stages_than_ranks");
    /* a batch of 8 rows into 3 micro-batches */
    st = make_pipe(size, 1, 3, TD_PIPE_GPIPE, &a, &p);
    if (st == TD_OK) {
        make_batch(3, TD_FLOAT64, 0, &x, &t);
        td_tensor_narrow(x, 0, 0, 8, &x2);
        td_tensor_narrow(t, 0, 0, 8, &t2);
        st = td_pipe_step(p, rank == 0 ? x2 : NULL,
                          rank == size - 1 ? t2 : NULL, &loss);
        td_tensor_release(x);
        td_tensor_release(t);
        td_tensor_release(x2);
        td_tensor_release(t2);
        td_pipe_destroy(p);
    }
    fail_detail("status %d: %s", st, td_last_error());
    agree(st != TD_OK && strstr(td_last_error(), "batch of 8 does not split "
                                "into 3 micro-batches") != NULL,
          "bad_batch_not_divisible");
    /* stage 0's output of micro-batch 1 is narrower */
    a.shape_bug = rank == 0;
    st = make_pipe(size, 1, 3, TD_PIPE_1F1B, &a, &p);
    if (st == TD_OK) {
        make_batch(3, TD_FLOAT64, 0, &x, &t);
        st = td_pipe_step(p, rank == 0 ? x : NULL, rank == size - 1 ? t : NULL,
                          &loss);
        td_tensor_release(x);
        td_tensor_release(t);
        td_pipe_destroy(p);
    }
    fail_detail("status %d: %s", st, td_last_error());
    agree(st != TD_OK &&
          strstr(td_last_error(), "stage 0 (rank 0) failed in the forward of "
                 "micro-batch 1") != NULL &&
          strstr(td_last_error(), "[2, 7] but the shape agreed in the first "
                 "step is float64 [3, 7]") != NULL,
          "bad_shape_changes_between_microbatches");
    /* a later mini-batch of another size */
    a.shape_bug = 0;
    st = make_pipe(size, 1, 2, TD_PIPE_ZB_H1, &a, &p);
    if (st == TD_OK) {
        for (int k = 0; k < 2 && st == TD_OK; k++) {
            make_batch(2 * (1 + k), TD_FLOAT64, k, &x, &t);
            st = td_pipe_step(p, rank == 0 ? x : NULL,
                              rank == size - 1 ? t : NULL, &loss);
            td_tensor_release(x);
            td_tensor_release(t);
        }
        td_pipe_destroy(p);
    }
    fail_detail("status %d: %s", st, td_last_error());
    agree(st != TD_OK && strstr(td_last_error(), "shapes must be static") !=
                             NULL,
          "bad_shape_changes_between_minibatches");
    model_free(&m);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "grad";
    int rc = 0;

    (void)maxdiff;             /* peer_agree.h's: float64 only; max_diff casts */
    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (strcmp(mode, "grad") == 0) {
        rc = mode_grad();
    } else if (strcmp(mode, "gradlin") == 0) {
        rc = mode_gradlin();
    } else if (strcmp(mode, "hybrid") == 0) {
        rc = mode_hybrid(argc > 2 ? atoi(argv[2]) : 2);
    } else if (strcmp(mode, "spin") == 0) {
        rc = mode_spin();
    } else if (strcmp(mode, "spinbound") == 0) {
        rc = mode_spinbound();
    } else if (strcmp(mode, "trace") == 0) {
        rc = mode_trace();
    } else if (strcmp(mode, "error") == 0) {
        rc = mode_error();
    } else if (strcmp(mode, "kill") == 0) {
        rc = mode_kill();
    } else if (strcmp(mode, "ingrad") == 0) {
        rc = mode_ingrad();
    } else if (strcmp(mode, "badargs") == 0) {
        rc = mode_badargs();
    } else {
        fprintf(stderr, "pipe_peer: unknown mode %s\n", mode);
        rc = 2;
    }
    fflush(stdout);
    td_finalize();
    return rc;
}
