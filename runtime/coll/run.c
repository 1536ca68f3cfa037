/* run.c: one checked collective on this thread (run.h): its route, the
 * choice of algorithm (the table in todist/coll.h) and the call under its
 * sequence number and description (step.h, C5).
 *
 *  A1 In a group of more than two members, the host map the choice reads
 *     (hier.c H2) is group rank 0's: before the group's first call
 *     begins, whatever its kind and whatever a member forces, the members
 *     run one hidden call, a broadcast from group rank 0 of its members'
 *     host ids (8 bytes each, binomial through the transport; call #0 of
 *     the group, so the application's calls are #1 on), and all build the
 *     map from those ids. It is kept until the group is re-formed
 *     (group.c G2), whose next call agrees again. Why rank 0's map
 *     rather than each member's own: one store lookup that failed (a
 *     starved store thread) made a member count that peer as a host of
 *     its own and pick another algorithm than its peers, and the call
 *     failed as a mismatch. Why not a refusal instead: to fail the same
 *     way on every member the members must tell each other anyway, and a
 *     host counted apart is still correct (nothing is shared with it),
 *     only slower; rank 0 warns naming the rank. A group of two agrees
 *     the same way, but only before its first call that may cut a link
 *     by host (map_needed: a broadcast, tree.c T1; a ring's kind over
 *     one far segment, ring.c R2; a forced "hier"), where the hidden call
 *     takes that call's number: its members' own lookups, one of which
 *     failed, once made the two ends of a link cut it differently, and
 *     every large call failed ("rank 1 sent 64512 bytes ..., rank 0
 *     expects 1048572"). Its small calls (8 B all_reduce: allreduce.c
 *     T1) pay no message for it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/run.h"
#include "runtime/coll/allreduce.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/gather.h"
#include "runtime/coll/hier.h"
#include "runtime/coll/nccl.h"
#include "runtime/coll/shm.h"
#include "runtime/coll/tree.h"
#include "runtime/runtime.h"
#include "base/byteorder.h"
#include "base/log.h"
#include "ucx_transport/staging.h"

#define SMALL_BYTES (64u * 1024u)
#define SHM_MAX     (4u << 20)    /* through a segment up to here (choose) */

/* ---- the choice of algorithm ------------------------------------------------ */

/* Through the transport: what auto picks without a shared segment. */
static coll_algo_t
choose_transport(coll_kind_t k, size_t bytes, size_t count, int n)
{
    switch (k) {
    case COLL_ALL_REDUCE:
        return bytes <= SMALL_BYTES || count < (size_t)n ? ALGO_RD
                                                         : ALGO_RING;
    case COLL_BROADCAST:
    case COLL_REDUCE:
        return ALGO_BINOMIAL;
    case COLL_ALL_GATHER:
        return bytes * (size_t)n <= SMALL_BYTES ? ALGO_DIRECT : ALGO_RING;
    case COLL_REDUCE_SCATTER:
        return bytes * (size_t)n <= SMALL_BYTES ? ALGO_DIRECT : ALGO_RING;
    case COLL_GATHER:
    case COLL_SCATTER:
        return ALGO_LINEAR;
    case COLL_ALL_TO_ALL:
        return ALGO_PAIRWISE;
    case COLL_BARRIER:
    default:
        return ALGO_DISSEMINATION;
    }
}

/* The algorithm of a call: the same on every member given the same call
 * (the segment's state is agreed, shm.c S1; the host map, A1). */
static coll_algo_t
choose(td_group_t *g, coll_kind_t k, size_t bytes, size_t count)
{
    coll_algo_t f = coll_algo_forced(k);

    if (f != ALGO_AUTO) {
        return f;
    }
    if (g->n > 2 && g->shm_state != SHM_ON &&
        coll_hier_pick(coll_hier_map(g), k)) {
        return ALGO_HIER;                       /* hier.c H1 */
    }
    if (coll_shm_eligible(g) &&
        (k == COLL_BARRIER ||
         ((k == COLL_ALL_REDUCE || k == COLL_BROADCAST) && bytes <= SHM_MAX) ||
         ((k == COLL_ALL_GATHER || k == COLL_REDUCE_SCATTER) &&
          bytes * (size_t)g->n <= SHM_MAX))) {
        return ALGO_SHM;
    }
    return choose_transport(k, bytes, count, g->n);
}

/* ---- the host map (A1) ---------------------------------------------------- */

/* Whether call K of BYTES a member on G needs G's host map, not yet
 * made: every call of a group of more than two members (auto may pick
 * "hier", H1; whatever a member forces, so that all agree when to make
 * it); in a group of two, a forced "hier", a broadcast (tree.c T1 tags a
 * link by whether it crosses hosts) and a call of the ring's kinds over
 * one far segment (ring.c R2 cuts such a link finer): what a member
 * forces or the segment decides is not known here, so the kind and the
 * size decide, alike on both (A1). */
static int
map_needed(const td_group_t *g, coll_kind_t k, size_t bytes)
{
    if (g->hosts != NULL || g->n < 2) {
        return 0;
    }
    if (g->n > 2 || coll_algo_forced(k) == ALGO_HIER ||
        k == COLL_BROADCAST) {
        return 1;
    }
    return (k == COLL_ALL_REDUCE || k == COLL_ALL_GATHER ||
            k == COLL_REDUCE_SCATTER) && bytes > TD_TRANSPORT_FAR_SEG_BYTES;
}

/* Whether group rank OTHER runs on another host than this member: from
 * G's map where it has one (agreed: A1), else from this member's own
 * lookups, which only a call that cuts no link by host reads (a group of
 * two, map_needed). */
static int
crosses(const td_group_t *g, int other)
{
    if (g->hosts != NULL) {
        return g->hosts->host_of[other] != g->hosts->host_of[g->me];
    }
    return td__runtime_host_id(g->ranks[other]) !=
           td__runtime_host_id(g->ranks[g->me]);
}

/* Which of this member's ring links cross hosts (step.h ring_far). */
static int
ring_far(const td_group_t *g)
{
    int right = (g->me + 1) % g->n, left = (g->me - 1 + g->n) % g->n;

    return (crosses(g, right) ? COLL_RING_FAR_TX : 0) |
           (crosses(g, left) ? COLL_RING_FAR_RX : 0);
}

/* The same for a binomial tree rooted at ROOT: bit b for this member's
 * link to virtual rank vr ^ 2^b (its parent where that bit is vr's
 * lowest, else a child where that rank exists; tree.c T1). */
static uint64_t
tree_far(const td_group_t *g, int root)
{
    int n = g->n, vr = (g->me - root + n) % n;
    uint64_t far = 0;

    for (int b = 0; b < 31 && (1 << b) < n; b++) {
        int peer = vr ^ (1 << b);

        if (peer < n && crosses(g, (peer + root) % n)) {
            far |= (uint64_t)1 << b;
        }
    }
    return far;
}

/* Agree on G's host map (A1): group rank 0 looks its members' host ids
 * up and broadcasts them; every member builds g->hosts from them. */
static td_status_t
map_agree(td_group_t *g)
{
    size_t len = 8 * (size_t)g->n;
    uint8_t *buf = calloc(len, 1);
    uint64_t *ids = calloc((size_t)g->n, sizeof(*ids));
    coll_op_t op;
    td_status_t st;

    if (buf == NULL || ids == NULL) {
        free(buf);
        free(ids);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory for the host "
                        "map of %d members", g->n);
    }
    for (int i = 0; g->me == 0 && i < g->n; i++) {
        uint64_t id = td__runtime_host_id(g->ranks[i]);

        if (id == 0) {
            td_log_warn("coll: group %u: host of rank %d unknown, counted as "
                        "a host of its own by every member: %s", g->id,
                        g->ranks[i], td_last_error());
        }
        td_put_be64(buf + 8 * (size_t)i, id);
    }
    memset(&op, 0, sizeof(op));
    op.g = g;
    op.desc.kind = COLL_BROADCAST;
    op.desc.dtype = TD_UINT8;
    op.desc.algo = ALGO_BINOMIAL;
    op.desc.root = 0;
    op.desc.count = len;
    st = coll_op_begin(&op, coll_shm_announce);
    if (st == TD_OK) {
        op.algo = ALGO_BINOMIAL;
        st = coll_broadcast_run(&op, buf, len);
        coll_op_end(&op);
    }
    for (int i = 0; st == TD_OK && i < g->n; i++) {
        ids[i] = td_get_be64(buf + 8 * (size_t)i);
    }
    if (st == TD_OK) {
        st = coll_hostmap_build(ids, g->n, &g->hosts);
    }
    if (st == TD_OK && g->hosts->nhosts > 1) {
        td_log_debug("coll: group %u (%d members) spans %d hosts", g->id,
                     g->n, g->hosts->nhosts);
    }
    free(ids);
    free(buf);
    return st;
}

/* ---- running one ---------------------------------------------------------------- */

static void *
data(td_tensor_t *t)
{
    return t != NULL ? td_tensor_data(t) : NULL;
}

/* OP's description of the call A on G (everything but the algorithm);
 * the per-rank element count in *COUNT. */
static void
describe(coll_op_t *op, td_group_t *g, const coll_args_t *a, size_t *count)
{
    td_tensor_t *per = NULL;      /* the per-rank tensor the count is of */

    *count = 0;
    switch (a->kind) {
    case COLL_ALL_REDUCE:
    case COLL_BROADCAST:
    case COLL_REDUCE:
    case COLL_SCATTER:
    case COLL_REDUCE_SCATTER:
        per = a->t;
        break;
    case COLL_ALL_GATHER:
    case COLL_GATHER:
    case COLL_ALL_TO_ALL:
        per = a->in;
        break;
    default:
        break;
    }
    if (per != NULL) {
        *count = (size_t)td_tensor_numel(per);
        if (a->kind == COLL_ALL_TO_ALL) {
            *count /= (size_t)g->n;
        }
        op->desc.dtype = (uint8_t)td_tensor_dtype(per);
    }
    op->desc.kind = (uint8_t)a->kind;
    op->desc.op = (uint8_t)a->op;
    op->desc.root = a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE ||
                    a->kind == COLL_GATHER || a->kind == COLL_SCATTER
                    ? a->root : -1;
    op->desc.count = *count;
}

/* ---- the staged route: host copies of the device tensors (nccl.h N1) ---- */

/* A's device tensors and their host copies (the staging module's). */
typedef struct {
    td_tensor_t      *t, *in;         /* the device tensors staged (or NULL) */
    td_staging_host_t t_host, in_host;
} stage_t;

static int
on_device(const td_tensor_t *t)
{
    return t != NULL && td_tensor_device(t).type != TD_DEVICE_CPU;
}

/* Whether A reads T's values (in place collectives, and every IN). */
static int
t_is_input(const coll_args_t *a)
{
    return a->kind == COLL_ALL_REDUCE || a->kind == COLL_BROADCAST ||
           a->kind == COLL_REDUCE;
}

static void
stage_free(stage_t *s)
{
    td__staging_host_free(&s->t_host);
    td__staging_host_free(&s->in_host);
    memset(s, 0, sizeof(*s));
}

/* stage_free where ROUTE staged anything (the host route leaves S's
 * copies unset). */
static void
unstage(stage_t *s, coll_route_t route)
{
    if (route == COLL_ROUTE_STAGED) {
        stage_free(s);
    }
}

static td_status_t
stage_in(const coll_args_t *a, stage_t *s)
{
    td_status_t status = TD_OK;

    memset(s, 0, sizeof(*s));
    if (on_device(a->t)) {
        status = td__staging_host_in(td_tensor_device(a->t),
                                     td_tensor_data(a->t),
                                     td_tensor_nbytes(a->t), t_is_input(a),
                                     &s->t_host);
        if (status == TD_OK) {
            s->t = a->t;
        }
    }
    if (status == TD_OK && on_device(a->in) && a->in != a->t) {
        status = td__staging_host_in(td_tensor_device(a->in),
                                     td_tensor_data(a->in),
                                     td_tensor_nbytes(a->in), 1, &s->in_host);
        if (status == TD_OK) {
            s->in = a->in;
        }
    }
    if (status != TD_OK) {
        stage_free(s);
    }
    return status;
}

/* Where the host algorithm reads/writes T: its host copy or its data. */
static void *
stage_ptr(const stage_t *s, td_tensor_t *t)
{
    if (t == NULL) {
        return NULL;
    }
    if (t == s->t) {
        return s->t_host.host;
    }
    if (t == s->in) {
        return s->in_host.host;
    }
    return td_tensor_data(t);
}

static td_status_t
stage_out(const stage_t *s)
{
    return s->t != NULL ? td__staging_host_out(&s->t_host) : TD_OK;
}

/* all_gather's list form: into one buffer, then copied out to each. */
static td_status_t
all_gather_list(coll_op_t *op, const coll_args_t *a, void *in, size_t bytes)
{
    int n = op->g->n;
    void *list_buf = malloc((size_t)n * bytes + 1);
    td_status_t st;

    if (list_buf == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: all_gather: out of memory "
                        "for %zu bytes", (size_t)n * bytes);
    }
    st = op->algo == ALGO_SHM ? coll_all_gather_shm(op, list_buf, in, bytes)
       : op->algo == ALGO_HIER ? coll_all_gather_hier(op, list_buf, in, bytes)
       : coll_all_gather_run(op, list_buf, in, bytes);
    for (int i = 0; st == TD_OK && i < n; i++) {
        const char *from = (char *)list_buf + (size_t)i * bytes;

        if (on_device(a->outs[i])) {   /* device outs are copied in */
            st = td__staging_copy_in(td_tensor_device(a->outs[i]),
                                     data(a->outs[i]), from, bytes);
        } else if (bytes > 0) {
            memcpy(data(a->outs[i]), from, bytes);
        }
        td_tensor_bump_version(a->outs[i]);
    }
    free(list_buf);
    return st;
}

/* Run A's algorithm (op->algo) on host buffers (SG's copies or the
 * tensors' data). */
static td_status_t
dispatch(coll_op_t *op, const coll_args_t *a, const stage_t *sg,
         size_t count, size_t bytes)
{
    int shm = op->algo == ALGO_SHM;
    void *t = stage_ptr(sg, a->t), *in = stage_ptr(sg, a->in);

    if (op->algo == ALGO_RING) {
        op->ring_far = ring_far(op->g);     /* ring.c R2: how links cut */
    } else if (op->algo == ALGO_BINOMIAL && a->kind == COLL_BROADCAST) {
        op->tree_far = tree_far(op->g, op->desc.root);      /* tree.c T1 */
    }

    if (op->algo == ALGO_HIER && a->outs == NULL) {     /* (list: below) */
        switch (a->kind) {
        case COLL_ALL_REDUCE:
            return op->g->n == 1 ? TD_OK : coll_all_reduce_hier(op, t, count);
        case COLL_BROADCAST:
            return coll_broadcast_hier(op, t, bytes);
        case COLL_ALL_GATHER:
            return coll_all_gather_hier(op, t, in, bytes);
        case COLL_REDUCE_SCATTER:
            return coll_reduce_scatter_hier(op, t, in, count);
        case COLL_BARRIER:
            return coll_barrier_hier(op);
        default:
            break;                 /* not one of its kinds (desc.c) */
        }
    }
    switch (a->kind) {
    case COLL_ALL_REDUCE:
        if (op->g->n == 1) {
            return TD_OK;          /* AVG of one is itself */
        }
        return shm ? coll_all_reduce_shm(op, t, count)
               : op->algo == ALGO_RING ? coll_all_reduce_ring(op, t, count)
               : op->g->n == 2 && bytes <= COLL_PAIR_MAX &&
                 coll_pair_tagged(op->g)              /* allreduce.c T1 */
               ? coll_all_reduce_pair_tag_run(op, t, count)
               : coll_all_reduce_rd(op, t, count);
    case COLL_BROADCAST:
        return shm ? coll_broadcast_shm(op, t, bytes)
                   : coll_broadcast_run(op, t, bytes);
    case COLL_REDUCE:
        return coll_reduce_run(op, t, count);
    case COLL_ALL_GATHER:
        if (a->outs != NULL) {
            return all_gather_list(op, a, in, bytes);
        }
        return shm ? coll_all_gather_shm(op, t, in, bytes)
                   : coll_all_gather_run(op, t, in, bytes);
    case COLL_GATHER:
        return coll_gather_run(op, t, in, bytes);
    case COLL_SCATTER:
        return coll_scatter_run(op, t, in, bytes);
    case COLL_REDUCE_SCATTER:
        return shm ? coll_reduce_scatter_shm(op, t, in, count)
                   : coll_reduce_scatter_run(op, t, in, count);
    case COLL_ALL_TO_ALL:
        return coll_all_to_all_run(op, t, in, bytes);
    case COLL_BARRIER:
        return shm ? coll_barrier_shm(op) : coll_barrier_run(op);
    default:
        return td_error(TD_ERR_INVALID, "coll: unknown collective %d",
                        (int)a->kind);
    }
}

td_status_t
coll_run(td_group_t *g, const coll_args_t *a)
{
    coll_op_t op;
    size_t count, bytes;
    stage_t sg;
    coll_algo_t algo;
    coll_route_t route = coll_device_route(g, a);
    td_status_t st;

    if (route == COLL_ROUTE_NCCL) {
        st = coll_nccl_run(g, a);
        if (st == TD_OK && a->t != NULL) {
            td_tensor_bump_version(a->t);
        }
        return st;
    }
    /* device tensors not for NCCL: through host copies (nccl.h N1); host
     * tensors: none (stage_ptr reads sg.t and sg.in only) */
    if (route == COLL_ROUTE_STAGED) {
        memset(&sg, 0, sizeof(sg));
        if ((st = stage_in(a, &sg)) != TD_OK) {
            return st;
        }
    } else {
        sg.t = sg.in = NULL;
    }
    memset(&op, 0, sizeof(op));
    op.g = g;
    describe(&op, g, a, &count);
    bytes = count * td_dtype_size((td_dtype_t)op.desc.dtype);
    if (map_needed(g, a->kind, bytes) && (st = map_agree(g)) != TD_OK) {
        unstage(&sg, route);
        return st;
    }
    op.desc.algo = (uint8_t)choose(g, a->kind, bytes, count);
    if (op.desc.algo == ALGO_RD && a->kind == COLL_ALL_REDUCE &&
        g->n == 2 && route == COLL_ROUTE_HOST && bytes <= COLL_PAIR_MAX) {
        /* two members, a small body: begun with its receive posted (step.h
         * C16), the same messages as rd */
        op.algo = ALGO_RD;
        st = coll_pair_tagged(g)                      /* allreduce.c T1 */
             ? coll_all_reduce_pair_tag(&op, data(a->t), count,
                                        coll_shm_announce)
             : coll_all_reduce_pair(&op, data(a->t), count,
                                    coll_shm_announce);
        coll_op_end(&op);              /* (a begin that failed left it so) */
        if (st == TD_OK) {
            td_tensor_bump_version(a->t);
        }
        return st;
    }
    st = coll_op_begin(&op, coll_shm_announce);
    if (st != TD_OK) {
        unstage(&sg, route);
        return st;
    }
    algo = (coll_algo_t)op.desc.algo;
    if (algo == ALGO_SHM) {
        /* The first shm call of G maps the segment on every member or on
         * none; without it (or alone) the call runs what auto would have
         * (S1). */
        int usable = g->shm_state == SHM_ON;     /* (the common case) */

        st = g->n > 1 && !usable ? coll_shm_attach(&op, &usable) : TD_OK;
        if (st != TD_OK) {
            coll_op_end(&op);
            unstage(&sg, route);
            return st;
        }
        if (!usable) {
            algo = choose_transport(a->kind, bytes, count, g->n);
        }
    }
    op.algo = algo;
    st = dispatch(&op, a, &sg, count, bytes);
    coll_op_end(&op);
    if (st == TD_OK) {
        st = stage_out(&sg);        /* N1: only after success */
    }
    unstage(&sg, route);
    if (st == TD_OK && a->t != NULL) {
        td_tensor_bump_version(a->t);
    }
    return st;
}
