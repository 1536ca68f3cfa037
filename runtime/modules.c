/* runtime/modules.c: the ordered table of runtime modules (see
 * runtime/modules.h for the invariants M1-M3 and runtime/runtime.h for
 * what a module provides). A new layer (coll, ddp) is one line in TABLE,
 * after the layers it uses. */
#include "config.h"

#include <stdbool.h>
#include <string.h>

#include "runtime/modules.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/rref_internal.h"
#include "runtime/rpc/mapreduce_internal.h"
#include "runtime/coll/module.h"
#include "runtime/dist_autograd/dist_internal.h"
#include "runtime/elastic/module.h"

/* The runtime, bottom layer first (M1). */
static const td_runtime_module_t *const table[] = {
    &td_rpc_module,             /* calls, futures, the handler pool */
    &td_rref_module,            /* remote references (an RPC plug-in) */
    &td_mapreduce_module,       /* map-reduce calls: the rank barrier */
    &td_coll_module,            /* process groups, p2p, collectives */
    &td_dist_autograd_module,   /* distributed autograd (an RPC plug-in) */
    &td_dist_optim_module,      /* the optimizer over remote references */
    &td_remote_module_module,   /* RemoteModule's owner-side functions */
    &td_elastic_module,         /* in-place recovery: the ranks lost */
};

#define N_TABLE (sizeof(table) / sizeof(table[0]))
#define N_MAX   (N_TABLE + TD_RUNTIME_MODULES_MAX)

typedef struct {
    td_runtime_module_t m;
    bool                attached;
    bool                skipped;     /* a table module unregistered */
} slot_t;

/* The table's modules, then the extra ones; filled on first use. */
static slot_t slots[N_MAX];
static size_t n_slots;
static size_t n_setup;               /* slots[0..n_setup) are set up */
static bool   running;               /* between setup and shutdown */

static void
fill_table(void)
{
    if (n_slots == 0) {
        for (size_t i = 0; i < N_TABLE; i++) {
            slots[n_slots++].m = *table[i];
        }
    }
}

static slot_t *
slot_find(const char *name)
{
    for (size_t i = 0; i < n_slots; i++) {
        if (strcmp(slots[i].m.name, name) == 0) {
            return &slots[i];
        }
    }
    return NULL;
}

td_status_t
td__runtime_register(const td_runtime_module_t *m)
{
    slot_t *s;

    if (m == NULL || m->name == NULL) {
        return td_error(TD_ERR_INVALID, "runtime: a module needs a name");
    }
    if (running) {
        return td_error(TD_ERR_STATE, "runtime: module '%s' registered after "
                        "td_init", m->name);
    }
    fill_table();
    s = slot_find(m->name);
    if (s != NULL && s < slots + N_TABLE) {
        return td_error(TD_ERR_EXISTS, "runtime: module '%s' is part of the "
                        "runtime's table", m->name);
    }
    if (s == NULL) {
        if (n_slots == N_MAX) {
            return td_error(TD_ERR_RANGE, "runtime: more than %d extra "
                            "modules (registering '%s')",
                            TD_RUNTIME_MODULES_MAX, m->name);
        }
        s = &slots[n_slots++];
    }
    s->m = *m;
    s->attached = false;
    s->skipped = false;
    return TD_OK;
}

td_status_t
td__runtime_unregister(const char *name)
{
    slot_t *s;

    if (running) {
        return td_error(TD_ERR_STATE, "runtime: module '%s' unregistered "
                        "while running", name != NULL ? name : "(null)");
    }
    fill_table();
    s = name != NULL ? slot_find(name) : NULL;
    if (s == NULL || s->skipped) {
        return td_error(TD_ERR_NOT_FOUND, "runtime: no module '%s'",
                        name != NULL ? name : "(null)");
    }
    if (s < slots + N_TABLE) {
        s->skipped = true;
    } else {
        memmove(s, s + 1, (size_t)(slots + n_slots - s - 1) * sizeof(*s));
        n_slots--;
    }
    return TD_OK;
}

td_status_t
td__modules_attach(void)
{
    fill_table();
    for (size_t i = 0; i < n_slots; i++) {
        slot_t *s = &slots[i];

        if (s->skipped || s->attached) {
            continue;
        }
        if (s->m.attach != NULL) {
            td_status_t status = s->m.attach(s->m.arg);

            if (status != TD_OK) {
                return status;      /* M3: its message stays */
            }
        }
        s->attached = true;
    }
    return TD_OK;
}

td_status_t
td__modules_setup(td_transport_t *tp, const td_world_t *world)
{
    fill_table();
    for (n_setup = 0; n_setup < n_slots; n_setup++) {
        slot_t *s = &slots[n_setup];

        if (s->skipped || s->m.setup == NULL) {
            continue;
        }
        td_status_t status = s->m.setup(s->m.arg, tp, world);

        if (status != TD_OK) {
            running = true;         /* shut down the ones before it */
            td__modules_shutdown();
            return status;
        }
    }
    running = true;
    return TD_OK;
}

size_t
td__modules_outstanding(void)
{
    size_t n = 0;

    /* n_slots, not n_setup: the table is fixed while running, and
     * n_setup moves while td_init / td_finalize walk it. */
    for (size_t i = 0; i < n_slots; i++) {
        if (!slots[i].skipped && slots[i].m.outstanding != NULL) {
            n += slots[i].m.outstanding(slots[i].m.arg);
        }
    }
    return n;
}

void
td__modules_peer_failed(int rank, td_status_t why)
{
    for (size_t i = 0; i < n_slots; i++) {
        if (!slots[i].skipped && slots[i].m.peer_failed != NULL) {
            slots[i].m.peer_failed(slots[i].m.arg, rank, why);
        }
    }
}

void
td__modules_shutdown(void)
{
    if (!running) {
        return;
    }
    while (n_setup-- > 0) {
        slot_t *s = &slots[n_setup];

        if (!s->skipped && s->m.shutdown != NULL) {
            s->m.shutdown(s->m.arg);
        }
    }
    n_setup = 0;
    running = false;
}
