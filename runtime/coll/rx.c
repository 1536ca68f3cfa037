/* rx.c: the receive handler (rx.h): a decode, a check against the
 * message's group, and one function per message type.
 *
 * Every message is one transport message: a 32-byte header (wire.h) and
 * at most one body. A receive that is posted when its message arrives
 * names its own buffer as the body's destination, so the body lands there
 * (UCX rendezvous for large ones); one that arrives first waits in the
 * unexpected list in a buffer the transport allocates, and is copied out
 * when its receive is posted (recv.c). */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/rx.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/late.h"
#include "runtime/coll/match.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/recv.h"
#include "runtime/coll/reduce.h"
#include "runtime/coll/tx.h"
#include "runtime/coll/wire.h"
#include "base/log.h"

static uint64_t zero_body;   /* where 0-byte bodies of matched receives go */

/* A group failure found under coll_lock, applied after it (C1). */
typedef struct {
    td_status_t code;
    char        msg[COLL_ERR_MAX];
    uint32_t    gid;
    uint32_t    seq;
    int         tell;
} fail_t;

/* No failure (yet): the fields a failure sets are set with it. Not
 * zeroed as a whole: its message is COLL_ERR_MAX bytes, which cost about
 * 85 instructions a message on every receive (callgrind, issue 30). */
#define FAIL_NONE(f) ((f).code = TD_OK, (f).tell = 0, (f).msg[0] = '\0')

/* By id: the group may be destroyed meanwhile (only read under the
 * lock). */
static void
fail_apply(const fail_t *f)
{
    coll_group_fail_id(f->gid, f->code, f->tell, f->seq, f->msg);
}

/* Why a message was dropped on arrival, for its answer (match.h C14):
 * written only when one is dropped. */
typedef struct {
    int         answer;            /* its sender is answered */
    td_status_t fail;              /* its group's failure here (TD_OK:
                                    * destroyed unbroken, not a member) */
    char        msg[COLL_ERR_MAX];
} drop_t;

/* C14: M from SRC was dropped unreceived (FULL: the queue was full; else
 * D says why): its sender, if it waits for an answer, is told (no lock
 * held). */
static void
refuse(int src, const coll_wire_t *m, int full, const drop_t *d)
{
    if (m->type == MSG_COLL && m->cma) {
        /* cma.h C15: its sender keeps the buffer until told */
        coll_cma_answer_ids(src, m->gid, m->digest, m->seq, m->tag,
                            COLL_CMA_DROPPED);
    }
    if (full || d == NULL || d->answer) {
        coll_recv_refuse_msg(src, m->type, m->gid, m->digest, m->seq,
                             m->dtype, m->ndim, m->shape, full,
                             d != NULL ? d->fail : TD_OK,
                             d != NULL && d->fail != TD_OK ? d->msg : NULL);
    }
}

/* Is message M from SRC for a group that takes it (coll_lock held)? 1
 * yes (*G_P: its group, NULL when not made here yet); 0 dropped (C6,
 * C11; *D: whether and how to answer it, C14) or a digest mismatch (*F
 * set); coll_lock is dropped then. */
static int
admit_locked(int src, const coll_wire_t *m, td_group_t **g_p, fail_t *f,
             drop_t *d)
{
    td_group_t *g = coll_group_find_locked(m->gid);

    *g_p = g;
    if (g == NULL && coll_group_gone_locked(m->gid)) {
        /* C11: a group made here and destroyed since (ids grow in the
         * order td_group_new is called, the same on every rank); C14:
         * answered unless it was broken then */
        d->answer = !coll_group_gone_broken_locked(m->gid);
        d->fail = TD_OK;
        coll_unlock();
        td_log_debug("coll: dropped a message from rank %d for group %u, "
                     "destroyed here", src, m->gid);
        return 0;
    }
    if (g != NULL && g->digest != m->digest) {
        f->code = TD_ERR_INVALID;
        snprintf(f->msg, sizeof(f->msg), "coll: group %u has different "
                 "members on rank %d and rank %d (member digests %08x and "
                 "%08x): every rank must call td_group_new with the same "
                 "lists in the same order", m->gid, src, coll_world_rank(),
                 m->digest, g->digest);
        f->gid = m->gid;
        f->seq = m->seq;
        d->answer = 1;
        d->fail = f->code;
        snprintf(d->msg, sizeof(d->msg), "%s", f->msg);
        coll_unlock();
        return 0;
    }
    if (g != NULL && (g->broken != TD_OK || g->of_world[src] < 0 ||
                      g->me < 0)) {
        d->answer = 1;                  /* C14: the failure, relayed */
        d->fail = g->broken;
        if (d->fail != TD_OK) {
            snprintf(d->msg, sizeof(d->msg), "%s", g->broken_msg);
        }
        coll_unlock();
        return 0;                       /* C6: dropped */
    }
    return 1;
}

/* MSG_ABORT: a member failed group G (NULL: not made here yet, kept until
 * it is, coll_group_register). */
static void
on_abort_locked(int src, const coll_wire_t *m, td_group_t *g)
{
    fail_t f = { .code = (td_status_t)(int32_t)m->tag };

    if (g == NULL) {
        coll_unexp_t *e = coll_ux_new_locked();

        if (e != NULL && (e->text = strndup(m->text, m->text_len)) != NULL) {
            e->type = MSG_ABORT;
            e->group_id = m->gid;
            e->seq = m->seq;
            e->code = (int32_t)m->tag;
            e->arrived = 1;
            e->src = src;
            coll_ux_append_locked(e);
            e = NULL;
        }
        free(e);
        coll_unlock();
        return;
    }
    coll_unlock();
    if (f.code >= TD_OK) {
        f.code = TD_ERR_REMOTE;
    }
    snprintf(f.msg, sizeof(f.msg), "%.*s (reported by rank %d)",
             (int)m->text_len, m->text, src);
    f.gid = m->gid;
    f.seq = m->seq;
    fail_apply(&f);
}

/* MSG_CMA: the reader of our offer answered (C9). */
static void
on_cma_locked(int src, const coll_wire_t *m)
{
    coll_req_t *r = coll_posted_take_locked(MSG_CMA, m->gid, src, m->seq,
                                            m->tag);

    coll_unlock();
    if (r != NULL) {
        coll_cma_answered(r, src, m->word);
    }
}

/* MSG_ACK: the receiver matched our p2p send (C2). */
static void
on_ack_locked(int src, const coll_wire_t *m)
{
    coll_req_t *r = coll_posted_take_locked(MSG_ACK, m->gid, src, m->seq, 0);

    coll_unlock();
    if (r != NULL) {
        coll_ack_complete(r, src, (td_status_t)(int32_t)m->word, m->dtype,
                          m->ndim, m->shape);
    }
}

/* A P2P or COLL message offered in place matched R (C9, C10). */
static void
matched_offer(int src, const coll_wire_t *m, coll_req_t *r)
{
    r->from = src;
    r->cma_pid = m->cma_pid;
    r->cma_addr = m->cma_addr;
    r->cma_token_addr = m->cma_token_addr;
    r->cma_token = m->cma_token;
    if (m->type == MSG_P2P) {
        r->seq = m->seq;                /* the answer names it */
        if (r->on_done != NULL) {
            /* C10: an irecv posted earlier: read by its waiter if it has
             * one now (C12), else have the body sent. */
            coll_cma_offered(r);
            return;
        }
    }
    atomic_store(&r->cma_ready_a, 1);
    coll_wake();
}

/* A P2P or COLL message matched posted receive R (taken, coll_lock
 * held): checked, then its body lands in R's buffer. */
static void
matched_locked(td_transport_rx_t *rx, const coll_wire_t *m, coll_req_t *r)
{
    fail_t f;

    FAIL_NONE(f);

    if (m->type == MSG_P2P) {
        f.code = coll_p2p_fits(r, rx->src, m->dtype, m->ndim, m->shape,
                               m->nbytes, f.msg, sizeof(f.msg));
    } else if (m->nbytes != r->nbytes) {
        f.code = TD_ERR_PROTOCOL;
        snprintf(f.msg, sizeof(f.msg), "coll: rank %d sent %" PRIu64
                 " bytes for step %u of call #%u in group %u, rank %d "
                 "expects %zu", rx->src, m->nbytes, m->tag, m->seq, m->gid,
                 coll_world_rank(), r->nbytes);
        f.gid = m->gid;
        f.seq = m->seq;
        f.tell = 1;
    }
    coll_unlock();
    if (f.code != TD_OK) {
        if (m->type == MSG_P2P) {
            coll_send_ack(rx->src, m->gid, m->digest, m->seq, f.code,
                          r->dtype, r->ndim, r->shape);
            coll_req_complete(r, f.code, f.msg);     /* body dropped */
            return;
        }
        coll_req_complete(r, f.code, f.msg);
        fail_apply(&f);
        return;
    }
    if (m->cma) {
        matched_offer(rx->src, m, r);
        return;
    }
    r->seq = m->seq;                    /* the ack names the sender's seq */
    if (rx->eager != NULL) {
        /* C13: the body came with the message: straight into R, or
         * reduced into where R's waiter would reduce it (ring.c R4);
         * UCX's headers before it leave it at any byte, which the
         * kernels read where COLL_REDUCE_ANY_SRC (else it must be
         * aligned for its elements) */
        size_t es = r->type == REQ_RECV_COLL && r->red_dst != NULL
                    ? td_dtype_size((td_dtype_t)r->desc->dtype) : 0;

        if (es > 0 && m->nbytes > 0 &&
            (COLL_REDUCE_ANY_SRC || (uintptr_t)rx->eager % es == 0)) {
            td_dtype_t dt = (td_dtype_t)r->desc->dtype;
            td_reduce_op_t op = (td_reduce_op_t)r->desc->op;
            size_t count = m->nbytes / es;

            if (r->red_with != NULL) {
                coll_reduce_to(r->red_dst, rx->eager, r->red_with, count,
                               dt, op);
            } else {
                coll_reduce_into(r->red_dst, rx->eager, count, dt, op);
            }
            r->red_done = 1;
        } else if (m->nbytes > 0) {
            memcpy(r->buf, rx->eager, m->nbytes);
        }
        rx->taken = 1;
        coll_recv_matched_done(r, TD_OK, rx->src, NULL, 0);
        return;
    }
    /* A 0-byte body still needs a buffer, or the transport would allocate
     * one and hand it to us. */
    rx->dest[0].buf = r->buf != NULL ? r->buf : (void *)&zero_body;
    rx->dest[0].mem = TD_MEM_HOST;
    rx->done = coll_recv_matched_done;
    rx->done_arg = r;
}

/* C5: collective message M, for G, against G's current call (read as
 * match.h L8 says); a mismatch: 1, and the failure into *F. */
static int
mismatch(const td_transport_rx_t *rx, const coll_wire_t *m,
         const td_group_t *g, fail_t *f)
{
    coll_desc_t cur;
    uint32_t seq;

    if (m->type != MSG_COLL || g == NULL || !coll_cur_get(g, &seq, &cur) ||
        seq != m->seq || coll_desc_equal(&m->desc, &cur)) {
        return 0;
    }
    f->code = TD_ERR_INVALID;
    f->gid = m->gid;
    f->seq = m->seq;
    f->tell = 1;
    coll_mismatch_text(f->msg, sizeof(f->msg), g->id, m->seq, rx->src,
                       coll_world_rank(), &m->desc, &cur);
    return 1;
}

/* A P2P or COLL message no receive is posted for: kept (C7) until one
 * is (recv.c). Once queued, a collective message is compared with G's
 * current call again (L8: a call begun meanwhile without the lock, step.c
 * C18, may not have seen it). */
static void
unexpected_locked(td_transport_rx_t *rx, const coll_wire_t *m,
                  const td_group_t *g)
{
    coll_unexp_t *e = coll_ux_new_locked();
    fail_t f;
    int mis;

    if (e == NULL) {
        size_t n = coll_ux_count_locked();

        coll_unlock();
        td_log_error("coll: dropped a message from rank %d (group %u): %zu "
                     "unmatched messages queued already", rx->src, m->gid, n);
        if (m->type == MSG_COLL) {
            char msg[COLL_ERR_MAX];

            /* the call here cannot complete either: told to all (C6) */
            snprintf(msg, sizeof(msg), "coll: rank %d dropped rank %d's "
                     "message of call #%u in group %u: %zu unmatched "
                     "messages queued already", coll_world_rank(), rx->src,
                     m->seq, m->gid, n);
            coll_group_fail_id(m->gid, TD_ERR_NO_MEMORY, 1, m->seq, msg);
        }
        refuse(rx->src, m, 1, NULL);                            /* C14 */
        return;
    }
    e->type = m->type;
    e->dtype = m->dtype;
    e->ndim = m->ndim;
    e->group_id = m->gid;
    e->digest = m->digest;
    e->seq = m->seq;
    e->tag = m->tag;
    e->src = rx->src;
    e->nbytes = m->nbytes;
    e->desc = m->desc;
    memcpy(e->shape, m->shape, sizeof(m->shape));
    if (m->cma) {
        e->cma = 1;
        e->arrived = 1;
        e->cma_pid = m->cma_pid;
        e->cma_addr = m->cma_addr;
        e->cma_token_addr = m->cma_token_addr;
        e->cma_token = m->cma_token;
    } else if (rx->eager != NULL && m->nbytes <= COLL_UX_SMALL) {
        /* C13: the body came with the message: kept in the entry */
        if (m->nbytes > 0) {
            memcpy(e->small, rx->eager, m->nbytes);
        }
        e->body = e->small;
        e->status = TD_OK;
        e->arrived = 1;
        rx->taken = 1;
    }
    coll_ux_append_locked(e);                   /* (n_ux seq_cst, L8) */
    mis = mismatch(rx, m, g, &f);
    coll_unlock();
    if (!m->cma && !rx->taken) {
        rx->done = coll_recv_unexp_done;
        rx->done_arg = e;
    }
    if (mis) {
        fail_apply(&f);                 /* C5 */
    }
}

/* MSG_P2P or MSG_COLL: a body (or its offer). */
static void
on_body_locked(td_transport_rx_t *rx, const coll_wire_t *m, td_group_t *g)
{
    int resend = m->type == MSG_P2P && (m->flags & COLL_F_RESEND);
    coll_req_t *r;
    fail_t f;

    if (mismatch(rx, m, g, &f)) {
        coll_unlock();
        fail_apply(&f);                 /* C5 */
        return;
    }
    r = coll_posted_take_locked(resend ? MSG_P2P_RESEND : m->type, m->gid,
                                rx->src, m->seq, m->tag);
    if (r != NULL) {
        matched_locked(rx, m, r);
        return;
    }
    if (resend) {
        /* C10: its receive was withdrawn (timeout, failure) meanwhile;
         * its sender waits for the ack (C14) */
        coll_unlock();
        td_log_debug("coll: dropped a resent body from rank %d (group %u, "
                     "#%u): its receive is gone", rx->src, m->gid, m->seq);
        refuse(rx->src, m, 0, NULL);
        return;
    }
    unexpected_locked(rx, m, g);
}

/* The transport's receive handler (token holder, C1). Every field is
 * checked before use. */
static void
rx_handler(void *arg, td_transport_rx_t *rx)
{
    coll_wire_t m;
    td_group_t *g;
    fail_t f;
    drop_t d;

    (void)arg;
    FAIL_NONE(f);
    if (coll_wire_parse(rx->header, rx->header_len, rx->n_bodies,
                        rx->n_bodies > 0 ? rx->body_len[0] : 0, &m) != TD_OK) {
        td_log_warn("coll: rejected a malformed message from rank %d (%zu "
                    "header bytes)", rx->src, rx->header_len);
        return;                         /* wire.c W1-W3 */
    }
    if (m.offer != NULL) {
        coll_mbox_offered(rx->src, m.offer);
    }
    if (m.type == MSG_P2P || m.type == MSG_POKE) {
        /* mbox.c M2: what the sender wrote into its mailbox before this
         * message comes first. */
        coll_mbox_drain(rx->src);
        if (m.type == MSG_POKE) {
            coll_mbox_poll();           /* acks, too */
            coll_wake();
            return;
        }
    }
    coll_lock();
    if (m.type == MSG_CMA) {
        /* cma.h C15: a reader's answer to our offer is taken whatever
         * our group's state: a failed group keeps its offers posted until
         * they are answered (the abort that failed it may come first,
         * from the same reader: dropped here, the answer left the offer
         * to wait out the call's deadline) */
        on_cma_locked(rx->src, &m);
        return;
    }
    if (m.type == MSG_ASK || m.type == MSG_TELL) {
        /* answered and taken for a broken group too: who is late is
         * asked once the call failed (late.c K1, K2) */
        if (m.type == MSG_ASK) {
            coll_late_on_ask_locked(rx->src, &m);
        } else {
            coll_late_on_tell_locked(rx->src, &m);
        }
        return;
    }
    d.answer = 0;
    if (!admit_locked(rx->src, &m, &g, &f, &d)) {
        if (f.code != TD_OK) {
            fail_apply(&f);
        }
        if (d.answer || (m.type == MSG_COLL && m.cma)) {
            refuse(rx->src, &m, 0, &d);     /* C14, cma.h C15 */
        }
        return;
    }
    switch (m.type) {
    case MSG_ABORT:
        on_abort_locked(rx->src, &m, g);
        break;
    case MSG_PROBE:
        coll_late_on_probe_locked(rx->src, &m, g);
        break;
    case MSG_ACK:
        on_ack_locked(rx->src, &m);
        break;
    default:                            /* MSG_P2P, MSG_COLL (W1) */
        on_body_locked(rx, &m, g);
        break;
    }
}

td_status_t
coll_rx_start(td_transport_t *tp)
{
    td_status_t st;

    coll_match_set_refuse(coll_recv_refuse);                 /* C14 */
    st = td__transport_set_handler(tp, COLL_TRANSPORT_ID, rx_handler, NULL);
    if (st != TD_OK) {
        return st;
    }
    td__transport_set_kind(tp, COLL_TRANSPORT_ID, "coll");   /* TODIST_FAULT */
    return TD_OK;
}
