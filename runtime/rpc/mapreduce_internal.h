/* runtime/rpc/mapreduce_internal.h: the map-reduce module inside the
 * runtime (internal): its runtime module registers the rank barrier
 * ("_td.barrier") before td_init publishes the address. */
#ifndef TD_RUNTIME_MAPREDUCE_INTERNAL_H
#define TD_RUNTIME_MAPREDUCE_INTERNAL_H

#include "runtime/runtime.h"

extern const td_runtime_module_t td_mapreduce_module;

/* Members of barriers waiting at this rank as their leader (an answer not
 * yet sent; no thread held). Thread-safe. For tests. */
int td__barrier_waiting(void);

#endif /* TD_RUNTIME_MAPREDUCE_INTERNAL_H */
