/* wireup_hold: an LD_PRELOAD shim for tests/hosts/test_hosts_wireup.sh
 * that stages UCX 1.13's late wire-up request (transport.c L13). It
 * wraps UCX's handler of wire-up messages (UCT active message 1, set
 * through uct_iface_set_am_handler, which libucp calls through the PLT).
 *   TD_WIREUP_HOLD=P  the first connection request that names no
 *       endpoint of ours (type REQUEST, no destination: a peer's own
 *       wire-up, sent before it heard of ours) and every wire-up message
 *       after it are held, unprocessed, and P.held is created; once P.release
 *       exists they are handed to UCX in order, at the end of a
 *       ucp_worker_progress: the peer's request "still on its way" when
 *       this rank dropped it.
 *   TD_WIREUP_SEEN=P  P.seen is created once UCX processed a connection
 *       request naming no endpoint of ours (the peer's).
 * Layout of a wire-up message (ucp_wireup_msg_t, packed): u8 type
 * (1 REQUEST) | u8 error mode | u16 connection number | u64 source
 * endpoint id | u64 destination endpoint id (0: none) | addresses. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#define HELD_MAX 64
#define IFACES_MAX 64

/* UCX's handler per interface: a wake-up capable one gets a proxy, whose
 * argument differs (the handler is called with its own). */
static struct {
    void              *arg;
    uct_am_callback_t  cb;
} ifaces[IFACES_MAX];
static int n_ifaces;
static struct {
    uct_am_callback_t  cb;
    void              *arg;
    void              *data;
    size_t             len;
} held[HELD_MAX];
static int n_held, holding, released;

static void
touch(const char *prefix, const char *what)
{
    char f[4096];
    FILE *out;

    snprintf(f, sizeof(f), "%s.%s", prefix, what);
    if ((out = fopen(f, "w")) != NULL) {
        fclose(out);
    }
}

static int
exists(const char *prefix, const char *what)
{
    char f[4096];

    snprintf(f, sizeof(f), "%s.%s", prefix, what);
    return access(f, F_OK) == 0;
}

/* A request from the peer's own endpoint, before it heard of ours. */
static int
own_request(const uint8_t *m, size_t len)
{
    uint64_t dst;

    if (len < 20) {
        return 0;
    }
    memcpy(&dst, m + 12, sizeof(dst));
    return m[0] == 1 && dst == 0;
}

static uct_am_callback_t
cb_of(void *arg)
{
    for (int i = 0; i < n_ifaces; i++) {
        if (ifaces[i].arg == arg) {
            return ifaces[i].cb;
        }
    }
    abort();            /* registered through uct_iface_set_am_handler */
}

static ucs_status_t
wrap(void *arg, void *data, size_t length, unsigned flags)
{
    const char *hold = getenv("TD_WIREUP_HOLD");
    const char *seen = getenv("TD_WIREUP_SEEN");
    uct_am_callback_t cb = cb_of(arg);
    ucs_status_t st;

    if (hold != NULL && !released && n_held < HELD_MAX &&
        (holding || own_request(data, length))) {
        /* UCT lends DATA for the call only (no UCT_CB_PARAM_FLAG_DESC
         * kept): copy it */
        if ((held[n_held].data = malloc(length)) != NULL) {
            memcpy(held[n_held].data, data, length);
            held[n_held].cb = cb;
            held[n_held].arg = arg;
            held[n_held].len = length;
            n_held++;
            if (!holding) {
                holding = 1;
                touch(hold, "held");
            }
            return UCS_OK;
        }
    }
    st = cb(arg, data, length, flags);
    if (seen != NULL && own_request(data, length)) {
        touch(seen, "seen");
    }
    return st;
}

ucs_status_t
uct_iface_set_am_handler(uct_iface_h iface, uint8_t id, uct_am_callback_t cb,
                         void *arg, uint32_t flags)
{
    static ucs_status_t (*real)(uct_iface_h, uint8_t, uct_am_callback_t,
                                void *, uint32_t);

    if (real == NULL) {
        real = (ucs_status_t (*)(uct_iface_h, uint8_t, uct_am_callback_t,
                                 void *, uint32_t))
               dlsym(RTLD_NEXT, "uct_iface_set_am_handler");
    }
    if (id == 1 && cb != NULL && n_ifaces < IFACES_MAX) {
        ifaces[n_ifaces].arg = arg;
        ifaces[n_ifaces].cb = cb;
        n_ifaces++;
        cb = wrap;
    }
    return real(iface, id, cb, arg, flags);
}

unsigned
ucp_worker_progress(ucp_worker_h worker)
{
    static unsigned (*real)(ucp_worker_h);
    static int64_t looked_ms;
    const char *hold = getenv("TD_WIREUP_HOLD");
    struct timespec ts;
    unsigned n;

    if (real == NULL) {
        real = (unsigned (*)(ucp_worker_h))dlsym(RTLD_NEXT,
                                                 "ucp_worker_progress");
    }
    n = real(worker);
    if (!holding || released || hold == NULL) {
        return n;
    }
    /* P.release is looked for every 20 ms at most */
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    if ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 < looked_ms + 20) {
        return n;
    }
    looked_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (exists(hold, "release")) {
        released = 1;
        for (int i = 0; i < n_held; i++) {
            (void)held[i].cb(held[i].arg, held[i].data, held[i].len, 0);
            free(held[i].data);
        }
        n_held = 0;
        n++;
    }
    return n;
}
