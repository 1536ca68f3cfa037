/* conf.c: the collectives module's settings and running state (conf.h). */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/coll/conf.h"

static struct {
    td_transport_t *tp;
    int             rank, size;
    double          timeout;           /* > 0 */
    double          cfg_timeout;       /* td_coll_set_timeout, 0: none */
    coll_algo_t     forced[COLL_NUM_KINDS];
    atomic_int      stopped;
    atomic_long     active;            /* operations in flight */
} K;

td_transport_t *coll_transport(void) { return K.tp; }
int coll_world_rank(void) { return K.rank; }
int coll_world_size(void) { return K.size; }

double
coll_timeout(void)
{
    return K.cfg_timeout > 0 ? K.cfg_timeout : K.timeout;
}

int
coll_stopped(void)
{
    return atomic_load_explicit(&K.stopped, memory_order_relaxed);
}

void
coll_active_add(long d)
{
    atomic_fetch_add(&K.active, d);
}

/* A blocking call run on its caller's thread counts in that thread's slot
 * (written by it only: a plain store, where K.active's add is a locked
 * instruction, ~5 ns, twice a call); threads past the slots count in
 * K.active. Read by coll_active. */
#define ACTIVE_SLOTS 128

static long        active_slot[ACTIVE_SLOTS];
static atomic_int  active_slots_used;
static long        active_none;         /* this thread has no slot */
/* initial-exec: a %fs load, not a call to __tls_get_addr (transport.c's
 * TLS_IE; 8 bytes of glibc's static TLS reserve) */
static __thread long *tl_active __attribute__((tls_model("initial-exec")));

void
coll_active_mine(long d)
{
    long *s = tl_active;

    if (s == NULL) {
        int i = atomic_fetch_add(&active_slots_used, 1);

        s = tl_active = i < ACTIVE_SLOTS ? &active_slot[i] : &active_none;
    }
    if (s == &active_none) {
        atomic_fetch_add(&K.active, d);
    } else {
        __atomic_store_n(s, __atomic_load_n(s, __ATOMIC_RELAXED) + d,
                         __ATOMIC_RELAXED);
    }
}

long
coll_active(void)
{
    long n = atomic_load(&K.active);
    int used = atomic_load(&active_slots_used);

    for (int i = 0; i < used && i < ACTIVE_SLOTS; i++) {
        n += __atomic_load_n(&active_slot[i], __ATOMIC_RELAXED);
    }
    return n;
}

td_status_t
coll_conf_setup(void)
{
    const char *s = getenv("TODIST_COLL_TIMEOUT");

    K.timeout = 60;
    if (s != NULL && *s != '\0') {
        char *end;
        double v = strtod(s, &end);

        if (*end != '\0' || !(v > 0)) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_TIMEOUT='%s' "
                            "is not a positive number of seconds", s);
        }
        K.timeout = v;
    }
    return coll_algo_parse(getenv("TODIST_COLL_ALGO"), K.forced);
}

void
coll_conf_start(td_transport_t *tp, int rank, int size)
{
    K.tp = tp;
    K.rank = rank;
    K.size = size;
    atomic_store(&K.stopped, 0);
}

void
coll_conf_stop(void)
{
    atomic_store(&K.stopped, 1);
}

void
coll_conf_clear(void)
{
    K.tp = NULL;
}

td_status_t
td_coll_set_algo(const char *spec)
{
    coll_algo_t f[COLL_NUM_KINDS];
    td_status_t st = coll_algo_parse(spec, f);

    if (st != TD_OK) {
        return st;
    }
    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        __atomic_store_n(&K.forced[k], f[k], __ATOMIC_RELAXED);
    }
    return TD_OK;
}

coll_algo_t
coll_algo_forced(coll_kind_t kind)
{
    return __atomic_load_n(&K.forced[kind], __ATOMIC_RELAXED);
}

td_status_t
td_coll_set_timeout(double seconds)
{
    if (!(seconds > 0)) {
        return td_error(TD_ERR_RANGE, "coll: timeout %g s is not positive",
                        seconds);
    }
    K.cfg_timeout = seconds;
    return TD_OK;
}
