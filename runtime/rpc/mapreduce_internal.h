/* runtime/rpc/mapreduce_internal.h: the map-reduce module inside the
 * runtime (internal): its runtime module registers the rank barrier
 * ("_td.barrier") before td_init publishes the address. */
#ifndef TD_RUNTIME_MAPREDUCE_INTERNAL_H
#define TD_RUNTIME_MAPREDUCE_INTERNAL_H

#include "runtime/runtime.h"

extern const td_runtime_module_t td_mapreduce_module;

#endif /* TD_RUNTIME_MAPREDUCE_INTERNAL_H */
