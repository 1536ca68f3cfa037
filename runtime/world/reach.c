/* reach.c: the loopback check of the store's master address (reach.h). */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "runtime/world/reach.h"
#include "base/log.h"

static int
sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

int
td__reach_is_loopback(const char *name, char *addr, size_t len)
{
    struct addrinfo hints, *ai = NULL;
    int loop;

    if (addr != NULL && len > 0) {
        addr[0] = '\0';
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (name == NULL || name[0] == '\0' ||
        getaddrinfo(name, NULL, &hints, &ai) != 0 || ai == NULL) {
        return -1;
    }
    loop = sockaddr_is_loopback(ai->ai_addr);    /* R1: the first result */
    if (addr != NULL && len > 0 &&
        getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, (socklen_t)len, NULL,
                    0, NI_NUMERICHOST) != 0) {
        addr[0] = '\0';
    }
    freeaddrinfo(ai);
    return loop;
}

int
td__reach_warn_loopback(const td_world_t *w)
{
    char addr[INET6_ADDRSTRLEN + 8], host[TD_HOSTNAME_MAX] = "";
    int mine;

    if (w == NULL || w->nnodes < 2) {                /* R2 */
        return 0;
    }
    if (td__reach_is_loopback(w->master_addr, addr, sizeof(addr)) != 1) {
        return 0;                                    /* R3 */
    }
    if (gethostname(host, sizeof(host) - 1) != 0) {
        snprintf(host, sizeof(host), "(unknown)");
    }
    /* a Slurm job's default master address is its first node's name */
    mine = strcmp(w->master_addr, host) == 0 ||
           (strncmp(w->master_addr, host, strlen(w->master_addr)) == 0 &&
            host[strlen(w->master_addr)] == '.');
    td_log_warn("world: the job spans %d hosts but the store's master "
                "address '%s'%s resolves to the loopback address %s on host "
                "%s, so ranks on the other hosts cannot reach the store "
                "there (a line like '127.0.1.1 %s' in /etc/hosts, as "
                "Debian writes, does this); set MASTER_ADDR / "
                "TODIST_MASTER_ADDR to an address the other hosts can "
                "reach", w->nnodes, w->master_addr,
                mine ? " (this host's name)" : "", addr, host, host);
    return 1;
}
