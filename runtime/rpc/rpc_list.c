/* rpc_list.c: value lists, the arguments and results of remote calls
 * (todist/rpc.h). A list is a growable array of tagged values; it retains
 * tensors and references and copies bytes. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "todist/rpc.h"
#include "todist/autograd.h"
#include "runtime/rpc/rpc_list.h"

static const char *
kind_name(td_value_kind_t kind)
{
    switch (kind) {
    case TD_VALUE_TENSOR: return "tensor";
    case TD_VALUE_INT:    return "int";
    case TD_VALUE_DOUBLE: return "double";
    case TD_VALUE_BYTES:  return "bytes";
    case TD_VALUE_STRING: return "string";
    case TD_VALUE_RREF:   return "rref";
    }
    return "unknown";
}

td_status_t
td_rpc_list_create(td_rpc_list_t **list_p)
{
    /* malloc, not calloc: glibc's calloc bypasses the per-thread cache and
     * takes the arena lock; every RPC creates lists (RESULTS, issue 31). */
    td_rpc_list_t *list = malloc(sizeof(*list));

    if (list == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a list");
    }
    list->n = 0;
    list->cap = TD_RPC_LIST_INLINE;
    list->items = list->small;
    *list_p = list;
    return TD_OK;
}

/* The rref plug-in's (td__rpc_list_set_ref_ops); set before td_init. */
static td_rref_t *(*ref_retain)(td_rref_t *rref);
static void       (*ref_release)(td_rref_t *rref);

void
td__rpc_list_set_ref_ops(td_rref_t *(*retain)(td_rref_t *rref),
                        void (*release)(td_rref_t *rref))
{
    ref_retain = retain;
    ref_release = release;
}

static void
value_clear(td_value_t *v)
{
    switch (v->kind) {
    case TD_VALUE_TENSOR:
        td_tensor_release(v->u.tensor);
        break;
    case TD_VALUE_BYTES:
    case TD_VALUE_STRING:
        free(v->u.bytes.data);
        break;
    case TD_VALUE_RREF:
        if (ref_release != NULL) {
            ref_release(v->u.rref);
        }
        break;
    default:
        break;
    }
    memset(v, 0, sizeof(*v));
}

void
td_rpc_list_free(td_rpc_list_t *list)
{
    if (list == NULL) {
        return;
    }
    for (size_t i = 0; i < list->n; i++) {
        value_clear(&list->items[i]);
    }
    if (list->items != list->small) {
        free(list->items);
    }
    free(list);
}

/* A slot at the end of LIST, zeroed, or NULL (error recorded). */
td_value_t *
td__rpc_list_push(td_rpc_list_t *list)
{
    if (list->n == list->cap) {
        size_t cap = 2 * list->cap;
        td_value_t *items = list->items == list->small
                            ? malloc(cap * sizeof(*items))
                            : realloc(list->items, cap * sizeof(*items));

        if (items == NULL) {
            td_error(TD_ERR_NO_MEMORY, "rpc: out of memory growing a list "
                     "to %zu items", cap);
            return NULL;
        }
        if (list->items == list->small) {
            memcpy(items, list->small, list->n * sizeof(*items));
        }
        list->items = items;
        list->cap = cap;
    }
    td_value_t *v = &list->items[list->n++];
    memset(v, 0, sizeof(*v));
    return v;
}

td_status_t
td_rpc_list_add_tensor(td_rpc_list_t *list, td_tensor_t *t)
{
    if (list == NULL || t == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: add_tensor: %s is NULL",
                        list == NULL ? "list" : "tensor");
    }
    td_value_t *v = td__rpc_list_push(list);
    if (v == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    v->kind = TD_VALUE_TENSOR;
    v->u.tensor = td_tensor_retain(t);
    return TD_OK;
}

td_status_t
td_rpc_list_add_int(td_rpc_list_t *list, int64_t x)
{
    td_value_t *v;

    if (list == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: add_int: list is NULL");
    }
    if ((v = td__rpc_list_push(list)) == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    v->kind = TD_VALUE_INT;
    v->u.i = x;
    return TD_OK;
}

td_status_t
td_rpc_list_add_double(td_rpc_list_t *list, double x)
{
    td_value_t *v;

    if (list == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: add_double: list is NULL");
    }
    if ((v = td__rpc_list_push(list)) == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    v->kind = TD_VALUE_DOUBLE;
    v->u.d = x;
    return TD_OK;
}

static td_status_t
add_bytes(td_rpc_list_t *list, td_value_kind_t kind, const void *data,
          size_t len)
{
    char *copy;
    td_value_t *v;

    if (list == NULL || (data == NULL && len > 0)) {
        return td_error(TD_ERR_INVALID, "rpc: add_%s: %s is NULL",
                        kind_name(kind), list == NULL ? "list" : "data");
    }
    copy = malloc(len + 1);
    if (copy == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory copying %zu "
                        "bytes", len);
    }
    if (len > 0) {
        memcpy(copy, data, len);
    }
    copy[len] = '\0';
    if ((v = td__rpc_list_push(list)) == NULL) {
        free(copy);
        return TD_ERR_NO_MEMORY;
    }
    v->kind = kind;
    v->u.bytes.data = copy;
    v->u.bytes.len = len;
    return TD_OK;
}

td_status_t
td_rpc_list_add_bytes(td_rpc_list_t *list, const void *data, size_t len)
{
    return add_bytes(list, TD_VALUE_BYTES, data, len);
}

td_status_t
td_rpc_list_add_string(td_rpc_list_t *list, const char *s)
{
    if (s == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: add_string: string is NULL");
    }
    return add_bytes(list, TD_VALUE_STRING, s, strlen(s));
}

td_status_t
td_rpc_list_add_rref(td_rpc_list_t *list, td_rref_t *rref)
{
    td_value_t *v;

    if (list == NULL || rref == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: add_rref: %s is NULL",
                        list == NULL ? "list" : "rref");
    }
    if (ref_retain == NULL) {
        return td_error(TD_ERR_STATE, "rpc: add_rref: remote references "
                        "exist only after td_init");
    }
    if ((v = td__rpc_list_push(list)) == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    v->kind = TD_VALUE_RREF;
    v->u.rref = ref_retain(rref);
    return TD_OK;
}

td_status_t
td__rpc_list_take_rref(td_rpc_list_t *list, td_rref_t *rref)
{
    td_value_t *v = td__rpc_list_push(list);

    if (v == NULL) {
        if (ref_release != NULL) {
            ref_release(rref);
        }
        return TD_ERR_NO_MEMORY;
    }
    v->kind = TD_VALUE_RREF;
    v->u.rref = rref;
    return TD_OK;
}

td_status_t
td_rpc_list_copy(const td_rpc_list_t *list, td_rpc_list_t **out)
{
    td_rpc_list_t *copy;
    td_status_t status;

    status = td_rpc_list_create(&copy);
    if (status != TD_OK) {
        return status;
    }
    for (size_t i = 0; list != NULL && i < list->n; i++) {
        const td_value_t *v = &list->items[i];

        switch (v->kind) {
        case TD_VALUE_TENSOR:
            status = td_rpc_list_add_tensor(copy, v->u.tensor);
            break;
        case TD_VALUE_INT:
            status = td_rpc_list_add_int(copy, v->u.i);
            break;
        case TD_VALUE_DOUBLE:
            status = td_rpc_list_add_double(copy, v->u.d);
            break;
        case TD_VALUE_BYTES:
        case TD_VALUE_STRING:
            status = add_bytes(copy, v->kind, v->u.bytes.data,
                               v->u.bytes.len);
            break;
        case TD_VALUE_RREF:
            status = td_rpc_list_add_rref(copy, v->u.rref);
            break;
        default:
            status = td_error(TD_ERR_INVALID, "rpc: list item %zu has kind "
                              "%d", i, (int)v->kind);
        }
        if (status != TD_OK) {
            td_rpc_list_free(copy);
            return status;
        }
    }
    *out = copy;
    return TD_OK;
}

size_t
td_rpc_list_len(const td_rpc_list_t *list)
{
    return list == NULL ? 0 : list->n;
}

td_value_kind_t
td_rpc_list_kind(const td_rpc_list_t *list, size_t i)
{
    if (list == NULL || i >= list->n) {
        return (td_value_kind_t)0;
    }
    return list->items[i].kind;
}

/* Item I of LIST when it has KIND, else NULL with the error recorded. */
static const td_value_t *
get(const td_rpc_list_t *list, size_t i, td_value_kind_t kind)
{
    if (list == NULL || i >= list->n) {
        td_error(TD_ERR_RANGE, "rpc: list index %zu out of range (length "
                 "%zu)", i, td_rpc_list_len(list));
        return NULL;
    }
    if (list->items[i].kind != kind) {
        td_error(TD_ERR_INVALID, "rpc: list item %zu is a %s, not a %s", i,
                 kind_name(list->items[i].kind), kind_name(kind));
        return NULL;
    }
    return &list->items[i];
}

/* The status get() recorded: range or kind. */
static td_status_t
get_status(const td_rpc_list_t *list, size_t i)
{
    return (list == NULL || i >= list->n) ? TD_ERR_RANGE : TD_ERR_INVALID;
}

td_status_t
td_rpc_list_tensor(const td_rpc_list_t *list, size_t i, td_tensor_t **t_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_TENSOR);

    if (v == NULL) {
        return get_status(list, i);
    }
    *t_p = v->u.tensor;
    return TD_OK;
}

td_status_t
td_rpc_list_int(const td_rpc_list_t *list, size_t i, int64_t *v_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_INT);

    if (v == NULL) {
        return get_status(list, i);
    }
    *v_p = v->u.i;
    return TD_OK;
}

td_status_t
td_rpc_list_double(const td_rpc_list_t *list, size_t i, double *v_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_DOUBLE);

    if (v == NULL) {
        return get_status(list, i);
    }
    *v_p = v->u.d;
    return TD_OK;
}

td_status_t
td_rpc_list_bytes(const td_rpc_list_t *list, size_t i, const void **data_p,
                  size_t *len_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_BYTES);

    if (v == NULL) {
        return get_status(list, i);
    }
    *data_p = v->u.bytes.data;
    *len_p = v->u.bytes.len;
    return TD_OK;
}

td_status_t
td_rpc_list_string(const td_rpc_list_t *list, size_t i, const char **s_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_STRING);

    if (v == NULL) {
        return get_status(list, i);
    }
    *s_p = v->u.bytes.data;
    return TD_OK;
}

td_status_t
td_rpc_list_rref(const td_rpc_list_t *list, size_t i, td_rref_t **rref_p)
{
    const td_value_t *v = get(list, i, TD_VALUE_RREF);

    if (v == NULL) {
        return get_status(list, i);
    }
    *rref_p = v->u.rref;
    return TD_OK;
}

td_status_t
td_rpc_list_set_tensor(td_rpc_list_t *list, size_t i, td_tensor_t *t)
{
    if (list == NULL || i >= list->n || t == NULL) {
        return td_error(TD_ERR_RANGE, "rpc: set_tensor: index %zu out of "
                        "range (length %zu) or tensor NULL", i,
                        td_rpc_list_len(list));
    }
    td_tensor_retain(t);
    value_clear(&list->items[i]);
    list->items[i].kind = TD_VALUE_TENSOR;
    list->items[i].u.tensor = t;
    return TD_OK;
}

int
td__rpc_list_requires_grad(const td_rpc_list_t *list)
{
    for (size_t i = 0; list != NULL && i < list->n; i++) {
        if (list->items[i].kind == TD_VALUE_TENSOR &&
            td_tensor_requires_grad(list->items[i].u.tensor)) {
            return 1;
        }
    }
    return 0;
}
