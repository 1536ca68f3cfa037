/* runtime/pipe/pipe.c: a pipeline stage: its groups, one step's executor
 * (forwards, backwards, the deferred weight passes of ZB_H1), its messages
 * to the neighbouring stages and their kept receive buffers, and the
 * agreed failure of a step (P1-P9 in todist/pipe.h). */
#include "config.h"

#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "runtime/coll/tx.h"      /* coll_group_fail */
#include "runtime/coll/work.h"    /* coll_work_set_spin */
#include "runtime/pipe/pipe_internal.h"
#include "runtime/runtime.h"      /* td__runtime_local_world_size, _host_cores */
#include "runtime/tensor/tensor_internal.h"   /* td__tensor_cache_bytes */
#include <todist/coll.h>
#include <todist/ops.h>

#define PIPE_MICRO_MAX  65536
#define PIPE_MSG_MAX    480
/* P8: how long a waiting stage drives the transport before it sleeps,
 * when every rank of this host has a core of its own */
#define PIPE_SPIN_S     0.05
/* Tags in the pipeline group (P1: one per direction, FIFO per pair). */
#define TAG_ACT   1
#define TAG_GRAD  2
#define TAG_META  3
/* The agreed-shape message: dtype, ndim, shape[TD_MAX_DIMS] as int64. */
#define META_LEN  (2 + TD_MAX_DIMS)

typedef struct {
    td_tensor_t *x;          /* the stage input (received, or a slice) */
    td_tensor_t *y;          /* the output (the loss on the last stage) */
    td_tensor_t *dy;         /* the received output gradient (ZB_H1: kept
                                until W, which may read it) */
    td_work_t   *act_recv, *grad_recv, *act_send, *grad_send;
    pipe_split_t split;      /* ZB_H1: what W needs */
} micro_t;

typedef struct {
    td_dtype_t dtype;
    int        ndim;
    int64_t    shape[TD_MAX_DIMS];
} shape_t;

/* Receive buffers kept across micro-batches and steps, one pool per
 * direction (P6): a receive lands in memory that is already mapped and
 * warm, and no allocation sits between a message and the op waiting for
 * it. CAP buffers, all made at the first receive of the direction: what
 * the schedule can hold at once (pool_need). */
typedef struct {
    td_tensor_t **t;
    int           n, cap, filled;
    int           poison;     /* TODIST_PIPE_POISON: fill what comes back */
} buf_pool_t;

struct td_pipe {
    int                S, R, M, stage, replica, rank;
    td_pipe_schedule_t sched;
    td_pipe_forward_fn forward;
    void              *arg;
    td_tensor_t      **params;
    int                n_params;
    td_group_t        *pg;          /* this replica's stages */
    td_group_t        *dg;          /* this stage's replicas (R > 1) */
    int                in_agreed, out_agreed;
    shape_t            in, out;     /* what comes from s-1, goes to s+1 */
    int                broken;
    int                input_grad;  /* P9: stage 0 computes dINPUT */
    td_tensor_t       *input;       /* the step's INPUT (borrowed), stage 0 */
    micro_t           *mb;
    pipe_op_t         *ops;         /* the step's ops, in order (schedule.c) */
    int                n_ops;
    /* W's waiting (ZB_H1): micro-batches, oldest first (P2) */
    int               *wq;
    int                wq_head, wq_n;
    int                in_flight;
    buf_pool_t         act_pool, grad_pool;   /* P6 */
    /* the step's trace (P7): at most n_ops + 4M events */
    td_pipe_event_t   *trace;
    int                n_trace, trace_cap;
    double             theory;
    double             spin_s;      /* P8: receives' drive-before-sleep */
    size_t             heap0;
    td_pipe_stats_t    stats;
};

static const char *const sched_names[] = {"gpipe", "1f1b", "zb"};
static const char *const event_names[] = {
    "F", "BW", "B", "W", "wait_act", "wait_grad", "send_act", "send_grad"};

const char *
td_pipe_event_name(td_pipe_event_kind_t kind)
{
    return (unsigned)kind < 8 ? event_names[kind] : "?";
}

/* Record one event (P7: the list is sized for a step's every op, wait and
 * send, so nothing is dropped in a step that keeps P1-P4). */
static void
trace_add(td_pipe_t *p, td_pipe_event_kind_t kind, int m, double t0,
          double t1)
{
    if (p->n_trace < p->trace_cap) {
        p->trace[p->n_trace++] = (td_pipe_event_t){kind, m, t0, t1};
    }
}

const char *
td_pipe_schedule_name(td_pipe_schedule_t s)
{
    return (unsigned)s < 3 ? sched_names[s] : "?";
}

td_status_t
td_pipe_schedule_parse(const char *name, td_pipe_schedule_t *s)
{
    for (int i = 0; name != NULL && i < 3; i++) {
        if (strcmp(name, sched_names[i]) == 0) {
            *s = (td_pipe_schedule_t)i;
            return TD_OK;
        }
    }
    if (name != NULL && strcmp(name, "zb-h1") == 0) {
        *s = TD_PIPE_ZB_H1;
        return TD_OK;
    }
    return td_error(TD_ERR_INVALID, "pipe: schedule '%s' is not gpipe, 1f1b "
                    "or zb", name ? name : "(null)");
}

/* The heap that holds live data: malloc's in-use bytes less the freed
 * tensor storage the tensor cache keeps for reuse (T1), which malloc
 * still counts in use (without the subtraction a step's activations,
 * made again in the blocks the last step freed, would read as no growth). */
static size_t
heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    struct mallinfo2 mi = mallinfo2();
    size_t used = mi.uordblks + mi.hblkhd, kept = td__tensor_cache_bytes();

    return used > kept ? used - kept : 0;
#else
    return 0;
#endif
}

static void
shape_str(const shape_t *sh, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s [", td_dtype_name(sh->dtype));

    for (int d = 0; d < sh->ndim && n < len; d++) {
        n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld",
                              (long long)sh->shape[d]);
    }
    if (n < len) {
        snprintf(buf + n, len - n, "]");
    }
}

static void
shape_of(const td_tensor_t *t, shape_t *sh)
{
    sh->dtype = td_tensor_dtype(t);
    sh->ndim = td_tensor_ndim(t);
    memcpy(sh->shape, td_tensor_shape(t), sizeof(int64_t) * (size_t)sh->ndim);
}

static int
shape_eq(const shape_t *a, const shape_t *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* ---- failure (P5) ------------------------------------------------------ */

/* Break the pipe's groups with STATUS and the message "pipe: stage s (rank
 * r) WHAT: <last error>", telling every member; the caller's error. */
static td_status_t
pipe_fail(td_pipe_t *p, td_status_t status, const char *fmt, ...)
{
    char what[200], msg[PIPE_MSG_MAX];
    const char *cause = td_last_error();
    const char *dead = cause ? strstr(cause, "coll: rank ") : NULL;
    int dead_rank = -1;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* a dead rank is named by the collectives as a world rank: say which
     * stage it was */
    if (dead != NULL && strstr(dead, " died") != NULL &&
        sscanf(dead, "coll: rank %d", &dead_rank) == 1 && dead_rank >= 0) {
        snprintf(msg, sizeof(msg), "pipe: stage %d (rank %d) %s: stage %d "
                 "(rank %d, replica %d) died: %s", p->stage, p->rank, what,
                 dead_rank % p->S, dead_rank, dead_rank / p->S, cause);
    } else {
        snprintf(msg, sizeof(msg), "pipe: stage %d (rank %d) %s: %s",
                 p->stage, p->rank, what, cause ? cause : "?");
    }
    if (status == TD_OK) {
        status = TD_ERR_REMOTE;
    }
    p->broken = 1;
    coll_group_fail(p->pg, status, 1, 0, msg);
    if (p->dg != NULL) {
        coll_group_fail(p->dg, status, 1, 0, msg);
    }
    return td_error(status, "%s", msg);
}

/* ---- receive buffers (P6) ---------------------------------------------- */

/* Buffers a direction can hold at once (P6). A receive for micro-batch
 * m+1 is posted when m's message is in (before m's op): m and m+1 hold
 * one each, and so does every micro-batch before m still in flight, at
 * most CAP (P3); an output gradient is held in flight only under ZB_H1
 * (until W), otherwise its backward ends with it. */
static int
pool_need(td_pipe_schedule_t sched, int cap, int n_micro, int grad)
{
    int n = grad && sched != TD_PIPE_ZB_H1 ? 2 : cap + 2;

    return n < n_micro ? n : n_micro;
}

/* A buffer of shape SH for a receive: a kept one, or a new one; the
 * first take makes the whole pool (counted in stats.recv_allocs). */
static td_status_t
pool_take(td_pipe_t *p, buf_pool_t *pool, const shape_t *sh,
          td_tensor_t **t_p)
{
    td_status_t st;

    while (!pool->filled && pool->n < pool->cap) {
        st = td_tensor_empty(sh->shape, sh->ndim, sh->dtype, TD_CPU,
                             &pool->t[pool->n]);
        if (st != TD_OK) {
            return st;
        }
        pool->n++;
        p->stats.recv_allocs++;
    }
    pool->filled = 1;
    if (pool->n > 0) {
        *t_p = pool->t[--pool->n];
        return TD_OK;
    }
    p->stats.recv_allocs++;
    return td_tensor_empty(sh->shape, sh->ndim, sh->dtype, TD_CPU, t_p);
}

/* Keep T (a buffer of POOL whose micro-batch is done) for a later
 * receive. Its .grad is dropped: the next backward must not add to it.
 * Poisoned (all one bits: NaN in floats) when asked: a read after
 * this point (a buffer given back too early, a forward that kept its X)
 * then shows at once, not only when a later receive happens to land in
 * it first. */
static void
pool_give(buf_pool_t *pool, td_tensor_t *t)
{
    if (t == NULL) {
        return;
    }
    if (pool->poison) {
        /* all one bits: a NaN in every float dtype */
        memset(td_tensor_data(t), 0xff, td_tensor_nbytes(t));
    }
    if (pool->n >= pool->cap || td_tensor_set_grad(t, NULL) != TD_OK) {
        td_tensor_release(t);
        return;
    }
    pool->t[pool->n++] = t;
}

static size_t
pool_bytes(const buf_pool_t *pool)
{
    size_t n = 0;

    for (int i = 0; i < pool->n; i++) {
        n += td_tensor_nbytes(pool->t[i]);
    }
    return n;
}

static void
pool_free(buf_pool_t *pool)
{
    for (int i = 0; i < pool->n; i++) {
        td_tensor_release(pool->t[i]);
    }
    free(pool->t);
    pool->t = NULL;
    pool->n = pool->cap = 0;
}

/* Micro-batch M is done with its input and output gradient: back to the
 * pools (stage 0's input is a slice of the caller's, the last stage's
 * output gradient its own). */
static void
micro_done(td_pipe_t *p, int m)
{
    micro_t *mb = &p->mb[m];

    if (p->stage > 0) {
        pool_give(&p->act_pool, mb->x);
    } else {
        td_tensor_release(mb->x);
    }
    if (p->stage < p->S - 1) {
        pool_give(&p->grad_pool, mb->dy);
    } else {
        td_tensor_release(mb->dy);
    }
    td_tensor_release(mb->y);
    mb->x = mb->y = mb->dy = NULL;
    p->in_flight--;
}

/* ---- messages ---------------------------------------------------------- */

static td_status_t
post_act_recv(td_pipe_t *p, int m)
{
    micro_t *mb = &p->mb[m];
    td_status_t st;

    double t0 = td_now_s();

    if (p->stage == 0 || m >= p->M) {
        return TD_OK;
    }
    st = pool_take(p, &p->act_pool, &p->in, &mb->x);
    if (st == TD_OK) {
        st = td_irecv(p->pg, mb->x, p->stage - 1, TAG_ACT, &mb->act_recv);
    }
    if (st == TD_OK && p->spin_s > 0) {
        coll_work_set_spin(mb->act_recv, p->spin_s);
    }
    p->stats.post_s += td_now_s() - t0;
    return st;
}

static td_status_t
post_grad_recv(td_pipe_t *p, int m)
{
    micro_t *mb = &p->mb[m];
    td_status_t st;

    double t0 = td_now_s();

    if (p->stage == p->S - 1 || m >= p->M || !p->out_agreed) {
        return TD_OK;
    }
    st = pool_take(p, &p->grad_pool, &p->out, &mb->dy);
    if (st == TD_OK) {
        st = td_irecv(p->pg, mb->dy, p->stage + 1, TAG_GRAD, &mb->grad_recv);
    }
    if (st == TD_OK && p->spin_s > 0) {
        coll_work_set_spin(mb->grad_recv, p->spin_s);
    }
    p->stats.post_s += td_now_s() - t0;
    return st;
}

/* The first step: learn the input's shape from stage s-1 (P1: once). */
static td_status_t
agree_input(td_pipe_t *p)
{
    int64_t len = META_LEN, *v;
    td_tensor_t *meta;
    td_status_t st;

    st = td_tensor_zeros(&len, 1, TD_INT64, &meta);
    if (st != TD_OK) {
        return st;
    }
    st = td_recv(p->pg, meta, p->stage - 1, TAG_META, NULL);
    v = td_tensor_data(meta);
    if (st == TD_OK && (v[0] < 0 || v[0] > 255 ||
                        td_dtype_size((td_dtype_t)v[0]) == 0 || v[1] < 0 ||
                        v[1] > TD_MAX_DIMS)) {
        st = td_error(TD_ERR_PROTOCOL, "pipe: stage %d sent a shape with "
                      "dtype %lld and %lld dims", p->stage - 1,
                      (long long)v[0], (long long)v[1]);
    }
    for (int d = 0; st == TD_OK && d < v[1]; d++) {
        if (v[2 + d] < 0) {
            st = td_error(TD_ERR_PROTOCOL, "pipe: stage %d sent dim %d = "
                          "%lld", p->stage - 1, d, (long long)v[2 + d]);
        }
        p->in.shape[d] = v[2 + d];
    }
    if (st == TD_OK) {
        p->in.dtype = (td_dtype_t)v[0];
        p->in.ndim = (int)v[1];
        p->in_agreed = 1;
    }
    td_tensor_release(meta);
    return st;
}

static td_status_t
agree_output(td_pipe_t *p, td_tensor_t *y)
{
    int64_t len = META_LEN, *v;
    td_tensor_t *meta;
    td_status_t st;

    shape_of(y, &p->out);
    st = td_tensor_zeros(&len, 1, TD_INT64, &meta);
    if (st != TD_OK) {
        return st;
    }
    v = td_tensor_data(meta);
    v[0] = p->out.dtype;
    v[1] = p->out.ndim;
    for (int d = 0; d < p->out.ndim; d++) {
        v[2 + d] = p->out.shape[d];
    }
    st = td_send(p->pg, meta, p->stage + 1, TAG_META);
    td_tensor_release(meta);
    if (st == TD_OK) {
        p->out_agreed = 1;
    }
    return st;
}

/* ---- one step ---------------------------------------------------------- */

/* Run the deferred W of micro-batch M, the oldest (P2). */
static td_status_t
run_w(td_pipe_t *p, int m)
{
    micro_t *mb = &p->mb[m];
    double t0 = td_now_s(), t1;
    td_status_t st;

    if (p->wq_n == 0 || p->wq[p->wq_head] != m) {
        return pipe_fail(p, TD_ERR_STATE, "was to run the weight backward "
                         "of micro-batch %d out of order", m);
    }
    p->wq_head++;
    p->wq_n--;
    st = pipe_split_weight(&mb->split, p->params);
    t1 = td_now_s();
    p->stats.wgt_s += t1 - t0;
    trace_add(p, TD_PIPE_EV_W, m, t0, t1);
    if (st != TD_OK) {
        return pipe_fail(p, st, "failed in the weight backward of "
                         "micro-batch %d", m);
    }
    micro_done(p, m);
    return TD_OK;
}

/* Wait for W (a receive). ZB_H1's W's do not fill the wait: their places
 * are fixed in the op list (schedule.c), so a message a little late costs
 * its lateness, not a whole W run before it. */
static td_status_t
wait_recv(td_pipe_t *p, td_work_t *w, const char *what, int m, int from)
{
    td_status_t st;
    double t0, t1;

    t0 = td_now_s();
    st = td_work_wait(w, -1);
    t1 = td_now_s();
    p->stats.wait_s += t1 - t0;
    trace_add(p, from < p->stage ? TD_PIPE_EV_WAIT_ACT : TD_PIPE_EV_WAIT_GRAD,
              m, t0, t1);
    if (st != TD_OK) {
        return pipe_fail(p, st, "got no %s of micro-batch %d from stage %d "
                         "(rank %d)", what, m, from,
                         td_group_world_rank(p->pg, from));
    }
    return TD_OK;
}

static td_status_t
do_forward(td_pipe_t *p, int m, td_tensor_t *input, td_tensor_t *target,
           double *loss_sum)
{
    micro_t *mb = &p->mb[m];
    td_tensor_t *tgt = NULL, *y = NULL, *send = NULL;
    int last = p->stage == p->S - 1;
    td_status_t st;
    double t0, t1;
    size_t heap;

    if (p->stage > 0) {
        st = wait_recv(p, mb->act_recv, "activation", m, p->stage - 1);
        if (st != TD_OK) {
            return st;
        }
        td_work_release(mb->act_recv);
        mb->act_recv = NULL;
        if (td_dtype_is_float(p->in.dtype)) {
            td_tensor_set_requires_grad(mb->x, 1);   /* dx goes back */
        }
        st = post_act_recv(p, m + 1);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not post a receive");
        }
    } else {
        /* P9: the data's slice is cut without autograd, so no op of the
         * forward keeps an edge to INPUT; when the caller asked for the
         * input's gradient the slice is a leaf of its own, whose gradient
         * input_grad_add puts into its rows of INPUT's .grad (an edge
         * through the narrow would build a zero tensor of INPUT's whole
         * size and add it into .grad, every micro-batch) */
        int64_t b = td_tensor_size(input, 0) / p->M;
        int was = td_grad_set_enabled(0);
        st = td_tensor_narrow(input, 0, m * b, b, &mb->x);
        td_grad_set_enabled(was);
        if (st == TD_OK && p->input_grad && was) {
            st = td_tensor_set_requires_grad(mb->x, 1);
        }
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not slice the input");
        }
    }
    if (last) {
        int64_t b = td_tensor_size(target, 0) / p->M;
        st = td_tensor_narrow(target, 0, m * b, b, &tgt);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not slice the target");
        }
    }
    t0 = td_now_s();
    st = p->forward(p->arg, mb->x, tgt, m, &y);
    t1 = td_now_s();
    p->stats.fwd_s += t1 - t0;
    trace_add(p, TD_PIPE_EV_F, m, t0, t1);
    td_tensor_release(tgt);
    if (st == TD_OK && y == NULL) {
        st = td_error(TD_ERR_INVALID, "the forward returned no tensor");
    }
    if (st != TD_OK) {
        return pipe_fail(p, st, "failed in the forward of micro-batch %d", m);
    }
    mb->y = y;
    p->in_flight++;
    if (p->in_flight > p->stats.peak_in_flight) {
        p->stats.peak_in_flight = p->in_flight;
    }
    heap = heap_in_use();
    if (heap > p->heap0 && heap - p->heap0 > p->stats.peak_act_bytes) {
        p->stats.peak_act_bytes = heap - p->heap0;
    }
    if (last) {
        double v;
        if (td_tensor_numel(y) != 1 || !td_dtype_is_float(td_tensor_dtype(y))) {
            st = td_error(TD_ERR_SHAPE, "the last stage's forward must return "
                          "a one-element float loss, not %lld elements",
                          (long long)td_tensor_numel(y));
            return pipe_fail(p, st, "failed in the forward of micro-batch %d",
                             m);
        }
        st = td_tensor_item(y, &v);
        *loss_sum += v;
        return TD_OK;
    }
    if (!p->out_agreed) {
        st = agree_output(p, y);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not send its output's shape");
        }
        st = post_grad_recv(p, 0);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not post a receive");
        }
    } else {
        shape_t sh;
        shape_of(y, &sh);
        if (!shape_eq(&sh, &p->out)) {
            char got[96], want[96];
            shape_str(&sh, got, sizeof(got));
            shape_str(&p->out, want, sizeof(want));
            st = td_error(TD_ERR_SHAPE, "its output is %s but the shape "
                          "agreed in the first step is %s (shapes must be "
                          "static)", got, want);
            return pipe_fail(p, st, "failed in the forward of micro-batch %d",
                             m);
        }
    }
    /* a non-contiguous output travels as a contiguous copy (not in the
     * graph: the gradient comes back to Y) */
    t0 = td_now_s();
    if (td_tensor_is_contiguous(y)) {
        send = td_tensor_retain(y);
    } else {
        int was = td_grad_set_enabled(0);
        st = td_tensor_contiguous(y, &send);
        td_grad_set_enabled(was);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not copy its output");
        }
    }
    st = td_isend(p->pg, send, p->stage + 1, TAG_ACT, &mb->act_send);
    td_tensor_release(send);
    t1 = td_now_s();
    p->stats.send_s += t1 - t0;
    trace_add(p, TD_PIPE_EV_SEND_ACT, m, t0, t1);
    if (st != TD_OK) {
        return pipe_fail(p, st, "could not send the activation of "
                         "micro-batch %d", m);
    }
    return TD_OK;
}

/* P9: micro-batch M's input gradient DX (NULL: the input did not reach
 * the output, so zero) into its rows of INPUT's .grad, made as zeros in
 * the step's first (the rows of different micro-batches do not overlap,
 * so each element gets exactly the one term the single process adds);
 * then INPUT's post-accumulate hooks, as an accumulation runs them. */
static td_status_t
input_grad_add(td_pipe_t *p, int m, td_tensor_t *dx)
{
    td_tensor_t *in = p->input, *g = td_tensor_grad(in), *rows = NULL;
    td_tensor_t *sum = NULL;
    int64_t b = td_tensor_size(in, 0) / p->M;
    int was = td_grad_set_enabled(0);
    td_status_t st = TD_OK;

    if (g == NULL) {
        st = td_tensor_zeros(td_tensor_shape(in), td_tensor_ndim(in),
                             td_tensor_dtype(in), &g);
        if (st == TD_OK) {
            st = td_tensor_set_grad(in, g);
            td_tensor_release(g);
            g = td_tensor_grad(in);
        }
    }
    if (st == TD_OK && dx != NULL) {
        st = td_tensor_narrow(g, 0, m * b, b, &rows);
        if (st == TD_OK) {
            st = td_add(rows, dx, &sum);
        }
        if (st == TD_OK) {
            st = td_tensor_copy_(rows, sum);
        }
        td_tensor_release(sum);
        td_tensor_release(rows);
    }
    td_grad_set_enabled(was);
    if (st == TD_OK) {
        st = td_tensor_run_post_accumulate_hooks(in);
    }
    return st;
}

static td_status_t
do_backward(td_pipe_t *p, int m, int split)
{
    micro_t *mb = &p->mb[m];
    td_tensor_t *dx = NULL;
    int last = p->stage == p->S - 1;
    td_status_t st;
    double t0, t1;

    if (!last) {
        st = wait_recv(p, mb->grad_recv, "gradient", m, p->stage + 1);
        if (st != TD_OK) {
            return st;
        }
        td_work_release(mb->grad_recv);
        mb->grad_recv = NULL;
        st = post_grad_recv(p, m + 1);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not post a receive");
        }
    } else {
        /* the mini-batch's mean loss: each micro-batch's loss / M */
        st = td_tensor_full(td_tensor_shape(mb->y), td_tensor_ndim(mb->y),
                            td_tensor_dtype(mb->y), 1.0 / p->M, &mb->dy);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not make the loss gradient");
        }
    }
    t0 = td_now_s();
    if (split) {
        st = pipe_split_input(&mb->split, mb->y, mb->dy,
                              p->stage > 0 || p->input_grad ? mb->x : NULL,
                              p->params, p->n_params, &dx);
    } else {
        st = td_backward(&mb->y, &mb->dy, 1, 0, 0);
        if (st == TD_OK && (p->stage > 0 || p->input_grad)) {
            dx = td_tensor_grad(mb->x);
            td_tensor_retain(dx);
        }
    }
    if (st == TD_OK && p->stage == 0 && p->input_grad) {
        /* P9: into INPUT's .grad, part of the backward's work */
        st = input_grad_add(p, m, dx);
        td_tensor_release(dx);
        dx = NULL;
    }
    t1 = td_now_s();
    p->stats.bwd_s += t1 - t0;
    trace_add(p, split ? TD_PIPE_EV_B : TD_PIPE_EV_BW, m, t0, t1);
    if (st != TD_OK) {
        return pipe_fail(p, st, "failed in the backward of micro-batch %d", m);
    }
    if (p->stage > 0) {
        if (dx == NULL) {
            /* the input did not reach the output: its gradient is zero */
            st = td_tensor_zeros(p->in.shape, p->in.ndim, p->in.dtype, &dx);
            if (st != TD_OK) {
                return pipe_fail(p, st, "could not make a zero gradient");
            }
        }
        t0 = td_now_s();
        st = td_isend(p->pg, dx, p->stage - 1, TAG_GRAD, &mb->grad_send);
        td_tensor_release(dx);
        t1 = td_now_s();
        p->stats.send_s += t1 - t0;
        trace_add(p, TD_PIPE_EV_SEND_GRAD, m, t0, t1);
        if (st != TD_OK) {
            return pipe_fail(p, st, "could not send the gradient of "
                             "micro-batch %d", m);
        }
    }
    if (split) {
        p->wq[p->wq_head + p->wq_n++] = m;   /* W may read dy: kept */
    } else {
        micro_done(p, m);
    }
    return TD_OK;
}

/* Average .grad over the replicas: one async all_reduce per parameter,
 * started once this stage's backward is done (overlapping the drain of
 * the stages still working), then waited for. */
static td_status_t
reduce_replicas(td_pipe_t *p)
{
    td_work_t **w;
    td_status_t st = TD_OK, st2;
    double t0 = td_now_s();

    w = calloc((size_t)p->n_params, sizeof(*w));
    if (w == NULL) {
        return pipe_fail(p, TD_ERR_NO_MEMORY, "ran out of memory");
    }
    for (int i = 0; i < p->n_params && st == TD_OK; i++) {
        td_tensor_t *g = td_tensor_grad(p->params[i]);
        if (g == NULL) {
            int was = td_grad_set_enabled(0);
            st = td_tensor_zeros(td_tensor_shape(p->params[i]),
                                 td_tensor_ndim(p->params[i]),
                                 td_tensor_dtype(p->params[i]), &g);
            td_grad_set_enabled(was);
            if (st == TD_OK) {
                st = td_tensor_set_grad(p->params[i], g);
                td_tensor_release(g);
                g = td_tensor_grad(p->params[i]);
            }
        }
        if (st == TD_OK) {
            st = td_all_reduce_async(p->dg, g, TD_REDUCE_AVG, &w[i]);
        }
    }
    for (int i = 0; i < p->n_params; i++) {
        if (w[i] != NULL) {
            st2 = td_work_wait(w[i], -1);
            if (st == TD_OK) {
                st = st2;
            }
            td_work_release(w[i]);
        }
    }
    free(w);
    p->stats.allreduce_s = td_now_s() - t0;
    if (st != TD_OK) {
        return pipe_fail(p, st, "failed to average the gradients over the "
                         "replicas");
    }
    return TD_OK;
}

static td_status_t
check_batch(td_pipe_t *p, td_tensor_t *t, const char *name)
{
    int64_t b;

    if (t == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: stage %d (rank %d) needs the "
                        "%s", p->stage, p->rank, name);
    }
    if (td_tensor_ndim(t) < 1) {
        return td_error(TD_ERR_SHAPE, "pipe: the %s is a scalar; it needs a "
                        "batch dimension", name);
    }
    b = td_tensor_size(t, 0);
    if (b < p->M || b % p->M != 0) {
        return td_error(TD_ERR_SHAPE, "pipe: the %s's batch of %lld does not "
                        "split into %d micro-batches of one size", name,
                        (long long)b, p->M);
    }
    return TD_OK;
}

static void
step_cleanup(td_pipe_t *p)
{
    for (int m = 0; m < p->M; m++) {
        micro_t *mb = &p->mb[m];
        td_work_t **ws[4] = {&mb->act_recv, &mb->grad_recv, &mb->act_send,
                             &mb->grad_send};
        for (int k = 0; k < 4; k++) {
            td_work_release(*ws[k]);
            *ws[k] = NULL;
        }
        pipe_split_clear(&mb->split);
        td_tensor_release(mb->x);
        td_tensor_release(mb->y);
        td_tensor_release(mb->dy);
        mb->x = mb->y = mb->dy = NULL;
    }
    p->wq_head = p->wq_n = 0;
    p->in_flight = 0;
}

td_status_t
td_pipe_step(td_pipe_t *p, td_tensor_t *input, td_tensor_t *target,
             double *loss_p)
{
    double t0 = td_now_s(), t_send, loss_sum = 0;
    td_status_t st = TD_OK;
    size_t kept;

    if (loss_p != NULL) {
        *loss_p = NAN;
    }
    if (p == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: step of a NULL pipe");
    }
    if (p->broken) {
        return td_error(TD_ERR_STATE, "pipe: stage %d (rank %d): an earlier "
                        "step failed, so the pipe is broken: make a new one",
                        p->stage, p->rank);
    }
    memset(&p->stats, 0, sizeof(p->stats));
    p->n_trace = 0;
    /* the kept receive buffers count as the step's, as if allocated now */
    kept = pool_bytes(&p->act_pool) + pool_bytes(&p->grad_pool);
    p->heap0 = heap_in_use();
    p->input = input;
    p->heap0 = p->heap0 > kept ? p->heap0 - kept : 0;
    if (p->stage == 0) {
        st = check_batch(p, input, "input");
        if (st == TD_OK && p->input_grad &&
            (!td_tensor_is_leaf(input) || !td_tensor_requires_grad(input))) {
            /* P9: the gradient goes to INPUT's .grad, once per
             * micro-batch: a non-leaf's graph would be run M times */
            st = td_error(TD_ERR_INVALID, "pipe: input_grad is set but the "
                          "input is %s", td_tensor_requires_grad(input)
                          ? "not a leaf (pass a detached leaf and carry its "
                            ".grad on after the step)"
                          : "a tensor that does not require grad");
        }
    }
    if (st == TD_OK && p->stage == p->S - 1) {
        st = check_batch(p, target, "target");
    }
    if (st != TD_OK) {
        return pipe_fail(p, st, "got a bad argument");
    }
    if (p->stage > 0 && !p->in_agreed) {
        st = agree_input(p);
        if (st != TD_OK) {
            return pipe_fail(p, st, "got no input shape from stage %d",
                             p->stage - 1);
        }
    }
    st = post_act_recv(p, 0);
    if (st == TD_OK) {
        st = post_grad_recv(p, 0);
    }
    if (st != TD_OK) {
        st = pipe_fail(p, st, "could not post a receive");
        goto out;
    }
    for (int i = 0; i < p->n_ops && st == TD_OK; i++) {
        pipe_op_t op = p->ops[i];
        if (op.kind == PIPE_OP_F) {
            st = do_forward(p, op.micro, input, target, &loss_sum);
        } else if (op.kind == PIPE_OP_W) {
            st = run_w(p, op.micro);
        } else {
            st = do_backward(p, op.micro, op.kind == PIPE_OP_B);
        }
    }
    if (st == TD_OK && p->dg != NULL) {
        st = reduce_replicas(p);
    }
    /* P4: the sends complete once the neighbours matched them */
    t_send = td_now_s();
    for (int m = 0; st == TD_OK && m < p->M; m++) {
        td_work_t *ws[2] = {p->mb[m].act_send, p->mb[m].grad_send};
        for (int k = 0; k < 2 && st == TD_OK; k++) {
            if (ws[k] != NULL && (st = td_work_wait(ws[k], -1)) != TD_OK) {
                st = pipe_fail(p, st, "could not deliver micro-batch %d's "
                               "%s", m, k ? "gradient" : "activation");
            }
        }
    }
    p->stats.send_s += td_now_s() - t_send;
out:
    step_cleanup(p);
    p->input = NULL;
    p->stats.step_s = td_now_s() - t0;
    p->stats.busy_s = p->stats.fwd_s + p->stats.bwd_s + p->stats.wgt_s;
    p->stats.bubble = p->stats.step_s > 0
        ? (p->stats.step_s - p->stats.busy_s) / p->stats.step_s : 0;
    p->stats.theory = p->theory;
    /* the schedule replayed at this stage's op times (small pipes: the
     * replay takes O(S^2 M)) */
    p->stats.model = NAN;
    if (st == TD_OK && (double)p->S * p->S * p->M <= 1e5) {
        double m = p->M;
        p->stats.model = pipe_schedule_replay(p->sched, p->S, p->M,
                                              p->stats.fwd_s / m,
                                              p->stats.bwd_s / m,
                                              p->stats.wgt_s / m);
    }
    if (st == TD_OK && loss_p != NULL && p->stage == p->S - 1) {
        *loss_p = loss_sum / p->M;
    }
    return st;
}

/* ---- create / destroy -------------------------------------------------- */

/* P8: how long a stage waiting for a message drives the transport before
 * it sleeps: TODIST_PIPE_SPIN_MS when set (0: the runtime's own 2 ms),
 * else PIPE_SPIN_S where every rank of this host has a core of its own
 * (a waiting stage has nothing else to run, and a sleeper's wake-up cost
 * 0.1-2 ms a message, bench/RESULTS.md), else 0: spinning would take
 * the core from the very rank it waits for. */
double
pipe_spin_choose(const char *env, int local_ranks, int cores)
{
    if (env != NULL && env[0] != '\0') {
        char *end;
        double ms = strtod(env, &end);

        return end != env && *end == '\0' && ms > 0 && ms <= 60e3
               ? ms * 1e-3 : 0;
    }
    return local_ranks > 0 && local_ranks <= cores ? PIPE_SPIN_S : 0;
}

/* The cores are those this process could use before placement bound it:
 * bound to one core each (TODIST_BIND=closest, fewer ranks than cores),
 * every rank still has a core of its own. */
static double
pipe_spin_s(void)
{
    return pipe_spin_choose(getenv("TODIST_PIPE_SPIN_MS"),
                            td__runtime_local_world_size(),
                            td__runtime_host_cores());
}

/* NAME set to anything but "" or "0". */
static int
pipe_env_flag(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

td_status_t
td_pipe_create(const td_pipe_opts_t *o, td_pipe_t **pipe_p)
{
    td_group_t *world = td_group_world();
    td_pipe_t *p;
    int S, R, n, rank, *ranks = NULL;
    td_status_t st;

    if (o == NULL || pipe_p == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: options or result is NULL");
    }
    if (world == NULL) {
        return td_error(TD_ERR_STATE, "pipe: td_init has not run");
    }
    S = o->n_stages;
    R = o->n_replicas ? o->n_replicas : 1;
    n = td_group_size(world);
    rank = td_group_rank(world);
    if (S < 1 || R < 1) {
        return td_error(TD_ERR_INVALID, "pipe: n_stages=%d and n_replicas=%d "
                        "must be at least 1", S, R);
    }
    if (o->n_micro < 1 || o->n_micro > PIPE_MICRO_MAX) {
        return td_error(TD_ERR_INVALID, "pipe: n_micro=%d micro-batches is "
                        "not in 1..%d", o->n_micro, PIPE_MICRO_MAX);
    }
    if ((long)S * R != n) {
        return td_error(TD_ERR_INVALID, "pipe: %d stages x %d replicas need "
                        "%ld ranks, but the world has %d%s", S, R, (long)S * R,
                        n, (long)S * R > n ? " (more stages than ranks)" : "");
    }
    if ((unsigned)o->schedule > TD_PIPE_ZB_H1) {
        return td_error(TD_ERR_INVALID, "pipe: schedule %d is not gpipe, 1f1b "
                        "or zb", (int)o->schedule);
    }
    if (o->forward == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: the forward function is NULL");
    }
    if (o->n_params < 0 || (o->n_params > 0 && o->params == NULL)) {
        return td_error(TD_ERR_INVALID, "pipe: n_params=%d with params %p",
                        o->n_params, (const void *)o->params);
    }
    for (int i = 0; i < o->n_params; i++) {
        td_tensor_t *t = o->params[i];
        if (t == NULL || !td_tensor_is_leaf(t) || !td_tensor_requires_grad(t) ||
            !td_tensor_is_contiguous(t)) {
            return td_error(TD_ERR_INVALID, "pipe: parameter %d of stage %d "
                            "is %s", i, rank % S, t == NULL ? "NULL" :
                            "not a contiguous leaf that requires grad");
        }
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "pipe: out of memory");
    }
    p->S = S;
    p->R = R;
    p->M = o->n_micro;
    p->rank = rank;
    p->stage = rank % S;
    p->replica = rank / S;
    p->sched = o->schedule;
    p->input_grad = o->input_grad != 0;
    p->theory = pipe_schedule_theory(p->sched, S, p->M);
    p->spin_s = pipe_spin_s();
    td_log_debug("pipe: stage %d (rank %d): a waiting stage drives the "
                 "transport for %g ms (P8; %d ranks on this host, %d cores "
                 "before placement)", p->stage, rank,
                 p->spin_s > 0 ? 1e3 * p->spin_s : 2.0,
                 td__runtime_local_world_size(), td__runtime_host_cores());
    p->forward = o->forward;
    p->arg = o->arg;
    p->n_params = o->n_params;
    p->params = calloc((size_t)(o->n_params + 1), sizeof(*p->params));
    p->mb = calloc((size_t)p->M, sizeof(*p->mb));
    p->n_ops = pipe_schedule_n_ops(p->sched, p->M);
    p->ops = calloc((size_t)p->n_ops, sizeof(*p->ops));
    p->wq = calloc((size_t)p->M, sizeof(*p->wq));
    p->trace_cap = p->n_ops + 4 * p->M;
    p->trace = calloc((size_t)p->trace_cap, sizeof(*p->trace));
    {
        int cap = pipe_schedule_cap(p->sched, S, p->stage, p->M);
        p->act_pool.cap = pool_need(p->sched, cap, p->M, 0);
        p->grad_pool.cap = pool_need(p->sched, cap, p->M, 1);
    }
    p->act_pool.poison = p->grad_pool.poison = pipe_env_flag(
        "TODIST_PIPE_POISON");
    p->act_pool.t = calloc((size_t)p->M, sizeof(td_tensor_t *));
    p->grad_pool.t = calloc((size_t)p->M, sizeof(td_tensor_t *));
    ranks = calloc((size_t)(S > R ? S : R), sizeof(int));
    if (p->params == NULL || p->mb == NULL || p->ops == NULL ||
        p->wq == NULL || p->trace == NULL || p->act_pool.t == NULL || p->grad_pool.t == NULL ||
        ranks == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "pipe: out of memory");
        goto err;
    }
    for (int i = 0; i < p->n_params; i++) {
        p->params[i] = td_tensor_retain(o->params[i]);
    }
    pipe_schedule_ops(p->sched, S, p->stage, p->M, p->ops);
    /* every rank makes every group, in one order (td_group_new) */
    for (int r = 0; r < R; r++) {
        td_group_t *g;
        for (int s = 0; s < S; s++) {
            ranks[s] = r * S + s;
        }
        st = td_group_new(ranks, S, &g);
        if (st != TD_OK) {
            goto err;
        }
        if (r == p->replica) {
            p->pg = g;
        } else {
            td_group_destroy(g);
        }
    }
    for (int s = 0; R > 1 && s < S; s++) {
        td_group_t *g;
        for (int r = 0; r < R; r++) {
            ranks[r] = r * S + s;
        }
        st = td_group_new(ranks, R, &g);
        if (st != TD_OK) {
            goto err;
        }
        if (s == p->stage) {
            p->dg = g;
        } else {
            td_group_destroy(g);
        }
    }
    free(ranks);
    *pipe_p = p;
    return TD_OK;
err:
    free(ranks);
    td_pipe_destroy(p);
    return st;
}

int
td_pipe_stage(const td_pipe_t *p)
{
    return p ? p->stage : -1;
}

int
td_pipe_replica(const td_pipe_t *p)
{
    return p ? p->replica : -1;
}

td_status_t
td_pipe_stats(const td_pipe_t *p, td_pipe_stats_t *stats)
{
    if (p == NULL || stats == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: stats of a NULL pipe");
    }
    *stats = p->stats;
    return TD_OK;
}

td_status_t
td_pipe_trace(const td_pipe_t *p, const td_pipe_event_t **events_p, int *n_p)
{
    if (p == NULL || events_p == NULL || n_p == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: trace of a NULL pipe, or "
                        "NULL results");
    }
    *events_p = p->trace;
    *n_p = p->n_trace;
    return TD_OK;
}

void
td_pipe_destroy(td_pipe_t *p)
{
    if (p == NULL) {
        return;
    }
    if (p->mb != NULL) {
        step_cleanup(p);
    }
    td_group_destroy(p->dg);
    td_group_destroy(p->pg);
    for (int i = 0; p->params != NULL && i < p->n_params; i++) {
        td_tensor_release(p->params[i]);
    }
    free(p->params);
    free(p->mb);
    free(p->ops);
    free(p->wq);
    free(p->trace);
    pool_free(&p->act_pool);
    pool_free(&p->grad_pool);
    free(p);
}
