/* runtime/coll/hier.h: hierarchical collectives for groups that span
 * hosts (internal, algorithm "hier"): the group's host map, the choice of
 * auto, and all_reduce, broadcast, all_gather, reduce_scatter and the
 * barrier in three phases (inside each host, among one leader per host,
 * inside each host again). At the algorithms' level, on the step
 * interface (step.h); run.c chooses and calls it. Invariants H1..H7 in
 * hier.c.
 *
 * Thread safety: coll_hostmap_build and coll_hier_pick are pure; the rest
 * run on the group's operation thread (work.c, L7). */
#ifndef TD_RUNTIME_COLL_HIER_H
#define TD_RUNTIME_COLL_HIER_H

#include "runtime/coll/step.h"

/* Which host each member of a group runs on. Hosts are numbered by their
 * first member in group-rank order; a host's members are listed in
 * group-rank order. */
typedef struct coll_hostmap {
    int  n;                /* members */
    int  nhosts;
    int *host_of;          /* group rank -> host */
    int *first;            /* host -> its first entry in members */
    int *count;            /* host -> its number of members */
    int *members;          /* group ranks, host after host */
} coll_hostmap_t;

/* The map of N members whose host ids are IDS (runtime/hostmap.h: equal
 * nonzero ids share a host; 0, unknown, is a host of its own). Pure. */
td_status_t coll_hostmap_build(const uint64_t *ids, int n,
                               coll_hostmap_t **map_p);
void        coll_hostmap_free(coll_hostmap_t *m);
/* Would auto pick "hier" for collective K on map M? Only when the group
 * spans hosts and some host holds more than one member (H1). Pure. */
int         coll_hier_pick(const coll_hostmap_t *m, coll_kind_t k);
/* The leader of host H in a call rooted at group rank ROOT (-1: none):
 * the root on its own host, else the host's first member (H2). Pure. */
int         coll_hier_leader(const coll_hostmap_t *m, int h, int root);

/* G's host map (H2), agreed by run.c at the group's first call that may
 * need it and kept with G; NULL before. */
const coll_hostmap_t *coll_hier_map(const td_group_t *g);

td_status_t coll_all_reduce_hier(coll_op_t *op, void *buf, size_t count);
td_status_t coll_broadcast_hier(coll_op_t *op, void *buf, size_t nbytes);
td_status_t coll_all_gather_hier(coll_op_t *op, void *out, const void *in,
                                 size_t nbytes);
td_status_t coll_reduce_scatter_hier(coll_op_t *op, void *out,
                                     const void *in, size_t count);
td_status_t coll_barrier_hier(coll_op_t *op);
/* G is destroyed: its host map freed, what its hierarchical calls moved
 * inside the host logged at debug (H8's test reads it). */
void        coll_hier_detach(td_group_t *g);

#endif /* TD_RUNTIME_COLL_HIER_H */
