/* test_coll_hier: the hierarchical collectives' host map and the choice
 * auto makes from it (runtime/coll/hier.c H1, H2), as pure functions over
 * host ids: no process, no transport. And TODIST_COLL_ALGO's "hier" where
 * it exists and nowhere else. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "runtime/coll/hier.h"
#include "tests/tap.h"

#define A 0x1111u
#define B 0x2222u
#define C 0x3333u

static coll_hostmap_t *
map_of(const uint64_t *ids, int n)
{
    coll_hostmap_t *m = NULL;

    if (coll_hostmap_build(ids, n, &m) != TD_OK) {
        return NULL;
    }
    return m;
}

/* "h0:0,1 h1:2,3" for M. */
static void
text(const coll_hostmap_t *m, char *s, size_t len)
{
    size_t used = 0;

    s[0] = '\0';
    for (int h = 0; h < m->nhosts && used < len; h++) {
        used += (size_t)snprintf(s + used, len - used, "%sh%d:", h ? " " : "",
                                 h);
        for (int i = 0; i < m->count[h] && used < len; i++) {
            used += (size_t)snprintf(s + used, len - used, "%s%d",
                                     i ? "," : "",
                                     m->members[m->first[h] + i]);
        }
    }
}

/* Does auto pick hier for all five of its collectives on M, and for none
 * of the others? 1: all five, 0: none, -1: mixed. */
static int
picks(const coll_hostmap_t *m)
{
    static const coll_kind_t yes[] = { COLL_ALL_REDUCE, COLL_BROADCAST,
        COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_BARRIER };
    static const coll_kind_t no[] = { COLL_REDUCE, COLL_GATHER, COLL_SCATTER,
        COLL_ALL_TO_ALL };
    int n_yes = 0;

    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        if (coll_hier_pick(m, no[i])) {
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        n_yes += coll_hier_pick(m, yes[i]);
    }
    return n_yes == 5 ? 1 : n_yes == 0 ? 0 : -1;
}

int
main(void)
{
    char s[256];
    coll_hostmap_t *m;
    coll_algo_t f[COLL_NUM_KINDS];

    plan(26);

    {   /* 2 hosts x 2 ranks, in order */
        const uint64_t ids[] = { A, A, B, B };

        m = map_of(ids, 4);
        ok(m != NULL, "2x2: a map");
        text(m, s, sizeof(s));
        is_str(s, "h0:0,1 h1:2,3", "2x2: hosts and members");
        is_int(picks(m), 1, "2x2: auto picks hier");
        is_int(coll_hier_leader(m, 0, -1), 0, "2x2: host 0's leader is 0");
        is_int(coll_hier_leader(m, 1, -1), 2, "2x2: host 1's leader is 2");
        is_int(coll_hier_leader(m, 1, 3), 3, "2x2: a root leads its host");
        is_int(coll_hier_leader(m, 0, 3), 0,
               "2x2: ...and not the others");
        coll_hostmap_free(m);
    }
    {   /* interleaved: hosts numbered by their first member */
        const uint64_t ids[] = { B, A, B, A };

        m = map_of(ids, 4);
        text(m, s, sizeof(s));
        is_str(s, "h0:0,2 h1:1,3", "interleaved: hosts and members");
        ok(m->host_of[0] == 0 && m->host_of[1] == 1 && m->host_of[2] == 0 &&
           m->host_of[3] == 1, "interleaved: each member's host");
        is_int(picks(m), 1, "interleaved: auto picks hier");
        is_int(coll_hier_leader(m, 1, -1), 1, "interleaved: host 1's leader");
        coll_hostmap_free(m);
    }
    {   /* 3 hosts, 2+1+1 (uneven) */
        const uint64_t ids[] = { A, A, B, C };

        m = map_of(ids, 4);
        text(m, s, sizeof(s));
        is_str(s, "h0:0,1 h1:2 h2:3", "2+1+1: hosts and members");
        is_int(m->nhosts, 3, "2+1+1: 3 hosts");
        is_int(picks(m), 1, "2+1+1: auto picks hier");
        coll_hostmap_free(m);
    }
    {   /* one rank per host: flat already is one step per host */
        const uint64_t ids[] = { A, B, C };

        m = map_of(ids, 3);
        is_int(picks(m), 0, "1+1+1: auto does not pick hier");
        coll_hostmap_free(m);
    }
    {   /* one host: the shared segment's case */
        const uint64_t ids[] = { A, A, A, A };

        m = map_of(ids, 4);
        is_int(m->nhosts, 1, "one host: 1 host");
        is_int(picks(m), 0, "one host: auto does not pick hier");
        coll_hostmap_free(m);
    }
    {   /* unknown ids (0) share nothing: each is a host of its own */
        const uint64_t ids[] = { 0, 0, A, A };

        m = map_of(ids, 4);
        text(m, s, sizeof(s));
        is_str(s, "h0:0 h1:1 h2:2,3", "unknown ids: a host each");
        is_int(picks(m), 1, "unknown ids: auto picks hier (A holds 2)");
        coll_hostmap_free(m);
    }
    {   /* one member */
        const uint64_t ids[] = { A };

        m = map_of(ids, 1);
        is_int(picks(m), 0, "one member: auto does not pick hier");
        coll_hostmap_free(m);
    }
    is_int(coll_hier_pick(NULL, COLL_ALL_REDUCE), 0,
           "no map: auto does not pick hier");

    /* TODIST_COLL_ALGO */
    is_int(coll_algo_parse("all_reduce:hier,broadcast:hier,all_gather:hier,"
                           "reduce_scatter:hier,barrier:hier", f), TD_OK,
           "TODIST_COLL_ALGO: hier for its five collectives");
    ok(f[COLL_ALL_REDUCE] == ALGO_HIER && f[COLL_BARRIER] == ALGO_HIER &&
       f[COLL_REDUCE] == ALGO_AUTO, "TODIST_COLL_ALGO: ...recorded");
    is_int(coll_algo_parse("reduce:hier", f), TD_ERR_INVALID,
           "TODIST_COLL_ALGO: reduce has no hier");
    is_int(coll_algo_parse("all_to_all:hier", f), TD_ERR_INVALID,
           "TODIST_COLL_ALGO: all_to_all has no hier");
    is_str(coll_algo_name(ALGO_HIER), "hier", "the algorithm's name");
    return exit_status();
}
