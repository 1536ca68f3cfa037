/* mbox.c: point-to-point messages through shared memory between ranks of
 * one host: a mailbox per ordered pair of ranks, in the receiver's inbox.
 * The ring itself (the inbox, its offer and checks, slots, positions,
 * sleep announcements) is ucx_transport/shm_mbox.c's (B1-B8); this file
 * is the collectives' glue: what a slot carries (w[0..3]: group, member
 * digest, seq, tag; b: dtype, ndim; data: shape, then body; an ack's b:
 * dtype, ndim; ack_ext: the receiver's shape on a mismatch), matching
 * under coll_lock, posted requests, pokes through coll's wire.
 *
 * A small td_send (at most MBOX_BODY bytes) to a rank of this host is
 * written into a slot of the receiver's mailbox for us, which the
 * receiver polls while it waits; the receiver's ack (its status and
 * shape, so that a mismatch still fails both sides) is written back into
 * the slot, which the sender polls. A round trip is then two cache-line
 * transfers instead of four active messages through the progress token.
 *
 * Setup: a rank creates its inbox (a memfd with a mailbox per world rank,
 * sparse: only the pages of senders that write are ever touched) at its
 * first receive, and offers it in the ack of each sender's first
 * transport message (MSG_ACK with COLL_F_MBOX: pid, fd, token, boot id
 * hash). At its next send the sender opens /proc/PID/fd/FD if the boot id
 * is its own, maps its own mailbox and checks the token; failing that it
 * keeps using the transport to that rank.
 *
 * Invariants (comments cite them as M1..M8):
 *  M1 (shm_mbox.h B1) A slot is the sender's when FREE or ACKED, the receiver's when FULL.
 *     The owner writes the fields, then the state (release); the other
 *     side reads the state (acquire), then copies the fields once and
 *     checks them before use (a peer's memory is not trusted).
 *  M2 Messages of one sender to one receiver keep their order across the
 *     two paths: the sender writes its mailbox only while none of its
 *     transport p2p sends to that receiver is unacked (tp_busy), and the
 *     receiver drains a sender's mailbox before it handles that sender's
 *     transport p2p message (the mailbox write came first).
 *  M3 (B2) Slots are written and consumed in ring order: the receiver takes
 *     slot pos % TD__MBOX_SLOTS only when its pos is the next one (rd), so a
 *     reused slot is never read twice; a sender whose next slot is still
 *     held (an unexpected message keeps it, M6) uses the transport.
 *  M4 Mailboxes are drained, their acks taken and their slots written
 *     under coll_lock (match.c, L1-L5), from reading a slot until its message or
 *     ack is in the matching engine: one lock per message, the one the
 *     matching takes anyway. Completions, pokes and group failures come
 *     after the unlock (C1). A sender's ring (positions, pending slots,
 *     what each is for) is under that mailbox's own spinlock, taken
 *     inside coll_lock where both are needed: a blocking send (M9), which
 *     posts nothing, takes only the spinlock.
 *  M5 A waiter that sleeps says so first (its inbox's sleepers, and
 *     s_sleep of every mailbox it writes), then polls, sleeps at most
 *     MBOX_RECHECK_S (wait.c) and polls again before it sleeps longer; a
 *     side that writes a message or an ack then reads the flag, with no
 *     fence, and pokes a sleeper with an empty transport message
 *     (MSG_POKE). Without a fence the flag may be read before the write
 *     is seen, but a store is seen within nanoseconds, far less than the
 *     recheck: a write that missed the announcement is found by the
 *     second poll. (A fence would cost every message the time its line
 *     takes to move, ~50-100 ns here.) Sleeps are bounded (2 ms), so a
 *     lost poke costs time, never a hang.
 *  M6 An unexpected mailbox message keeps its slot (its body is read in
 *     place when matched); one that is dropped (its group destroyed or
 *     broken, the runtime stopping) is acked TD_ERR_CANCELED, so the slot
 *     comes back.
 *  M7 (B7) Mappings live until the next td_init (the progress thread may still
 *     handle a message after the modules shut down); a dead peer's
 *     mailboxes are skipped (dead), never unmapped under a poller.
 *  M8 (B8) Bounded: TD__MBOX_SLOTS slots per ordered pair, MBOX_BODY
 *     bytes per body, worlds of at most TD__MBOX_WORLD_MAX ranks (larger ones use the
 *     transport only).
 *  M9 A blocking td_send's slot may be left to its thread (lean): the
 *     thread polls the slot for its ack itself, with no posted request;
 *     acks() leaves a lean slot alone. A slot is freed (its ring position
 *     given back) only once its ack was taken (handled), oldest first,
 *     under the ring's lock; a freed slot keeps its ACKED state (M1: the
 *     sender's), so freeing writes nothing the receiver polls. A lean
 *     send not acked within MBOX_SPIN_S is posted under coll_lock, after
 *     a last look at its slot, and waited for like any other.
 * M10 A blocking td_recv may take its message from the mailbox itself
 *     (coll_p2p_recv_fast), under coll_lock, only when no receive posted
 *     earlier and no unexpected message could match it, and only the
 *     oldest message (M3): what any other receive would have matched.
 *
 * Thread safety: all functions are thread-safe. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/mbox.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/wire.h"
#include "ucx_transport/shm_mbox.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/log.h"

_Static_assert(8 * TD_MAX_DIMS + MBOX_BODY <= TD__MBOX_DATA,
               "a mailbox slot holds a shape and a body");
_Static_assert(TD_MAX_DIMS <= TD__MBOX_EXT, "an ack holds a shape");
_Static_assert(MBOX_OFFER_BYTES == TD__MBOX_OFFER_BYTES, "offer size");

typedef td__mbox_slot_t slot_t;
typedef td__mbox_out_t out_t;

enum { SLOT_FREE = TD__MBOX_FREE, SLOT_FULL = TD__MBOX_FULL,
       SLOT_ACKED = TD__MBOX_ACKED };

/* The collectives' set of mailboxes (TODIST_COLL_P2P_SHM). */
static td__mbox_t M;

static atomic_ulong pokes;            /* MSG_POKE sent (M5) */
static atomic_ulong fast[2];          /* receives taken, sends written on
                                       * the fast path (M9, M10): a debug
                                       * count */

static void slot_drop(int src, int slot);

/* Wake a sleeper of DST (M5): an empty transport message. */
static void
send_poke(int dst)
{
    uint8_t h[COLL_WIRE_BYTES];

    atomic_fetch_add_explicit(&pokes, 1, memory_order_relaxed);
    coll_wire_fixed(h, MSG_POKE, 0, 0, 0, 0, 0, 0, 0);
    if (td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID, h,
                          sizeof(h), NULL, 0, NULL, NULL) != TD_OK) {
        td_log_debug("coll: poke to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

/* TODIST_FAULT's verdict on a mailbox message (tests only). */
static int
fault_roll(void)
{
    td_transport_t *tp = coll_transport();

    return tp != NULL ? td__transport_fault_roll(tp, "mbox") : 0;
}

int
coll_spin_over(double *t_first, const td_group_t *g)
{
    double now = td_now_s();

    if (*t_first == 0) {
        *t_first = now;                 /* (the clock is read only now) */
        return 0;
    }
    return now - *t_first > MBOX_SPIN_S || coll_stopped() ||
           (g != NULL && __atomic_load_n(&g->broken, __ATOMIC_RELAXED) !=
                             TD_OK);
}

void
coll_mbox_fast_count(int send)
{
    /* no locked instruction: a lost count is harmless (a debug figure) */
    atomic_store_explicit(&fast[send != 0],
                          atomic_load_explicit(&fast[send != 0],
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

td_status_t
coll_mbox_setup(int rank, int size, const char *boot_id)
{
    const char *s = getenv("TODIST_COLL_P2P_SHM");
    coll_match_hooks_t hooks = { coll_mbox_tp_end, slot_drop };

    coll_match_set_hooks(&hooks);       /* match.h: M2, M6 */
    return td__mbox_setup(&M, "coll", "point-to-point",
                          !(s != NULL && strcmp(s, "0") == 0),
                          rank, size, boot_id);
}

/* The runtime shuts down: mailboxes are no longer used. Their memory is
 * freed at the next td_init (M7): the transport's progress thread runs
 * until after the modules shut down, and a message it handles meanwhile
 * may still look at a mailbox. */
void
coll_mbox_shutdown(void)
{
    coll_lock();
    td__mbox_stop(&M);
    coll_unlock();
    td_log_debug("coll: %lu mailbox pokes sent", atomic_load(&pokes));
    td_log_debug("coll: %lu sends and %lu receives done on the fast path",
                 atomic_load(&fast[1]), atomic_load(&fast[0]));
    atomic_store(&pokes, 0);
    atomic_store(&fast[0], 0);
    atomic_store(&fast[1], 0);
}

/* Our inbox, made at the first receive (a user thread: never in a
 * callback, where a syscall would hold the token). */
void
coll_mbox_inbox_ensure(void)
{
    (void)td__mbox_inbox_ensure(&M);
}

/* The offer of our inbox to world rank DST, for the ack of its first
 * transport message: its length into T (MBOX_OFFER_BYTES), or 0 (none,
 * or offered before). From then on its mailbox is polled. */
size_t
coll_mbox_offer(int dst, uint8_t *t)
{
    return td__mbox_offer(&M, dst, t);
}

/* World rank SRC offered its inbox (T, from an ack; a callback: recorded
 * only, mapped at our next send to it). */
void
coll_mbox_offered(int src, const uint8_t *t)
{
    td__mbox_offered(&M, src, t);
}

/* ---- the receiver's side --------------------------------------------- */

/* Write the ack of slot SLOT of SRC's mailbox (M1); POKE: wake the sender
 * if it sleeps (M5; never under coll_lock: it may send). */
void
coll_mbox_ack(int src, int slot, td_status_t status, uint8_t dtype,
              int ndim, const int64_t *shape, int poke)
{
    /* an error ack may carry no shape */
    if (td__mbox_ack(&M, src, slot, status, dtype, (uint8_t)ndim,
                     status != TD_OK ? shape : NULL, ndim, poke)) {
        send_poke(src);
    }
}

/* Read the message in slot K of SRC's mailbox into *M (M1: copied once,
 * then checked); 0 when it is malformed. */
static int
slot_read(int src, int k, const slot_t *s, coll_mbox_msg_t *m)
{
    m->src = src;
    m->slot = k;
    m->gid = s->w[0];
    m->digest = s->w[1];
    m->seq = s->w[2];
    m->tag = s->w[3];
    m->dtype = s->b[0];
    m->ndim = s->b[1];
    m->nbytes = s->len;
    if (m->ndim > TD_MAX_DIMS || m->dtype >= TD_NUM_DTYPES ||
        m->nbytes > MBOX_BODY || m->tag > (uint32_t)TD_TAG_MAX) {
        return 0;
    }
    memcpy(m->shape, s->data, 8 * (size_t)m->ndim);
    m->body = s->data + 8 * (size_t)m->ndim;
    return 1;
}

/* M6: a dropped message's slot comes back (match.h hook; no poke: coll_lock
 * may be held). */
static void
slot_drop(int src, int slot)
{
    coll_mbox_ack(src, slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
}

td_status_t
coll_mbox_receive(coll_req_t *r, const coll_mbox_msg_t *m, char *msg,
                  size_t len, int poke)
{
    td_status_t code;

    r->from = m->src;
    r->seq = m->seq;                /* the ack names the sender's seq */
    code = coll_p2p_fits(r, m->src, m->dtype, m->ndim, m->shape, m->nbytes,
                         msg, len);
    if (code == TD_OK && m->nbytes > 0) {
        memcpy(r->buf, m->body, m->nbytes);
    }
    coll_mbox_ack(m->src, m->slot, code, r->dtype, r->ndim, r->shape, poke);
    return code;
}

/* What a mailbox message came to (arrive_locked). */
typedef struct {
    td_status_t code;              /* the matched receive's status */
    int         fail;              /* fail the message's group with msg */
    char        msg[COLL_ERR_MAX];
} arrive_t;

/* coll_lock held (M4): a p2p message from world rank M->src read out of
 * its mailbox; rx.c's MSG_P2P path, with the body in the slot. Returns
 * the receive it matched, to be completed after the unlock with A->code
 * and A->msg (copied and acked here), or NULL (kept as unexpected, or
 * dropped and acked; A->fail: fail group M->gid with A->msg after the
 * unlock). Acks written here never poke (L4). */
static coll_req_t *
arrive_locked(const coll_mbox_msg_t *m, arrive_t *a)
{
    td_group_t *g;
    coll_req_t *r;
    coll_unexp_t *e;

    a->code = TD_OK;
    a->fail = 0;
    a->msg[0] = '\0';
    g = coll_group_find_locked(m->gid);
    if ((g == NULL && coll_group_gone_locked(m->gid)) ||
        (g != NULL && (g->broken != TD_OK || g->of_world[m->src] < 0 ||
                       g->me < 0))) {
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        return NULL;                          /* C11, C6: dropped */
    }
    if (g != NULL && g->digest != m->digest) {
        snprintf(a->msg, sizeof(a->msg), "coll: group %u has different "
                 "members on rank %d and rank %d (member digests %08x and "
                 "%08x): every rank must call td_group_new with the same "
                 "lists in the same order", m->gid, m->src, M.rank,
                 m->digest, g->digest);
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        a->fail = 1;
        return NULL;
    }
    r = coll_posted_take_locked(MSG_P2P, m->gid, m->src, m->seq, m->tag);
    if (r != NULL) {
        a->code = coll_mbox_receive(r, m, a->msg, sizeof(a->msg), 0);
        return r;
    }
    /* Unexpected: kept in its slot (M6, C7) until its receive is posted. */
    if ((e = coll_ux_new_locked()) == NULL) {
        td_log_error("coll: dropped a message from rank %d (group %u): %zu "
                     "unmatched messages queued already", m->src, m->gid,
                     coll_ux_count_locked());
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        return NULL;
    }
    e->type = MSG_P2P;
    e->dtype = m->dtype;
    e->ndim = m->ndim;
    e->group_id = m->gid;
    e->digest = m->digest;
    e->seq = m->seq;
    e->tag = m->tag;
    e->src = m->src;
    e->nbytes = m->nbytes;
    memcpy(e->shape, m->shape, sizeof(int64_t) * m->ndim);
    e->body = (void *)m->body;
    e->mbox_slot = m->slot + 1;
    e->arrived = 1;
    e->status = TD_OK;
    coll_ux_append_locked(e);
    return NULL;
}

/* Hand the messages waiting in SRC's mailbox to the matching engine, in
 * order (M3), one at a time under coll_lock (M4). */
static void
drain(int src)
{
    td__mbox_in_t *in = &M.in[src];
    int took = 0;
    slot_t *s;

    while (td__mbox_next_full(&M, src, &s)) {
        coll_mbox_msg_t m;
        arrive_t a;
        coll_req_t *r;
        int k;

        coll_lock();
        k = (int)(in->rd % TD__MBOX_SLOTS);
        s = td__mbox_in_slot(&M, src, k);
        if (atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_FULL || s->pos != in->rd) {
            coll_unlock();              /* another thread took it */
            continue;
        }
        td__mbox_in_advance(&M, src);
        took++;
        if (!slot_read(src, k, s, &m)) {
            coll_mbox_ack(src, k, TD_ERR_PROTOCOL, 0, 0, NULL, 0);
            coll_unlock();
            td_log_warn("coll: rejected a malformed mailbox message from "
                        "rank %d", src);
            continue;
        }
        r = arrive_locked(&m, &a);      /* acked, or kept (M6) */
        coll_unlock();
        if (r != NULL) {
            coll_req_complete(r, a.code, a.code != TD_OK ? a.msg : NULL);
        }
        if (a.fail) {
            coll_group_fail_quiet(NULL, m.gid, TD_ERR_INVALID, a.msg);
        }
    }
    /* M5: a sender asleep for its ack is poked (outside coll_lock: a
     * poke is a transport send, C1). */
    if (took > 0 && td__mbox_in_sender_sleeps(&M, src)) {
        send_poke(src);
    }
}

/* The oldest waiting message of SRC's mailbox, if it is for group GID
 * (members' digest DIGEST) and tag TAG: taken (M3) into *M for a receive
 * that nothing posted earlier could match (coll_post_recv; coll_lock
 * held, M4). 1 taken, 0 not (anything odd is left to drain). */
int
coll_mbox_take(int src, uint32_t gid, uint32_t digest, uint32_t tag,
               coll_mbox_msg_t *m)
{
    slot_t *s;
    int k;

    if (!td__mbox_in_polled(&M, src) || !td__mbox_next_full(&M, src, &s)) {
        return 0;
    }
    k = (int)(M.in[src].rd % TD__MBOX_SLOTS);
    if (!slot_read(src, k, s, m) || m->gid != gid || m->digest != digest ||
        m->tag != tag) {
        return 0;
    }
    td__mbox_in_advance(&M, src);
    return 1;
}

int
coll_mbox_from(int src)
{
    return td__mbox_from(&M, src);
}

int
coll_mbox_ready(int src)
{
    slot_t *s;

    return td__mbox_next_full(&M, src, &s);
}

void
coll_mbox_drain(int src)
{
    if (td__mbox_in_polled(&M, src)) {
        drain(src);
    }
}

/* ---- the sender's side -------------------------------------------------- */

/* An ack's fields out of slot S (M1: copied once, then checked). */
static void
ack_read(const slot_t *s, td_status_t *st, uint8_t *dtype, uint8_t *nd,
         int64_t *shape)
{
    *st = (td_status_t)s->ack_status;
    *dtype = s->ack_b[0];
    *nd = s->ack_b[1];
    if (*st != TD_OK && *nd <= TD_MAX_DIMS) {
        memcpy(shape, s->ack_ext, 8 * (size_t)*nd);
    }
    if (*nd > TD_MAX_DIMS || *st > TD_OK) {
        *st = TD_ERR_PROTOCOL;
        *nd = 0;
    }
}

/* Acks that came back into DST's mailbox: their sends taken off the
 * posted list under coll_lock (M4) and completed after it (the one who
 * takes a send off the posted list completes it, C2). */
static void
acks(int dst, out_t *o)
{
    struct {
        coll_req_t *r;
        td_status_t st;
        uint8_t     dtype, nd;
        int64_t     shape[TD_MAX_DIMS];
    } done[TD__MBOX_SLOTS];
    int n = 0;

    coll_lock();
    td__mbox_ring_lock(o);
    /* Slots come back in ring order only: an earlier one may be held. */
    for (uint32_t p = o->wr - (uint32_t)o->npend; p != o->wr; p++) {
        int k = (int)(p % TD__MBOX_SLOTS);
        slot_t *s = &o->mb->slot[k];

        if (__atomic_load_n(&o->handled[k], __ATOMIC_RELAXED) ||
            __atomic_load_n(&o->lean[k], __ATOMIC_RELAXED) ||
            atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_ACKED) {
            continue;                   /* taken, or its thread's (M9) */
        }
        ack_read(s, &done[n].st, &done[n].dtype, &done[n].nd, done[n].shape);
        /* our own copy of what the slot was for, not the peer's */
        done[n].r = coll_posted_take_locked(MSG_ACK, o->id[k][0], dst,
                                            o->id[k][1], 0);
        n += done[n].r != NULL;
        __atomic_store_n(&o->handled[k], 1, __ATOMIC_RELAXED);
                                                /* freed in ring order */
    }
    td__mbox_ring_free_locked(o);
    td__mbox_ring_unlock(o);
    coll_unlock();
    for (int i = 0; i < n; i++) {
        coll_ack_complete(done[i].r, dst, done[i].st, done[i].dtype,
                              done[i].nd, done[i].shape);
    }
}

/* Can R go to world rank DST through its mailbox? Attaches it at the
 * first send after its offer. */
static out_t *
out_usable(const coll_req_t *r, int dst)
{
    if (r->nbytes > MBOX_BODY) {
        return NULL;
    }
    return td__mbox_out_usable(&M, dst);
}

/* Write R into slot S at ring position POS (M1). All in one go: the
 * receiver polls this line, and a locked instruction between the first
 * store and the state would let it read the line back from under us (a
 * second transfer). */
static void
slot_write(slot_t *s, uint32_t pos, const coll_req_t *r, int fault)
{
    s->pos = pos;
    s->w[0] = r->group_id;
    s->w[1] = r->g->digest;
    s->w[2] = r->seq;
    s->w[3] = r->tag;
    s->b[0] = r->dtype;
    s->b[1] = r->ndim;
    s->len = r->nbytes;
    memcpy(s->data, r->shape, 8 * (size_t)r->ndim);
    if (r->nbytes > 0) {
        memcpy(s->data + 8 * (size_t)r->ndim, r->buf, r->nbytes);
    }
    if (fault == TD_TRANSPORT_FAULT_CORRUPT) {
        s->b[1] = 0xff;                 /* the receiver must reject it */
    }
    atomic_store_explicit(&s->state, SLOT_FULL, memory_order_release);
}

/* A message is in DST's inbox: poke its waiters if they sleep (M5: no
 * fence; never under coll_lock: a poke is a transport send). */
static void
slot_published(out_t *o, int dst)
{
    if (td__mbox_receiver_sleeps(o)) {
        send_poke(dst);
    }
}

/* coll_lock held: R, a send through DST's mailbox, posted (for its ack)
 * before the slot is published, since the ack may come at once. */
static void
post_locked(coll_req_t *r, int dst)
{
    /* relaxed: published to other threads by coll_lock */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = dst;
    r->cma_send = 0;
    atomic_store_explicit(&r->tp_counted, 0, memory_order_relaxed);
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    coll_posted_append_locked(r);
}

/* Post R to DST through its mailbox with TODIST_FAULT's verdict FAULT. */
static int
mbox_send(coll_req_t *r, int dst, out_t *o, int fault)
{
    slot_t *s;
    uint32_t pos;
    int k;

    coll_lock();
    td__mbox_ring_lock(o);
    if (!td__mbox_slot_reserve(o, &k)) {
        td__mbox_ring_unlock(o);
        coll_unlock();
        return 0;                       /* M2, M3: the transport, this time */
    }
    s = &o->mb->slot[k];
    /* Posted first (the ack may come at once), then the slot written in
     * one go: the receiver polls this line, and any locked instruction
     * between the first store and the state would let it read the line
     * back from under us (a second transfer). */
    post_locked(r, dst);
    if (fault == TD_TRANSPORT_FAULT_DROP) {
        td__mbox_ring_unlock(o);
        coll_unlock();                  /* lost: the send times out */
        return 1;
    }
    pos = td__mbox_slot_take(o, k, r->group_id, r->seq);
    slot_write(s, pos, r, fault);
    td__mbox_ring_unlock(o);
    coll_unlock();
    slot_published(o, dst);
    return 1;
}

/* Send R (a p2p send, header fields in R) to world rank DST through its
 * mailbox: 1 when posted so (R in the posted list, completed by the ack),
 * 0: use the transport. */
int
coll_mbox_send(coll_req_t *r, int dst)
{
    out_t *o = out_usable(r, dst);

    return o != NULL && mbox_send(r, dst, o, fault_roll());
}

/* td_send's fast path (M9): R (a p2p send, its seq taken) to world rank
 * DST through its mailbox, this thread polling the slot for the ack.
 * 1: done, R's status and err set; 2: sent and posted (wait for R); 0:
 * not sent (the full path). G: R's group, checked while it spins. */
int
coll_mbox_send_fast(coll_req_t *r, int dst)
{
    out_t *o = out_usable(r, dst);
    slot_t *s;
    double t_first = 0;
    uint32_t pos;
    int fault, k;
    td_status_t st;
    uint8_t dtype, nd;
    int64_t shape[TD_MAX_DIMS];

    if (o == NULL) {
        return 0;
    }
    fault = fault_roll();          /* TODIST_FAULT "mbox" (tests) */
    if (fault != TD_TRANSPORT_FAULT_NONE) {
        return mbox_send(r, dst, o, fault) ? 2 : 0;
    }
    td__mbox_ring_lock(o);      /* (no posted request: not coll_lock) */
    if (!td__mbox_slot_reserve(o, &k)) {
        td__mbox_ring_unlock(o);
        return 0;
    }
    __atomic_store_n(&o->lean[k], 1, __ATOMIC_RELAXED);
    pos = td__mbox_slot_take(o, k, r->group_id, r->seq);
    td__mbox_ring_unlock(o);
    /* The slot is this thread's (lean) from here: written after the
     * unlock, so that no locked instruction waits for its line to move. */
    s = &o->mb->slot[k];
    slot_write(s, pos, r, 0);
    slot_published(o, dst);
    coll_mbox_fast_count(1);    /* (whether acked in the spin or not) */
    for (unsigned i = 0; atomic_load_explicit(&s->state,
                                              memory_order_acquire) !=
                         SLOT_ACKED; i++) {
        if ((i & 63) == 63 && (coll_spin_over(&t_first, r->g) ||
                               atomic_load_explicit(&o->dead,
                                                    memory_order_relaxed))) {
            break;
        }
        td_cpu_relax();
    }
    if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_ACKED) {
        coll_lock();
        if (atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_ACKED) {
            /* M9: posted before the slot is let go, so its ack finds it */
            post_locked(r, dst);
            __atomic_store_n(&o->lean[k], 0, __ATOMIC_RELAXED);
            coll_unlock();
            return 2;
        }
        coll_unlock();
    }
    ack_read(s, &st, &dtype, &nd, shape);
    __atomic_store_n(&o->handled[k], 1, __ATOMIC_RELEASE);   /* M9 */
    r->status = TD_OK;
    if (st != TD_OK) {
        atomic_store(&r->pending, 1);
        coll_ack_complete(r, dst, st, dtype, nd, shape);
    }
    return 1;
}

/* A transport p2p send to DST begins / ends (M2). */
void
coll_mbox_tp_begin(int dst)
{
    td__mbox_tp_begin(&M, dst);
}

void
coll_mbox_tp_end(int dst)
{
    td__mbox_tp_end(&M, dst);
}

void
coll_mbox_peer_dead(int rank)
{
    td__mbox_peer_dead(&M, rank);
}

/* ---- polling and sleeping ----------------------------------------------- */

/* Do messages from or to world rank RANK go through mailboxes? */
int
coll_mbox_local(int rank)
{
    return td__mbox_local(&M, rank);
}

int
coll_mbox_active(void)
{
    return td__mbox_active(&M);
}

/* Drain our inbox's mailboxes (WHAT & MBOX_POLL_IN) and take the acks
 * of our mailbox sends (WHAT & MBOX_POLL_ACKS). */
void
coll_mbox_poll_some(int what)
{
    int n;

    if (!atomic_load_explicit(&M.active, memory_order_acquire)) {
        return;
    }
    n = (what & MBOX_POLL_ACKS) ?
        atomic_load_explicit(&M.n_out, memory_order_acquire) : 0;
    for (int i = 0; i < n; i++) {
        int dst = M.out_list[i];
        out_t *o = &M.out[dst];

        if (__atomic_load_n(&o->npend, __ATOMIC_RELAXED) > 0 &&
            td__mbox_acks_ready(o)) {
            acks(dst, o);
        }
    }
    n = (what & MBOX_POLL_IN) ?
        atomic_load_explicit(&M.n_in, memory_order_acquire) : 0;
    for (int i = 0; i < n; i++) {
        int src = M.in_list[i];
        slot_t *s;

        if (td__mbox_next_full(&M, src, &s)) {
            drain(src);
        }
    }
}

void
coll_mbox_poll(void)
{
    coll_mbox_poll_some(MBOX_POLL_IN | MBOX_POLL_ACKS);
}

/* A waiter goes to sleep (M5): announced in our inbox and in every
 * mailbox we write. Returns what sleep_end takes back (the inbox and the
 * mailboxes attached so far: more may be attached meanwhile). */
int
coll_mbox_sleep_begin(void)
{
    return td__mbox_sleep_begin(&M);
}

void
coll_mbox_sleep_end(int cookie)
{
    td__mbox_sleep_end(&M, cookie);
}
