/* group.c: process groups (todist/coll.h): the world's group and subsets
 * made by td_group_new, which every world rank calls with the same list in
 * the same order. No message is exchanged: the id is the count of
 * td_group_new calls, and the FNV-1a digest of the member list travels in
 * every message so that ranks which built different lists fail (rx.c).
 *
 * Thread safety: td_group_new and td_group_destroy may be called from any
 * thread (ids are taken atomically; callers must still call td_group_new
 * in the same order on every rank); the getters are thread-safe. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "todist/coll.h"
#include "runtime/coll/group.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/hier.h"
#include "runtime/coll/match.h"
#include "runtime/coll/shm.h"
#include "runtime/coll/work.h"

static td_group_t *world_group;
static atomic_uint next_id = 1;

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
    coll_hier_detach(g);
    coll_shm_detach(g);
    pthread_mutex_destroy(&g->qlock);
    pthread_cond_destroy(&g->qcond);
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
    g->ranks = malloc(sizeof(int) * (size_t)n);
    g->of_world = malloc(sizeof(int) * (size_t)world);
    g->send_seq = calloc((size_t)n, sizeof(uint32_t));
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
}

td_group_t *
td_group_world(void)
{
    return __atomic_load_n(&world_group, __ATOMIC_ACQUIRE);
}

td_status_t
td_group_new(const int *ranks, int n, td_group_t **group_p)
{
    int world = coll_world_size();
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
    st = group_make(atomic_fetch_add(&next_id, 1), ranks, n,
                    coll_world_rank(), world, &g);
    if (st != TD_OK) {
        return st;
    }
    if (g->me >= 0) {
        st = coll_group_register(g);
        if (st != TD_OK) {
            group_free(g);
            return st;
        }
    }
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
    coll_group_stop_thread(g);
    coll_group_unregister(g);
    group_free(g);
}
