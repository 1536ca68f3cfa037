/* group.c: process groups (todist/coll.h): the world's group and subsets
 * made by td_group_new, which every world rank calls with the same list in
 * the same order. No message is exchanged: the id is the count of
 * td_group_new calls, and the FNV-1a digest of the member list travels in
 * every message so that ranks which built different lists fail (rx.c).
 *
 * Elastic epochs (runtime/elastic) re-form the groups made here:
 *  G1 Every group td_group_new returned, member or not, is in made_head's
 *     list (creation order, so increasing made ids) from td_group_new to
 *     td_group_destroy or td_finalize, with its creation list and id.
 *  G2 When epoch E's members are known (coll_groups_reform), each listed
 *     group whose creation list, kept to E's members in its order, differs
 *     from its current members is re-formed in place: same handle, those
 *     members, group ranks 0..n-1 in that order, id COLL_REFORM_ID(E, made
 *     id), a fresh sequence and no failure; a group that lost no member
 *     is left as it is. Every member computes the same lists and ids from
 *     the same plan, without a message; the groups are re-formed in list
 *     order, so the ids of one epoch are registered increasing (C11).
 *  G3 After an epoch E > 0 was adopted here, td_group_new forms its list
 *     kept to E's members with id COLL_REFORM_ID(E, made id): the
 *     members and a replacement that joined at E (and makes the same
 *     td_group_new calls in the same order) agree on it.
 *  G4 made_lock guards the list, made_epoch and made_alive, and each
 *     listed group's shape while it is re-formed; it is taken before
 *     coll_lock or a group's qlock, never while holding one. A re-form
 *     needs the group idle (no operation queued or running): it happens
 *     inside td_elastic_recover/admit/join, on the application's thread.
 *  A group left with no member (only a rank outside it can see that) fails
 *  every call naming it.
 *
 * Thread safety: td_group_new and td_group_destroy may be called from any
 * thread (ids are taken atomically; callers must still call td_group_new
 * in the same order on every rank); the getters are thread-safe. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/coll.h"
#include "base/log.h"
#include "runtime/coll/group.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/hier.h"
#include "runtime/coll/match.h"
#include "runtime/coll/shm.h"
#include "runtime/coll/work.h"

static td_group_t *world_group;
static atomic_uint next_id = 1;

/* G1-G4 */
static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;
static td_group_t     *made_head, *made_tail;
static uint32_t        made_epoch;       /* 0: no epoch adopted here */
static unsigned char  *made_alive;       /* world-indexed: in made_epoch */
static int             made_world;

static void made_unlink_locked(td_group_t *g);

static uint32_t
digest_of(const int *ranks, int n)
{
    uint32_t h = 2166136261u;

    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ranks[i];

        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 16777619u;
        }
    }
    return h;
}

static void
group_free(td_group_t *g)
{
    if (g == NULL) {
        return;
    }
    if (g->ring_paced > 0) {
        td_log_debug("coll: group %u: %llu ring sends waited for an arrival "
                     "(ring.c R1), in segments of %zu B (R2)", g->id,
                     (unsigned long long)g->ring_paced, g->ring_seg_far);
    }
    if (g->ring_rx_reduced > 0) {
        td_log_debug("coll: group %u: %llu ring segments reduced as they "
                     "arrived (ring.c R4)", g->id,
                     (unsigned long long)g->ring_rx_reduced);
    }
    if (g->tree_pieces > 0) {
        td_log_debug("coll: group %u: broadcast sent %llu pieces of %zu B "
                     "to other hosts (tree.c T1)", g->id,
                     (unsigned long long)g->tree_pieces, g->tree_piece_bytes);
    }
    coll_hier_detach(g);
    coll_shm_detach(g);
    pthread_mutex_destroy(&g->qlock);
    pthread_cond_destroy(&g->qcond);
    free(g->made_ranks);
    free(g->ranks);
    free(g->of_world);
    free(g->send_seq);
    free(g->scratch);
    free(g);
}

static td_status_t
group_make(uint32_t id, const int *ranks, int n, int my_rank, int world,
           td_group_t **g_p)
{
    td_group_t *g = calloc(1, sizeof(*g));

    if (g == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    pthread_mutex_init(&g->qlock, NULL);
    pthread_cond_init(&g->qcond, NULL);
    g->id = id;
    g->n = n;
    g->me = -1;
    g->ranks = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    g->of_world = malloc(sizeof(int) * (size_t)world);
    g->send_seq = calloc((size_t)(n > 0 ? n : 1), sizeof(uint32_t));
    if (g->ranks == NULL || g->of_world == NULL || g->send_seq == NULL) {
        group_free(g);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory for a group "
                        "of %d", n);
    }
    for (int i = 0; i < world; i++) {
        g->of_world[i] = -1;
    }
    for (int i = 0; i < n; i++) {
        g->ranks[i] = ranks[i];
        g->of_world[ranks[i]] = i;
        if (ranks[i] == my_rank) {
            g->me = i;
        }
    }
    g->digest = digest_of(ranks, n);
    *g_p = g;
    return TD_OK;
}

td_status_t
coll_world_group_create(int rank, int size)
{
    int *ranks = malloc(sizeof(int) * (size_t)size);
    td_group_t *g;
    td_status_t st;

    if (ranks == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    for (int i = 0; i < size; i++) {
        ranks[i] = i;
    }
    st = group_make(0, ranks, size, rank, size, &g);
    free(ranks);
    if (st != TD_OK) {
        return st;
    }
    st = coll_group_register(g);
    if (st != TD_OK) {
        group_free(g);
        return st;
    }
    atomic_store(&next_id, 1);
    __atomic_store_n(&world_group, g, __ATOMIC_RELEASE);
    return TD_OK;
}

void
coll_world_group_free(void)
{
    td_group_t *g = __atomic_exchange_n(&world_group, NULL, __ATOMIC_ACQ_REL);

    if (g != NULL) {
        coll_group_unregister(g);
        group_free(g);
    }
}

void
coll_groups_reset(void)
{
    atomic_store(&next_id, 1);
    pthread_mutex_lock(&made_lock);
    while (made_head != NULL) {
        made_unlink_locked(made_head);
    }
    made_epoch = 0;
    free(made_alive);
    made_alive = NULL;
    made_world = 0;
    pthread_mutex_unlock(&made_lock);
}

td_group_t *
td_group_world(void)
{
    return __atomic_load_n(&world_group, __ATOMIC_ACQUIRE);
}

/* MADE[N] kept to made_epoch's members, in order, into KEPT: their number
 * (all of them before any epoch). made_lock held. */
static int
made_keep(const int *made, int n, int *kept)
{
    int k = 0;

    for (int i = 0; i < n; i++) {
        if (made_alive == NULL ||
            (made[i] < made_world && made_alive[made[i]])) {
            kept[k++] = made[i];
        }
    }
    return k;
}

static void
made_append_locked(td_group_t *g)
{
    g->made_prev = made_tail;
    g->made_next = NULL;
    if (made_tail != NULL) {
        made_tail->made_next = g;
    } else {
        made_head = g;
    }
    made_tail = g;
    g->made_listed = 1;
}

static void
made_unlink_locked(td_group_t *g)
{
    if (!g->made_listed) {
        return;
    }
    if (g->made_prev != NULL) {
        g->made_prev->made_next = g->made_next;
    } else {
        made_head = g->made_next;
    }
    if (g->made_next != NULL) {
        g->made_next->made_prev = g->made_prev;
    } else {
        made_tail = g->made_prev;
    }
    g->made_prev = g->made_next = NULL;
    g->made_listed = 0;
}

td_status_t
td_group_new(const int *ranks, int n, td_group_t **group_p)
{
    int world = coll_world_size(), *made, *kept, n_kept;
    uint32_t id;
    td_group_t *g;
    td_status_t st;

    if (td_group_world() == NULL) {
        return td_error(TD_ERR_STATE, "coll: td_group_new before td_init");
    }
    if (ranks == NULL || group_p == NULL) {
        return td_error(TD_ERR_INVALID, "coll: td_group_new: %s is NULL",
                        ranks == NULL ? "ranks" : "group_p");
    }
    if (n < 1 || n > world) {
        return td_error(TD_ERR_RANGE, "coll: td_group_new: n=%d, allowed "
                        "1..%d (the world size)", n, world);
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= world) {
            return td_error(TD_ERR_RANGE, "coll: td_group_new: ranks[%d]=%d "
                            "is not in the world of %d", i, ranks[i], world);
        }
        for (int j = 0; j < i; j++) {
            if (ranks[j] == ranks[i]) {
                return td_error(TD_ERR_INVALID, "coll: td_group_new: rank %d "
                                "is listed twice (ranks[%d] and ranks[%d])",
                                ranks[i], j, i);
            }
        }
    }
    made = malloc(sizeof(int) * (size_t)n);
    kept = malloc(sizeof(int) * (size_t)n);
    if (made == NULL || kept == NULL) {
        free(made);
        free(kept);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    memcpy(made, ranks, sizeof(int) * (size_t)n);
    id = atomic_fetch_add(&next_id, 1);
    pthread_mutex_lock(&made_lock);
    n_kept = made_keep(made, n, kept);
    if (made_epoch > 0) {                                       /* G3 */
        if (id >= COLL_REFORM_MADE || made_epoch >= COLL_REFORM_EPOCHS) {
            pthread_mutex_unlock(&made_lock);
            free(made);
            free(kept);
            return td_error(TD_ERR_RANGE, "coll: td_group_new: group %u in "
                            "elastic epoch %u: groups 1..%u can be formed "
                            "after a recovery, in epochs 1..%u", id,
                            made_epoch, COLL_REFORM_MADE - 1,
                            COLL_REFORM_EPOCHS - 1);
        }
        st = group_make(COLL_REFORM_ID(made_epoch, id), kept, n_kept,
                        coll_world_rank(), world, &g);
    } else {
        st = group_make(id, ranks, n, coll_world_rank(), world, &g);
    }
    free(kept);
    if (st == TD_OK && g->me >= 0) {
        st = coll_group_register(g);
        if (st != TD_OK) {
            group_free(g);
        }
    }
    if (st != TD_OK) {
        pthread_mutex_unlock(&made_lock);
        free(made);
        return st;
    }
    g->made_ranks = made;                                       /* G1 */
    g->made_n = n;
    g->made_id = id;
    made_append_locked(g);
    pthread_mutex_unlock(&made_lock);
    *group_p = g;
    return TD_OK;
}

td_status_t
coll_group_new_id(uint32_t id, const int *ranks, int n, td_group_t **group_p)
{
    int world = coll_world_size();
    td_group_t *g;
    td_status_t st;

    if (td_group_world() == NULL) {
        return td_error(TD_ERR_STATE, "coll: a group before td_init");
    }
    if (id < COLL_EPOCH_ID_BASE || ranks == NULL || n < 1 || n > world) {
        return td_error(TD_ERR_INVALID, "coll: group id %u with %d ranks "
                        "(world %d)", id, n, world);
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= world) {
            return td_error(TD_ERR_RANGE, "coll: group %u: ranks[%d]=%d is "
                            "not in the world of %d", id, i, ranks[i], world);
        }
    }
    st = group_make(id, ranks, n, coll_world_rank(), world, &g);
    if (st != TD_OK) {
        return st;
    }
    if (g->me < 0) {
        group_free(g);
        return td_error(TD_ERR_INVALID, "coll: group %u: this rank (%d) is "
                        "not a member", id, coll_world_rank());
    }
    st = coll_group_register(g);
    if (st != TD_OK) {
        group_free(g);
        return st;
    }
    *group_p = g;
    return TD_OK;
}

int
td_group_rank(const td_group_t *g)
{
    return g != NULL ? g->me : -1;
}

int
td_group_size(const td_group_t *g)
{
    return g != NULL ? g->n : 0;
}

int
td_group_world_rank(const td_group_t *g, int r)
{
    return (g != NULL && r >= 0 && r < g->n) ? g->ranks[r] : -1;
}

void
td_group_destroy(td_group_t *g)
{
    if (g == NULL || g == td_group_world() || g->id == 0) {
        return;
    }
    pthread_mutex_lock(&made_lock);
    made_unlink_locked(g);
    pthread_mutex_unlock(&made_lock);
    coll_group_stop_thread(g);
    coll_group_unregister(g);
    group_free(g);
}

/* G2: G (idle) becomes the group of world ranks RANKS[N] (N may be 0: no
 * member left) with id ID, in place. made_lock held. */
static td_status_t
group_reform_locked(td_group_t *g, uint32_t id, const int *ranks, int n)
{
    int world = coll_world_size(), me = coll_world_rank();
    int *rk = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    uint32_t *ss = calloc((size_t)(n > 0 ? n : 1), sizeof(*ss));

    if (rk == NULL || ss == NULL) {
        free(rk);
        free(ss);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory re-forming "
                        "group %u", g->id);
    }
    coll_group_stop_thread(g);
    if (g->registered) {
        coll_group_unregister(g);       /* C11: its old id is gone */
    }
    coll_hier_detach(g);
    coll_shm_detach(g);
    g->shm_state = SHM_UNTRIED;
    g->hshm_state = SHM_UNTRIED;
    free(g->ranks);
    free(g->send_seq);
    g->ranks = rk;
    g->send_seq = ss;
    g->me = -1;
    for (int i = 0; i < world; i++) {
        g->of_world[i] = -1;
    }
    for (int i = 0; i < n; i++) {
        g->ranks[i] = ranks[i];
        g->of_world[ranks[i]] = i;
        if (ranks[i] == me) {
            g->me = i;
        }
    }
    g->n = n;
    g->id = id;
    g->digest = digest_of(ranks, n);
    g->seq = 0;
    g->watched = 0;
    g->pair_tag = 0;                   /* allreduce.c T1: asked again */
    coll_lock();
    g->in_op = 0;
    g->cur_seq = 0;
    g->begun = 0;
    g->ask_seq = 0;
    g->broken_msg[0] = '\0';
    __atomic_store_n(&g->tx_failed, TD_OK, __ATOMIC_RELAXED); /* C19 */
    __atomic_store_n(&g->broken, TD_OK, __ATOMIC_RELEASE);
    coll_unlock();
    atomic_store(&g->ask_left, 0);
    atomic_store(&g->running, 0);
    return g->me >= 0 ? coll_group_register(g) : TD_OK;
}

/* "1 2 3" of RANKS[N] into S[CAP]. */
static void
ranks_text(char *s, size_t cap, const int *ranks, int n)
{
    size_t off = 0;

    s[0] = '\0';
    for (int i = 0; i < n && off < cap; i++) {
        off += (size_t)snprintf(s + off, cap - off, "%s%d", i ? " " : "",
                                ranks[i]);
    }
}

td_status_t
coll_groups_reform(uint32_t epoch, const int *members, int n)
{
    int world = coll_world_size(), *kept = NULL;
    td_status_t st = TD_OK;

    if (epoch == 0) {
        return td_error(TD_ERR_INVALID, "coll: groups re-formed for epoch 0");
    }
    pthread_mutex_lock(&made_lock);
    if (made_alive == NULL) {
        made_alive = calloc((size_t)world, 1);
        made_world = made_alive != NULL ? world : 0;
    }
    if (made_alive == NULL) {
        pthread_mutex_unlock(&made_lock);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    memset(made_alive, 0, (size_t)made_world);
    for (int i = 0; i < n; i++) {
        if (members[i] >= 0 && members[i] < made_world) {
            made_alive[members[i]] = 1;
        }
    }
    made_epoch = epoch;
    for (td_group_t *g = made_head; g != NULL && st == TD_OK;
         g = g->made_next) {
        int n_kept, was_n = g->n, was_me = g->me;
        char lost[256], now[256];

        free(kept);
        if ((kept = malloc(sizeof(int) * (size_t)g->made_n)) == NULL) {
            st = td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
            break;
        }
        n_kept = made_keep(g->made_ranks, g->made_n, kept);
        if (n_kept == g->n &&
            memcmp(kept, g->ranks, sizeof(int) * (size_t)n_kept) == 0) {
            continue;                              /* G2: nothing lost */
        }
        if (g->made_id >= COLL_REFORM_MADE || epoch >= COLL_REFORM_EPOCHS) {
            st = td_error(TD_ERR_RANGE, "coll: group %u cannot be re-formed "
                          "in epoch %u (groups 1..%u can, in epochs 1..%u)",
                          g->made_id, epoch, COLL_REFORM_MADE - 1,
                          COLL_REFORM_EPOCHS - 1);
            break;
        }
        st = group_reform_locked(g, COLL_REFORM_ID(epoch, g->made_id), kept,
                                 n_kept);
        {
            int nl = 0, ml[64];

            for (int i = 0; i < g->made_n; i++) {
                if (g->of_world[g->made_ranks[i]] < 0 && nl < 64) {
                    ml[nl++] = g->made_ranks[i];
                }
            }
            ranks_text(lost, sizeof(lost), ml, nl);
        }
        ranks_text(now, sizeof(now), kept, n_kept);
        td_log_warn("coll: epoch %u: group %u (made with %d ranks) "
                    "re-formed: %d -> %d members [%s]%s%s; this rank %d -> "
                    "%d", epoch, g->made_id, g->made_n, was_n, n_kept, now,
                    lost[0] ? ", without world ranks " : "", lost, was_me,
                    g->me);
    }
    free(kept);
    pthread_mutex_unlock(&made_lock);
    return st;
}

int
td_group_lost(const td_group_t *g, int *ranks, int max)
{
    int nl = 0;

    if (g == NULL || g->made_ranks == NULL) {
        return 0;
    }
    pthread_mutex_lock(&made_lock);
    for (int i = 0; i < g->made_n; i++) {
        if (g->of_world[g->made_ranks[i]] < 0) {
            if (ranks != NULL && nl < max) {
                ranks[nl] = g->made_ranks[i];
            }
            nl++;
        }
    }
    pthread_mutex_unlock(&made_lock);
    return nl;
}
