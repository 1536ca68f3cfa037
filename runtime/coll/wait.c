/* wait.c: waiting for requests (wait.h, C4). */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>

#include "runtime/coll/wait.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/late.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/tx.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/cpu.h"

#define SPIN_S 0.002       /* drive this long before sleeping */

static void (*group_check)(td_group_t *g);
static atomic_ulong spin_sleeps;     /* coll_wait_spin_sleeps */

void
coll_wait_set_group_check(void (*check)(td_group_t *g))
{
    group_check = check;
}

typedef struct {
    coll_req_t **reqs;
    int          n;
    td_group_t  *g;
    double       spin;       /* drive this long after the last completion */
    int          p2p_recv;   /* a point-to-point receive among REQS */
} wait_t;

static int
all_done(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        if (w->reqs[i] != NULL &&
            !atomic_load_explicit(&w->reqs[i]->done, memory_order_acquire)) {
            return 0;
        }
    }
    return 1;
}

/* Receives whose bodies wait to be read in place (C9). */
static int
cma_pending(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        if (w->reqs[i] != NULL &&
            atomic_load_explicit(&w->reqs[i]->cma_ready_a,
                                 memory_order_acquire)) {
            return 1;
        }
    }
    return 0;
}

/* C12: W's irecvs have a waiter: an offer for one is left to us. */
static void
cma_wait_begin(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];

        if (r != NULL && r->type == REQ_RECV_P2P && r->on_done != NULL) {
            atomic_fetch_add(&r->cma_waiters, 1);
        }
    }
}

/* C12: leaving: an offer left to us and not read is declined. */
static void
cma_wait_end(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];

        if (r != NULL && r->type == REQ_RECV_P2P && r->on_done != NULL) {
            atomic_fetch_sub(&r->cma_waiters, 1);
            if (atomic_exchange(&r->cma_ready_a, 0)) {
                coll_cma_decline(r);
            }
        }
    }
}

static void
cma_service(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];

        /* a load first: the exchange, a locked instruction, only for
         * an offer that came (every round of every wait looks) */
        if (r != NULL &&
            atomic_load_explicit(&r->cma_ready_a, memory_order_relaxed) &&
            atomic_exchange(&r->cma_ready_a, 0)) {
            coll_cma_read(r);
        }
    }
}

/* Is W's wait over (or has it work to do)? No polling: callable under
 * the waiters' lock. */
static int
wait_check(const void *arg)
{
    const wait_t *w = arg;

    return all_done(w) || cma_pending(w) ||
           (w->g != NULL &&
            __atomic_load_n(&w->g->broken, __ATOMIC_RELAXED) != TD_OK) ||
           coll_stopped();
}

/* The transport's predicate while we drive: mailboxes are polled here. */
static int
wait_pred(void *arg)
{
    const wait_t *w = arg;

    if (all_done(w)) {
        return 1;
    }
    coll_mbox_poll();
    return wait_check(w);
}

/* Drive or sleep until PRED holds or UNTIL (td_now_s) passes. */
static void
wait_some(wait_t *w, double until, double t0)
{
    td_transport_t *tp = coll_transport();
    double now = td_now_s();
    td_status_t st;
    int sleep_cookie;

    if (now - t0 < w->spin) {
        double max = t0 + w->spin - now;

        if (until > 0 && until - now < max) {
            max = until - now;
        }
        st = td__transport_drive(tp, wait_pred, w, max);
        if (st == TD_OK || st == TD_ERR_TIMEOUT) {
            return;
        }
    } else if (w->p2p_recv) {
        atomic_fetch_add_explicit(&spin_sleeps, 1, memory_order_relaxed);
    }
    /* Another thread drives, or we waited long: sleep until a completion
     * wakes us (the progress thread delivers), then drive a little.
     * Mailbox writers poke us once told (mbox.c M5). */
    sleep_cookie = coll_mbox_sleep_begin();
    coll_mbox_poll();
    coll_sleep(wait_check, w, sleep_cookie != 0 ? MBOX_RECHECK_S : 0,
               coll_mbox_poll);
    if (!wait_pred(w)) {
        td__transport_drive(tp, wait_pred, w, 50e-6);
    }
    /* (still announced while it drives: a mailbox writer pokes then,
     * harmlessly, and so the whole slow path is covered) */
    coll_mbox_sleep_end(sleep_cookie);
}

/* Take the not-yet-matched requests of W off the posted list and
 * complete them with CODE/MSG (C4); offers in place (cma.h C15) only
 * with OFFERS: their readers may still be copying them. How many offers
 * were left. */
static int
withdraw(wait_t *w, td_status_t code, const char *msg, int offers)
{
    int left = 0;

    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];

        if (r == NULL || atomic_load(&r->done)) {
            continue;
        }
        if (!offers && r->cma_send &&
            (r->type == REQ_SEND_COLL || r->type == REQ_SEND_P2P)) {
            left++;
        } else if (coll_unpost(r)) {
            coll_req_complete(r, code, msg);
        }
    }
    return left;
}

/* "1, 3" for the ranks W's unfinished receives wait for. */
static void
missing_ranks(const wait_t *w, char *s, size_t len)
{
    size_t n = 0;

    s[0] = '\0';
    for (int i = 0; i < w->n && n < len; i++) {
        const coll_req_t *r = w->reqs[i];

        if (r != NULL && !atomic_load(&r->done)) {
            int dup = 0;

            for (int j = 0; j < i; j++) {
                dup |= w->reqs[j] != NULL && !atomic_load(&w->reqs[j]->done) &&
                       w->reqs[j]->peer == r->peer;
            }
            if (!dup) {
                int k = snprintf(s + n, len - n, "%s%d", n ? ", " : "",
                                 r->peer);
                n += k > 0 ? (size_t)k : 0;
            }
        }
    }
}

/* A point-to-point wait whose every answer comes through a mailbox: poll
 * the mailboxes alone for a moment before driving the transport (a peer
 * on this host waiting too answers within a microsecond or two). The
 * clock is read only once that takes long. */
static void
wait_mbox_spin(wait_t *w)
{
    double t_first = 0;
    int what = 0;

    /* Only what these requests wait for: a td_send's wait leaving the
     * reply in the mailbox lets the td_recv that follows match it
     * straight from there, not through the unexpected list. */
    for (int i = 0; i < w->n; i++) {
        const coll_req_t *r = w->reqs[i];

        if (r == NULL || atomic_load(&r->done)) {
            continue;
        }
        /* only when each answer comes through a mailbox: a message over
         * the network needs the transport driven at once */
        if ((r->type == REQ_SEND_P2P && atomic_load(&r->tp_counted)) ||
            r->nbytes > MBOX_BODY || r->peer < 0 ||
            !coll_mbox_local(r->peer)) {
            return;
        }
        what |= r->type == REQ_SEND_P2P ? MBOX_POLL_ACKS : MBOX_POLL_IN;
    }
    for (unsigned i = 0; what != 0 && !all_done(w); i++) {
        coll_mbox_poll_some(what);
        if ((i & 63) == 63 && coll_spin_over(&t_first, NULL)) {
            break;
        }
        td_cpu_relax();
    }
}

/* Has a send of G's collectives failed long enough ago to end the call
 * (C19)? Then its error into MSG. */
static td_status_t
tx_failure(td_group_t *g, double now, char *msg, size_t len)
{
    td_status_t st = TD_OK;

    if (g == NULL ||
        __atomic_load_n(&g->tx_failed, __ATOMIC_ACQUIRE) == TD_OK ||
        now < g->tx_failed_at + td__transport_fail_grace_s(coll_transport(),
                                                           g->tx_failed_to)) {
        return TD_OK;
    }
    coll_lock();
    st = g->tx_failed;
    snprintf(msg, len, "%s", g->tx_failed_msg);
    coll_unlock();
    return st;
}

/* G's first failure (C6) and its message into MSG; ST (MSG untouched)
 * while G is unbroken. */
static td_status_t
group_failure(td_group_t *g, td_status_t st, char *msg, size_t len)
{
    coll_lock();
    if (g->broken != TD_OK) {
        st = g->broken;
        snprintf(msg, len, "%s", g->broken_msg);
    }
    coll_unlock();
    return st;
}

/* Why W (of group G) must stop now, into MSG: TD_OK (go on), or the
 * failure. A collective's timeout breaks G and tells every member; so
 * does a failed send of its collectives, after a grace (C19). */
static td_status_t
wait_verdict(wait_t *w, td_group_t *g, int is_coll, double now,
             double deadline, char *msg, size_t len)
{
    td_status_t st = TD_OK;

    if (coll_stopped()) {
        st = TD_ERR_CANCELED;
        snprintf(msg, len, "coll: the runtime shut down with this operation "
                 "pending");
    } else if (g != NULL &&
               __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
        st = group_failure(g, TD_OK, msg, len);
    } else if (is_coll && (st = tx_failure(g, now, msg, len)) != TD_OK) {
        coll_group_fail(g, st, 1, g->cur_seq, msg);
        st = group_failure(g, st, msg, len);                   /* C6 */
    } else if (deadline > 0 && now > deadline) {
        char who[128];

        /* A collective names the members that have not begun the call,
         * asked now (late.c): the peer we wait for may be waiting too. */
        if (!is_coll ||
            coll_late_ranks(g, g->cur_seq, who, sizeof(who)) == 0) {
            missing_ranks(w, who, sizeof(who));
        }
        st = TD_ERR_TIMEOUT;
        snprintf(msg, len, "coll: %s timed out after %.1f s on rank %d "
                 "waiting for rank(s) %s", is_coll ?
                 coll_kind_name(g->cur_desc.kind) : "point-to-point",
                 coll_timeout(), coll_world_rank(), who[0] ? who :
                 "(none: sends in flight)");
        if (is_coll) {
            /* Told to every member: a late one must not go on as if the
             * call had worked (C6). */
            coll_group_fail(g, st, 1, g->cur_seq, msg);
            /* a member's failure may have come first while we asked:
             * the group's first failure is the one reported (C6) */
            st = group_failure(g, st, msg, len);
        }
    }
    return st;
}

td_status_t
coll_wait_ex(td_group_t *g, coll_req_t **reqs, int n, double deadline,
             int is_coll, double give_up)
{
    wait_t w = { reqs, n, g, SPIN_S, 0 };
    double t0, t_spin, probe_at = 0, probe_gap = COLL_PROBE_S;
    unsigned long seen = coll_completions();
    char msg[COLL_ERR_MAX];
    size_t bytes = 0;
    td_status_t verdict = TD_OK;

    /* Large bodies move only while some thread drives the worker (the
     * progress thread sleeps between events): keep driving for as long as
     * the bytes need at 1 GB/s, and after every completion, before
     * sleeping. */
    for (int i = 0; i < n; i++) {
        bytes += reqs[i] != NULL ? reqs[i]->nbytes : 0;
    }
    w.spin += (double)bytes * 1e-9;
    /* A waiter with a core of its own and nothing else to do (a pipeline
     * stage) drives for longer: a sleeper's wake-up costs it 0.1-2 ms. */
    for (int i = 0; i < n; i++) {
        if (reqs[i] != NULL && reqs[i]->spin_s > w.spin) {
            w.spin = reqs[i]->spin_s;
        }
        w.p2p_recv |= reqs[i] != NULL && reqs[i]->type == REQ_RECV_P2P;
    }

    if (td__transport_on_progress_thread(coll_transport())) {
        withdraw(&w, TD_ERR_STATE, "coll: waited for inside a transport "
                 "callback", 1);
        /* Cannot drive from here: leave what is in flight to finish. */
        return td_error(TD_ERR_STATE, "coll: a wait inside a transport "
                        "callback would deadlock");
    }
    cma_wait_begin(&w);                                        /* C12 */
    if (!is_coll && coll_mbox_active()) {
        wait_mbox_spin(&w);
    }
    t0 = all_done(&w) ? 0 : td_now_s();     /* (done: no clock read) */
    t_spin = t0;
    probe_at = t0 + probe_gap;
    if (deadline < 0) {
        deadline = t0 + coll_timeout();
    }
    while (!all_done(&w)) {
        double now, until = deadline;
        unsigned long c;
        td_status_t st;

        if (is_coll && g != NULL && g->shm != NULL && group_check != NULL) {
            /* a member waiting in the segment for another call (shm.c
             * S4) fails the group here; the verdict below reports it */
            group_check(g);
        }
        cma_service(&w);
        if (all_done(&w)) {
            break;
        }
        now = td_now_s();
        if (give_up > 0 && now > give_up && !coll_stopped() &&
            (g == NULL ||
             __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) == TD_OK)) {
            cma_wait_end(&w);
            return td_error(TD_ERR_TIMEOUT, "coll: wait timed out after %.3f "
                            "s (the operation goes on)", now - t0);
        }
        st = wait_verdict(&w, g, is_coll, now, deadline, msg, sizeof(msg));
        if (st != TD_OK) {
            /* cma.h C15: offers wait for their readers' answers or
             * deaths, until the call's deadline at most */
            double hard = deadline > 0 ? deadline : now + coll_timeout();
            int offers = withdraw(&w, st, msg,
                                  coll_stopped() || now > hard);

            while (!all_done(&w)) {       /* C4: bodies in flight land */
                cma_service(&w);
                if (offers > 0 && td_now_s() > hard) {
                    td_log_warn("coll: %d offer(s) in place still "
                                "unanswered at the deadline: their readers "
                                "may still read the buffer (cma.h C15)",
                                offers);
                    offers = withdraw(&w, st, msg, 1);
                }
                wait_some(&w, td_now_s() + 0.01, 0);
            }
            verdict = st;
            break;
        }
        if (is_coll && g != NULL && now >= probe_at) {
            /* a long wait may be one on a member that runs another
             * algorithm and waits too (late.h K4) */
            coll_late_probe(g);
            probe_gap *= 2;
            probe_at = now + probe_gap;
        }
        if (give_up > 0 && (until <= 0 || give_up < until)) {
            until = give_up;
        }
        c = coll_completions();
        if (c != seen) {
            seen = c;
            t_spin = td_now_s();
        }
        wait_some(&w, until, t_spin);
    }
    cma_wait_end(&w);
    for (int i = 0; i < n; i++) {
        if (reqs[i] != NULL && reqs[i]->status != TD_OK) {
            if (is_coll && g != NULL &&
                __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
                /* C6: a collective reports its group's first failure, not
                 * a later one of this call's requests (a send to a member
                 * that died after the one that broke the group) */
                coll_lock();
                verdict = g->broken;
                snprintf(msg, sizeof(msg), "%s", g->broken_msg);
                coll_unlock();
                return td_error(verdict, "%s", msg);
            }
            return td_error(reqs[i]->status, "%s", reqs[i]->err);
        }
    }
    if (verdict != TD_OK) {
        /* every request ended well (an offer read), but the call may not
         * go on: the reason the wait stopped */
        return td_error(verdict, "%s", msg);
    }
    return TD_OK;
}

unsigned long
coll_wait_spin_sleeps(void)
{
    return atomic_load_explicit(&spin_sleeps, memory_order_relaxed);
}

td_status_t
coll_wait(td_group_t *g, coll_req_t **reqs, int n, double deadline)
{
    return coll_wait_ex(g, reqs, n, deadline, 1, 0);
}
