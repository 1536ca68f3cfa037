/* p2p.c: point-to-point messages (td_send, td_recv, td_isend, td_irecv).
 *
 * A send is one MSG_P2P message (the tensor's dtype and shape in the
 * header, its bytes as the body) and completes when the receiver's ack
 * comes back: the ack says whether the receive fit, so a size or dtype
 * mismatch fails on both sides, naming both shapes. From COLL_CMA_MIN
 * bytes on, between ranks that can read each other's memory, the body is
 * offered in place instead and the receiver copies it once with
 * process_vm_readv (cma.h C9, C10); its answer completes the send. Up to
 * MBOX_BODY bytes to a rank of this host that offered its inbox go through
 * its mailbox instead, acked in the slot (mbox.c). Receives match by
 * (source or TD_ANY_SOURCE, tag) in the order they were posted (match.h).
 *
 * Thread safety: all functions are thread-safe. */
#include "config.h"

#include <string.h>

#include "todist/coll.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/recv.h"
#include "runtime/coll/wait.h"
#include "runtime/coll/work.h"
#include "base/byteorder.h"
#include "base/clock.h"

/* Checks shared by the four calls. PEER_ANY: TD_ANY_SOURCE allowed. */
static td_status_t
check(const char *fn, td_group_t *g, td_tensor_t *t, int peer, int tag,
      int peer_any)
{
    td_device_t dev;
    td_status_t st;

    if (g == NULL || t == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: %s is NULL", fn,
                        g == NULL ? "group" : "tensor");
    }
    st = coll_group_check(g);
    if (st != TD_OK) {
        return st;
    }
    dev = td_tensor_device(t);
    if (dev.type != TD_DEVICE_CPU) {
        return td_error(TD_ERR_UNSUPPORTED, "coll: %s: the tensor is on "
                        "cuda:%d; only cpu tensors are supported here", fn,
                        dev.index);
    }
    if (!td_tensor_is_contiguous(t)) {
        return td_error(TD_ERR_INVALID, "coll: %s: the tensor is not "
                        "contiguous (use td_tensor_contiguous)", fn);
    }
    if (!(peer_any && peer == TD_ANY_SOURCE) && (peer < 0 || peer >= g->n)) {
        return td_error(TD_ERR_RANGE, "coll: %s: rank %d is not in group %u "
                        "of %d", fn, peer, g->id, g->n);
    }
    if (tag < 0) {
        return td_error(TD_ERR_RANGE, "coll: %s: tag %d is not in 0..%d", fn,
                        tag, TD_TAG_MAX);
    }
    return TD_OK;
}

static void
fill(coll_req_t *r, td_group_t *g, td_tensor_t *t, int tag)
{
    int nd = td_tensor_ndim(t);

    r->g = g;
    r->group_id = g->id;
    r->tag = (uint32_t)tag;
    r->buf = td_tensor_data(t);
    r->nbytes = td_tensor_nbytes(t);
    r->dtype = (uint8_t)td_tensor_dtype(t);
    r->ndim = (uint8_t)nd;
    memcpy(r->shape, td_tensor_shape(t), sizeof(int64_t) * (size_t)nd);
}

static void
send_fill(td_group_t *g, td_tensor_t *t, int dst, int tag, coll_req_t *r)
{
    fill(r, g, t, tag);
    r->type = REQ_SEND_P2P;
    r->seq = __atomic_fetch_add(&g->send_seq[dst], 1, __ATOMIC_RELAXED);
}

/* Post send R (send_fill'ed) to group rank DST. */
static td_status_t
send_post(td_group_t *g, int dst, coll_req_t *r)
{
    uint8_t *h = r->hdr;
    int nd = r->ndim;
    td_status_t st;

    /* Small bodies to a rank of this host go through its mailbox once it
     * offered one (mbox.c); the rest through the transport, counted so
     * the mailbox waits for them (M2). */
    if (coll_mbox_send(r, g->ranks[dst])) {
        return TD_OK;
    }
    h[0] = COLL_WIRE_VERSION;
    h[1] = MSG_P2P;
    h[2] = r->dtype;
    h[3] = (uint8_t)nd;
    td_put_be32(h + 4, g->id);
    td_put_be32(h + 8, g->digest);
    td_put_be32(h + 12, r->seq);
    td_put_be32(h + 16, r->tag);
    td_put_be32(h + 20, 0);
    td_put_be64(h + 24, r->nbytes);
    for (int i = 0; i < nd; i++) {
        td_put_be64(h + COLL_WIRE_BYTES + 8 * i, (uint64_t)r->shape[i]);
    }
    r->hdr_len = COLL_WIRE_BYTES + 8 * (size_t)nd;
    coll_mbox_tp_begin(g->ranks[dst]);
    atomic_store(&r->tp_counted, 1);
    /* Large bodies between ranks of one node are offered in place and
     * read by the receiver (cma.h C9, C10). */
    st = coll_post_send_offer(r, g->ranks[dst]);
    if (st != TD_OK && atomic_exchange(&r->tp_counted, 0)) {
        coll_mbox_tp_end(g->ranks[dst]);
    }
    return st;
}

static td_status_t
post_send(td_group_t *g, td_tensor_t *t, int dst, int tag, coll_req_t *r)
{
    send_fill(g, t, dst, tag, r);
    return send_post(g, dst, r);
}

static void
recv_fill(td_group_t *g, td_tensor_t *t, int src, int tag, coll_req_t *r)
{
    fill(r, g, t, tag);
    coll_mbox_inbox_ensure();           /* offered in our acks (mbox.c) */
    r->type = REQ_RECV_P2P;
    r->peer = src == TD_ANY_SOURCE ? -1 : g->ranks[src];
    r->seq = 0;
}

static td_status_t
post_recv(td_group_t *g, td_tensor_t *t, int src, int tag, coll_req_t *r)
{
    recv_fill(g, t, src, tag, r);
    return coll_post_recv(r);
}

/* A request on the stack: all but its header and error (COLL_REQ_ZERO). */
static void
req_init(coll_req_t *r)
{
    memset(r, 0, COLL_REQ_ZERO);
    r->err[0] = '\0';
}

/* R's error, done on this thread's fast path (mbox.c M9, M10). */
static td_status_t
fast_status(const coll_req_t *r)
{
    return r->status == TD_OK ? TD_OK : td_error(r->status, "%s", r->err);
}

td_status_t
td_send(td_group_t *g, td_tensor_t *t, int dst, int tag)
{
    coll_req_t r, *rp = &r;
    td_status_t st = check("td_send", g, t, dst, tag, 0);
    int fast;

    if (st != TD_OK) {
        return st;
    }
    req_init(&r);
    send_fill(g, t, dst, tag, &r);
    /* A peer of this host that waits acks within a microsecond: the
     * ack is polled here, nothing posted (mbox.c M9) */
    fast = coll_mbox_send_fast(&r, g->ranks[dst]);
    if (fast == 1) {
        return fast_status(&r);
    }
    coll_active_mine(1);
    st = fast == 2 ? TD_OK : send_post(g, dst, &r);
    if (st == TD_OK) {
        st = coll_wait_ex(g, &rp, 1, -1, 0, 0);   /* timeout: from now */
    }
    coll_active_mine(-1);
    return st;
}

td_status_t
td_recv(td_group_t *g, td_tensor_t *t, int src, int tag, int *src_p)
{
    coll_req_t r, *rp = &r;
    td_status_t st = check("td_recv", g, t, src, tag, 1);

    if (st != TD_OK) {
        return st;
    }
    req_init(&r);
    recv_fill(g, t, src, tag, &r);
    if (coll_p2p_recv_fast(&r)) {                /* mbox.c M10 */
        st = fast_status(&r);
    } else {
        coll_active_mine(1);
        st = coll_post_recv(&r);
        if (st == TD_OK) {
            st = coll_wait_ex(g, &rp, 1, -1, 0, 0);   /* timeout: from now */
        }
        coll_active_mine(-1);
    }
    if (st == TD_OK) {
        td_tensor_bump_version(t);
        if (src_p != NULL) {
            *src_p = g->of_world[r.from];
        }
    }
    return st;
}

static td_status_t
post_async(int send, td_group_t *g, td_tensor_t *t, int peer, int tag,
           td_work_t **work_p)
{
    td_work_t *w;
    td_status_t st;

    if (work_p == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: work_p is NULL",
                        send ? "td_isend" : "td_irecv");
    }
    st = check(send ? "td_isend" : "td_irecv", g, t, peer, tag, !send);
    if (st != TD_OK) {
        return st;
    }
    w = coll_work_p2p_new(g, t);
    if (w == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    w->deadline = td_now_s() + coll_timeout();
    st = send ? post_send(g, t, peer, tag, &w->req)
              : post_recv(g, t, peer, tag, &w->req);
    if (st != TD_OK) {
        /* Nothing was posted: the request's on_done will not run. */
        coll_work_p2p_done(&w->req);
        td_work_release(w);
        return st;
    }
    if (!send) {
        td_tensor_bump_version(t);
    }
    *work_p = w;
    return TD_OK;
}

td_status_t
td_isend(td_group_t *g, td_tensor_t *t, int dst, int tag, td_work_t **work_p)
{
    return post_async(1, g, t, dst, tag, work_p);
}

td_status_t
td_irecv(td_group_t *g, td_tensor_t *t, int src, int tag, td_work_t **work_p)
{
    return post_async(0, g, t, src, tag, work_p);
}
