/* runtime/coll/module.h: the collectives as a runtime module (internal):
 * its line of the module table (runtime/modules.c). */
#ifndef TD_RUNTIME_COLL_MODULE_H
#define TD_RUNTIME_COLL_MODULE_H

#include "runtime/runtime.h"

extern const td_runtime_module_t td_coll_module;

#endif /* TD_RUNTIME_COLL_MODULE_H */
