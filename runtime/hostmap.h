/* runtime/hostmap.h: which host each rank runs on (internal).
 *
 * A host, to todist, is what shared memory and /proc/PID reach: one kernel
 * (its boot id) and one PID namespace. Two ranks with equal host ids may
 * share a memfd through /proc/PID/fd, read each other with
 * process_vm_readv and share a futex; ranks with different ids, or an
 * unknown one (0), may not: everything between them goes over the
 * transport. The id travels in front of each rank's published worker
 * address (hostmap_pack), so a rank learns a peer's host with its address,
 * once, at the first contact (td__runtime_same_host, runtime.h). With it
 * travel the host's network addresses (hostmap_self_ips), by which the
 * liveness check tells a host that still answers at the network level
 * from one cut off (runtime/liveness.h V4).
 *
 * Thread-safe: hostmap_self computes its id once (pthread_once); the
 * others are pure. */
#ifndef TD_RUNTIME_HOSTMAP_H
#define TD_RUNTIME_HOSTMAP_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>

#define HOSTMAP_MAGIC 0x54444832u           /* "TDH2" */
#define HOSTMAP_HDR   13      /* magic, be64 host id, u8 name length */
#define HOSTMAP_NAME_MAX 64   /* bytes of host name kept (for messages) */
#define HOSTMAP_IPS_MAX  8    /* network addresses kept per host */
#define HOSTMAP_IP_LEN   17   /* u8 family (4 or 6), 16 address bytes */

/* A host's network addresses: IPv4 ones in the first 4 bytes of a[i]. */
typedef struct {
    uint8_t n;
    uint8_t family[HOSTMAP_IPS_MAX];     /* 4 or 6 */
    uint8_t a[HOSTMAP_IPS_MAX][16];
} hostmap_ips_t;

/* The id of the host BOOT_ID (the kernel's boot id text, "" unknown) and
 * PID namespace (device, inode of /proc/self/ns/pid): nonzero, or 0 when
 * BOOT_ID is empty (unknown: shares nothing). */
uint64_t hostmap_id(const char *boot_id, uint64_t ns_dev, uint64_t ns_ino);

/* This process's host id (0 when its boot id cannot be read). */
uint64_t hostmap_self(void);

/* This host's addresses: IPv4 and IPv6 (not link-local) of interfaces
 * that are up, loopback excluded, the first HOSTMAP_IPS_MAX of them. */
void hostmap_self_ips(hostmap_ips_t *ips);

/* Write into *OUT (malloc'ed, *OUT_LEN bytes) the published form of the
 * worker address ADDR: HOSTMAP_HDR bytes, the host's NAME (cut to
 * HOSTMAP_NAME_MAX - 1 bytes), u8 count and that many HOSTMAP_IP_LEN
 * entries of IPS (NULL: none), then ADDR. */
td_status_t hostmap_pack(const void *addr, size_t len, uint64_t host,
                         const char *name, const hostmap_ips_t *ips,
                         void **out, size_t *out_len);

/* Read rank RANK's published value V: its worker address (*ADDR_P, a
 * pointer into V, *ADDR_LEN bytes), host id, host name (into NAME,
 * HOSTMAP_NAME_MAX bytes, NUL-terminated) and addresses (into *IPS).
 * TD_ERR_PROTOCOL, naming the rank, when V is not one (a count above
 * HOSTMAP_IPS_MAX or a family other than 4 and 6 included). */
td_status_t hostmap_unpack(int rank, const void *v, size_t len,
                           const void **addr_p, size_t *addr_len,
                           uint64_t *host_p, char *name, hostmap_ips_t *ips);

#endif /* TD_RUNTIME_HOSTMAP_H */
