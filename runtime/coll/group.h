/* runtime/coll/group.h: the world's group (internal; group.c also holds
 * td_group_new and the other group calls of todist/coll.h). */
#ifndef TD_RUNTIME_COLL_GROUP_H
#define TD_RUNTIME_COLL_GROUP_H

#include "todist/coll.h"

/* Make the world's group (RANK of SIZE) / free it (module lifecycle). */
td_status_t coll_world_group_create(int rank, int size);
void        coll_world_group_free(void);
/* A group of world ranks RANKS[0..N-1] with the id ID (at or above
 * COLL_EPOCH_ID_BASE, match.h), made by its members only: runtime/elastic's
 * epoch groups, whose ids the members agreed on through the store, so the
 * dead and the stale, who never make it, need not call it (td_group_new
 * needs every world rank). This rank must be in RANKS. */
td_status_t coll_group_new_id(uint32_t id, const int *ranks, int n,
                              td_group_t **group_p);
/* Membership epoch EPOCH (> 0) has the world ranks
 * MEMBERS[N]: re-form every group td_group_new made that lost or regained
 * a member (group.c G2), and form later ones on these members (G3).
 * Called by runtime/elastic on every member, with the groups idle. */
td_status_t coll_groups_reform(uint32_t epoch, const int *members, int n);
/* Ids of td_group_new start again, and its list empties (td_finalize). */
void        coll_groups_reset(void);

#endif /* TD_RUNTIME_COLL_GROUP_H */
