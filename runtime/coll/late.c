/* late.c: who is late, and who is in another call (late.h, K1-K4). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/coll/late.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/tx.h"
#include "base/clock.h"
#include "base/log.h"

enum { ANS_NONE = 0, ANS_NOT_BEGUN = 1, ANS_BEGUN = 2 };

static int
answered(void *arg)
{
    td_group_t *g = arg;

    return atomic_load(&g->ask_left) <= 0;
}

static int
answered_c(const void *arg)
{
    return answered((void *)arg) || coll_stopped();
}

/* Wait for G's answers, at most COLL_LATE_ASK_S (K3): drive the
 * transport, or sleep while another thread drives it. */
static void
wait_answers(td_group_t *g)
{
    td_transport_t *tp = coll_transport();
    double until = td_now_s() + COLL_LATE_ASK_S;

    while (!answered(g) && !coll_stopped()) {
        double left = until - td_now_s();
        td_status_t st;

        if (left <= 0) {
            break;
        }
        st = td__transport_drive(tp, answered, g,
                                 left < 0.01 ? left : 0.01);
        if (st != TD_OK && st != TD_ERR_TIMEOUT) {
            coll_sleep(answered_c, g, 0, coll_mbox_poll);   /* <= 2 ms */
        }
    }
}

int
coll_late_ranks(td_group_t *g, uint32_t seq, char *who, size_t len)
{
    td_transport_t *tp = coll_transport();
    uint8_t h[COLL_WIRE_BYTES];
    uint8_t *ans = calloc((size_t)g->n, 1);
    size_t hlen, k = 0;
    int named = 0;

    who[0] = '\0';
    if (ans == NULL || g->me < 0) {
        free(ans);
        return 0;
    }
    coll_lock();
    g->ask = ans;
    g->ask_seq = seq;
    atomic_store(&g->ask_left, g->n - 1);
    coll_unlock();
    hlen = coll_wire_ask(h, g->id, g->digest, seq);
    for (int r = 0; r < g->n; r++) {
        if (r == g->me) {
            continue;
        }
        if (!td__transport_peer_alive(tp, g->ranks[r]) ||
            coll_tx_send_hdr(g->ranks[r], h, hlen) != TD_OK) {
            atomic_fetch_sub(&g->ask_left, 1);      /* K3: named */
        }
    }
    wait_answers(g);
    coll_lock();
    g->ask = NULL;
    for (int r = 0; r < g->n; r++) {
        if (r != g->me && ans[r] != ANS_BEGUN && k < len) {
            int w = snprintf(who + k, len - k, "%s%d", k ? ", " : "",
                             g->ranks[r]);

            k += w > 0 ? (size_t)w : 0;
            named++;
        }
    }
    coll_unlock();
    free(ans);
    return named;
}

void
coll_late_on_ask_locked(int src, const coll_wire_t *m)
{
    td_group_t *g = coll_group_find_locked(m->gid);
    uint32_t begun = 0;
    uint8_t h[COLL_WIRE_BYTES + 4];
    size_t hlen;

    if (g != NULL && g->digest == m->digest && g->me >= 0 &&
        g->of_world[src] >= 0) {
        begun = (int32_t)(__atomic_load_n(&g->begun, __ATOMIC_RELAXED) -
                          (m->seq + 1)) >= 0;                   /* K1, L8 */
    }
    coll_unlock();
    hlen = coll_wire_tell(h, m->gid, m->digest, m->seq, begun);
    if (coll_tx_send_hdr(src, h, hlen) != TD_OK) {
        td_log_debug("coll: answer to rank %d's ask (group %u, #%u) not "
                     "sent: %s", src, m->gid, m->seq, td_last_error());
    }
}

void
coll_late_on_tell_locked(int src, const coll_wire_t *m)
{
    td_group_t *g = coll_group_find_locked(m->gid);
    int r = g != NULL ? g->of_world[src] : -1;
    int taken = 0;

    if (r >= 0 && g->ask != NULL && g->ask_seq == m->seq &&
        g->ask[r] == ANS_NONE) {                         /* K2 */
        g->ask[r] = m->word ? ANS_BEGUN : ANS_NOT_BEGUN;
        atomic_fetch_sub(&g->ask_left, 1);
        taken = 1;
    }
    coll_unlock();
    if (taken) {
        coll_wake();
    }
}

void
coll_late_probe(td_group_t *g)
{
    td_transport_t *tp = coll_transport();
    uint8_t h[COLL_WIRE_BYTES + 16];
    coll_desc_t d;
    uint32_t seq;
    size_t hlen;
    int in_op;

    if (g->me < 0) {
        return;
    }
    in_op = coll_cur_get(g, &seq, &d);                           /* L8 */
    if (!in_op) {
        return;
    }
    hlen = coll_wire_probe(h, g->id, g->digest, seq, &d);
    for (int r = 0; r < g->n; r++) {
        if (r != g->me && td__transport_peer_alive(tp, g->ranks[r]) &&
            coll_tx_send_hdr(g->ranks[r], h, hlen) != TD_OK) {
            td_log_debug("coll: probe to rank %d (group %u, #%u) not sent: "
                         "%s", g->ranks[r], g->id, seq, td_last_error());
        }
    }
}

void
coll_late_on_probe_locked(int src, const coll_wire_t *m, td_group_t *g)
{
    char msg[COLL_ERR_MAX];
    coll_desc_t cur;
    uint32_t seq;

    if (g == NULL || g->me < 0 || g->of_world[src] < 0 ||
        !coll_cur_get(g, &seq, &cur) ||                         /* L8 */
        seq != m->seq || coll_desc_equal(&m->desc, &cur)) {
        coll_unlock();                  /* K4: not this call, or the same */
        return;
    }
    coll_mismatch_text(msg, sizeof(msg), g->id, m->seq, src,
                       coll_world_rank(), &m->desc, &cur);
    coll_unlock();
    coll_group_fail_id(m->gid, TD_ERR_INVALID, 1, m->seq, msg);   /* C5 */
}
