/* runtime/coll/args.h: a collective's arguments (internal), checked by
 * api.c, run by run.c (or nccl.c); tensors retained while a work handle
 * holds them (work.c). */
#ifndef TD_RUNTIME_COLL_ARGS_H
#define TD_RUNTIME_COLL_ARGS_H

#include "runtime/coll/match.h"

typedef struct {
    coll_kind_t     kind;
    td_tensor_t    *t;             /* in place / out */
    td_tensor_t    *in;
    td_tensor_t   **outs;          /* all_gather's list form (n entries) */
    int             n_outs;
    int             root;
    td_reduce_op_t  op;
} coll_args_t;

#endif /* TD_RUNTIME_COLL_ARGS_H */
