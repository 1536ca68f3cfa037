/* allreduce.c: all_reduce's two algorithm families.
 *
 * rd (recursive doubling, latency-bound): log2(p) exchanges of the whole
 * vector with partner rank ^ mask; a group that is not a power of two
 * first folds its first 2*(n-p) ranks pairwise (odd ones keep the sum, even
 * ones sit out and get the result at the end), MPICH's way.
 *
 * ring (bandwidth-optimal): reduce-scatter then all-gather around the ring,
 * n - 1 steps each (ring.c: every chunk in segments, receives posted
 * first, sends paced where the link crosses hosts, R1 and R2): the
 * reduce-scatter reduces each segment as it arrives while later ones are
 * still moving, the all-gather receives straight into the caller's
 * tensor. Each rank sends and receives 2(n-1)/n of the data.
 *
 * Both are run by the thread running the group's operation (work.c).
 *
 * Two members on two hosts, a small body (T1..T5): rd's one exchange as
 * one UCX tagged message each way (transport.c U1..U6), the way Open MPI
 * sends it: no handler, no header, no matching of ours; the receive lands
 * in place. 0.4-0.6 us of an 8-9 us call across two emulated hosts.
 *  T1 Chosen from what both members know alike: the group has two
 *     members on two hosts (their host ids, asked once), the call is an
 *     all_reduce of at most COLL_PAIR_MAX bytes chosen as rd, staged or
 *     not. A tagged message is seen only by a tagged receive, so both run
 *     it or neither (the tag: group id, call number).
 *  T2 Each message carries its sender's call after the body (C5): a
 *     different call, count or length fails the group as a mismatch, on
 *     both members; a different collective (its messages are not tagged)
 *     is caught by the receiving member's match (begun as any call).
 *  T3 The wait ends on both completions, the group's failure (a member
 *     lost, a mismatch, a timeout told), the runtime's stop or the call's
 *     deadline. Any but the first cancels the receive and still waits for
 *     both completions (U3, U4) before it returns: UCX holds the buffers.
 *  T4 It drives like any wait (wait.c): the transport for 2 ms, then it
 *     sleeps until a completion wakes it (the progress thread delivers),
 *     driving briefly after each wake-up. It sends no probe (late.h K4):
 *     a peer in another call of the group waits in wait.c, which probes,
 *     or in this exchange, whose message shows its call (T2).
 *  T5 The post and the wait's first 2 ms are one hold of the token
 *     (transport.c U7), and the call reads no clock before it: its
 *     deadline (C6) is set at the first look at the clock after the post,
 *     when the exchange did not complete within that first wait or it
 *     fails (coll_op_begin_lean). A call's timeout then runs from
 *     up to 2 ms after it began.
 *  T6 A post refused for want of an endpoint (transport.c U2: none yet,
 *     or one still wiring up, L13) is posted again after driving for
 *     PAIR_SPIN_S, until it is taken or the call fails (T3): nothing
 *     wakes a wait when the endpoint is ready, so a wait to the call's
 *     deadline, as before, waited out the whole timeout and failed the
 *     call. It happens to a group's first call with a peer not talked to
 *     before where TODIST_COLL_SHM=0 (else that call first tries the
 *     segment, through the transport, and fails over to rd: its messages
 *     make the endpoint). Counted (coll_all_reduce_pair_unwired_count;
 *     tests/hosts/test_hosts_pair.sh cold: the peer stopped before it
 *     could answer the wire-up). */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/allreduce.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/desc.h"
#include "runtime/coll/late.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/reduce.h"
#include "runtime/coll/ring.h"
#include "runtime/coll/tx.h"
#include "runtime/coll/wire.h"
#include "base/clock.h"
#include "runtime/runtime.h"
#include "ucx_transport/transport.h"

#define SMALL_STACK 256

/* Group rank of the rd partner NEWDST (in folded numbering). */
static int
rd_real(int newdst, int rem)
{
    return newdst < rem ? newdst * 2 + 1 : newdst + rem;
}

td_status_t
coll_all_reduce_rd(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, p = 1, rem, newrank;
    size_t bytes = count * op->esize;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    _Alignas(16) unsigned char small[SMALL_STACK];
    void *tmp = bytes <= sizeof(small) ? small : coll_scratch(g, bytes);
    td_status_t st;

    if (tmp == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    while (p * 2 <= n) {
        p *= 2;
    }
    rem = n - p;
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            st = coll_sendrecv(op, me + 1, buf, bytes, -1, NULL, 0, 1u << 20);
            newrank = -1;
        } else {
            st = coll_sendrecv(op, -1, NULL, 0, me - 1, tmp, bytes, 1u << 20);
            coll_reduce_into(buf, tmp, count, dt, rop);
            newrank = me / 2;
        }
        if (st != TD_OK) {
            return st;
        }
    } else {
        newrank = me - rem;
    }
    if (newrank >= 0) {
        for (int mask = 1, step = 0; mask < p; mask <<= 1, step++) {
            int dst = rd_real(newrank ^ mask, rem);

            st = coll_sendrecv(op, dst, buf, bytes, dst, tmp, bytes,
                               (uint32_t)step);
            if (st != TD_OK) {
                return st;
            }
            coll_reduce_into(buf, tmp, count, dt, rop);
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(buf, count, dt, n);
        }
    }
    if (me < 2 * rem) {
        if (me % 2 == 1) {
            st = coll_sendrecv(op, me - 1, buf, bytes, -1, NULL, 0,
                               2u << 20);
        } else {
            st = coll_sendrecv(op, -1, NULL, 0, me + 1, buf, bytes, 2u << 20);
        }
        if (st != TD_OK) {
            return st;
        }
    }
    return TD_OK;
}

static atomic_ulong pair_calls;        /* coll_all_reduce_pair_count */

unsigned long
coll_all_reduce_pair_count(void)
{
    return atomic_load_explicit(&pair_calls, memory_order_relaxed);
}

td_status_t
coll_all_reduce_pair(coll_op_t *op, void *buf, size_t count,
                     void (*announce)(td_group_t *g, uint32_t seq,
                                      const coll_desc_t *d))
{
    td_group_t *g = op->g;
    int peer = 1 - g->me;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    _Alignas(16) unsigned char tmp[COLL_PAIR_MAX];
    coll_req_t rr, sr;
    coll_req_t *reqs[2] = { &rr, &sr };
    size_t bytes = count * td_dtype_size(dt);
    td_status_t st;

    /* rd's one exchange at n = 2 (step 0, tag 0: the same messages) */
    st = coll_op_begin_irecv(op, announce, &rr, peer, 0, tmp, bytes);
    if (st != TD_OK) {
        return st;
    }
    st = coll_isend(op, &sr, peer, 0, buf, bytes);
    if (st != TD_OK) {
        coll_step_wait(op, reqs, 1);
        return st;
    }
    st = coll_step_wait(op, reqs, 2);
    if (st != TD_OK) {
        return st;
    }
    coll_reduce_into(buf, tmp, count, dt, rop);
    if (rop == TD_REDUCE_AVG) {
        coll_divide(buf, count, dt, 2);
    }
    /* (one thread a group: a lost increment is only a test's count) */
    atomic_store_explicit(&pair_calls, atomic_load_explicit(&pair_calls,
                          memory_order_relaxed) + 1, memory_order_relaxed);
    return TD_OK;
}

/* ---- two members on two hosts: tagged (T1..T5) --------------------------- */

#define PAIR_TRAILER COLL_WIRE_DESC   /* the sender's call (T2) */
#define PAIR_SPIN_S  0.002         /* T4, as wait.c */
#define PAIR_AFTER_S 50e-6

static atomic_ulong pair_tag_calls;   /* coll_all_reduce_pair_tag_count */
static atomic_ulong pair_unwired;     /* T6: posts refused, no endpoint */

unsigned long
coll_all_reduce_pair_tag_count(void)
{
    return atomic_load_explicit(&pair_tag_calls, memory_order_relaxed);
}

unsigned long
coll_all_reduce_pair_unwired_count(void)
{
    return atomic_load_explicit(&pair_unwired, memory_order_relaxed);
}

int
coll_pair_tagged(td_group_t *g)
{
    if (g->pair_tag == 0) {
        uint64_t a = td__runtime_host_id(g->ranks[0]);
        uint64_t b = td__runtime_host_id(g->ranks[1]);

        /* (an unknown host: its address could not be fetched, and no
         * exchange with it can work either way) */
        g->pair_tag = g->n == 2 && a != 0 && b != 0 && a != b ? 1 : -1;
    }
    return g->pair_tag > 0;
}

typedef struct {
    td_transport_pair_t x;
    td_group_t         *g;
} pair_wait_t;

static int
pair_done(const pair_wait_t *w)
{
    return __atomic_load_n(&w->x.done, __ATOMIC_ACQUIRE) ==
           (TD_PAIR_RECV | TD_PAIR_SEND);
}

/* T3: over, or something to act on */
static int
pair_check(const void *arg)
{
    const pair_wait_t *w = arg;

    return pair_done(w) ||
           __atomic_load_n(&w->g->broken, __ATOMIC_RELAXED) != TD_OK ||
           coll_stopped();
}

static int
pair_pred(void *arg)
{
    return pair_check(arg);
}

static int
pair_landed(void *arg)
{
    return pair_done(arg);
}

/* Drive or sleep until CHECK holds or DEADLINE (td_now_s; 0: none)
 * passes (T4). */
static void
pair_drive(pair_wait_t *w, int (*check)(void *), double deadline)
{
    td_transport_t *tp = coll_transport();
    td_status_t st = td__transport_drive(tp, check, w, PAIR_SPIN_S);

    while (st != TD_OK && !check(w) &&
           (deadline <= 0 || td_now_s() <= deadline)) {
        coll_sleep(pair_check, w, 0, coll_mbox_poll);
        st = td__transport_drive(tp, check, w, PAIR_AFTER_S);
    }
}

/* T5: the deadline from the first look at the clock after the post */
static void
pair_deadline(coll_op_t *op)
{
    if (op->deadline == 0) {
        op->deadline = td_now_s() + coll_timeout();
    }
}

/* Why the call stops (T3), into MSG; TD_OK: it does not. */
static td_status_t
pair_verdict(coll_op_t *op, int peer, char *msg, size_t len)
{
    td_group_t *g = op->g;
    td_status_t st = TD_OK;
    char who[128];

    if (coll_stopped()) {
        snprintf(msg, len, "coll: the runtime shut down with this "
                 "operation pending");
        return TD_ERR_CANCELED;
    }
    pair_deadline(op);
    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) == TD_OK &&
        td_now_s() > op->deadline) {
        if (coll_late_ranks(g, op->seq, who, sizeof(who)) == 0) {
            snprintf(who, sizeof(who), "%d", peer);
        }
        snprintf(msg, len, "coll: all_reduce timed out after %.1f s on rank "
                 "%d waiting for rank(s) %s", coll_timeout(),
                 coll_world_rank(), who);
        coll_group_fail(g, TD_ERR_TIMEOUT, 1, op->seq, msg);     /* C6 */
    }
    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
        coll_lock();
        st = g->broken;                     /* the group's first failure */
        snprintf(msg, len, "%s", g->broken_msg);
        coll_unlock();
    }
    return st;
}

td_status_t
coll_all_reduce_pair_tag_run(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    int peer = g->ranks[1 - g->me];
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    size_t bytes = count * td_dtype_size(dt);
    _Alignas(16) uint8_t out[COLL_PAIR_MAX + PAIR_TRAILER];
    _Alignas(16) uint8_t in[COLL_PAIR_MAX + PAIR_TRAILER];
    uint64_t tag = (uint64_t)g->id << 32 | op->seq;             /* T1 */
    pair_wait_t w;
    coll_desc_t theirs;
    char msg[COLL_ERR_MAX];
    td_status_t st;

    memcpy(out, buf, bytes);
    coll_wire_desc_put(out + bytes, &op->desc);
    w.g = g;
    w.x.notify = coll_wake;
    w.x.done = 0;
    for (;;) {
        /* posted, then a first wait in the same hold of the token (U7) */
        st = td__transport_pair_post(coll_transport(), peer, tag, out,
                                     bytes + PAIR_TRAILER, in, sizeof(in),
                                     &w.x, pair_pred, &w, PAIR_SPIN_S);
        if (st != TD_ERR_NOT_FOUND) {
            break;
        }
        /* no endpoint yet (U2): T6 */
        atomic_fetch_add_explicit(&pair_unwired, 1, memory_order_relaxed);
        if ((st = pair_verdict(op, peer, msg, sizeof(msg))) != TD_OK) {
            return td_error(st, "%s", msg);
        }
        pair_drive(&w, pair_pred, td_now_s() + PAIR_SPIN_S);
    }
    if (st != TD_OK) {
        /* the peer failed before: the group's failure if it has one */
        td_status_t gs = pair_verdict(op, peer, msg, sizeof(msg));

        return gs != TD_OK ? td_error(gs, "%s", msg) : st;
    }
    if (!pair_done(&w)) {
        pair_deadline(op);                                      /* T5 */
        (void)coll_op_check_queued(op);  /* step.h C18: a mismatch fails
                                          * the group, seen below */
    }
    while (!pair_done(&w)) {
        pair_drive(&w, pair_pred, op->deadline);
        if (!pair_done(&w) &&
            (st = pair_verdict(op, peer, msg, sizeof(msg))) != TD_OK) {
            td__transport_pair_cancel(coll_transport(), &w.x);  /* T3 */
            while (!pair_done(&w)) {
                pair_drive(&w, pair_landed, 0);
            }
            return td_error(st, "%s", msg);
        }
    }
    if (w.x.rstatus != TD_OK || w.x.sstatus != TD_OK) {
        td_status_t xs = w.x.rstatus != TD_OK ? w.x.rstatus : w.x.sstatus;

        if ((st = pair_verdict(op, peer, msg, sizeof(msg))) != TD_OK) {
            return td_error(st, "%s", msg);
        }
        snprintf(msg, sizeof(msg), "coll: all_reduce: the exchange with rank "
                 "%d failed: %s", peer, xs == TD_ERR_PROTOCOL
                 ? "its message was longer than any all_reduce's of this size"
                 : td_strerror(xs));
        coll_group_fail(g, xs, 1, op->seq, msg);
        return td_error(xs, "%s", msg);
    }
    if (w.x.rlen < PAIR_TRAILER) {
        snprintf(msg, sizeof(msg), "coll: a malformed all_reduce message "
                 "from rank %d (%zu bytes)", peer, w.x.rlen);
        coll_group_fail(g, TD_ERR_PROTOCOL, 1, op->seq, msg);
        return td_error(TD_ERR_PROTOCOL, "%s", msg);
    }
    coll_wire_desc_get(in + w.x.rlen - PAIR_TRAILER, &theirs);      /* T2 */
    if (w.x.rlen != bytes + PAIR_TRAILER ||
        !coll_desc_equal(&theirs, &op->desc)) {
        coll_mismatch_text(msg, sizeof(msg), g->id, op->seq, peer,
                           coll_world_rank(), &theirs, &op->desc);
        coll_group_fail(g, TD_ERR_INVALID, 1, op->seq, msg);
        return td_error(TD_ERR_INVALID, "%s", msg);
    }
    coll_reduce_into(buf, in, count, dt, rop);
    if (rop == TD_REDUCE_AVG) {
        coll_divide(buf, count, dt, 2);
    }
    atomic_store_explicit(&pair_tag_calls, atomic_load_explicit(
                          &pair_tag_calls, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return TD_OK;
}

td_status_t
coll_all_reduce_pair_tag(coll_op_t *op, void *buf, size_t count,
                         void (*announce)(td_group_t *g, uint32_t seq,
                                          const coll_desc_t *d))
{
    td_status_t st = coll_op_begin_lean(op, announce);  /* T5; step.h C18 */

    if (st != TD_OK) {
        return st;
    }
    st = coll_all_reduce_pair_tag_run(op, buf, count);
    coll_op_end(op);
    return st;
}

/* Chunk C of COUNT elements cut in N: [*start, *start + *len). */
static void
chunk(size_t count, int n, int c, size_t *start, size_t *len)
{
    size_t a = count * (size_t)c / (size_t)n;
    size_t b = count * (size_t)(c + 1) / (size_t)n;

    *start = a;
    *len = b - a;
}

td_status_t
coll_all_reduce_ring(coll_op_t *op, void *buf, size_t count)
{
    int n = op->g->n, me = op->g->me;
    size_t es = op->esize, max_chunk = 0;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    char *b = buf;
    coll_ring_t r;
    td_status_t st;

    if (n == 1) {
        return TD_OK;
    }
    for (int c = 0; c < n; c++) {
        size_t s0, l;

        chunk(count, n, c, &s0, &l);
        max_chunk = l > max_chunk ? l : max_chunk;
    }
    st = coll_ring_init(&r, op, max_chunk, max_chunk);
    for (int phase = 0; phase < 2 && st == TD_OK; phase++) {
        for (int s = 0; s < n - 1 && st == TD_OK; s++) {
            /* reduce-scatter: send chunk me-s, get me-s-1 and reduce it;
             * all-gather: send me+1-s (complete), get me-s in place. */
            int sc = phase == 0 ? (me - s + 2 * n) % n
                                : (me + 1 - s + 2 * n) % n;
            int rc = phase == 0 ? (me - s - 1 + 2 * n) % n
                                : (me - s + 2 * n) % n;
            size_t s0, sl, r0, rl;

            chunk(count, n, sc, &s0, &sl);
            chunk(count, n, rc, &r0, &rl);
            st = coll_ring_step(&r, (uint32_t)(phase << 30 | s << 16),
                                b + s0 * es, sl, b + r0 * es, rl, phase == 0,
                                NULL);
        }
        if (phase == 0 && st == TD_OK &&
            (td_reduce_op_t)op->desc.op == TD_REDUCE_AVG) {
            size_t s0, l;

            chunk(count, n, (me + 1) % n, &s0, &l);
            coll_divide(b + s0 * es, l, dt, n);
        }
    }
    coll_ring_free(&r);                 /* (also after a failed init) */
    return st;
}
