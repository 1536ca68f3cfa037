/* runtime/elastic/module.h: the elastic runtime module (internal): it
 * records the ranks the transport lost, for td_elastic_recover. */
#ifndef TD_RUNTIME_ELASTIC_MODULE_H
#define TD_RUNTIME_ELASTIC_MODULE_H

#include "runtime/runtime.h"

extern const td_runtime_module_t td_elastic_module;

#endif /* TD_RUNTIME_ELASTIC_MODULE_H */
