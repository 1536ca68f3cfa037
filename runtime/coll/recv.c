/* recv.c: posting receives and delivering matched messages (recv.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "runtime/coll/recv.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/tx.h"
#include "base/cpu.h"
#include "base/log.h"

void
coll_recv_matched_done(void *arg, td_status_t status, int src,
                       td_iov_t *bodies, size_t n_bodies)
{
    coll_req_t *r = arg;
    char msg[COLL_ERR_MAX];

    (void)bodies;
    (void)n_bodies;
    r->from = src;
    if (status != TD_OK) {
        coll_peer_fail_text(msg, sizeof(msg), "receiving from", src, status);
    } else if (r->type == REQ_RECV_P2P) {
        coll_send_ack(src, r->group_id, r->g->digest, r->seq, TD_OK,
                      r->dtype, r->ndim, r->shape);
    }
    coll_req_complete(r, status, status != TD_OK ? msg : NULL);
}

/* Copy an arrived unexpected message E into its receive R and complete R
 * (no lock held). */
static void
deliver(coll_unexp_t *e, coll_req_t *r)
{
    char msg[COLL_ERR_MAX];
    td_status_t st = e->status;

    r->from = e->src;
    if (st == TD_OK) {
        if (e->nbytes > 0) {
            memcpy(r->buf, e->body, e->nbytes);
        }
        if (e->mbox_slot) {
            coll_mbox_ack(e->src, e->mbox_slot - 1, TD_OK, r->dtype, r->ndim,
                          r->shape, 1);
            e->mbox_slot = 0;
            e->body = NULL;
        } else if (r->type == REQ_RECV_P2P) {
            coll_send_ack(e->src, e->group_id, e->digest, e->seq, TD_OK,
                          r->dtype, r->ndim, r->shape);
        }
    } else {
        snprintf(msg, sizeof(msg), "coll: receiving from rank %d failed: %s",
                 e->src, td_strerror(st));
    }
    coll_ux_free(e);
    coll_req_complete(r, st, st != TD_OK ? msg : NULL);
}

void
coll_recv_refuse_msg(int src, uint8_t type, uint32_t gid, uint32_t digest,
                     uint32_t seq, uint8_t dtype, int ndim,
                     const int64_t *shape, int full, td_status_t fail,
                     const char *msg)
{
    uint8_t h[COLL_WIRE_BYTES + 2 + COLL_ERR_MAX];
    char text[COLL_ERR_MAX];
    size_t len;

    if (coll_stopped() || (type != MSG_P2P && type != MSG_COLL)) {
        return;             /* shutting down: its sender sees us leave */
    }
    td_log_debug("coll: dropped a %s message from rank %d (group %u, #%u) "
                 "unreceived: answered", type == MSG_P2P ?
                 "point-to-point" : "collective", src, gid, seq);
    if (type == MSG_P2P) {
        /* its ack: the sender's td_send fails naming this rank (C3) */
        coll_send_ack(src, gid, digest, seq,
                      full ? TD_ERR_NO_MEMORY : TD_ERR_CANCELED, dtype, ndim,
                      shape);
        return;
    }
    /* the group fails at the sender: its call ends, its sends and offers
     * complete (C6, cma.h C9) */
    if (full || fail == TD_OK) {
        snprintf(text, sizeof(text), "coll: rank %d dropped rank %d's "
                 "message of call #%u in group %u unreceived: %s",
                 coll_world_rank(), src, seq, gid, full ?
                 "its queue of unmatched messages was full" :
                 "the group was destroyed there (or never had it)");
        fail = full ? TD_ERR_NO_MEMORY : TD_ERR_CANCELED;
        msg = text;
    }
    len = coll_wire_abort(h, gid, digest, seq, fail, msg);
    if (coll_tx_send_hdr(src, h, len) != TD_OK) {
        td_log_debug("coll: abort to rank %d not sent: %s", src,
                     td_last_error());
    }
}

void
coll_recv_refuse(const coll_unexp_t *e, td_status_t fail, const char *msg)
{
    if (e->type == MSG_COLL && e->cma) {
        /* cma.h C15: its sender keeps the buffer until told */
        coll_cma_answer_ids(e->src, e->group_id, e->digest, e->seq, e->tag,
                            COLL_CMA_DROPPED);
    }
    coll_recv_refuse_msg(e->src, e->type, e->group_id, e->digest, e->seq,
                         e->dtype, e->ndim, e->shape, 0, fail, msg);
}

void
coll_recv_unexp_done(void *arg, td_status_t status, int src,
                     td_iov_t *bodies, size_t n_bodies)
{
    coll_unexp_t *e = arg;
    coll_req_t *r;
    int orphan;

    (void)src;
    coll_lock();
    e->body = n_bodies > 0 ? bodies[0].buf : NULL;
    e->status = status;
    e->arrived = 1;
    r = e->claim;
    orphan = e->orphan;     /* read under the lock: once it is dropped, a
                             * receive may claim, deliver and free E */
    if (r != NULL || orphan) {
        coll_ux_remove_locked(e);
    }
    coll_unlock();
    if (r != NULL) {
        deliver(e, r);
    } else if (orphan) {
        if (status == TD_OK && e->type == MSG_P2P &&
            coll_ux_needs_answer(e)) {
            /* C14: dropped as it landed (its group failed or is gone);
             * a collective's step landing so is left to the failure's
             * own news (its send completed already) */
            coll_recv_refuse(e, TD_OK, NULL);
        }
        coll_ux_free(e);
    }
}

/* Unexpected E does not fit p2p receive R (CODE, MSG): the sender learns
 * it from the ack, its body is dropped (coll_lock held; dropped here). */
static void
refuse_locked(coll_unexp_t *e, coll_req_t *r, td_status_t code,
              const char *msg)
{
    int src = e->src, slot = e->mbox_slot;
    uint32_t gid = e->group_id, dig = e->digest, seq = e->seq;

    e->mbox_slot = 0;               /* acked below, not dropped */
    if (slot) {
        e->body = NULL;             /* in the slot */
    }
    if (e->arrived) {
        coll_ux_remove_locked(e);
        coll_ux_free(e);
    } else {
        e->orphan = 1;
    }
    coll_unlock();
    if (slot) {
        coll_mbox_ack(src, slot - 1, code, r->dtype, r->ndim, r->shape, 1);
    } else {
        coll_send_ack(src, gid, dig, seq, code, r->dtype, r->ndim, r->shape);
    }
    coll_req_complete(r, code, msg);
}

/* Unexpected E, an offer in place, matched R (coll_lock held; dropped
 * here): C9, C10. */
static void
take_offer_locked(coll_unexp_t *e, coll_req_t *r)
{
    coll_ux_remove_locked(e);
    coll_unlock();
    r->from = e->src;
    r->cma_pid = e->cma_pid;
    r->cma_addr = e->cma_addr;
    r->cma_token_addr = e->cma_token_addr;
    r->cma_token = e->cma_token;
    if (r->type == REQ_RECV_P2P) {
        r->seq = e->seq;                  /* the answer names it */
    }
    coll_ux_free(e);
    if (r->type == REQ_RECV_P2P && r->on_done != NULL) {
        coll_cma_read(r);                 /* C10: td_irecv reads it */
        return;
    }
    atomic_store(&r->cma_ready_a, 1);     /* C9: the waiter reads it */
}

void
coll_post_recv_prep(coll_req_t *r)
{
    /* relaxed: published to other threads by coll_lock */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    atomic_store_explicit(&r->cma_ready_a, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    r->from = -1;
    r->exact_seq = 0;
}

td_status_t
coll_post_recv(coll_req_t *r)
{
    coll_post_recv_prep(r);
    coll_lock();
    return coll_post_recv_locked(r);
}

td_status_t
coll_post_recv_locked(coll_req_t *r)
{
    coll_unexp_t *e;
    char msg[COLL_ERR_MAX];
    td_status_t st = TD_OK;

    if (r->g->broken != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", r->g->broken_msg);
        st = r->g->broken;
        coll_unlock();
        coll_req_complete(r, st, msg);
        return TD_OK;
    }
    e = coll_ux_find_locked(r);
    if (e == NULL && r->type == REQ_RECV_P2P && r->peer >= 0 &&
        !r->exact_seq && coll_mbox_active() &&
        !coll_posted_p2p_from_locked(r)) {
        /* The message may wait in its sender's mailbox already: take it
         * for R at once, which nothing posted earlier could match
         * (mbox.c M3), instead of posting R for the drain to match. */
        coll_mbox_msg_t m;

        if (coll_mbox_take(r->peer, r->group_id, r->g->digest, r->tag, &m)) {
            coll_unlock();
            st = coll_mbox_receive(r, &m, msg, sizeof(msg), 1);
            coll_req_complete(r, st, st != TD_OK ? msg : NULL);
            return TD_OK;
        }
    }
    if (e == NULL) {
        coll_posted_append_locked(r);
        coll_unlock();
        return TD_OK;
    }
    if (r->type == REQ_RECV_P2P) {
        st = coll_p2p_fits(r, e->src, e->dtype, e->ndim, e->shape, e->nbytes,
                           msg, sizeof(msg));
        if (st != TD_OK) {
            refuse_locked(e, r, st, msg);
            return TD_OK;
        }
    } else if (e->nbytes != r->nbytes || !coll_desc_equal(&e->desc, r->desc)) {
        coll_mismatch_text(msg, sizeof(msg), r->g->id, r->seq, e->src,
                           coll_world_rank(), &e->desc, r->desc);
        coll_unlock();
        coll_group_fail(r->g, TD_ERR_INVALID, 1, r->seq, msg);
        return TD_OK;
    }
    if (e->cma) {
        take_offer_locked(e, r);
        return TD_OK;
    }
    if (e->arrived) {
        coll_ux_remove_locked(e);
        coll_unlock();
        deliver(e, r);
        return TD_OK;
    }
    e->claim = r;          /* C2: coll_recv_unexp_done delivers it */
    coll_unlock();
    return TD_OK;
}

int
coll_p2p_recv_fast(coll_req_t *r)
{
    coll_mbox_msg_t m;
    double t_first = 0;

    if (r->peer < 0 || r->nbytes > MBOX_BODY || !coll_mbox_from(r->peer)) {
        return 0;
    }
    for (unsigned i = 0; !coll_mbox_ready(r->peer); i++) {
        if ((i & 63) == 63 && coll_spin_over(&t_first, r->g)) {
            return 0;
        }
        td_cpu_relax();
    }
    r->status = TD_OK;
    r->err[0] = '\0';
    coll_lock();
    /* M10: only what coll_post_recv would have taken */
    if (r->g->broken != TD_OK || coll_ux_find_locked(r) != NULL ||
        coll_posted_p2p_from_locked(r) ||
        !coll_mbox_take(r->peer, r->group_id, r->g->digest, r->tag, &m)) {
        coll_unlock();
        return 0;
    }
    coll_unlock();
    r->status = coll_mbox_receive(r, &m, r->err, sizeof(r->err), 1);
    coll_mbox_fast_count(0);
    return 1;
}
