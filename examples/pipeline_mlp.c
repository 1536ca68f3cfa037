/* examples/pipeline_mlp: a deep MLP (784, then --layers hidden layers of
 * --hidden, then 10) on Fashion-MNIST, its linear layers split over the
 * stages of a pipeline (todist/pipe.h), optionally replicated:
 *   todist-run -n S*R pipeline_mlp --stages S --microbatches M
 *       --schedule gpipe|1f1b|zb [--replicas R] [--check]
 *       [--layers 8] [--hidden 256] [--batch-size 64] [--lr 0.05]
 *       [--epochs 1] [--max-steps N] [--warmup 2] [--threads 1]
 *       [--seed 1] [--data DIR] [--balance flops|auto|even|N,N,...]
 *       [--trace FILE] [--input-grad]
 * Training prints, from the last stage of replica 0, one line per epoch:
 *   epoch=1 train_loss=0.61 test_accuracy=0.83 seconds=12.3 steps=937
 *   samples_per_s=4870
 * and every rank prints its stage's figures (mean over the steps after
 * --warmup): stats stage=0 replica=0 step_ms=.. busy_ms=.. bubble=..
 * theory=.. model=.. peak_in_flight=.. peak_act_mib=.. allreduce_ms=..
 * f_ms=.. b_ms=.. w_ms=.. wait_ms=.. send_ms=.. post_ms=.. other_ms=..
 * (td_pipe_stats_t's fields)
 * --check runs one mini-batch through the pipeline, computes the same
 * gradients in this process by single-process accumulation over the same
 * micro-batches (every replica's, averaged), compares this stage's, and
 * rank 0 prints "check=ok max_abs_diff=X" (or "check=FAIL ...", exit 1).
 * --balance: which layers each stage gets. flops (the default): each
 * layer's multiply-adds per row, forward and backward (a linear layer's
 * forward, its input gradient unless it is layer 0, whose input needs
 * none, and its weight gradient: one in x out product each), split by
 * td_pipe_partition so that the costliest stage costs least (the same on
 * every rank, nothing measured); auto: rank 0 times every layer's forward
 * and backward on one micro-batch (layer 0 without an input gradient, the
 * last with the loss), broadcasts the costs, and td_pipe_partition splits
 * them; even: stage s gets layers s*n/S .. (s+1)*n/S - 1 of the n linear
 * layers (by count); N,N,...: S layer counts. Rank 0 prints
 * "balance=flops layers=4,5 stage_mflop=F,B,W/F,B,W cost_mflop=..." (per
 * stage its forward, input-gradient and weight-gradient multiply-adds per
 * micro-batch, in millions), "balance=auto layers=4,5 stage_ms=..
 * cost_ms=.." (the measured costs, per stage and per layer) or
 * "balance=even layers=..".
 * --input-grad: the "inner pipeline" case, a pipeline inside a larger
 * model: stage 0's input stands for an upstream part's activation, whose
 * gradient that upstream needs, so stage 0 computes it (td_pipe_opts_t
 * input_grad, P9): each mini-batch is a leaf that requires grad, and after
 * the step its .grad is handed back as a caller would take it (read;
 * there is no upstream here). Layer 0 then has an input gradient too, so
 * every stage's forward, input-gradient and weight-gradient passes cost
 * the same multiply-adds (F = B = W, the schedules' theory), which
 * --balance flops and auto count; --check compares stage 0's input
 * gradient with the single process's as well.
 * --trace FILE: every rank writes the trace of each step after --warmup
 * (td_pipe_trace) to FILE.RANK, one event a line:
 *   step stage replica kind micro t0_us t1_us
 * (times in microseconds of td_now_s's clock, shared by the ranks of one
 * host); bench/pipeline_trace.py reads them. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/todist.h>

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

#define FMNIST_MEAN 0.2860
#define FMNIST_STD  0.3530
#define LMAX        64

typedef struct {
    int          n;                  /* linear layers */
    td_tensor_t *w[LMAX], *b[LMAX];
} model_t;

typedef struct {
    model_t *m;
    int      lo, hi;
} stage_t;

static int rank, size;
static int input_grad;   /* --input-grad: stage 0 computes dINPUT */

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One step's trace (--trace): STEP STAGE REPLICA KIND MICRO T0 T1 (us). */
static void
write_trace(FILE *f, const td_pipe_t *p, int64_t step, int stage, int rep)
{
    const td_pipe_event_t *ev;
    int n;

    if (td_pipe_trace(p, &ev, &n) != TD_OK) {
        return;
    }
    for (int i = 0; i < n; i++) {
        fprintf(f, "%lld %d %d %s %d %.3f %.3f\n", (long long)step, stage,
                rep, td_pipe_event_name(ev[i].kind), ev[i].micro,
                1e6 * ev[i].t0, 1e6 * ev[i].t1);
    }
}

static int
die(const char *what)
{
    fprintf(stderr, "pipeline_mlp: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

/* Layer l: [out, in] weights uniform in +-1/sqrt(in) (torch's default
 * bound), seeded by (seed, l): every rank can build any layer. */
static td_status_t
model_init(model_t *m, int layers, int64_t hidden, uint64_t seed, int lo,
           int hi)
{
    memset(m, 0, sizeof(*m));
    m->n = layers + 1;
    for (int l = lo; l < hi; l++) {
        int64_t in = l == 0 ? 784 : hidden, out = l == m->n - 1 ? 10 : hidden;
        int64_t ws[2] = {out, in}, bs[1] = {out};
        double k = 1.0 / sqrt((double)in);
        td_status_t st = td_tensor_empty(ws, 2, TD_FLOAT32, TD_CPU, &m->w[l]);
        if (st == TD_OK) {
            st = td_tensor_empty(bs, 1, TD_FLOAT32, TD_CPU, &m->b[l]);
        }
        if (st != TD_OK) {
            return st;
        }
        td_tensor_uniform_(m->w[l], -k, k, seed * 1000 + 2 * l);
        td_tensor_uniform_(m->b[l], -k, k, seed * 1000 + 2 * l + 1);
        td_tensor_set_requires_grad(m->w[l], 1);
        td_tensor_set_requires_grad(m->b[l], 1);
    }
    return TD_OK;
}

static void
model_free(model_t *m)
{
    for (int l = 0; l < m->n; l++) {
        td_tensor_release(m->w[l]);
        td_tensor_release(m->b[l]);
    }
}

/* layers LO..HI-1 on X (relu between); the loss against Y at the end */
static td_status_t
layers_forward(model_t *m, int lo, int hi, td_tensor_t *x, td_tensor_t *y,
               td_tensor_t **out)
{
    td_tensor_t *h = td_tensor_retain(x), *n;
    td_status_t st = TD_OK;

    for (int l = lo; l < hi && st == TD_OK; l++) {
        st = td_linear(h, m->w[l], m->b[l], &n);
        td_tensor_release(h);
        h = st == TD_OK ? n : NULL;
        if (st == TD_OK && l < m->n - 1) {
            st = td_relu(h, &n);
            td_tensor_release(h);
            h = st == TD_OK ? n : NULL;
        }
    }
    if (st == TD_OK && y != NULL) {
        st = td_cross_entropy(h, y, TD_REDUCTION_MEAN, &n);
        td_tensor_release(h);
        h = st == TD_OK ? n : NULL;
    }
    if (st == TD_OK) {
        *out = h;
    }
    return st;
}

static td_status_t
stage_forward(void *arg, td_tensor_t *x, td_tensor_t *target, int micro,
              td_tensor_t **out)
{
    stage_t *s = arg;

    (void)micro;
    return layers_forward(s->m, s->lo, s->hi, x, target, out);
}

/* Test accuracy through replica 0's stages with plain td_send/td_recv
 * (no grad); the last stage returns it. */
static td_status_t
evaluate(stage_t *s, int S, int stage, int64_t hidden, td_tensor_t *images,
         td_tensor_t *labels, double *acc)
{
    td_batcher_t *b;
    td_tensor_t *x, *y;
    int64_t correct = 0, total = 0, rows = 1000;
    int was = td_grad_set_enabled(0), r;
    td_status_t st;

    st = td_batcher_create(images, labels, rows, 0, 0, FMNIST_MEAN,
                           FMNIST_STD, &b);
    while (st == TD_OK && (r = td_batcher_next(b, &x, &y)) == 1) {
        td_tensor_t *in = NULL, *out = NULL;
        int64_t hs[2] = {td_tensor_size(x, 0), hidden};
        if (stage == 0) {
            in = td_tensor_retain(x);
        } else {
            st = td_tensor_empty(hs, 2, TD_FLOAT32, TD_CPU, &in);
            if (st == TD_OK) {
                st = td_recv(td_group_world(), in, rank - 1, 77, NULL);
            }
        }
        if (st == TD_OK) {
            st = layers_forward(s->m, s->lo, s->hi, in, NULL, &out);
        }
        if (st == TD_OK && stage < S - 1) {
            st = td_send(td_group_world(), out, rank + 1, 77);
        } else if (st == TD_OK) {
            td_tensor_t *val, *idx;
            st = td_max_dim(out, 1, 0, &val, &idx);
            if (st == TD_OK) {
                const int64_t *p = td_tensor_data(idx), *t = td_tensor_data(y);
                for (int64_t i = 0; i < td_tensor_numel(y); i++) {
                    correct += p[i] == t[i];
                }
                total += td_tensor_numel(y);
                td_tensor_release(val);
                td_tensor_release(idx);
            }
        }
        td_tensor_release(in);
        td_tensor_release(out);
        td_tensor_release(x);
        td_tensor_release(y);
    }
    td_batcher_free(b);
    td_grad_set_enabled(was);
    *acc = total ? (double)correct / (double)total : 0;
    return st;
}

/* Next batch of replica REP: batches come in groups of R, the k-th to
 * replica k, so every replica reads the same groups and takes the same
 * number of steps (a group with a short batch ends the epoch for all:
 * shapes are static). 1, 0 at the end, negative on error. */
static int
next_batch(td_batcher_t *b, int R, int rep, int64_t batch, td_tensor_t **x,
           td_tensor_t **y)
{
    td_tensor_t *mx = NULL, *my = NULL;
    int full = 1, r = 1;

    for (int k = 0; k < R && r == 1; k++) {
        td_tensor_t *bx, *by;
        r = td_batcher_next(b, &bx, &by);
        if (r != 1) {
            break;
        }
        full &= td_tensor_size(bx, 0) == batch;
        if (k == rep) {
            mx = bx;
            my = by;
        } else {
            td_tensor_release(bx);
            td_tensor_release(by);
        }
    }
    if (r == 1 && full) {
        *x = mx;
        *y = my;
        return 1;
    }
    td_tensor_release(mx);
    td_tensor_release(my);
    return r < 0 ? r : 0;
}

static int
check(stage_t *st, int S, int R, int M, td_pipe_t *p, td_batcher_t *b,
      int64_t batch, int layers, int64_t hidden, uint64_t seed)
{
    int stage = rank % S, rep = rank / S;
    td_tensor_t *x = NULL, *y = NULL, *xs[16], *ys[16];
    model_t ref;
    double loss, d = 0;
    int64_t one = 1, mb = batch / M;
    td_tensor_t *t;

    if (R > 16) {
        fprintf(stderr, "pipeline_mlp: --check takes at most 16 replicas\n");
        return 1;
    }
    td_batcher_start_epoch(b, 1);
    for (int r = 0; r < R; r++) {
        if (next_batch(b, 1, 0, batch, &xs[r], &ys[r]) != 1) {
            return die("check batch");
        }
    }
    x = xs[rep];
    y = ys[rep];
    if (input_grad && stage == 0) {
        td_tensor_set_requires_grad(x, 1);
    }
    if (td_pipe_step(p, stage == 0 ? x : NULL, stage == S - 1 ? y : NULL,
                     &loss) != TD_OK) {
        return die("pipeline step");
    }
    if (model_init(&ref, layers, hidden, seed, 0, layers + 1) != TD_OK) {
        return die("reference model");
    }
    for (int r = 0; r < R; r++) {
        /* the reference's own leaf over the same data: its .grad is the
         * single process's gradient of replica r's input */
        td_tensor_t *rx;
        if (td_tensor_detach(xs[r], &rx) != TD_OK) {
            return die("reference input");
        }
        td_tensor_set_requires_grad(rx, input_grad);
        for (int k = 0; k < M; k++) {
            td_tensor_t *mx, *my, *l, *g;
            td_tensor_narrow(rx, 0, k * mb, mb, &mx);
            td_tensor_narrow(ys[r], 0, k * mb, mb, &my);
            if (layers_forward(&ref, 0, ref.n, mx, my, &l) != TD_OK) {
                return die("reference forward");
            }
            td_tensor_full(td_tensor_shape(l), td_tensor_ndim(l),
                           TD_FLOAT32, 1.0 / ((double)M * R), &g);
            if (td_backward(&l, &g, 1, 0, 0) != TD_OK) {
                return die("reference backward");
            }
            td_tensor_release(g);
            td_tensor_release(l);
            td_tensor_release(mx);
            td_tensor_release(my);
        }
        if (input_grad && stage == 0 && r == rep) {
            /* the pipe's is replica REP's mean loss's gradient, the
             * reference's 1/R of it (every replica's, averaged) */
            td_tensor_t *gp = td_tensor_grad(x), *gr = td_tensor_grad(rx);
            if (gp == NULL || gr == NULL) {
                fprintf(stderr, "pipeline_mlp: --check: no input gradient "
                        "(pipeline %s, reference %s)\n",
                        gp ? "has one" : "none", gr ? "has one" : "none");
                d = INFINITY;
            } else {
                const float *a = td_tensor_data(gp), *c = td_tensor_data(gr);
                for (int64_t i = 0; i < td_tensor_numel(gp); i++) {
                    double e = fabs((double)a[i] - (double)R * (double)c[i]);
                    d = e > d || isnan(e) ? e : d;
                }
            }
        }
        td_tensor_release(rx);
    }
    for (int l = st->lo; l < st->hi; l++) {
        td_tensor_t *pairs[2][2] = {
            {td_tensor_grad(st->m->w[l]), td_tensor_grad(ref.w[l])},
            {td_tensor_grad(st->m->b[l]), td_tensor_grad(ref.b[l])}};
        for (int k = 0; k < 2; k++) {
            const float *a = td_tensor_data(pairs[k][0]);
            const float *c = td_tensor_data(pairs[k][1]);
            for (int64_t i = 0; i < td_tensor_numel(pairs[k][0]); i++) {
                double e = fabs((double)a[i] - (double)c[i]);
                d = e > d || isnan(e) ? e : d;
            }
        }
    }
    td_tensor_full(&one, 1, TD_FLOAT64, d, &t);
    if (td_all_reduce(td_group_world(), t, TD_REDUCE_MAX) != TD_OK) {
        return die("all_reduce of the difference");
    }
    d = ((double *)td_tensor_data(t))[0];
    td_tensor_release(t);
    if (rank == 0) {
        printf("check=%s max_abs_diff=%.3g\n", d <= 1e-5 ? "ok" : "FAIL", d);
    }
    for (int r = 0; r < R; r++) {
        td_tensor_release(xs[r]);
        td_tensor_release(ys[r]);
    }
    model_free(&ref);
    return d <= 1e-5 ? 0 : 1;
}

/* One timing of layer L of M (ms, forward + backward of ROWS rows).
 * Layer 0's input needs no gradient, the last layer carries the loss, as
 * in the pipeline. */
static td_status_t
layer_time(model_t *m, int l, int64_t rows, double *ms)
{
    int64_t in = td_tensor_size(m->w[l], 1), xs[2] = {rows, in}, n = rows;
    td_tensor_t *x = NULL, *y = NULL, *out = NULL, *g = NULL;
    td_status_t st;
    double t0;

    st = td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x);
    if (st == TD_OK) {
        td_tensor_uniform_(x, -1, 1, 7);
        td_tensor_set_requires_grad(x, l > 0 || input_grad);
        st = td_tensor_zeros(&n, 1, TD_INT64, &y);
    }
    t0 = now();
    if (st == TD_OK) {
        st = layers_forward(m, l, l + 1, x, l == m->n - 1 ? y : NULL, &out);
    }
    if (st == TD_OK) {
        st = td_tensor_full(td_tensor_shape(out), td_tensor_ndim(out),
                            TD_FLOAT32, 1.0, &g);
    }
    if (st == TD_OK) {
        st = td_backward(&out, &g, 1, 0, 0);
    }
    *ms = 1e3 * (now() - t0);
    td_tensor_release(out);
    td_tensor_release(g);
    td_tensor_release(x);
    td_tensor_release(y);
    return st;
}

/* Layer L's multiply-adds for ROWS rows, in millions: forward (F),
 * input gradient (B: none for layer 0, whose input is the data) and
 * weight gradient (W), one ROWS x in x out product each; the relu, bias
 * and loss are O(ROWS x out) and left out. */
static void
layer_mflop(const model_t *m, int l, int64_t hidden, int64_t rows,
            double fbw[3])
{
    int64_t in = l == 0 ? 784 : hidden, out = l == m->n - 1 ? 10 : hidden;
    double p = 1e-6 * (double)rows * (double)in * (double)out;

    fbw[0] = p;
    fbw[1] = l == 0 && !input_grad ? 0 : p;
    fbw[2] = p;
}

/* FIRST[0..S] for --balance SPEC (see the top); rank 0 prints the split.
 * Collective over the world for "auto". */
static int
balance(const char *spec, int S, int layers, int64_t hidden, int64_t rows,
        uint64_t seed, int *first)
{
    int n = layers + 1;
    double cost[LMAX] = {0};
    int measured = 0;          /* costs: 1 timed (auto), 2 counted (flops) */

    if (strcmp(spec, "even") == 0) {
        for (int s = 0; s <= S; s++) {
            first[s] = s * n / S;
        }
    } else if (strcmp(spec, "flops") == 0) {
        model_t shape = {.n = n};   /* layer_mflop reads only n */

        for (int l = 0; l < n; l++) {
            double fbw[3];
            layer_mflop(&shape, l, hidden, rows, fbw);
            cost[l] = fbw[0] + fbw[1] + fbw[2];
        }
        if (td_pipe_partition(cost, n, S, first) != TD_OK) {
            return die("balance");
        }
        measured = 2;
    } else if (strcmp(spec, "auto") == 0) {
        int64_t len = n;
        td_tensor_t *t;
        model_t whole;

        if (td_tensor_zeros(&len, 1, TD_FLOAT64, &t) != TD_OK) {
            return die("balance");
        }
        if (rank == 0) {
            if (model_init(&whole, layers, hidden, seed, 0, n) != TD_OK) {
                return die("balance: model");
            }
            /* rounds over all layers, the least time of each: a burst of
             * load then slows one round of every layer, not one layer's
             * every run; round 0 only warms caches and the BLAS */
            for (int r = 0; r <= 8; r++) {
                for (int l = 0; l < n; l++) {
                    double ms;
                    if (layer_time(&whole, l, rows, &ms) != TD_OK) {
                        return die("balance: timing a layer");
                    }
                    cost[l] = r == 1 || ms < cost[l] ? ms : cost[l];
                }
            }
            model_free(&whole);
            memcpy(td_tensor_data(t), cost, sizeof(double) * (size_t)n);
        }
        if (td_broadcast(td_group_world(), t, 0) != TD_OK) {
            return die("balance: broadcast of the costs");
        }
        memcpy(cost, td_tensor_data(t), sizeof(double) * (size_t)n);
        td_tensor_release(t);
        if (td_pipe_partition(cost, n, S, first) != TD_OK) {
            return die("balance");
        }
        measured = 1;
    } else {
        const char *c = spec;
        char *end;
        first[0] = 0;
        for (int s = 0; s < S; s++) {
            long k = strtol(c, &end, 10);
            if (end == c || k < 1 || first[s] + k > n ||
                (*end != (s < S - 1 ? ',' : '\0'))) {
                fprintf(stderr, "pipeline_mlp: --balance '%s' is not flops, "
                        "auto, even or %d layer counts >= 1 adding up to %d\n",
                        spec, S, n);
                return 2;
            }
            first[s + 1] = first[s] + (int)k;
            c = end + 1;
        }
        if (first[S] != n) {
            fprintf(stderr, "pipeline_mlp: --balance '%s' gives %d layers, "
                    "not %d\n", spec, first[S], n);
            return 2;
        }
    }
    if (rank == 0) {
        printf("balance=%s layers=", measured == 1 ? "auto" : spec);
        for (int s = 0; s < S; s++) {
            printf(s ? ",%d" : "%d", first[s + 1] - first[s]);
        }
        if (measured == 2) {
            model_t shape = {.n = n};

            printf(" stage_mflop=");
            for (int s = 0; s < S; s++) {
                double sum[3] = {0};
                for (int l = first[s]; l < first[s + 1]; l++) {
                    double fbw[3];
                    layer_mflop(&shape, l, hidden, rows, fbw);
                    for (int k = 0; k < 3; k++) {
                        sum[k] += fbw[k];
                    }
                }
                printf("%s%.3f,%.3f,%.3f", s ? "/" : "", sum[0], sum[1],
                       sum[2]);
            }
            printf(" cost_mflop=");
            for (int l = 0; l < n; l++) {
                printf(l ? ",%.3f" : "%.3f", cost[l]);
            }
        } else if (measured) {
            printf(" stage_ms=");
            for (int s = 0; s < S; s++) {
                double c = 0;
                for (int l = first[s]; l < first[s + 1]; l++) {
                    c += cost[l];
                }
                printf(s ? ",%.3f" : "%.3f", c);
            }
            printf(" cost_ms=");
            for (int l = 0; l < n; l++) {
                printf(l ? ",%.3f" : "%.3f", cost[l]);
            }
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    int S = 1, R = 1, M = 4, layers = 8, epochs = 1, threads = 1, warmup = 2;
    int do_check = 0, rc = 0;
    int64_t hidden = 256, batch = 64, max_steps = -1;
    double lr = 0.05;
    uint64_t seed = 1;
    const char *data = TD_FASHION_MNIST_DIR, *sched_name = "1f1b";
    const char *balance_spec = "flops", *trace_path = NULL;
    FILE *trace = NULL;
    int first[LMAX + 1];
    td_pipe_schedule_t sched;
    static const struct option lopts[] = {
        {"stages", 1, 0, 's'}, {"microbatches", 1, 0, 'm'},
        {"schedule", 1, 0, 'S'}, {"replicas", 1, 0, 'r'},
        {"check", 0, 0, 'c'}, {"layers", 1, 0, 'L'}, {"hidden", 1, 0, 'H'},
        {"batch-size", 1, 0, 'b'}, {"lr", 1, 0, 'l'}, {"epochs", 1, 0, 'e'},
        {"max-steps", 1, 0, 'x'}, {"warmup", 1, 0, 'w'},
        {"threads", 1, 0, 't'}, {"seed", 1, 0, 'd'}, {"data", 1, 0, 'D'},
        {"balance", 1, 0, 'B'}, {"trace", 1, 0, 'T'},
        {"input-grad", 0, 0, 'g'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    td_tensor_t *tr_x, *tr_y, *te_x, *te_y, *params[2 * LMAX];
    td_batcher_t *batcher;
    td_pipe_opts_t po = {0};
    td_pipe_t *p;
    td_optim_t *opt;
    model_t m;
    stage_t st;
    int c, stage, rep, n_params = 0;

    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (c) {
        case 's': S = atoi(optarg); break;
        case 'm': M = atoi(optarg); break;
        case 'S': sched_name = optarg; break;
        case 'r': R = atoi(optarg); break;
        case 'c': do_check = 1; break;
        case 'L': layers = atoi(optarg); break;
        case 'H': hidden = atoll(optarg); break;
        case 'b': batch = atoll(optarg); break;
        case 'l': lr = atof(optarg); break;
        case 'e': epochs = atoi(optarg); break;
        case 'x': max_steps = atoll(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'd': seed = (uint64_t)atoll(optarg); break;
        case 'D': data = optarg; break;
        case 'B': balance_spec = optarg; break;
        case 'T': trace_path = optarg; break;
        case 'g': input_grad = 1; break;
        case 'h':
            printf("usage: pipeline_mlp --stages S --microbatches M --schedule "
                   "gpipe|1f1b|zb [--replicas R] [--check] [--layers N] "
                   "[--hidden N] [--batch-size N] [--lr X] [--epochs N] "
                   "[--max-steps N] [--warmup N] [--threads N] [--seed N] "
                   "[--data DIR] [--balance flops|auto|even|N,N,...] "
                   "[--trace FILE] [--input-grad]\n"
                   "  --balance  layers per stage: flops (default) splits "
                   "by each layer's multiply-adds\n"
                   "             (forward, input and weight gradient; "
                   "layer 0 has no input gradient),\n"
                   "             auto by its forward + backward timed on "
                   "rank 0, even by count,\n"
                   "             N,N,... gives S layer counts\n"
                   "  --trace    write each measured step's ops to "
                   "FILE.RANK (bench/pipeline_trace.py)\n"
                   "  --input-grad  stage 0 computes its input's gradient "
                   "(a pipeline inside a larger\n"
                   "             model; layer 0 then has one too: F = B = W "
                   "on every stage)\n");
            return 0;
        default:
            return 2;
        }
    }
    if (td_pipe_schedule_parse(sched_name, &sched) != TD_OK) {
        fprintf(stderr, "pipeline_mlp: %s\n", td_last_error());
        return 2;
    }
    if (layers < 0 || layers + 1 > LMAX || hidden < 1 || S < 1 ||
        S > layers + 1) {
        fprintf(stderr, "pipeline_mlp: --layers %d must be in 0..%d and give "
                "every one of --stages %d stages a layer\n", layers, LMAX - 1,
                S);
        return 2;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(threads);
    }
    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "pipeline_mlp: td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    stage = rank % S;
    rep = rank / S;
    st.m = &m;
    rc = balance(balance_spec, S, layers, hidden, batch / (M > 0 ? M : 1),
                 seed, first);
    if (rc != 0) {
        return rc;
    }
    st.lo = first[stage];
    st.hi = first[stage + 1];
    if (trace_path != NULL) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.%d", trace_path, rank);
        trace = fopen(path, "w");
        if (trace == NULL) {
            perror(path);
            return 1;
        }
    }
    if (td_fashion_mnist_load(data, 1, &tr_x, &tr_y) != TD_OK ||
        td_fashion_mnist_load(data, 0, &te_x, &te_y) != TD_OK) {
        return die("data");
    }
    if (model_init(&m, layers, hidden, seed, st.lo, st.hi) != TD_OK) {
        return die("model");
    }
    for (int l = st.lo; l < st.hi; l++) {
        params[n_params++] = m.w[l];
        params[n_params++] = m.b[l];
    }
    po.n_stages = S;
    po.n_replicas = R;
    po.n_micro = M;
    po.schedule = sched;
    po.forward = stage_forward;
    po.arg = &st;
    po.params = params;
    po.n_params = n_params;
    po.input_grad = input_grad;
    if (td_pipe_create(&po, &p) != TD_OK) {
        return die("pipeline");
    }
    if (td_batcher_create(tr_x, tr_y, batch, 1, seed, FMNIST_MEAN, FMNIST_STD,
                          &batcher) != TD_OK) {
        return die("batcher");
    }
    if (do_check) {
        rc = check(&st, S, R, M, p, batcher, batch, layers, hidden, seed);
        goto out;
    }
    {
        td_sgd_opts_t so = {lr, 0.9, 0, 0, 0};   /* momentum 0.9 */
        if (td_optim_sgd(params, n_params, &so, &opt) != TD_OK) {
            return die("optimizer");
        }
    }
    for (int ep = 1; ep <= epochs; ep++) {
        double t0 = now(), loss_sum = 0, acc = 0, sum[10] = {0}, t_meas = 0;
        int64_t steps = 0, measured = 0;
        td_pipe_stats_t s, peak = {0};
        td_tensor_t *x = NULL, *y = NULL;
        int r;

        td_batcher_start_epoch(batcher, ep);
        while ((max_steps < 0 || steps < max_steps) &&
               (r = next_batch(batcher, R, rep, batch, &x, &y)) == 1) {
            double loss;
            if (steps == warmup) {
                t_meas = now();
            }
            td_optim_zero_grad(opt);
            if (input_grad && stage == 0) {
                td_tensor_set_requires_grad(x, 1);   /* an upstream's output */
            }
            if (td_pipe_step(p, stage == 0 ? x : NULL,
                             stage == S - 1 ? y : NULL, &loss) != TD_OK) {
                return die("pipeline step");
            }
            if (input_grad && stage == 0 && td_tensor_grad(x) == NULL) {
                /* where a caller takes it for the upstream's backward */
                fprintf(stderr, "pipeline_mlp: stage 0 got no input "
                        "gradient\n");
                return 1;
            }
            if (td_optim_step(opt) != TD_OK) {
                return die("optimizer step");
            }
            td_tensor_release(x);
            td_tensor_release(y);
            loss_sum += stage == S - 1 ? loss : 0;
            if (++steps > warmup) {
                td_pipe_stats(p, &s);
                if (trace != NULL) {
                    write_trace(trace, p, steps - warmup - 1, stage, rep);
                }
                sum[0] += s.step_s;
                sum[1] += s.busy_s;
                sum[2] += s.allreduce_s;
                sum[3] += s.fwd_s;
                sum[4] += s.bwd_s;
                sum[5] += s.wgt_s;
                sum[6] += s.wait_s;
                sum[7] += s.send_s;
                sum[8] += s.post_s;
                sum[9] += s.model;
                measured++;
                peak.peak_in_flight = s.peak_in_flight > peak.peak_in_flight
                                          ? s.peak_in_flight
                                          : peak.peak_in_flight;
                peak.peak_act_bytes = s.peak_act_bytes > peak.peak_act_bytes
                                          ? s.peak_act_bytes
                                          : peak.peak_act_bytes;
                peak.theory = s.theory;
            }
        }
        t_meas = measured ? now() - t_meas : 0;
        if (rep == 0 && evaluate(&st, S, stage, hidden, te_x, te_y, &acc) !=
                            TD_OK) {
            return die("evaluation");
        }
        if (rep == 0 && stage == S - 1) {
            printf("epoch=%d train_loss=%.4f test_accuracy=%.4f seconds=%.1f "
                   "steps=%lld samples_per_s=%.0f\n", ep,
                   steps ? loss_sum / (double)steps : 0.0, acc, now() - t0,
                   (long long)steps,
                   t_meas > 0 ? (double)measured * batch * R / t_meas : 0.0);
        }
        if (measured > 0) {
            printf("stats stage=%d replica=%d step_ms=%.2f busy_ms=%.2f "
                   "bubble=%.3f theory=%.3f model=%.3f peak_in_flight=%d "
                   "peak_act_mib=%.1f allreduce_ms=%.2f f_ms=%.2f b_ms=%.2f "
                   "w_ms=%.2f wait_ms=%.2f send_ms=%.2f post_ms=%.2f "
                   "other_ms=%.2f\n", stage, rep,
                   1e3 * sum[0] / measured, 1e3 * sum[1] / measured,
                   (sum[0] - sum[1]) / sum[0], peak.theory,
                   sum[9] / measured, peak.peak_in_flight, peak.peak_act_bytes / 1048576.0,
                   1e3 * sum[2] / measured, 1e3 * sum[3] / measured,
                   1e3 * sum[4] / measured, 1e3 * sum[5] / measured,
                   1e3 * sum[6] / measured, 1e3 * sum[7] / measured,
                   1e3 * sum[8] / measured,
                   1e3 * (sum[0] - sum[1] - sum[2] - sum[6] - sum[7] -
                          sum[8]) / measured);
        }
        fflush(stdout);
        td_group_barrier(td_group_world());
    }
    td_optim_free(opt);
out:
    td_batcher_free(batcher);
    td_pipe_destroy(p);
    if (trace != NULL && fclose(trace) != 0) {
        perror("pipeline_mlp: --trace");
        rc = 1;
    }
    model_free(&m);
    td_tensor_release(tr_x);
    td_tensor_release(tr_y);
    td_tensor_release(te_x);
    td_tensor_release(te_y);
    td_finalize();
    return rc;
}
