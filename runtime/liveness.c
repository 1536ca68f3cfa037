/* liveness.c: has a peer process of this host exited? Does a peer's
 * host still answer? (liveness.h, V1-V4). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
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

int32_t
td__liveness_pid(td_store_t *store, int rank)
{
    char key[64], *end;
    void *v = NULL;
    size_t len = 0;
    long pid;
    int32_t out = 0;

    snprintf(key, sizeof(key), "td/pid/%d", rank);
    if (store == NULL || td_store_get(store, key, 0, &v, &len) != TD_OK) {
        return 0;
    }
    pid = strtol(v, &end, 10);
    if (*end == '\0' && pid > 0 && pid <= INT32_MAX) {
        out = (int32_t)pid;
    }
    free(v);
    return out;
}

void
td__liveness_watch(td__proc_t *p, int32_t pid)
{
    if (p->pid != 0) {
        return;
    }
    p->pid = pid > 0 ? pid : -1;      /* 0: unknown (V1) */
    p->fd = -1;
#ifdef SYS_pidfd_open
    if (pid > 0) {
        p->fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);   /* V2 */
        if (p->fd < 0 && errno == ESRCH) {
            p->fd = -2;               /* gone already */
        }
    }
#endif
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

/* Is the peer address SA one of IPS? (an IPv4-mapped IPv6 one as IPv4) */
static int
ips_have(const hostmap_ips_t *ips, const struct sockaddr_storage *sa)
{
    uint8_t a[16] = { 0 };
    uint8_t fam;

    if (sa->ss_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        fam = 4;
    } else if (sa->ss_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            memcpy(a, a6->s6_addr + 12, 4);
            fam = 4;
        } else {
            memcpy(a, a6->s6_addr, 16);
            fam = 6;
        }
    } else {
        return 0;
    }
    for (int i = 0; i < ips->n; i++) {
        if (ips->family[i] == fam &&
            memcmp(ips->a[i], a, fam == 4 ? 4 : 16) == 0) {
            return 1;
        }
    }
    return 0;
}

/* V6: the kernel probes FD once it was idle 1 s, then every second, so
 * a live host acknowledges something each second. Best effort: a socket
 * that refuses is only read. */
static void
keepalive_arm(int fd)
{
    int on = 1, sec = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &sec, sizeof(sec)) == 0 &&
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &sec, sizeof(sec)) == 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    }
}

int
td__liveness_heard_ms(const hostmap_ips_t *ips)
{
    DIR *d;
    struct dirent *e;
    long best = -1;

    if (ips == NULL || ips->n == 0 || (d = opendir("/proc/self/fd")) == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof(sa);
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);
        int type = 0;
        socklen_t yl = sizeof(type);
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        long heard;

        if (*end != '\0' || fd < 0 || fd == dirfd(d) ||
            getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &yl) != 0 ||
            type != SOCK_STREAM ||
            getpeername((int)fd, (struct sockaddr *)&sa, &sl) != 0 ||
            !ips_have(ips, &sa) ||
            getsockopt((int)fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 ||
            ti.tcpi_state != TCP_ESTABLISHED) {
            continue;
        }
        keepalive_arm((int)fd);                                 /* V6 */
        heard = ti.tcpi_last_ack_recv < ti.tcpi_last_data_recv
                ? (long)ti.tcpi_last_ack_recv : (long)ti.tcpi_last_data_recv;
        if (best < 0 || heard < best) {
            best = heard;
        }
    }
    closedir(d);
    return best > INT32_MAX ? INT32_MAX : (int)best;
}
