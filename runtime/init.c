/* init.c: td_init / td_finalize and the runtime's shared handles (see
 * todist/init.h and runtime/runtime.h). The runtime's modules come from the
 * ordered table in runtime/modules.c: attached first, set up once the
 * transport exists (before this worker's address is published), shut down
 * in reverse after the join.
 *
 * Store keys used (all under "td/"):
 *   td/addr/<r>           rank r's host id and UCX worker address
 *                         (hostmap.h; also its arrival at the start-up
 *                         barrier)
 *   td/dev/<r>            rank r's device count and NCCL capability
 *                         (runtime/rpc/device_map.c)
 *   td/init/...           the start-up barrier (a replacement, started
 *                         with TODIST_ELASTIC_JOIN=1, skips it: it joins
 *                         through runtime/elastic's quorum instead)
 *   td/barrier/<m>.<g>/... td_barrier generation g among the members of
 *                         membership generation m (0 the world; after
 *                         td__runtime_set_members, its GEN)
 *   td/fin/in/<r>         rank r entered td_finalize
 *   td/fin/<k>/...        round k of the join: sums of sent and received
 *                         messages and of outstanding operations
 *   td/fin/m<g>/...       the join after the g-th shrink (members only)
 *   td/fin/exit           ranks done with the store (rank 0 waits for all
 *                         when it serves the store)
 * The store is served by rank 0's process, or by the launcher when it
 * says so (TODIST_AGENT_STORE=1: todist-run --no-kill, as torchrun's
 * agent store), so that rank 0 can die and be replaced like any other
 * rank (runtime.h, R3).
 * The join is the four-counter termination check: it ends after two
 * consecutive rounds in which every rank was idle and the job-wide sums of
 * sent and received messages were equal and unchanged, so no message (and
 * thus no work) can still be on its way. */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "todist/init.h"
#include "todist/store.h"
#include "todist/topology.h"
#include "runtime/runtime.h"
#include "runtime/rpc/device_map.h"
#include "runtime/modules.h"
#include "kernels/device.h"
#include "base/clock.h"
#include "base/log.h"
#include "runtime/hostmap.h"
#include "runtime/liveness.h"
#include "runtime/world/pmix.h"
#include "runtime/world/reach.h"

#define JOIN_POLL_S 0.001
/* The resolver's connection, made at the first lookup, gives up after. */
#define RESOLVER_CONNECT_S 10.0
/* A barrier waits in slices this long, checking for dead ranks between. */
#define DEAD_CHECK_S 0.25

typedef struct {
    void    *value;      /* as published (hostmap_pack), NULL not fetched */
    const void *addr;    /* the worker address inside it */
    size_t   len;
    uint64_t host;       /* its host id (hostmap.h), 0 unknown */
    int32_t  pid;        /* its pid, read with the address (liveness.h V5),
                          * 0 unknown */
    td__proc_t proc;     /* its process (liveness.h), watched when asked */
    char     host_name[HOSTMAP_NAME_MAX];
    hostmap_ips_t ips;   /* its host's addresses (liveness.h V4) */
    int      fetching;   /* A1: a thread is fetching it (addr_lock) */
    unsigned gen;        /* A2: bumped by td__runtime_readmit */
} addr_t;

static struct {
    int                 initialized;
    td_world_t          world;
    td_init_params_t    params;
    td_store_server_t  *server;
    td_store_t         *store;         /* the application thread's */
    td_store_t         *resolver;      /* the progress thread's lookups:
                                        * connected at the first one, under
                                        * addr_lock (a rank that talks to
                                        * nobody costs the store nothing) */
    char                store_host[256];
    uint16_t            store_port;
    char               *token;         /* TODIST_JOB_TOKEN's copy or NULL */
    td_transport_t     *tp;
    pthread_mutex_t     addr_lock;     /* rt.addrs; never held across
                                        * store I/O (A1) */
    pthread_cond_t      addr_cond;     /* a fetch ended (A1) */
    pthread_mutex_t     resolver_lock; /* connecting rt.resolver (A1) */
    addr_t             *addrs;
    unsigned            barrier_gen;
    int                 dead_rank;     /* first member the transport lost,
                                        * -1 */
    unsigned char      *left;          /* left[r]: r is out of the members
                                        * (td__runtime_set_members; atomic
                                        * bytes, the progress thread reads) */
    int                 n_members;     /* world_size until a shrink */
    unsigned            member_gen;    /* the members' generation (0 the
                                        * world, then the elastic epoch):
                                        * the join's and barriers' keys */
    bool                joining;       /* TODIST_ELASTIC_JOIN=1: a
                                        * replacement (no start-up barrier) */
    bool                agent_store;   /* TODIST_AGENT_STORE=1: the
                                        * launcher serves the store */
    bool                pmix;          /* addresses through PMIx (pmix.h) */
    int                 cores;         /* CPUs this process could run on
                                        * before placement bound it (what
                                        * this host's ranks share; 0:
                                        * unknown) */
    int                 finalizing;    /* in td_finalize: a peer that goes
                                        * now is most likely leaving too; a
                                        * real loss fails the join, which
                                        * names it (atomic; the progress
                                        * thread reads) */
} rt = { .addr_lock = PTHREAD_MUTEX_INITIALIZER,
        .addr_cond = PTHREAD_COND_INITIALIZER,
        .resolver_lock = PTHREAD_MUTEX_INITIALIZER };

/* Who serves the store, for messages. */
static const char *
store_holder(void)
{
    return rt.agent_store ? "the launcher (TODIST_AGENT_STORE=1)" : "rank 0";
}

static void
sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

    nanosleep(&ts, NULL);
}

/* ---- devices at start-up ----------------------------------------------- */

/* Whether this rank wants its device backend at td_init (kernels/module.h:
 * the CUDA module is 160 MB of mappings a CPU rank must not pay for).
 * TODIST_DEVICE=cpu: no; =cuda: yes, and a failure fails td_init naming
 * what is missing; unset or "auto": when device maps are given, or the
 * NVIDIA driver is on this node (its /proc entry: a cheap look, no
 * library). Anything else: TD_ERR_INVALID. Later requests (a CUDA tensor)
 * still load the module on first use. After this, the device count start-up
 * publishes is td__device_count_loaded()'s, which never loads. */
static td_status_t
devices_at_init(const td_device_maps_t *given)
{
    const char *want = getenv("TODIST_DEVICE");
    const char *maps = getenv("TODIST_DEVICE_MAPS");
    int n;

    if (want != NULL && strcmp(want, "cpu") == 0) {
        return TD_OK;
    }
    if (want != NULL && strcmp(want, "cuda") == 0) {
        return td__device_count_of(TD_DEVICE_CUDA, &n);
    }
    if (want != NULL && want[0] != '\0' && strcmp(want, "auto") != 0) {
        return td_error(TD_ERR_INVALID, "init: TODIST_DEVICE=%s on rank %d "
                        "is not one of cpu, cuda, auto", want,
                        rt.world.rank);
    }
    if (given != NULL || (maps != NULL && maps[0] != '\0') ||
        access("/proc/driver/nvidia/version", F_OK) == 0) {
        if (td__device_count_of(TD_DEVICE_CUDA, &n) != TD_OK) {
            td_log_debug("init: no device (%s)", td_last_error());
            td_error_clear();           /* cpu tensors only */
        }
    }
    return TD_OK;
}

/* ---- handles ------------------------------------------------------------ */

td_transport_t *
td__runtime_transport(void)
{
    return rt.initialized ? rt.tp : NULL;
}

td_store_t *
td__runtime_store(void)
{
    return rt.initialized ? rt.store : NULL;
}

int
td__runtime_local_world_size(void)
{
    return rt.initialized ? rt.world.local_world_size : 0;
}

int
td__runtime_host_cores(void)
{
    return rt.initialized ? rt.cores : 0;
}

const td_world_t *
td_world(void)
{
    return rt.initialized ? &rt.world : NULL;
}

bool
td_initialized(void)
{
    return rt.initialized != 0;
}

/* ---- addresses ------------------------------------------------------------ */

/* Peers' addresses (A1, A2):
 *  A1 addr_lock guards rt.addrs and is never held across a store or PMIx
 *     round trip. A thread that must fetch rank R's address marks R in
 *     flight (fetching), drops the lock for its round trips and takes it
 *     again to store what came; another thread that wants R meanwhile
 *     waits on addr_cond for the marker to clear (bounded: the fetcher's
 *     round trips are, by init_timeout and RESOLVER_CONNECT_S), and one
 *     that wants another rank's address, or only reads what is known
 *     (same_host_cb, peer_heard_cb, host texts: the transport's token
 *     holder asks these), never waits for the store. Before, one lock
 *     was held across the round trips: a thread fetching one address
 *     stopped every other thread that needed any, the token holder
 *     included (issue 30: test_spank_hosts 17/18 hung under load while
 *     rank 0's store took tens of seconds to answer).
 *  A2 td__runtime_readmit bumps the rank's generation: a fetch begun
 *     before it stores nothing (it may have read the old process's
 *     address); its caller fetches again. */

/* TODIST_TEST_HOLD_ADDR=R:S, for tests only: world rank R's first fetch
 * of a peer's address from the store after td_init, on a thread that is
 * not the progress thread, takes S seconds longer, as a store slow to
 * answer does; the rank is then in flight (A1), the lock is not held
 * (tests/hosts/test_hosts_answer.sh, transport.c L9, L11). */
static void
fetch_test_hold(void)
{
    static int done;
    const char *s = getenv("TODIST_TEST_HOLD_ADDR");
    int r;
    double secs;
    struct timespec ts;

    if (done || s == NULL || !rt.initialized ||
        sscanf(s, "%d:%lf", &r, &secs) != 2 || r != rt.world.rank ||
        !(secs > 0 && secs < 600) ||
        (rt.tp != NULL && td__transport_on_progress_thread(rt.tp))) {
        return;
    }
    done = 1;
    ts.tv_sec = (time_t)secs;
    ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* TODIST_TEST_SLOW_STORE=R:P:PATH, for tests only: world rank R's fetch
 * of rank P's address from the store, on whatever thread makes it,
 * waits until PATH exists (at most 60 s, then says so), as a store that
 * takes that long to answer (tests/transport/test_transport.sh
 * slowstore: the token holder must go on, transport.c L11). */
static void
fetch_test_slow(int rank)
{
    const char *s = getenv("TODIST_TEST_SLOW_STORE");
    char path[512];
    int r, p;
    struct timespec ts = { 0, 10000000 };

    if (s == NULL || sscanf(s, "%d:%d:%511s", &r, &p, path) != 3 ||
        r != rt.world.rank || p != rank) {
        return;
    }
    for (int i = 0; i < 6000; i++) {
        if (access(path, F_OK) == 0) {
            return;
        }
        nanosleep(&ts, NULL);
    }
    td_log_warn("runtime: TODIST_TEST_SLOW_STORE: gave up waiting for %s",
                path);
}

/* The store's error on a fetch of RANK's address, said as what it means. */
static td_status_t
fetch_error(int rank, td_status_t status)
{
    char why[512];

    if (status == TD_ERR_TIMEOUT) {
        return td_error(TD_ERR_TIMEOUT, "runtime: rank %d never published "
                        "its address (%.3g s)", rank,
                        rt.params.init_timeout);
    }
    if (status == TD_ERR_IO || status == TD_ERR_PROTOCOL) {
        /* The store lives in rank 0: say so, not just "I/O error". */
        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(TD_ERR_PEER, "runtime: %s, which holds the store, "
                        "is gone: cannot reach rank %d, whose address this "
                        "rank never fetched (%s)", store_holder(), rank, why);
    }
    return status;
}

/* RANK's published value and its pid from the store or PMIx, no lock of
 * ours held (A1). */
static td_status_t
fetch_remote(int rank, void **v_p, size_t *len_p, int32_t *pid_p)
{
    char key[64];
    td_status_t status = TD_OK;
    td_store_t *resolver;

    *pid_p = 0;
    if (rt.pmix) {
        return td__pmix_lookup(rank, v_p, len_p);
    }
    pthread_mutex_lock(&rt.resolver_lock);
    if (rt.resolver == NULL) {
        /* The store was up at td_init: no long retries, and a refusal
         * means rank 0 is gone. */
        status = td_store_connect(rt.store_host, rt.store_port, rt.token,
                                  RESOLVER_CONNECT_S, &rt.resolver);
        if (status != TD_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", td_last_error());
            status = td_error(TD_ERR_PEER, "runtime: %s, which holds the "
                              "store, is gone: cannot reach rank %d, whose "
                              "address this rank never fetched (%s)",
                              store_holder(), rank, why);
        }
    }
    resolver = rt.resolver;
    pthread_mutex_unlock(&rt.resolver_lock);
    if (status != TD_OK) {
        return status;
    }
    fetch_test_hold();
    fetch_test_slow(rank);
    /* V5: the pid first, so it is never a later process's (the client
     * serialises its calls itself) */
    *pid_p = td__liveness_pid(resolver, rank);
    snprintf(key, sizeof(key), "td/addr/%d", rank);
    status = td_store_get(resolver, key, rt.params.init_timeout, v_p, len_p);
    return status == TD_OK ? TD_OK : fetch_error(rank, status);
}

static td_status_t
fetch_address(int rank, void **addr_p, size_t *len_p)
{
    void *v = NULL, *copy;
    size_t len = 0;
    td_status_t status = TD_OK;
    addr_t *a = &rt.addrs[rank];

    pthread_mutex_lock(&rt.addr_lock);
    while (a->value == NULL && status == TD_OK) {
        unsigned gen = a->gen;
        int32_t pid;

        if (a->fetching) {
            pthread_cond_wait(&rt.addr_cond, &rt.addr_lock);  /* A1 */
            continue;
        }
        a->fetching = 1;
        pthread_mutex_unlock(&rt.addr_lock);
        status = fetch_remote(rank, &v, &len, &pid);
        pthread_mutex_lock(&rt.addr_lock);
        a->fetching = 0;
        pthread_cond_broadcast(&rt.addr_cond);
        if (status == TD_OK && a->gen != gen) {
            free(v);                    /* A2: the old process's: again */
            v = NULL;
        } else if (status == TD_OK) {
            status = hostmap_unpack(rank, v, len, &a->addr, &a->len,
                                    &a->host, a->host_name, &a->ips);
            if (status == TD_OK) {
                a->value = v;
                a->pid = pid;
            } else {
                free(v);
            }
        }
    }
    if (status == TD_OK && addr_p == NULL) {
        *len_p = 0;
    } else if (status == TD_OK) {
        len = a->len;
        copy = malloc(len ? len : 1);
        if (copy == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "runtime: out of memory");
        } else {
            memcpy(copy, a->addr, len);
            *addr_p = copy;
            *len_p = len;
        }
    }
    pthread_mutex_unlock(&rt.addr_lock);
    return status;
}

static td_status_t
resolve_cb(void *arg, int rank, void **addr_p, size_t *len_p)
{
    return fetch_address(rank, addr_p, len_p);
}

td_status_t
td__runtime_peer_address(int rank, void **addr_p, size_t *len_p)
{
    if (!rt.initialized) {
        return td_error(TD_ERR_STATE, "runtime: not initialised");
    }
    if (rank < 0 || rank >= rt.world.world_size) {
        return td_error(TD_ERR_INVALID, "runtime: rank %d is not in the "
                        "world of %d", rank, rt.world.world_size);
    }
    return fetch_address(rank, addr_p, len_p);
}

int
td__runtime_same_host(int rank)
{
    uint64_t id;

    if (rt.initialized && rank == rt.world.rank) {
        return 1;
    }
    /* Learnt with the address (fetched once; this rank talks to it). */
    id = td__runtime_host_id(rank);
    return id != 0 && id == hostmap_self();
}

/* TODIST_TEST_HOST_UNKNOWN=R:P, for tests only: on world rank R, the
 * lookup of rank P's host fails as a store lookup that timed out would
 * (tests/coll/test_hostmap_agree.sh: the group's members must still agree
 * on one host map, runtime/coll/run.c). */
static int
test_host_unknown(int rank)
{
    const char *s = getenv("TODIST_TEST_HOST_UNKNOWN");
    int r, p;

    return s != NULL && sscanf(s, "%d:%d", &r, &p) == 2 &&
           r == rt.world.rank && p == rank;
}

uint64_t
td__runtime_host_id(int rank)
{
    size_t len;
    uint64_t id;

    if (!rt.initialized || rank < 0 || rank >= rt.world.world_size) {
        return 0;
    }
    if (rank == rt.world.rank) {
        return hostmap_self();
    }
    if (test_host_unknown(rank)) {
        td_error(TD_ERR_TIMEOUT, "runtime: rank %d never published its "
                 "address (TODIST_TEST_HOST_UNKNOWN, a test knob)", rank);
        return 0;
    }
    if (fetch_address(rank, NULL, &len) != TD_OK) {
        return 0;
    }
    pthread_mutex_lock(&rt.addr_lock);
    id = rt.addrs[rank].host;
    pthread_mutex_unlock(&rt.addr_lock);
    return id;
}

/* "on host NAME, ranks there: R..." for RANK (addr_lock held): the ranks of
 * this job on its host that this rank knows of (a lost host takes all of
 * them); "" when its address was never fetched. */
static void
host_text_locked(int rank, char *buf, size_t len)
{
    const addr_t *a = &rt.addrs[rank];
    size_t used;

    buf[0] = '\0';
    if (a->value == NULL || len < 32) {
        return;
    }
    used = (size_t)snprintf(buf, len, "on host %s, ranks there:",
                            a->host_name[0] ? a->host_name : "?");
    for (int r = 0; a->host != 0 && r < rt.world.world_size &&
                    used + 16 < len; r++) {
        if (rt.addrs[r].value != NULL && rt.addrs[r].host == a->host) {
            used += (size_t)snprintf(buf + used, len - used, " %d", r);
        }
    }
    if (a->host == 0 && used + 16 < len) {
        snprintf(buf + used, len - used, " %d", rank);
    }
}

void
td__runtime_peer_fate(int rank, char *buf, size_t len)
{
    if (len == 0) {
        return;
    }
    if (!rt.initialized || rt.tp == NULL ||
        !td__transport_peer_fate(rt.tp, rank, buf, len)) {
        snprintf(buf, len, "died");
    }
}

void
td__runtime_host_text(int rank, char *buf, size_t len)
{
    if (len == 0) {
        return;
    }
    buf[0] = '\0';
    if (!rt.initialized || rank < 0 || rank >= rt.world.world_size ||
        rank == rt.world.rank) {
        return;
    }
    pthread_mutex_lock(&rt.addr_lock);
    if (rt.addrs[rank].value != NULL &&
        !(rt.addrs[rank].host != 0 && rt.addrs[rank].host == hostmap_self())) {
        host_text_locked(rank, buf, len);
    }
    pthread_mutex_unlock(&rt.addr_lock);
}

/* The transport asks about a peer it holds an endpoint to (token holder):
 * has it exited? Only peers of this host are known (liveness.h V1). */
static int
peer_gone_cb(void *arg, int rank)
{
    td__proc_t *p;

    (void)arg;
    if (rt.pmix || !td__runtime_same_host(rank)) {
            return 0;
    }
    p = &rt.addrs[rank].proc;
    if (p->pid == 0) {
        /* V5: the process whose address was fetched (same_host above
         * fetched it), not whichever published the pid last */
        pthread_mutex_lock(&rt.addr_lock);
        td__liveness_watch(p, rt.addrs[rank].pid);
        pthread_mutex_unlock(&rt.addr_lock);
    }
    return td__liveness_gone(p);
}

/* The transport asks about a peer on another host that answered no ping
 * (token holder, transport.h): how long ago did its host last answer at
 * the network level? (liveness.h V4; -1 unknown) */
static int
peer_heard_cb(void *arg, int rank)
{
    hostmap_ips_t ips;

    (void)arg;
    pthread_mutex_lock(&rt.addr_lock);
    ips = rt.addrs[rank].ips;           /* fetched with its address */
    pthread_mutex_unlock(&rt.addr_lock);
    return td__liveness_heard_ms(&ips);
}

/* The transport reset RANK for a new process (td__runtime_readmit; token
 * holder, transport.h R1): its old pid is forgotten here, where
 * peer_gone_cb reads it, so no liveness check asks about the old one. */
static void
peer_reset_cb(void *arg, int rank)
{
    (void)arg;
    pthread_mutex_lock(&rt.addr_lock);
    td__liveness_clear(&rt.addrs[rank].proc);
    pthread_mutex_unlock(&rt.addr_lock);
}

/* Transport's question (transport.h): is RANK, just connected, here? */
static int
same_host_cb(void *arg, int rank)
{
    int same;

    pthread_mutex_lock(&rt.addr_lock);
    same = rt.addrs[rank].value != NULL && rt.addrs[rank].host != 0 &&
           rt.addrs[rank].host == hostmap_self();
    pthread_mutex_unlock(&rt.addr_lock);
    return same;
}

/* Say which host RANK was on and which ranks of this job (that this rank
 * knows of) run there: a lost host takes all of them. Progress thread. */
static void
log_lost_host(int rank)
{
    char where[256], fate[160];

    pthread_mutex_lock(&rt.addr_lock);
    host_text_locked(rank, where, sizeof(where));
    pthread_mutex_unlock(&rt.addr_lock);
    if (where[0] != '\0') {
        if (td__transport_peer_fate(rt.tp, rank, fate, sizeof(fate))) {
            /* transport.c L12: it is alive, this rank was cut off */
            td_log_error("runtime: rank %d (%s) %s", rank, where, fate);
        } else {
            td_log_error("runtime: lost rank %d (%s)", rank, where);
        }
    }
}

static void
peer_failed_cb(void *arg, int rank, td_status_t why)
{
    int none = -1;

    if (__atomic_load_n(&rt.finalizing, __ATOMIC_ACQUIRE)) {
        /* a member that passed the join before us closes its endpoint as
         * it exits (across hosts that reaches us as an error): no "lost"
         * alarm on a clean exit; a real loss fails our join, naming it */
        td_log_debug("runtime: rank %d went while this rank finalizes",
                     rank);
        td__modules_peer_failed(rank, why);
        return;
    }
    log_lost_host(rank);
    /* Barriers and the join watch this to fail fast (progress thread);
     * a rank that left the members no longer counts. */
    if (rt.left != NULL && __atomic_load_n(&rt.left[rank], __ATOMIC_ACQUIRE)) {
        td__modules_peer_failed(rank, why);
        return;
    }
    __atomic_compare_exchange_n(&rt.dead_rank, &none, rank, false,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    td__modules_peer_failed(rank, why);
}

/* ---- naming the ranks that did not arrive ---------------------------------- */

/* Write into BUF the ranks for which "PREFIX/<r>" is not in the store. */
static void
missing_ranks(const char *prefix, char *buf, size_t len)
{
    size_t off = 0;
    int shown = 0, missing = 0;

    buf[0] = '\0';
    for (int r = 0; r < rt.world.world_size; r++) {
        char key[128];
        void *v = NULL;
        size_t vl;
        if (rt.left != NULL && rt.left[r]) {
            continue;           /* not a member since a shrink */
        }
        snprintf(key, sizeof(key), "%s/%d", prefix, r);
        if (td_store_get(rt.store, key, 0, &v, &vl) == TD_OK) {
            free(v);
            continue;
        }
        missing++;
        if (shown < 16 && off < len) {
            off += snprintf(buf + off, len - off, "%s%d", shown ? ", " : "",
                            r);
            shown++;
        }
    }
    if (missing > shown && off < len) {
        snprintf(buf + off, len - off, " and %d more", missing - shown);
    }
}

/* A store barrier NAME of the whole world that also ends, with TD_ERR_PEER
 * naming the rank, as soon as the transport knows a rank is dead: it waits
 * in slices of DEAD_CHECK_S. WHAT names the caller in the message; a
 * timeout is left to the caller to word. */
static td_status_t
watched_barrier(const char *name, double timeout, const char *what)
{
    char kn[128], kd[128];
    const char *keys[1] = { kd };
    double deadline = td_now_s() + timeout;
    int64_t n;
    td_status_t status;

    snprintf(kn, sizeof(kn), "%s/n", name);
    snprintf(kd, sizeof(kd), "%s/done", name);
    status = td_store_add(rt.store, kn, 1, &n);
    if (status == TD_OK && n == rt.n_members) {
        status = td_store_set(rt.store, kd, "1", 1);
    }
    while (status == TD_OK) {
        int dead = __atomic_load_n(&rt.dead_rank, __ATOMIC_SEQ_CST);
        double left = deadline - td_now_s();
        if (dead >= 0) {
            /* It may have died after everyone arrived (a rank that left
             * td_finalize first): only a barrier still open fails. */
            char where[256];

            if (td_store_wait(rt.store, keys, 1, 0) == TD_OK) {
                return TD_OK;
            }
            char fate[160];

            td__runtime_host_text(dead, where, sizeof(where));
            if (td__transport_peer_fate(rt.tp, dead, fate, sizeof(fate))) {
                /* transport.c L12 */
                return td_error(TD_ERR_PEER, "%s: rank %d%s%s%s %s, so it "
                                "cannot arrive", what, dead,
                                where[0] ? " (" : "", where,
                                where[0] ? ")" : "", fate);
            }
            return td_error(TD_ERR_PEER, "%s: rank %d%s%s%s failed (the "
                            "transport lost it), so it cannot arrive", what,
                            dead, where[0] ? " (" : "", where,
                            where[0] ? ")" : "");
        }
        status = td_store_wait(rt.store, keys, 1,
                               left < DEAD_CHECK_S ? (left > 0 ? left : 0)
                                                   : DEAD_CHECK_S);
        if (status == TD_ERR_TIMEOUT && left > DEAD_CHECK_S) {
            status = TD_OK;   /* a slice ended: look again */
        } else if (status == TD_OK) {
            return TD_OK;
        }
    }
    return status;
}

/* Barrier NAME where each rank first sets "NAME/in/<rank>", so a timeout
 * can say who is missing. ARRIVED: the prefix of per-rank keys every rank
 * has set already ("PREFIX/<rank>", e.g. its address), which then serve
 * as the arrivals and save the set (NULL: NAME/in). */
static td_status_t
named_barrier(const char *name, const char *arrived, double timeout,
              const char *what)
{
    char key[128], missing[256];
    td_status_t status;

    if (arrived == NULL) {
        snprintf(key, sizeof(key), "%s/in/%d", name, rt.world.rank);
        status = td_store_set(rt.store, key, "1", 1);
        if (status != TD_OK) {
            return status;
        }
    }
    status = watched_barrier(name, timeout, what);
    if (status == TD_ERR_TIMEOUT) {
        if (arrived != NULL) {
            snprintf(key, sizeof(key), "%s", arrived);
        } else {
            snprintf(key, sizeof(key), "%s/in", name);
        }
        missing_ranks(key, missing, sizeof(missing));
        status = td_error(TD_ERR_TIMEOUT, "%s: rank%s %s did not arrive "
                          "within %.3g s", what, strchr(missing, ',') ||
                          strstr(missing, "more") ? "s" : "", missing,
                          timeout);
    }
    return status;
}

td_status_t
td_barrier(double timeout)
{
    char name[64];

    if (!rt.initialized) {
        return td_error(TD_ERR_STATE, "barrier: td_init has not been called");
    }
    snprintf(name, sizeof(name), "td/barrier/%u.%u", rt.member_gen,
             rt.barrier_gen++);
    return named_barrier(name, NULL,
                         timeout < 0 ? rt.params.init_timeout : timeout,
                         "barrier");
}

/* ---- init ------------------------------------------------------------------- */

td_init_params_t
td_init_params_default(void)
{
    td_init_params_t p;

    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    p.connect_timeout = 60;
    p.init_timeout = 120;
    p.finalize_timeout = 300;
    p.progress = TD_INIT_PROGRESS_AUTO;
    p.world = NULL;
    return p;
}

static td_status_t
env_seconds(const char *name, double *v)
{
    const char *s = getenv(name);
    char *end;
    double d;

    if (s == NULL || s[0] == '\0') {
        return TD_OK;
    }
    d = strtod(s, &end);
    if (*end != '\0' || !(d > 0)) {
        return td_error(TD_ERR_INVALID, "init: %s=%s is not a positive number "
                        "of seconds", name, s);
    }
    *v = d;
    return TD_OK;
}

/* Reword a store failure that is really a port clash so that it names
 * the port, the job and the fix (issue 19): rank 0 cannot listen, or a
 * rank reached a store that rejects this job's token (another job's). */
static td_status_t
store_port_error(td_status_t status, uint16_t port, bool serving)
{
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    char what[96] = "";

    if (job != NULL) {
        snprintf(what, sizeof(what), " for Slurm job %.32s step %.32s", job,
                 step != NULL ? step : "?");
    }
    if (serving) {
        return td_error(status, "init: todist's store cannot listen on port "
                        "%u (TODIST_MASTER_PORT)%s: %s; another job or program "
                        "holds it. Reserve ports (MpiParams=ports=LO-HI in "
                        "slurm.conf and srun --resv-ports) or choose one "
                        "(--todist=store_port=N, todist-run --store-port N)",
                        port, what, td_last_error());
    }
    if (status != TD_ERR_AUTH) {
        return status;
    }
    return td_error(status, "init: rank %d reached a store on port %u that "
                    "is not this job's%s (%s): its port collides with "
                    "another job's. Reserve ports (MpiParams=ports=LO-HI in "
                    "slurm.conf and srun --resv-ports) or choose one "
                    "(--todist=store_port=N, todist-run --store-port N)",
                    rt.world.rank, port, what, td_last_error());
}

td_status_t
td_init(const td_init_params_t *params)
{
    td_transport_params_t tpp;
    const char *token = getenv("TODIST_JOB_TOKEN");
    const char *host;
    const void *addr;
    size_t addr_len;
    void *packed;
    size_t packed_len;
    char key[64];
    td_status_t status;

    if (rt.initialized) {
        return td_error(TD_ERR_STATE, "init: td_init called twice");
    }
    rt.params = td_init_params_default();
    if (params != NULL) {
        size_t n = params->size < sizeof(rt.params) ? params->size
                                                     : sizeof(rt.params);
        if (n < sizeof(size_t)) {
            return td_error(TD_ERR_INVALID, "init: params.size is %zu; start "
                            "from td_init_params_default()", params->size);
        }
        memcpy(&rt.params, params, n);
        rt.params.size = sizeof(rt.params);
    }
    if ((status = env_seconds("TODIST_CONNECT_TIMEOUT",
                              &rt.params.connect_timeout)) != TD_OK ||
        (status = env_seconds("TODIST_INIT_TIMEOUT",
                              &rt.params.init_timeout)) != TD_OK ||
        (status = env_seconds("TODIST_FINALIZE_TIMEOUT",
                              &rt.params.finalize_timeout)) != TD_OK) {
        return status;
    }
    if (rt.params.world != NULL) {
        rt.world = *rt.params.world;
    } else if ((status = td_world_from_env(&rt.world)) != TD_OK) {
        return status;
    }
    rt.params.world = NULL;   /* not kept: the caller's may go away */
    {
        const char *j = getenv("TODIST_ELASTIC_JOIN");

        rt.joining = j != NULL && strcmp(j, "1") == 0;
        if (j != NULL && j[0] != '\0' && strcmp(j, "0") != 0 &&
            !rt.joining) {
            return td_error(TD_ERR_INVALID, "init: TODIST_ELASTIC_JOIN='%s' "
                            "(1: this process replaces a lost rank; 0 or "
                            "unset: it starts with the world)", j);
        }
        j = getenv("TODIST_AGENT_STORE");
        rt.agent_store = j != NULL && strcmp(j, "1") == 0;
        if (j != NULL && j[0] != '\0' && strcmp(j, "0") != 0 &&
            !rt.agent_store) {
            return td_error(TD_ERR_INVALID, "init: TODIST_AGENT_STORE='%s' "
                            "(1: the launcher serves the store at "
                            "TODIST_MASTER_ADDR:TODIST_MASTER_PORT; 0 or "
                            "unset: rank 0 serves it)", j);
        }
        if (rt.joining && rt.world.rank == 0 && !rt.agent_store) {
            return td_error(TD_ERR_INVALID, "init: TODIST_ELASTIC_JOIN=1 on "
                            "rank 0: rank 0 serves the store and cannot be "
                            "replaced (a launcher that serves it sets "
                            "TODIST_AGENT_STORE=1: todist-run --no-kill)");
        }
    }
    td__log_set_rank(rt.world.rank);
    td__log_init();            /* a bad TODIST_LOG is named even if all is quiet */
    if (rt.world.local_rank == 0) {
        td__reach_warn_loopback(&rt.world);   /* once a host */
    }
    /* Across nodes the store must authenticate; a launcher that could not
     * agree on a token (todist-run --nnodes without one) exports none. */
    if (rt.world.nnodes > 1 && (token == NULL || token[0] == '\0')) {
        return td_error(TD_ERR_AUTH, "init: rank %d is one of %d nodes but "
                        "TODIST_JOB_TOKEN is not set; give every node the "
                        "same token (srun --todist makes one; for todist-run "
                        "export TODIST_JOB_TOKEN=$(openssl rand -hex 32) on "
                        "every node)", rt.world.rank,
                        rt.world.nnodes);
    }

    /* The modules register their RPC functions and plug into RPC first:
     * a failure there is td_init's, with the module's message. */
    status = td__modules_attach();
    if (status != TD_OK) {
        td__log_set_rank(-1);
        return status;
    }

    /* Placement first (TODIST_BIND=closest, set by srun --todist bind=closest
     * or the user): UCX reads UCX_NET_DEVICES when the transport starts, and
     * memory binding should precede the big allocations. */
    {
        td_place_report_t report;
        cpu_set_t set;

        rt.cores = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set) : 0;
        status = td_placement_apply_env(&rt.world, &report);
        if (status != TD_OK) {
            return status;
        }
    }
    /* After placement: CUDA reads CUDA_VISIBLE_DEVICES when it starts. */
    status = devices_at_init(rt.params.device_maps);
    if (status != TD_OK) {
        td__log_set_rank(-1);
        return status;
    }
    rt.addrs = calloc(rt.world.world_size, sizeof(*rt.addrs));
    if (rt.addrs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "init: out of memory for %d ranks",
                        rt.world.world_size);
    }
    rt.left = calloc(rt.world.world_size, 1);
    if (rt.left == NULL) {
        free(rt.addrs);
        rt.addrs = NULL;
        return td_error(TD_ERR_NO_MEMORY, "init: out of memory for %d ranks",
                        rt.world.world_size);
    }
    rt.n_members = rt.world.world_size;
    rt.member_gen = 0;
    rt.barrier_gen = 0;
    rt.dead_rank = -1;
    __atomic_store_n(&rt.finalizing, 0, __ATOMIC_RELEASE);

    /* Under srun --mpi=pmix the addresses travel through PMIx. */
    rt.pmix = td__pmix_wanted();
    if (rt.pmix && (status = td__pmix_init(&rt.world)) != TD_OK) {
        rt.pmix = false;
        goto err_addrs;
    }
    if (rt.pmix) {
        td_log_info("init: worker addresses through PMIx (%s)",
                    getenv("PMIX_NAMESPACE"));
    }

    /* The store: rank 0 serves (a world of one serves itself on loopback),
     * unless the launcher does. */
    host = rt.world.master_addr[0] ? rt.world.master_addr : "127.0.0.1";
    if (rt.world.rank == 0 && !rt.agent_store) {
        /* Listen on the master address only, not every interface. */
        status = td_store_server_start(rt.world.world_size > 1 ? host
                                                               : "127.0.0.1",
                                       rt.world.master_port, token,
                                       &rt.server);
        if (status != TD_OK) {
            status = store_port_error(status, rt.world.master_port, true);
            goto err_addrs;
        }
    }
    uint16_t port = rt.server != NULL ? td_store_server_port(rt.server)
                                      : rt.world.master_port;
    if (rt.server != NULL && rt.world.world_size == 1) {
        host = "127.0.0.1";
    }
    status = td_store_connect(host, port, token, rt.params.connect_timeout,
                              &rt.store);
    if (status != TD_OK) {
        status = store_port_error(status, port, false);
        goto err_server;
    }
    /* the resolver connects at the first address lookup (fetch_address) */
    snprintf(rt.store_host, sizeof(rt.store_host), "%s", host);
    rt.store_port = port;
    free(rt.token);
    rt.token = token != NULL && token[0] != '\0' ? strdup(token) : NULL;
    if (token != NULL && token[0] != '\0' && rt.token == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "init: out of memory");
        goto err_store;
    }

    memset(&tpp, 0, sizeof(tpp));
    tpp.rank = rt.world.rank;
    tpp.world_size = rt.world.world_size;
    tpp.local_world_size = rt.world.local_world_size;
    tpp.progress = (td_progress_mode_t)rt.params.progress;
    tpp.resolve = resolve_cb;
    tpp.peer_failed = peer_failed_cb;
    tpp.peer_gone = peer_gone_cb;
    tpp.peer_reset = peer_reset_cb;
    tpp.same_host = same_host_cb;
    tpp.peer_heard = peer_heard_cb;
    tpp.token = token;   /* keys the per-message job tags */
    status = td__transport_create(&tpp, &rt.tp);
    if (status != TD_OK) {
        goto err_resolver;
    }

    /* Upper layers register their handlers before anyone can reach us. */
    status = td__modules_setup(rt.tp, &rt.world);
    if (status != TD_OK) {
        goto err_transport;
    }
    /* Device maps: validated against the peers' device counts before the
     * barrier, so a bad map fails td_init here, naming entry and rule. */
    status = td__device_maps_setup(rt.store, &rt.world, rt.params.device_maps,
                                  rt.params.init_timeout);
    rt.params.device_maps = NULL;   /* copied; the caller's may go away */
    if (status != TD_OK) {
        goto err_modules;
    }
    td__transport_address(rt.tp, &addr, &addr_len);
    {
        char name[HOSTMAP_NAME_MAX] = "";
        hostmap_ips_t ips;

        gethostname(name, sizeof(name) - 1);
        hostmap_self_ips(&ips);
        status = hostmap_pack(addr, addr_len, hostmap_self(), name, &ips,
                              &packed, &packed_len);
    }
    if (status != TD_OK) {
        goto err_modules;
    }
    if (rt.pmix) {
        /* Initialised before the fence, as before the store's barrier: a
         * peer out of the fence first may call us at once, and handlers
         * read td_world() (srun --mpi=pmix crashed rpc_allpairs 1 run in
         * 8 when this came after the fence). */
        rt.initialized = 1;
        /* Put, commit and one fence: the start-up barrier included. */
        status = td__pmix_exchange(packed, packed_len,
                                  rt.params.init_timeout);
        free(packed);
        if (status != TD_OK) {
            rt.initialized = 0;
            goto err_modules;
        }
        return TD_OK;
    }
    snprintf(key, sizeof(key), "td/addr/%d", rt.world.rank);
    status = td_store_set(rt.store, key, packed, packed_len);
    free(packed);
    if (status == TD_OK) {
        status = td__liveness_publish(rt.store, rt.world.rank);
    }
    if (status != TD_OK) {
        goto err_modules;
    }
    rt.initialized = 1;
    if (rt.joining) {
        /* a replacement: the others are past the start-up barrier; it
         * joins at a step boundary (td_elastic_create) */
        td_log_info("init: rank %d starts as a replacement "
                    "(TODIST_ELASTIC_JOIN=1)", rt.world.rank);
        return TD_OK;
    }
    /* every rank's address is its arrival (one set fewer per rank) */
    status = named_barrier("td/init", "td/addr", rt.params.init_timeout,
                           "init");
    if (status != TD_OK) {
        rt.initialized = 0;
        goto err_modules;
    }
    return TD_OK;

err_modules:
    td__modules_shutdown();
err_transport:
    td__transport_destroy(rt.tp, 0.5);
    rt.tp = NULL;
    td__device_maps_reset();      /* after the progress thread (device_map.h) */
err_resolver:
    td_store_close(rt.resolver);
    rt.resolver = NULL;
err_store:
    td_store_close(rt.store);
    rt.store = NULL;
    free(rt.token);
    rt.token = NULL;
err_server:
    td_store_server_stop(rt.server);
    rt.server = NULL;
err_addrs:
    if (rt.pmix) {
        td__pmix_finalize();
        rt.pmix = false;
    }
    free(rt.addrs);
    rt.addrs = NULL;
    free(rt.left);
    rt.left = NULL;
    td__log_set_rank(-1);
    return status;
}

/* ---- members after a shrink (runtime/elastic) ------------------------------ */

int
td__runtime_joining(void)
{
    return rt.initialized && rt.joining;
}

int
td__runtime_agent_store(void)
{
    return rt.initialized && rt.agent_store;
}

td_status_t
td__runtime_readmit(int rank, double timeout)
{
    int dead;

    if (!rt.initialized) {
        return td_error(TD_ERR_STATE, "runtime: readmit before td_init");
    }
    if (rank < (rt.agent_store ? 0 : 1) || rank >= rt.world.world_size ||
        rank == rt.world.rank) {
        return td_error(TD_ERR_INVALID, "runtime: readmit rank %d (world "
                        "%d; not this rank %d%s)", rank, rt.world.world_size,
                        rt.world.rank, rt.agent_store ? "" :
                        ", not rank 0: it serves the store");
    }
    /* R2: the address is fetched again, the new one; the old pid is
     * forgotten by the transport's reset (peer_reset_cb), on the token
     * holder, which alone asks about it */
    pthread_mutex_lock(&rt.addr_lock);
    rt.addrs[rank].gen++;                                      /* A2 */
    free(rt.addrs[rank].value);
    rt.addrs[rank].value = NULL;
    rt.addrs[rank].addr = NULL;
    rt.addrs[rank].len = 0;
    rt.addrs[rank].host = 0;
    rt.addrs[rank].pid = 0;
    pthread_mutex_unlock(&rt.addr_lock);
    /* V5: the new address and pid now, from the process admitted (it
     * asked to join, so it published both); a lookup only at the first
     * send could get a later replacement's (this one died meanwhile).
     * Failing, the first send looks it up again. */
    if (!rt.pmix) {
        size_t len;

        (void)fetch_address(rank, NULL, &len);
    }
    dead = rank;
    __atomic_compare_exchange_n(&rt.dead_rank, &dead, -1, false,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return td__transport_peer_revive(rt.tp, rank, timeout);
}

td_status_t
td__runtime_set_members(const int *ranks, int n, unsigned gen)
{
    unsigned char *in;
    int dead;

    if (!rt.initialized) {
        return td_error(TD_ERR_STATE, "runtime: members before td_init");
    }
    if (ranks == NULL || n < 1 || n > rt.world.world_size) {
        return td_error(TD_ERR_INVALID, "runtime: %d members of a world of "
                        "%d", n, rt.world.world_size);
    }
    in = calloc(rt.world.world_size, 1);
    if (in == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "runtime: out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= rt.world.world_size || in[ranks[i]]) {
            free(in);
            return td_error(TD_ERR_INVALID, "runtime: members[%d]=%d (world "
                            "%d, or listed twice)", i, ranks[i],
                            rt.world.world_size);
        }
        in[ranks[i]] = 1;
    }
    if ((!in[0] && !rt.agent_store) || !in[rt.world.rank]) {
        free(in);
        return td_error(TD_ERR_INVALID, "runtime: the members must hold "
                        "this rank (%d)%s", rt.world.rank, rt.agent_store ?
                        "" : " and rank 0 (it serves the store)");
    }
    if (gen <= rt.member_gen) {
        free(in);
        return td_error(TD_ERR_INVALID, "runtime: members of generation %u "
                        "after %u (generations increase)", gen,
                        rt.member_gen);
    }
    /* R1: a rank that left comes back only as another process, after
     * td__runtime_readmit (its address and endpoint made again). */
    for (int r = 0; r < rt.world.world_size; r++) {
        if (!in[r]) {
            __atomic_store_n(&rt.left[r], 1, __ATOMIC_RELEASE);
            td__transport_peer_left(rt.tp, r);  /* closed by force at the end */
        } else {
            __atomic_store_n(&rt.left[r], 0, __ATOMIC_RELEASE);
        }
    }
    free(in);
    rt.n_members = n;
    rt.member_gen = gen;
    rt.barrier_gen = 0;
    dead = __atomic_load_n(&rt.dead_rank, __ATOMIC_SEQ_CST);
    if (dead >= 0 && rt.left[dead]) {
        /* only a member's death fails the barriers from now on */
        __atomic_compare_exchange_n(&rt.dead_rank, &dead, -1, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    return TD_OK;
}

/* ---- finalize --------------------------------------------------------------- */

static size_t
local_outstanding(void)
{
    return td__modules_outstanding();
}

static td_status_t
sum_get(const char *key, int64_t *v)
{
    return td_store_add(rt.store, key, 0, v);
}

/* The join after a shrink: the four counters cannot balance once a rank
 * died (its sends and receives are lost), so each member waits until it
 * is idle and the members meet once. The members' last collective (the
 * step they all completed) has ended on each of them, so nothing of
 * theirs is on its way to a member that leaves. */
static td_status_t
join_members(double deadline)
{
    char key[96];

    while (local_outstanding() > 0) {
        if (td_now_s() > deadline) {
            return td_error(TD_ERR_TIMEOUT, "finalize: rank %d still has "
                            "%zu operations outstanding", rt.world.rank,
                            local_outstanding());
        }
        sleep_s(JOIN_POLL_S);
    }
    snprintf(key, sizeof(key), "td/fin/m%u", rt.member_gen);
    double left = deadline - td_now_s();
    return watched_barrier(key, left > 0 ? left : 0.001, "finalize");
}

/* The graceful join: see the comment at the top. */
static td_status_t
join(double deadline)
{
    int64_t prev_sent = -1, prev_recv = -1;
    char key[96], missing[256];
    td_status_t status;

    snprintf(key, sizeof(key), "td/fin/in/%d", rt.world.rank);
    status = td_store_set(rt.store, key, "1", 1);
    if (status != TD_OK) {
        return status;
    }
    if (rt.member_gen > 0) {
        return join_members(deadline);
    }
    for (int k = 0;; k++) {
        int64_t sent, recv, busy, n;
        uint64_t msent, mrecv;

        /* Local work ends by itself (or times out in its own layer). */
        while (local_outstanding() > 0) {
            if (td_now_s() > deadline) {
                return td_error(TD_ERR_TIMEOUT, "finalize: rank %d still has "
                                "%zu operations outstanding",
                                rt.world.rank, local_outstanding());
            }
            sleep_s(JOIN_POLL_S);
        }
        td__transport_counts(rt.tp, &msent, &mrecv);
        snprintf(key, sizeof(key), "td/fin/%d/sent", k);
        if ((status = td_store_add(rt.store, key, (int64_t)msent, NULL)))
            return status;
        snprintf(key, sizeof(key), "td/fin/%d/recv", k);
        if ((status = td_store_add(rt.store, key, (int64_t)mrecv, NULL)))
            return status;
        snprintf(key, sizeof(key), "td/fin/%d/busy", k);
        if ((status = td_store_add(rt.store, key,
                                   local_outstanding() > 0, NULL)))
            return status;
        snprintf(key, sizeof(key), "td/fin/%d", k);
        double left = deadline - td_now_s();
        status = watched_barrier(key, left > 0 ? left : 0.001, "finalize");
        if (status == TD_ERR_TIMEOUT) {
            missing_ranks("td/fin/in", missing, sizeof(missing));
            if (missing[0] != '\0') {
                return td_error(TD_ERR_TIMEOUT, "finalize: rank%s %s did not "
                                "arrive within %.3g s",
                                strchr(missing, ',') ? "s" : "", missing,
                                rt.params.finalize_timeout);
            }
            return td_error(TD_ERR_TIMEOUT, "finalize: the join did not "
                            "settle within %.3g s (round %d)",
                            rt.params.finalize_timeout, k);
        }
        if (status != TD_OK) {
            return status;
        }
        snprintf(key, sizeof(key), "td/fin/%d/sent", k);
        if ((status = sum_get(key, &sent)) != TD_OK) return status;
        snprintf(key, sizeof(key), "td/fin/%d/recv", k);
        if ((status = sum_get(key, &recv)) != TD_OK) return status;
        snprintf(key, sizeof(key), "td/fin/%d/busy", k);
        if ((status = sum_get(key, &busy)) != TD_OK) return status;
        (void)n;
        if (busy == 0 && sent == recv && sent == prev_sent &&
            recv == prev_recv) {
            return TD_OK;
        }
        prev_sent = sent;
        prev_recv = recv;
        if (sent != recv) {
            sleep_s(JOIN_POLL_S);   /* messages on their way: let them land */
        }
    }
}

td_status_t
td_finalize(void)
{
    double deadline;
    td_status_t status, st2;
    int64_t n;
    char first_error[1024] = "";

    if (!rt.initialized) {
        return td_error(TD_ERR_STATE, "finalize: td_init has not been called");
    }
    deadline = td_now_s() + rt.params.finalize_timeout;
    __atomic_store_n(&rt.finalizing, 1, __ATOMIC_RELEASE);
    status = join(deadline);
    if (status != TD_OK) {
        /* The caller sees this first message, not a later consequence. */
        snprintf(first_error, sizeof(first_error), "%s", td_last_error());
    }

    td__modules_shutdown();
    st2 = td__transport_destroy(rt.tp, 2.0);
    td__device_maps_reset();      /* after the progress thread (device_map.h) */
    if (st2 != TD_OK && status == TD_OK) {
        /* A peer that did not close its endpoint in time. After a join
         * that completed, every message sent was received: the close only
         * waited for that peer's UCX to answer (its flush needs the peer
         * to progress), and a peer that got no CPU for the timeout (a
         * loaded machine) or stopped after the join loses nothing. So it
         * is said, not returned: td_finalize succeeded. (It failed the
         * job's ranks that had done all their work: test_hosts under a
         * loaded make check; TODIST_TEST_CLOSE_STALL plays it.) */
        td_log_info("finalize: %s; every message was delivered (the join "
                    "completed), so this is not an error", td_last_error());
    }
    rt.tp = NULL;
    rt.initialized = 0;

    /* Rank 0's store outlives everyone's last use of it (a launcher's
     * outlives its ranks). */
    if (rt.server == NULL) {
        st2 = td_store_add(rt.store, "td/fin/exit", 1, &n);
        if (st2 == TD_OK && n == rt.n_members - 1) {
            td_store_set(rt.store, "td/fin/exit/done", "1", 1);
        }
    } else if (rt.world.world_size > 1) {
        const char *keys[1] = { "td/fin/exit/done" };
        double left = deadline - td_now_s();
        /* After a failed join, do not keep the others' store for long. */
        if (status != TD_OK || left < 1) {
            left = 1;
        }
        td_store_wait(rt.store, keys, 1, left);
    }
    td_store_close(rt.resolver);
    td_store_close(rt.store);
    td_store_server_stop(rt.server);
    rt.resolver = rt.store = NULL;
    rt.server = NULL;
    free(rt.token);
    rt.token = NULL;
    for (int r = 0; r < rt.world.world_size; r++) {
        free(rt.addrs[r].value);
        td__liveness_clear(&rt.addrs[r].proc);
    }
    free(rt.addrs);
    rt.addrs = NULL;
    free(rt.left);
    rt.left = NULL;
    if (rt.pmix) {
        td__pmix_finalize();
        rt.pmix = false;
    }
    if (status != TD_OK) {
        td_error(status, "%s", first_error);
    }
    return status;
}
