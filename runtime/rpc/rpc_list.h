/* runtime/rpc/rpc_list.h: the inside of value lists (todist/rpc.h's
 * td_rpc_list_t), for the wire codec and RPC's plug-ins (internal, not
 * installed). rpc_list.c owns them; it knows remote references only
 * through the retain / release the rref plug-in provides.
 *
 * Thread safety: a list is not thread-safe; one thread at a time. */
#ifndef TD_RUNTIME_RPC_LIST_H
#define TD_RUNTIME_RPC_LIST_H

#include <stddef.h>
#include <stdint.h>

#include <todist/rpc.h>
#include <todist/tensor.h>

/* One item of a value list. */
typedef struct {
    td_value_kind_t kind;
    union {
        td_tensor_t *tensor;
        int64_t      i;
        double       d;
        struct {
            char   *data;    /* NUL-terminated copy, also for bytes */
            size_t  len;
        } bytes;
        td_rref_t   *rref;
    } u;
} td_value_t;

#define TD_RPC_LIST_INLINE 2   /* items held without an allocation */

struct td_rpc_list {
    size_t      n;
    size_t      cap;
    td_value_t *items;        /* small, or owned once it outgrew it */
    /* the first items: a small call's arguments and result cost no
     * allocation beyond the list itself (never copy a list: items may
     * point here) */
    td_value_t  small[TD_RPC_LIST_INLINE];
};

/* How lists hold remote references: the rref plug-in's retain and release
 * (td__rpc_plug installs them); until then a list takes no reference. This
 * keeps lists below remote references (no include of rref.c's headers). */
void td__rpc_list_set_ref_ops(td_rref_t *(*retain)(td_rref_t *rref),
                             void (*release)(td_rref_t *rref));
/* Append RREF, taking over the caller's reference (released on failure). */
td_status_t td__rpc_list_take_rref(td_rpc_list_t *list, td_rref_t *rref);

/* A zeroed slot at the end of LIST (grown as needed), or NULL (error
 * recorded): the only way to grow a list, as its first items are inline. */
td_value_t *td__rpc_list_push(td_rpc_list_t *list);

/* true when LIST holds a tensor that requires grad. */
int td__rpc_list_requires_grad(const td_rpc_list_t *list);

#endif /* TD_RUNTIME_RPC_LIST_H */
