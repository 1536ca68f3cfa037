/* hostmap.c: host ids and their place in the published worker address
 * (hostmap.h says what a host is). */
#include "config.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/hostmap.h"
#include "base/byteorder.h"

static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static uint64_t       self_id;

/* FNV-1a, 64 bits, over LEN bytes of P, continuing from H. */
static uint64_t
fnv1a(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

uint64_t
hostmap_id(const char *boot_id, uint64_t ns_dev, uint64_t ns_ino)
{
    uint64_t h = 0xcbf29ce484222325ull;
    uint8_t ns[16];

    if (boot_id == NULL || boot_id[0] == '\0') {
        return 0;
    }
    h = fnv1a(h, boot_id, strlen(boot_id));
    td_put_be64(ns, ns_dev);
    td_put_be64(ns + 8, ns_ino);
    h = fnv1a(h, ns, sizeof(ns));
    return h != 0 ? h : 1;
}

static void
self_compute(void)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    struct stat st;

    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL) {
            boot[0] = '\0';
        }
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    /* Without a PID namespace to name (old kernels), the boot id alone. */
    if (stat("/proc/self/ns/pid", &st) != 0) {
        memset(&st, 0, sizeof(st));
    }
    self_id = hostmap_id(boot, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
}

uint64_t
hostmap_self(void)
{
    pthread_once(&self_once, self_compute);
    return self_id;
}

void
hostmap_self_ips(hostmap_ips_t *ips)
{
    struct ifaddrs *all = NULL;

    ips->n = 0;
    if (getifaddrs(&all) != 0) {
        return;                       /* none known: no network evidence */
    }
    for (struct ifaddrs *i = all; i != NULL && ips->n < HOSTMAP_IPS_MAX;
         i = i->ifa_next) {
        if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK)) {
            continue;
        }
        if (i->ifa_addr->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)i->ifa_addr;

            memset(ips->a[ips->n], 0, 16);
            memcpy(ips->a[ips->n], &a->sin_addr, 4);
            ips->family[ips->n++] = 4;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)i->ifa_addr;

            if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr)) {
                continue;
            }
            memcpy(ips->a[ips->n], &a->sin6_addr, 16);
            ips->family[ips->n++] = 6;
        }
    }
    freeifaddrs(all);
}

td_status_t
hostmap_pack(const void *addr, size_t len, uint64_t host, const char *name,
             const hostmap_ips_t *ips, void **out, size_t *out_len)
{
    size_t nl = name != NULL ? strnlen(name, HOSTMAP_NAME_MAX - 1) : 0;
    size_t ni = ips != NULL && ips->n <= HOSTMAP_IPS_MAX ? ips->n : 0;
    size_t il = 1 + ni * HOSTMAP_IP_LEN;
    uint8_t *v = malloc(HOSTMAP_HDR + nl + il + len);

    if (v == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "runtime: out of memory for a "
                        "%zu-byte address", len);
    }
    td_put_be32(v, HOSTMAP_MAGIC);
    td_put_be64(v + 4, host);
    v[12] = (uint8_t)nl;
    memcpy(v + HOSTMAP_HDR, name, nl);
    v[HOSTMAP_HDR + nl] = (uint8_t)ni;
    for (size_t i = 0; i < ni; i++) {
        uint8_t *e = v + HOSTMAP_HDR + nl + 1 + i * HOSTMAP_IP_LEN;

        e[0] = ips->family[i];
        memcpy(e + 1, ips->a[i], 16);
    }
    memcpy(v + HOSTMAP_HDR + nl + il, addr, len);
    *out = v;
    *out_len = HOSTMAP_HDR + nl + il + len;
    return TD_OK;
}

td_status_t
hostmap_unpack(int rank, const void *v, size_t len, const void **addr_p,
               size_t *addr_len, uint64_t *host_p, char *name,
               hostmap_ips_t *ips)
{
    const uint8_t *b = v;
    size_t nl = 0, ni = 0, il = 0;

    if (b == NULL || len <= HOSTMAP_HDR || td_get_be32(b) != HOSTMAP_MAGIC ||
        (nl = b[12]) >= HOSTMAP_NAME_MAX || len <= HOSTMAP_HDR + nl ||
        (ni = b[HOSTMAP_HDR + nl]) > HOSTMAP_IPS_MAX ||
        len <= HOSTMAP_HDR + nl + (il = 1 + ni * HOSTMAP_IP_LEN)) {
        return td_error(TD_ERR_PROTOCOL, "runtime: rank %d published %zu "
                        "bytes that are not a todist worker address (another "
                        "todist version?)", rank, len);
    }
    for (size_t i = 0; i < ni; i++) {
        const uint8_t *e = b + HOSTMAP_HDR + nl + 1 + i * HOSTMAP_IP_LEN;

        if (e[0] != 4 && e[0] != 6) {
            return td_error(TD_ERR_PROTOCOL, "runtime: rank %d published "
                            "a network address of family %u", rank, e[0]);
        }
        ips->family[i] = e[0];
        memcpy(ips->a[i], e + 1, 16);
    }
    ips->n = (uint8_t)ni;
    *host_p = td_get_be64(b + 4);
    memcpy(name, b + HOSTMAP_HDR, nl);
    name[nl] = '\0';
    *addr_p = b + HOSTMAP_HDR + nl + il;
    *addr_len = len - HOSTMAP_HDR - nl - il;
    return TD_OK;
}
