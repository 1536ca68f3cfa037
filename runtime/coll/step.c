/* step.c: an operation's life and its steps (step.h, C8). */
#include "config.h"

#include <stdlib.h>
#include <sys/mman.h>

#include "runtime/coll/step.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/recv.h"
#include "runtime/coll/tx.h"
#include "runtime/coll/wait.h"
#include "runtime/coll/wire.h"
#include "base/clock.h"

/* R as a receive of step TAG of OP from group rank SRC into BUF. */
static void
recv_fill(coll_op_t *op, coll_req_t *r, int src, uint32_t tag, void *buf,
          size_t nbytes)
{
    r->type = REQ_RECV_COLL;
    r->on_done = NULL;
    r->spin_s = 0;              /* (read by the wait) */
    r->cma_dst = NULL;          /* set by the caller after posting, if */
    r->cma_landed = 0;
    r->red_dst = NULL;
    r->red_with = NULL;
    r->red_done = 0;
    r->g = op->g;
    r->group_id = op->g->id;
    r->peer = op->g->ranks[src];
    r->tag = tag;
    r->seq = op->seq;
    r->buf = buf;
    r->nbytes = nbytes;
    r->desc = &op->desc;
}

td_status_t
coll_irecv(coll_op_t *op, coll_req_t *r, int src, uint32_t tag, void *buf,
           size_t nbytes)
{
    recv_fill(op, r, src, tag, buf, nbytes);
    return coll_post_recv(r);
}

td_status_t
coll_irecv_reduce(coll_op_t *op, coll_req_t *r, int src, uint32_t tag,
                  void *buf, size_t nbytes, void *dst, const void *with)
{
    recv_fill(op, r, src, tag, buf, nbytes);
    r->red_dst = dst;                   /* before it is posted: the
                                         * handler may run at once */
    r->red_with = with;
    return coll_post_recv(r);
}

td_status_t
coll_isend(coll_op_t *op, coll_req_t *r, int dst, uint32_t tag,
           const void *buf, size_t nbytes)
{
    int wdst = op->g->ranks[dst];

    r->type = REQ_SEND_COLL;
    r->on_done = NULL;
    r->spin_s = 0;              /* (read by the wait) */
    r->g = op->g;
    r->group_id = op->g->id;
    r->tag = tag;
    r->seq = op->seq;
    r->buf = (void *)buf;
    r->nbytes = nbytes;
    r->hdr_len = coll_wire_coll(r->hdr, op->g->id, op->g->digest, op->seq,
                                tag, nbytes, &op->desc);
    return coll_post_send_offer(r, wdst);
}

td_status_t
coll_step_wait(coll_op_t *op, coll_req_t **reqs, int n)
{
    return coll_wait(op->g, reqs, n, op->deadline);
}

td_status_t
coll_sendrecv(coll_op_t *op, int dst, const void *sbuf, size_t slen, int src,
              void *rbuf, size_t rlen, uint32_t tag)
{
    coll_req_t rr, sr;
    coll_req_t *reqs[2] = { NULL, NULL };
    td_status_t st;

    if (rbuf != NULL || src >= 0) {
        st = coll_irecv(op, &rr, src, tag, rbuf, rlen);
        if (st != TD_OK) {
            return st;
        }
        reqs[0] = &rr;
    }
    if (dst >= 0) {
        st = coll_isend(op, &sr, dst, tag, sbuf, slen);
        if (st != TD_OK) {
            coll_wait(op->g, reqs, 1, op->deadline);
            return st;
        }
        reqs[1] = &sr;
    }
    return coll_wait(op->g, reqs, 2, op->deadline);
}

void *
coll_scratch(td_group_t *g, size_t len)
{
    if (g->scratch_len < len) {
        size_t huge = (size_t)2 << 20;
        void *p;

        /* Large scratch on huge pages, as large tensor storage
         * (runtime/tensor/tensor.c): fewer faults, and bodies read in
         * place (C9) land at memcpy speed. Advice only. */
        if (len >= 2 * huge) {
            len = (len + huge - 1) & ~(huge - 1);
            p = aligned_alloc(huge, len);
#ifdef MADV_HUGEPAGE
            if (p != NULL) {
                (void)madvise(p, len, MADV_HUGEPAGE);
            }
#endif
        } else {
            p = malloc(len);
        }
        if (p != NULL) {
            free(g->scratch);
        }
        if (p == NULL) {
            td_error(TD_ERR_NO_MEMORY, "coll: out of memory for %zu bytes "
                     "of scratch", len);
            return NULL;
        }
        g->scratch = p;
        g->scratch_len = len;
    }
    return g->scratch;
}

/* coll_op_begin up to its lock: the sequence number, deadline (CLOCKED:
 * else 0, for the wait to set), size. */
static void
begin_prep(coll_op_t *op, int clocked)
{
    td_group_t *g = op->g;

    if (!g->watched) {
        /* Endpoints to every member, so a death is noticed (keepalive)
         * even by members that never talk to the dead one. */
        for (int i = 0; i < g->n; i++) {
            if (i != g->me) {
                td__transport_watch(coll_transport(), g->ranks[i]);
            }
        }
        g->watched = 1;
    }
    op->seq = g->seq++;
    /* Through a segment already mapped the deadline is set by the wait's
     * first look at the clock (shm.c): a call that waits less reads no
     * clock at all (25 ns of a 190 ns all_reduce here). */
    op->deadline = !clocked ||
                   (op->desc.algo == ALGO_SHM && g->shm_state == SHM_ON)
                   ? 0 : td_now_s() + coll_timeout();
    op->esize = td_dtype_size((td_dtype_t)op->desc.dtype);
}

/* C5: what arrived for OP's call before it was made; a mismatch: 1, and
 * MSG says it. */
static int
queued_mismatch_locked(const coll_op_t *op, char *msg, size_t len)
{
    coll_unexp_t *e = coll_ux_mismatch_locked(op->g->id, op->seq, &op->desc);

    if (e != NULL) {
        coll_mismatch_text(msg, len, op->g->id, op->seq, e->src,
                           coll_world_rank(), &e->desc, &op->desc);
    }
    return e != NULL;
}

/* coll_op_begin's part under coll_lock (held; kept held on TD_OK, else
 * released): the call made current and checked against what arrived
 * for it already (C5). On a mismatch *MISMATCH is set and MSG says it. */
static td_status_t
begin_locked(coll_op_t *op, int *mismatch, char *msg, size_t len)
{
    td_group_t *g = op->g;

    if (g->broken != TD_OK) {
        coll_unlock();
        return coll_group_check(g);
    }
    coll_cur_publish(g, op->seq, &op->desc);    /* (and begun, K1; L8) */
    __atomic_store_n(&g->in_op, 1, __ATOMIC_RELAXED);
    *mismatch = queued_mismatch_locked(op, msg, len);
    return TD_OK;
}

/* After the lock: announce, and fail the group on a mismatch. */
static td_status_t
begin_finish(coll_op_t *op,
             void (*announce)(td_group_t *g, uint32_t seq,
                              const coll_desc_t *d),
             int mismatch, const char *msg)
{
    td_group_t *g = op->g;

    if (announce != NULL) {
        announce(g, op->seq, &op->desc);            /* shm.c S4 */
    }
    if (mismatch) {
        coll_group_fail(g, TD_ERR_INVALID, 1, op->seq, msg);
        __atomic_store_n(&g->in_op, 0, __ATOMIC_RELEASE);
        return td_error(TD_ERR_INVALID, "%s", msg);
    }
    return TD_OK;
}

static td_status_t
op_begin(coll_op_t *op,
         void (*announce)(td_group_t *g, uint32_t seq, const coll_desc_t *d),
         int clocked)
{
    char msg[COLL_ERR_MAX];
    int mismatch = 0;
    td_status_t st;

    begin_prep(op, clocked);
    coll_lock();
    st = begin_locked(op, &mismatch, msg, sizeof(msg));
    if (st != TD_OK) {
        return st;
    }
    coll_unlock();
    return begin_finish(op, announce, mismatch, msg);
}

td_status_t
coll_op_begin(coll_op_t *op,
              void (*announce)(td_group_t *g, uint32_t seq,
                               const coll_desc_t *d))
{
    return op_begin(op, announce, 1);
}

td_status_t
coll_op_begin_lean(coll_op_t *op,
                   void (*announce)(td_group_t *g, uint32_t seq,
                                    const coll_desc_t *d))
{
    td_group_t *g = op->g;

    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
        return op_begin(op, announce, 0);       /* (its failure, C6) */
    }
    begin_prep(op, 0);
    coll_cur_publish(g, op->seq, &op->desc);
    __atomic_store_n(&g->in_op, 1, __ATOMIC_RELEASE);           /* L8 */
    return begin_finish(op, announce, 0, NULL);
}

td_status_t
coll_op_check_queued(coll_op_t *op)
{
    char msg[COLL_ERR_MAX];
    int mismatch;

    atomic_thread_fence(memory_order_seq_cst);      /* in_op, then n_ux */
    if (!coll_ux_any()) {
        return TD_OK;
    }
    coll_lock();
    mismatch = queued_mismatch_locked(op, msg, sizeof(msg));
    coll_unlock();
    if (!mismatch) {
        return TD_OK;
    }
    coll_group_fail(op->g, TD_ERR_INVALID, 1, op->seq, msg);
    return td_error(TD_ERR_INVALID, "%s", msg);
}

td_status_t
coll_op_begin_irecv(coll_op_t *op,
                    void (*announce)(td_group_t *g, uint32_t seq,
                                     const coll_desc_t *d),
                    coll_req_t *r, int src, uint32_t tag, void *buf,
                    size_t nbytes)
{
    char msg[COLL_ERR_MAX];
    int mismatch = 0;
    td_status_t st;

    begin_prep(op, 1);
    recv_fill(op, r, src, tag, buf, nbytes);     /* (op->seq is set) */
    coll_post_recv_prep(r);
    coll_lock();
    st = begin_locked(op, &mismatch, msg, sizeof(msg));
    if (st != TD_OK) {
        return st;                     /* (released; R not posted) */
    }
    if (mismatch) {
        coll_unlock();
        return begin_finish(op, announce, mismatch, msg); /* R not posted */
    }
    st = coll_post_recv_locked(r);     /* C16: releases coll_lock */
    (void)begin_finish(op, announce, 0, NULL);
    return st;
}

void
coll_op_end(coll_op_t *op)
{
    /* no lock: a message read under it meanwhile compares with the call
     * that just ended, as it would have a moment before */
    __atomic_store_n(&op->g->in_op, 0, __ATOMIC_RELEASE);
}
