/* liveness.c: has a peer process of this host exited? (liveness.h,
 * V1-V3). */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "runtime/liveness.h"

td_status_t
td__liveness_publish(td_store_t *store, int rank)
{
    char key[64], val[32];
    int n = snprintf(val, sizeof(val), "%ld", (long)getpid());

    snprintf(key, sizeof(key), "td/pid/%d", rank);
    return td_store_set(store, key, val, (size_t)n);
}

void
td__liveness_fetch(td_store_t *store, int rank, td__proc_t *p)
{
    char key[64], *end;
    void *v = NULL;
    size_t len = 0;
    long pid;

    if (p->pid != 0) {
        return;
    }
    p->pid = -1;                      /* unknown unless read below (V1) */
    p->fd = -1;
    snprintf(key, sizeof(key), "td/pid/%d", rank);
    if (store == NULL || td_store_get(store, key, 0, &v, &len) != TD_OK) {
        return;
    }
    pid = strtol(v, &end, 10);
    if (*end == '\0' && pid > 0 && pid <= INT32_MAX) {
        p->pid = (int32_t)pid;
#ifdef SYS_pidfd_open
        p->fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);   /* V2 */
        if (p->fd < 0 && errno == ESRCH) {
            p->fd = -2;               /* gone already */
        }
#endif
    }
    free(v);
}

int
td__liveness_gone(td__proc_t *p)
{
    if (p->pid <= 0) {
        return 0;                     /* unknown: alive here (V1) */
    }
    if (p->fd == -2) {
        return 1;
    }
    if (p->fd >= 0) {
        struct pollfd pfd = { .fd = p->fd, .events = POLLIN };

        return poll(&pfd, 1, 0) > 0;  /* readable once it exited */
    }
    return kill((pid_t)p->pid, 0) != 0 && errno == ESRCH;
}

void
td__liveness_clear(td__proc_t *p)
{
    if (p->fd >= 0) {
        close(p->fd);
    }
    p->pid = 0;
    p->fd = -1;
}
