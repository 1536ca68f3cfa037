/* match.c: the posted and unexpected lists, the table of live groups and
 * their failure, request completion, and the waiters' sleep and wake
 * (match.h: C2, C3, C6, C7, C11 and the lock, L1-L7). */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/coll/match.h"
#include "runtime/coll/conf.h"
#include "base/clock.h"
#include "base/log.h"

static struct {
    pthread_mutex_t lock;              /* coll_lock (L1) */
    coll_req_t     *posted_head, *posted_tail;
    coll_unexp_t   *ux_head, *ux_tail;
    size_t          n_ux;
    td_group_t     *groups[TD_GROUPS_MAX];
    int             groups_hi;         /* slots used so far: the rest NULL */
    uint32_t        id_max;            /* highest group id registered
                                        * below COLL_EPOCH_ID_BASE */
    uint32_t        epoch_id_max;      /* highest at or above it, below
                                        * COLL_REFORM_ID_BASE */
    uint32_t        reform_id_max;     /* highest at or above that */
    coll_match_hooks_t hooks;          /* mbox.c's (set before any use) */
    coll_refuse_fn  refuse;            /* rx.c's (C14, set before use) */
    uint32_t        gone_broken[COLL_GONE_BROKEN];  /* C14: ids destroyed
                                        * broken, a ring (0: none) */
    unsigned        gone_broken_at;
    _Atomic(coll_unexp_t *) ux_spare;  /* C13: one freed entry, kept */
    pthread_mutex_t wait_lock;         /* L6 */
    pthread_cond_t  wait_cond;
    atomic_int      waiters;
    atomic_ulong    completions;       /* requests completed (progress) */
} C = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wait_lock = PTHREAD_MUTEX_INITIALIZER,
    .wait_cond = PTHREAD_COND_INITIALIZER,
};

void coll_lock(void) { pthread_mutex_lock(&C.lock); }
void coll_unlock(void) { pthread_mutex_unlock(&C.lock); }

void
coll_match_set_hooks(const coll_match_hooks_t *h)
{
    C.hooks = *h;
}

void
coll_match_set_refuse(coll_refuse_fn refuse)
{
    C.refuse = refuse;
}

/* ---- sleeping and waking ------------------------------------------------ */

unsigned long
coll_completions(void)
{
    return atomic_load_explicit(&C.completions, memory_order_relaxed);
}

void
coll_wake(void)
{
    td_transport_t *tp = coll_transport();

    if (atomic_load(&C.waiters) > 0) {
        pthread_mutex_lock(&C.wait_lock);
        pthread_cond_broadcast(&C.wait_cond);
        pthread_mutex_unlock(&C.wait_lock);
    }
    if (tp != NULL) {
        td__transport_wake(tp);
    }
}

void
coll_sleep(int (*check)(const void *), const void *arg, double first_nap,
           void (*poll)(void))
{
    pthread_mutex_lock(&C.wait_lock);
    atomic_fetch_add(&C.waiters, 1);
    /* mbox.c M5: announced to mailbox writers, who read it without a
     * fence, a first nap, then a poll that sees any write that missed it */
    for (int nap = first_nap > 0; !check(arg); nap = 0) {
        struct timespec ts;

        td_deadline_after(nap ? first_nap : 0.002, &ts);
        pthread_cond_timedwait(&C.wait_cond, &C.wait_lock, &ts);
        if (!nap) {
            break;
        }
        pthread_mutex_unlock(&C.wait_lock);
        poll();
        pthread_mutex_lock(&C.wait_lock);
    }
    atomic_fetch_sub(&C.waiters, 1);
    pthread_mutex_unlock(&C.wait_lock);
}

/* ---- requests -------------------------------------------------------------- */

void
coll_req_complete(coll_req_t *r, td_status_t status, const char *msg)
{
    if (status != TD_OK) {
        pthread_mutex_lock(&C.lock);
        if (r->status == TD_OK) {
            r->status = status;
            snprintf(r->err, sizeof(r->err), "%s", msg != NULL ? msg :
                     td_strerror(status));
        }
        pthread_mutex_unlock(&C.lock);
    }
    /* a "something completed" hint for the waiters' spin (no locked
     * instruction: a lost increment still changes the value) */
    atomic_store_explicit(&C.completions,
                          atomic_load_explicit(&C.completions,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
    /* The last completion due (C3): when only ours is left nobody else
     * touches `pending`, so no locked instruction is needed. */
    if (atomic_load_explicit(&r->pending, memory_order_acquire) == 1 ||
        atomic_fetch_sub(&r->pending, 1) == 1) {
        void (*on_done)(coll_req_t *) = r->on_done;

        atomic_store_explicit(&r->pending, 0, memory_order_relaxed);
        /* (only p2p.c's sends set it: a collective's stack requests
         * are not zeroed) */
        if (r->type == REQ_SEND_P2P && atomic_exchange(&r->tp_counted, 0) &&
            C.hooks.tp_end != NULL) {
            C.hooks.tp_end(r->peer);            /* mbox.c M2 */
        }
        atomic_store(&r->done, 1);     /* seq_cst: then coll_wake reads */
        coll_wake();
        if (on_done != NULL) {
            on_done(r);            /* a work handle keeps R alive (C3) */
        }
    }
}

void
coll_req_complete_list(coll_req_t *list, td_status_t code, const char *msg)
{
    while (list != NULL) {
        coll_req_t *next = list->next;

        coll_req_complete(list, code, msg);
        list = next;
    }
}

/* ---- the posted list ------------------------------------------------------- */

void
coll_posted_append_locked(coll_req_t *r)
{
    r->next = NULL;
    if (C.posted_tail != NULL) {
        C.posted_tail->next = r;
    } else {
        C.posted_head = r;
    }
    C.posted_tail = r;
}

/* Take Q, whose predecessor is PREV (NULL: Q is the head), off the list. */
static void
posted_unlink(coll_req_t *prev, coll_req_t *q)
{
    if (prev != NULL) {
        prev->next = q->next;
    } else {
        C.posted_head = q->next;
    }
    if (C.posted_tail == q) {
        C.posted_tail = prev;
    }
}

int
coll_posted_remove_locked(coll_req_t *r)
{
    coll_req_t *p = NULL;

    for (coll_req_t *q = C.posted_head; q != NULL; p = q, q = q->next) {
        if (q == r) {
            posted_unlink(p, q);
            return 1;
        }
    }
    return 0;
}

void
coll_post(coll_req_t *r)
{
    pthread_mutex_lock(&C.lock);
    coll_posted_append_locked(r);
    pthread_mutex_unlock(&C.lock);
}

int
coll_unpost(coll_req_t *r)
{
    int took;

    pthread_mutex_lock(&C.lock);
    took = coll_posted_remove_locked(r);
    pthread_mutex_unlock(&C.lock);
    return took;
}

/* Does posted request Q take a TYPE message with these keys? */
static int
posted_hit(const coll_req_t *q, unsigned type, int src, uint32_t seq,
           uint32_t tag)
{
    switch (type) {
    case MSG_P2P:
        return q->type == REQ_RECV_P2P && q->tag == tag && !q->exact_seq &&
               (q->peer < 0 || q->peer == src);
    case MSG_P2P_RESEND:
        return q->type == REQ_RECV_P2P && q->tag == tag && q->exact_seq &&
               q->seq == seq && q->peer == src;
    case MSG_COLL:
        return q->type == REQ_RECV_COLL && q->seq == seq && q->tag == tag &&
               q->peer == src;
    case MSG_ACK:
        return q->type == REQ_SEND_P2P && q->seq == seq && q->peer == src;
    case MSG_CMA:
        return (q->type == REQ_SEND_COLL || q->type == REQ_SEND_P2P) &&
               q->cma_send && q->seq == seq && q->tag == tag &&
               q->peer == src;
    default:
        return 0;
    }
}

coll_req_t *
coll_posted_take_locked(unsigned type, uint32_t gid, int src, uint32_t seq,
                        uint32_t tag)
{
    coll_req_t *p = NULL;

    for (coll_req_t *q = C.posted_head; q != NULL; p = q, q = q->next) {
        if (q->group_id == gid && posted_hit(q, type, src, seq, tag)) {
            posted_unlink(p, q);
            return q;
        }
    }
    return NULL;
}

int
coll_posted_p2p_from_locked(const coll_req_t *r)
{
    for (const coll_req_t *q = C.posted_head; q != NULL; q = q->next) {
        if (q->type == REQ_RECV_P2P && q->group_id == r->group_id &&
            (q->peer < 0 || q->peer == r->peer)) {
            return 1;
        }
    }
    return 0;
}

/* ---- the unexpected list --------------------------------------------------- */

coll_unexp_t *
coll_ux_new_locked(void)
{
    coll_unexp_t *e;

    if (C.n_ux >= COLL_UNEXPECTED_MAX) {
        return NULL;
    }
    e = atomic_exchange_explicit(&C.ux_spare, NULL, memory_order_acquire);
    if (e != NULL) {
        /* C13: zeroed but for the small body's bytes */
        memset(e, 0, offsetof(coll_unexp_t, small));
        return e;
    }
    return calloc(1, sizeof(coll_unexp_t));
}

void
coll_ux_append_locked(coll_unexp_t *e)
{
    e->next = NULL;
    if (C.ux_tail != NULL) {
        C.ux_tail->next = e;
    } else {
        C.ux_head = e;
    }
    C.ux_tail = e;
    __atomic_store_n(&C.n_ux, C.n_ux + 1, __ATOMIC_SEQ_CST);    /* L8 */
}

void
coll_ux_remove_locked(coll_unexp_t *e)
{
    coll_unexp_t *p = NULL;

    for (coll_unexp_t *q = C.ux_head; q != NULL; p = q, q = q->next) {
        if (q == e) {
            if (p != NULL) {
                p->next = q->next;
            } else {
                C.ux_head = q->next;
            }
            if (C.ux_tail == q) {
                C.ux_tail = p;
            }
            __atomic_store_n(&C.n_ux, C.n_ux - 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

int
coll_ux_any(void)
{
    return __atomic_load_n(&C.n_ux, __ATOMIC_SEQ_CST) != 0;
}

void
coll_cur_publish(td_group_t *g, uint32_t seq, const coll_desc_t *d)
{
    unsigned v = g->cur_gen;           /* (its one writer, L8) */

    __atomic_store_n(&g->cur_gen, v + 1, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_release);
    g->cur_seq = seq;
    g->cur_desc = *d;
    __atomic_store_n(&g->begun, seq + 1, __ATOMIC_RELAXED);  /* late.c K1 */
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&g->cur_gen, v + 2, __ATOMIC_RELAXED);
}

int
coll_cur_get(const td_group_t *g, uint32_t *seq, coll_desc_t *d)
{
    for (;;) {
        unsigned v = __atomic_load_n(&g->cur_gen, __ATOMIC_ACQUIRE);
        int in_op = __atomic_load_n(&g->in_op, __ATOMIC_SEQ_CST); /* L8 */

        *seq = g->cur_seq;
        *d = g->cur_desc;
        atomic_thread_fence(memory_order_acquire);
        if (!(v & 1) && __atomic_load_n(&g->cur_gen, __ATOMIC_RELAXED) == v) {
            return in_op;
        }
    }
}

size_t
coll_ux_count_locked(void)
{
    return C.n_ux;
}

void
coll_ux_free(coll_unexp_t *e)
{
    if (e->mbox_slot) {
        /* M6: dropped unreceived; the sender gets its slot back (no
         * poke: coll_lock may be held, L4). */
        if (C.hooks.slot_drop != NULL) {
            C.hooks.slot_drop(e->src, e->mbox_slot - 1);
        }
        e->body = NULL;
    }
    if (e->body != e->small) {
        free(e->body);
    }
    free(e->text);
    if (!atomic_compare_exchange_strong_explicit(&C.ux_spare,
                                                 &(coll_unexp_t *){ NULL }, e,
                                                 memory_order_release,
                                                 memory_order_relaxed)) {
        free(e);                        /* C13: one is kept already */
    }
}

/* Does unexpected E match posted receive R? */
static int
ux_matches(const coll_unexp_t *e, const coll_req_t *r)
{
    if (e->group_id != r->group_id || e->claim != NULL || e->orphan) {
        return 0;
    }
    if (r->type == REQ_RECV_P2P) {
        return e->type == MSG_P2P && e->tag == r->tag &&
               (r->peer < 0 || r->peer == e->src);
    }
    return e->type == MSG_COLL && e->seq == r->seq && e->tag == r->tag &&
           e->src == r->peer;
}

coll_unexp_t *
coll_ux_find_locked(const coll_req_t *r)
{
    coll_unexp_t *e;

    for (e = C.ux_head; e != NULL && !ux_matches(e, r); e = e->next) {
    }
    return e;
}

coll_unexp_t *
coll_ux_mismatch_locked(uint32_t gid, uint32_t seq, const coll_desc_t *d)
{
    for (coll_unexp_t *e = C.ux_head; e != NULL; e = e->next) {
        if (e->type == MSG_COLL && e->group_id == gid && e->seq == seq &&
            !coll_desc_equal(&e->desc, d)) {
            return e;
        }
    }
    return NULL;
}

int
coll_ux_needs_answer(const coll_unexp_t *e)
{
    /* (a mailbox message's slot is its answer: M6) */
    return e->mbox_slot == 0 && (e->type == MSG_P2P || e->type == MSG_COLL);
}

/* Free the unclaimed unexpected messages of group GID (ABORTs too if
 * WITH_ABORT); one whose body is still landing is freed when it lands
 * (recv.c answers it then). Those whose senders wait for an answer go
 * onto *ANSWER instead (C14: answered and freed after the unlock, by
 * ux_answer_list); ANSWER NULL: freed unanswered (td_finalize). */
static size_t
ux_drop_group_locked(uint32_t gid, int with_abort, coll_unexp_t **answer)
{
    size_t n = 0;

    for (coll_unexp_t *e = C.ux_head, *en; e != NULL; e = en) {
        en = e->next;
        if (e->group_id == gid && e->claim == NULL &&
            (with_abort || e->type != MSG_ABORT)) {
            n++;
            if (e->arrived) {
                coll_ux_remove_locked(e);
                if (answer != NULL && coll_ux_needs_answer(e)) {
                    e->next = *answer;
                    *answer = e;
                } else {
                    coll_ux_free(e);
                }
            } else {
                e->orphan = 1;
            }
        }
    }
    return n;
}

/* C14: answer the senders of LIST's dropped messages (all of one group,
 * whose failure here is FAIL, MSG; TD_OK: destroyed unbroken), then free
 * them (no lock held: an answer is a transport send, L4). A collective's
 * sender is answered once: one abort fails its group. */
static void
ux_answer_list(coll_unexp_t *list, td_status_t fail, const char *msg)
{
    int n = coll_world_size();
    uint8_t *told = list != NULL && n > 0 ? calloc((size_t)n, 1) : NULL;

    while (list != NULL) {
        coll_unexp_t *next = list->next;
        int once = list->type == MSG_COLL && list->src >= 0 &&
                   list->src < n;

        /* an offer in place is answered each (cma.h C15), the rest once */
        if (C.refuse != NULL &&
            (list->cma || !(once && told != NULL && told[list->src]))) {
            C.refuse(list, fail, msg);
            if (once && told != NULL) {
                told[list->src] = 1;
            }
        }
        coll_ux_free(list);
        list = next;
    }
    free(told);
}

/* ---- groups: the table and failure ---------------------------------------- */

td_group_t *
coll_group_find_locked(uint32_t id)
{
    /* every message looks its group up: scan the used slots only */
    for (int i = 0; i < C.groups_hi; i++) {
        if (C.groups[i] != NULL && C.groups[i]->id == id) {
            return C.groups[i];
        }
    }
    return NULL;
}

int
coll_group_gone_locked(uint32_t gid)
{
    /* Two counters: an epoch's group (elastic, coll_group_new_id) must not
     * make a user group not created here yet look destroyed. */
    uint32_t max = gid >= COLL_REFORM_ID_BASE ? C.reform_id_max :
                   gid >= COLL_EPOCH_ID_BASE ? C.epoch_id_max : C.id_max;

    return gid != 0 && gid <= max && coll_group_find_locked(gid) == NULL;
}

/* Fail G: returns the requests to complete after the unlock (linked
 * through next); *ANSWER gets the dropped messages to answer then
 * (C14). */
static coll_req_t *
group_fail_locked(td_group_t *g, td_status_t code, const char *msg,
                  coll_unexp_t **answer)
{
    coll_req_t *out = NULL, *p = NULL, *q, *next;

    if (g->broken != TD_OK) {
        return NULL;
    }
    snprintf(g->broken_msg, sizeof(g->broken_msg), "%s", msg);
    /* waits read broken without coll_lock (atomic, then the message
     * under it): an atomic store, not a plain one */
    __atomic_store_n(&g->broken, code, __ATOMIC_RELEASE);
    for (q = C.posted_head; q != NULL; q = next) {
        next = q->next;
        if (q->group_id == g->id && q->cma_send &&
            (q->type == REQ_SEND_COLL || q->type == REQ_SEND_P2P)) {
            /* cma.h C15: its reader may be copying the buffer now: it
             * stays posted, failed, until the reader answers or dies */
            if (q->status == TD_OK) {
                q->status = code;
                snprintf(q->err, sizeof(q->err), "%s", msg);
            }
            p = q;
        } else if (q->group_id == g->id) {
            posted_unlink(p, q);
            q->next = out;
            out = q;
        } else {
            p = q;
        }
    }
    /* Unclaimed messages of a broken group are never received (C6). */
    ux_drop_group_locked(g->id, 0, answer);
    return out;
}

int
coll_group_fail_local(td_group_t *g, uint32_t gid, td_status_t code,
                      const char *msg, int **tell, int *n_tell,
                      uint32_t *gid_p, uint32_t *digest_p)
{
    coll_req_t *list;
    coll_unexp_t *answer = NULL;
    int first;

    if (tell != NULL) {
        *tell = NULL;
        *n_tell = 0;
    }
    /* By id from transport callbacks: td_group_destroy on another thread
     * may free the group as soon as coll_lock is dropped, so what the
     * abort needs is taken under the lock. */
    pthread_mutex_lock(&C.lock);
    if (g == NULL && (g = coll_group_find_locked(gid)) == NULL) {
        pthread_mutex_unlock(&C.lock);
        return 0;
    }
    first = g->broken == TD_OK;
    list = group_fail_locked(g, code, msg, &answer);
    if (first && tell != NULL &&
        (*tell = malloc(sizeof(int) * (size_t)g->n)) != NULL) {
        for (int i = 0; i < g->n; i++) {
            if (i != g->me) {
                (*tell)[(*n_tell)++] = g->ranks[i];
            }
        }
        *gid_p = g->id;
        *digest_p = g->digest;
    }
    gid = g->id;
    pthread_mutex_unlock(&C.lock);
    coll_req_complete_list(list, code, msg);
    ux_answer_list(answer, code, msg);                          /* C14 */
    if (first) {
        td_log_debug("coll: group %u broken: %s", gid, msg);
    }
    return first;
}

void
coll_group_tx_failed(td_group_t *g, int to, td_status_t code,
                     const char *msg)
{
    int first = 0;

    pthread_mutex_lock(&C.lock);
    if (g->tx_failed == TD_OK) {
        snprintf(g->tx_failed_msg, sizeof(g->tx_failed_msg), "%s", msg);
        g->tx_failed_at = td_now_s();
        g->tx_failed_to = to;
        __atomic_store_n(&g->tx_failed, code, __ATOMIC_RELEASE);
        first = 1;
    }
    pthread_mutex_unlock(&C.lock);
    if (first) {
        coll_wake();
    }
}

void
coll_group_fail_quiet(td_group_t *g, uint32_t gid, td_status_t code,
                      const char *msg)
{
    if (coll_group_fail_local(g, gid, code, msg, NULL, NULL, NULL, NULL)) {
        coll_wake();
    }
}

td_status_t
coll_group_check(td_group_t *g)
{
    td_status_t st;
    char msg[COLL_ERR_MAX];

    if (g->me < 0 && g->n == 0) {
        return td_error(TD_ERR_STATE, "coll: group %u has no member left: "
                        "an elastic recovery took every one of its %d "
                        "ranks", g->made_id, g->made_n);
    }
    if (g->me < 0) {
        return td_error(TD_ERR_STATE, "coll: this rank (%d) is not a member "
                        "of group %u", coll_world_rank(), g->id);
    }
    if (coll_stopped() || coll_transport() == NULL) {
        return td_error(TD_ERR_STATE, "coll: the runtime is not running "
                        "(td_init not called, or td_finalize was)");
    }
    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) == TD_OK) {
        return TD_OK;                   /* C6: once broken, it stays so */
    }
    pthread_mutex_lock(&C.lock);
    st = g->broken;
    if (st != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", g->broken_msg);
    }
    pthread_mutex_unlock(&C.lock);
    if (st != TD_OK) {
        return td_error(st, "%s (group %u is broken by that failure: make a "
                        "new group)", msg, g->id);
    }
    return TD_OK;
}

td_status_t
coll_group_register(td_group_t *g)
{
    int slot = -1;
    coll_unexp_t *abort_e = NULL;

    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] == NULL) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        pthread_mutex_unlock(&C.lock);
        return td_error(TD_ERR_RANGE, "coll: more than %d live groups; "
                        "destroy some", TD_GROUPS_MAX);
    }
    C.groups[slot] = g;
    if (slot >= C.groups_hi) {
        C.groups_hi = slot + 1;
    }
    g->registered = 1;
    if (g->id >= COLL_REFORM_ID_BASE) {
        if (g->id > C.reform_id_max) {
            C.reform_id_max = g->id;
        }
    } else if (g->id >= COLL_EPOCH_ID_BASE) {
        if (g->id > C.epoch_id_max) {
            C.epoch_id_max = g->id;
        }
    } else if (g->id > C.id_max) {
        C.id_max = g->id;
    }
    /* A member may have failed the group before we made it. */
    for (coll_unexp_t *e = C.ux_head; e != NULL; e = e->next) {
        if (e->type == MSG_ABORT && e->group_id == g->id) {
            abort_e = e;
            coll_ux_remove_locked(e);
            break;
        }
    }
    pthread_mutex_unlock(&C.lock);
    if (abort_e != NULL) {
        coll_group_fail_quiet(g, 0, (td_status_t)abort_e->code,
                              abort_e->text);
        coll_ux_free(abort_e);
    }
    return TD_OK;
}

int
coll_group_gone_broken_locked(uint32_t gid)
{
    for (int i = 0; i < COLL_GONE_BROKEN; i++) {
        if (C.gone_broken[i] == gid && gid != 0) {
            return 1;
        }
    }
    return 0;
}

void
coll_group_unregister(td_group_t *g)
{
    coll_unexp_t *answer = NULL;
    td_status_t fail;
    char msg[COLL_ERR_MAX];
    size_t n;

    pthread_mutex_lock(&C.lock);
    fail = g->broken;
    if (fail != TD_OK) {
        /* C14: what still comes for it needs no answer */
        snprintf(msg, sizeof(msg), "%s", g->broken_msg);
        C.gone_broken[C.gone_broken_at++ % COLL_GONE_BROKEN] = g->id;
    }
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] == g) {
            C.groups[i] = NULL;
        }
    }
    g->registered = 0;
    /* C11: what is queued for it will never be received */
    n = ux_drop_group_locked(g->id, 1, &answer);
    pthread_mutex_unlock(&C.lock);
    ux_answer_list(answer, fail, fail != TD_OK ? msg : NULL);  /* C14 */
    if (n > 0) {
        td_log_debug("coll: group %u destroyed with %zu unreceived "
                     "messages: freed", g->id, n);
    }
}

void
coll_peer_fail_text(char *msg, size_t len, const char *what, int rank,
                    td_status_t status)
{
    char where[256], fate[160];

    td__runtime_host_text(rank, where, sizeof(where));
    if (status == TD_ERR_PEER) {
        td__runtime_peer_fate(rank, fate, sizeof(fate));          /* L12 */
    }
    snprintf(msg, len, "coll: %s rank %d%s%s%s failed: %s%s", what, rank,
             where[0] ? " (" : "", where, where[0] ? ")" : "",
             status == TD_ERR_PEER ? "the rank " : "",
             status == TD_ERR_PEER ? fate : td_strerror(status));
}

void
coll_match_peer_dead(int rank)
{
    struct { uint32_t id; int grank, n; } hit[TD_GROUPS_MAX];
    int n_hit = 0;
    char where[256];      /* the host and its ranks, when another host */
    char fate[160];       /* "died", or it dropped this rank (L12) */
    coll_req_t *out = NULL, *p = NULL, *next;

    /* Ids, not pointers: a group may be destroyed once the lock is
     * dropped (coll_group_fail_local looks it up again). */
    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        td_group_t *g = C.groups[i];

        if (g != NULL && g->me >= 0 && rank < coll_world_size() &&
            g->of_world[rank] >= 0) {
            hit[n_hit].id = g->id;
            hit[n_hit].grank = g->of_world[rank];
            hit[n_hit++].n = g->n;
        }
    }
    pthread_mutex_unlock(&C.lock);
    td__runtime_host_text(rank, where, sizeof(where));
    td__runtime_peer_fate(rank, fate, sizeof(fate));
    for (int i = 0; i < n_hit; i++) {
        char msg[COLL_ERR_MAX];

        snprintf(msg, sizeof(msg), "coll: rank %d (group rank %d of group "
                 "%u, %d members%s%s) %s", rank, hit[i].grank, hit[i].id,
                 hit[i].n, where[0] ? "; " : "", where, fate);
        coll_group_fail_quiet(NULL, hit[i].id, TD_ERR_PEER, msg);
    }
    /* Sends waiting for an ack from it in any group, too. */
    pthread_mutex_lock(&C.lock);
    for (coll_req_t *q = C.posted_head; q != NULL; q = next) {
        next = q->next;
        if (q->peer == rank) {
            posted_unlink(p, q);
            q->next = out;
            out = q;
        } else {
            p = q;
        }
    }
    pthread_mutex_unlock(&C.lock);
    while (out != NULL) {
        char msg[COLL_ERR_MAX];

        next = out->next;
        snprintf(msg, sizeof(msg), "coll: rank %d%s%s%s %s with a "
                 "point-to-point message pending", rank, where[0] ? " (" : "",
                 where, where[0] ? ")" : "", fate);
        coll_req_complete(out, TD_ERR_PEER, msg);
        out = next;
    }
}

int
coll_groups_live(td_group_t **live)
{
    int n = 0;

    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] != NULL) {
            live[n++] = C.groups[i];
        }
    }
    pthread_mutex_unlock(&C.lock);
    return n;
}

void
coll_match_reset(void)
{
    coll_req_t *list;

    pthread_mutex_lock(&C.lock);
    list = C.posted_head;
    C.posted_head = C.posted_tail = NULL;
    /* Groups the user still holds leave the table: a later td_init
     * numbers its groups from 1 again. */
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] != NULL) {
            C.groups[i]->registered = 0;
            C.groups[i] = NULL;
        }
    }
    C.groups_hi = 0;
    pthread_mutex_unlock(&C.lock);
    coll_req_complete_list(list, TD_ERR_CANCELED,
                           "coll: the runtime shut down");
    pthread_mutex_lock(&C.lock);
    while (C.ux_head != NULL) {
        coll_unexp_t *e = C.ux_head;

        C.ux_head = e->next;
        if (e->arrived) {
            coll_ux_free(e);
        } else {
            e->orphan = 1;           /* freed if its body still lands */
            e->claim = NULL;
        }
    }
    C.ux_tail = NULL;
    __atomic_store_n(&C.n_ux, 0, __ATOMIC_RELAXED);
    free(atomic_exchange(&C.ux_spare, NULL));   /* C13 */
    C.id_max = 0;                    /* ids start again at the next init */
    memset(C.gone_broken, 0, sizeof(C.gone_broken));
    C.epoch_id_max = 0;
    C.reform_id_max = 0;
    pthread_mutex_unlock(&C.lock);
}

/* ---- checks of a p2p message -------------------------------------------- */

void
coll_shape_text(char *s, size_t len, uint8_t dtype, int ndim,
                const int64_t *shape)
{
    int n = snprintf(s, len, "%s [", td_dtype_name((td_dtype_t)dtype));

    for (int i = 0; i < ndim && n > 0 && (size_t)n < len; i++) {
        n += snprintf(s + n, len - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    if (n > 0 && (size_t)n < len) {
        snprintf(s + n, len - n, "]");
    }
}

td_status_t
coll_p2p_fits(const coll_req_t *r, int src, uint8_t dtype, int ndim,
              const int64_t *shape, size_t nbytes, char *msg, size_t len)
{
    char a[160], b[160];

    if (dtype == r->dtype && nbytes == r->nbytes) {
        return TD_OK;
    }
    coll_shape_text(a, sizeof(a), dtype, ndim, shape);
    coll_shape_text(b, sizeof(b), r->dtype, r->ndim, r->shape);
    snprintf(msg, len, "coll: td_recv from rank %d tag %u: rank %d sent %s "
             "(%zu bytes) but rank %d receives into %s (%zu bytes)", src,
             r->tag, src, a, nbytes, coll_world_rank(), b, r->nbytes);
    return dtype != r->dtype ? TD_ERR_DTYPE : TD_ERR_SHAPE;
}

void
coll_ack_complete(coll_req_t *r, int src, td_status_t st, uint8_t dtype,
                  int ndim, const int64_t *shape)
{
    char msg[COLL_ERR_MAX] = "";

    if (st == TD_ERR_CANCELED) {
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank "
                 "%d dropped the message unreceived (its group was "
                 "destroyed or failed there)", src, r->tag, src);
    } else if (st == TD_ERR_NO_MEMORY) {
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank "
                 "%d dropped the message unreceived (its queue of "
                 "unmatched messages was full)", src, r->tag, src);
    } else if (st == TD_ERR_PROTOCOL) {
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank "
                 "%d rejected the message as malformed", src, r->tag, src);
    } else if (st != TD_OK) {
        char a[160], b[160];

        coll_shape_text(a, sizeof(a), r->dtype, r->ndim, r->shape);
        coll_shape_text(b, sizeof(b), dtype, ndim, shape);
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank %d "
                 "sent %s (%zu bytes) but rank %d receives into %s", src,
                 r->tag, coll_world_rank(), a, r->nbytes, src, b);
        if (st != TD_ERR_SHAPE && st != TD_ERR_DTYPE) {
            st = TD_ERR_REMOTE;
        }
    }
    coll_req_complete(r, st, msg);
}
