/* runtime/coll/group.h: the world's group (internal; group.c also holds
 * td_group_new and the other group calls of todist/coll.h). */
#ifndef TD_RUNTIME_COLL_GROUP_H
#define TD_RUNTIME_COLL_GROUP_H

#include "todist/coll.h"

/* Make the world's group (RANK of SIZE) / free it (module lifecycle). */
td_status_t coll_world_group_create(int rank, int size);
void        coll_world_group_free(void);
/* Ids of td_group_new start again (td_finalize). */
void        coll_groups_reset(void);

#endif /* TD_RUNTIME_COLL_GROUP_H */
