/* tx.c: messages out through the transport, and group failure with its
 * aborts (tx.h; C1). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/tx.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/wire.h"
#include "base/log.h"

static void
send_done(void *arg, td_status_t status)
{
    coll_req_t *r = arg;
    char msg[COLL_ERR_MAX];

    if (status != TD_OK) {
        coll_peer_fail_text(msg, sizeof(msg), "send to", r->peer, status);
        if (status != TD_ERR_PEER) {
            /* the transport's reason, said just before this callback
             * (transport.c op_finish), e.g. it could not connect */
            size_t n = strlen(msg);

            snprintf(msg + n, sizeof(msg) - n, " (%s)", td_last_error());
        }
        if (r->type == REQ_SEND_COLL) {
            coll_group_tx_failed(r->g, r->peer, status, msg);  /* C19 */
        }
    }
    coll_req_complete(r, status, status != TD_OK ? msg : NULL);
}

/* A collective's offer left (the transport's share of R, coll_tx_offer)
 * or failed: then its reader never saw it and will not answer, so R is
 * taken off the posted list and given the answer's share too (unless an
 * answer, a death or a withdrawal took it first), and its failure ends
 * the call as any failed send's does (C19). */
static void
offer_done(void *arg, td_status_t status)
{
    if (status != TD_OK && coll_unpost(arg)) {
        coll_req_complete(arg, TD_OK, NULL);
    }
    send_done(arg, status);
}

td_status_t
coll_post_send(coll_req_t *r, int dst, const uint8_t *hdr, size_t hdr_len)
{
    td_iov_t iov = { r->buf, r->nbytes, TD_MEM_HOST };
    td_status_t st;

    /* Relaxed: R reaches another thread only through the transport's
     * queue (its lock) or coll_post (coll_lock), which order these; a
     * locked store each cost a send ~20 cycles for nothing. */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = dst;
    atomic_store_explicit(&r->pending, r->type == REQ_SEND_P2P ? 2 : 1,
                          memory_order_relaxed);
    if (r->type == REQ_SEND_P2P) {
        /* In the ack list before the message leaves: the ack may come
         * before td__transport_send returns. */
        coll_post(r);
    }
    st = td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID, hdr,
                           hdr_len, &iov, 1, send_done, r);
    if (st != TD_OK) {
        if (r->type == REQ_SEND_P2P) {
            coll_unpost(r);
        }
        atomic_store(&r->done, 1);
        r->status = st;
        if (st == TD_ERR_PEER) {
            /* the peer failed before this send: said as send_done says
             * it, naming its host and what became of it (L12) */
            coll_peer_fail_text(r->err, sizeof(r->err), "send to", dst, st);
            td_error(st, "%s", r->err);
        } else {
            snprintf(r->err, sizeof(r->err), "%s", td_last_error());
        }
        if (r->type == REQ_SEND_COLL) {
            coll_group_tx_failed(r->g, dst, st, r->err);       /* C19 */
        }
        return st;
    }
    return TD_OK;
}

td_status_t
coll_tx_send_body(coll_req_t *r, int dst)
{
    td_iov_t iov = { r->buf, r->nbytes, TD_MEM_HOST };

    return td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID,
                             r->hdr, r->hdr_len, &iov, 1, send_done, r);
}

td_status_t
coll_tx_offer(coll_req_t *r, int dst, const uint8_t *h, size_t len)
{
    td_status_t st;

    atomic_store(&r->pending, 2);
    coll_post(r);
    st = td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID, h, len,
                            NULL, 0, offer_done, r);
    if (st != TD_OK) {
        char msg[COLL_ERR_MAX];

        snprintf(msg, sizeof(msg), "%s", td_last_error());
        coll_group_tx_failed(r->g, dst, st, msg);              /* C19 */
        if (coll_unpost(r)) {
            coll_req_complete(r, st, msg);
        }
        coll_req_complete(r, st, msg);
        td_error(st, "%s", msg);
    }
    return st;
}

td_status_t
coll_tx_send_hdr(int dst, const uint8_t *h, size_t len)
{
    return td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID, h,
                             len, NULL, 0, NULL, NULL);
}

void
coll_send_ack(int dst, uint32_t gid, uint32_t digest, uint32_t seq,
              td_status_t status, uint8_t dtype, int ndim,
              const int64_t *shape)
{
    uint8_t h[COLL_HDR_MAX];
    size_t len, offer;

    len = coll_wire_ack(h, gid, digest, seq, status, dtype, ndim, shape);
    /* The first ack to a sender offers our inbox (mbox.c). */
    offer = coll_mbox_offer(dst, h + len);
    if (offer > 0) {
        h[COLL_FLAGS_AT] = COLL_F_MBOX;
        len += offer;
    }
    if (coll_tx_send_hdr(dst, h, len) != TD_OK) {
        td_log_debug("coll: ack to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

static void
group_fail(td_group_t *g, uint32_t gid, td_status_t code, int tell,
           uint32_t seq, const char *msg)
{
    uint8_t h[COLL_WIRE_BYTES + 2 + COLL_ERR_MAX];
    td_transport_t *tp = coll_transport();
    int *dst = NULL, n_dst = 0;
    uint32_t digest = 0;
    size_t hlen;

    if (!coll_group_fail_local(g, gid, code, msg, tell ? &dst : NULL, &n_dst,
                               &gid, &digest)) {
        return;
    }
    hlen = coll_wire_abort(h, gid, digest, seq, code, msg);
    for (int i = 0; i < n_dst; i++) {
        if (td__transport_peer_alive(tp, dst[i])) {
            coll_tx_send_hdr(dst[i], h, hlen);
        }
    }
    coll_wake();
    free(dst);
}

void
coll_group_fail(td_group_t *g, td_status_t code, int tell, uint32_t seq,
                const char *msg)
{
    group_fail(g, 0, code, tell, seq, msg);
}

void
coll_group_fail_id(uint32_t gid, td_status_t code, int tell, uint32_t seq,
                   const char *msg)
{
    group_fail(NULL, gid, code, tell, seq, msg);
}

void
coll_group_abort_all(td_group_t *g, td_status_t code, const char *msg)
{
    uint8_t h[COLL_WIRE_BYTES + 2 + COLL_ERR_MAX];
    td_transport_t *tp = coll_transport();
    size_t hlen;

    coll_group_fail_quiet(g, 0, code, msg);
    hlen = coll_wire_abort(h, g->id, g->digest, 0, code, msg);
    for (int i = 0; i < g->n; i++) {
        if (i != g->me && td__transport_peer_alive(tp, g->ranks[i])) {
            coll_tx_send_hdr(g->ranks[i], h, hlen);
        }
    }
    coll_wake();
}
