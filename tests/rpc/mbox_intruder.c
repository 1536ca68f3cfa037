/* tests/rpc/mbox_intruder.c PID: a process outside the job (it does not
 * know TODIST_JOB_TOKEN) writes into the transport's inbox of process PID
 * (a rank of a job on this host, same user: it may open the memfd through
 * /proc/PID/fd): it copies the newest message rank 0 wrote into its
 * mailbox there, breaks its job tag, and puts it back as the next
 * message (transport.c X6 must refuse it). Exits 0 when it wrote, 1 when
 * it found nothing to write into, printing why. Run by
 * tests/rpc/test_rpc_mbox.sh. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "ucx_transport/shm_mbox.h"

#define TAG_OFF 16            /* transport.c's wire: the job tag's place */

int
main(int argc, char **argv)
{
    char dir[64], path[400], link[256];
    struct dirent *d;
    DIR *dp;
    int fd = -1;
    struct stat sb;
    uint8_t *base;
    const td__mbox_inbox_hdr_t *h;
    td__mbox_ring_t *ring;
    td__mbox_slot_t *last = NULL, *next;
    long page = sysconf(_SC_PAGESIZE);

    if (argc != 2) {
        fprintf(stderr, "usage: mbox_intruder PID\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "/proc/%s/fd", argv[1]);
    if ((dp = opendir(dir)) == NULL) {
        perror(dir);
        return 1;
    }
    while (fd < 0 && (d = readdir(dp)) != NULL) {
        ssize_t n;

        snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
        n = readlink(path, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            if (strstr(link, "memfd:todist-transport") != NULL) {
                fd = open(path, O_RDWR);
            }
        }
    }
    closedir(dp);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fprintf(stderr, "mbox_intruder: no transport inbox in %s\n", dir);
        return 1;
    }
    base = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    h = (const td__mbox_inbox_hdr_t *)base;
    /* rank 0's mailbox: the first after the header page */
    ring = (td__mbox_ring_t *)(base + page);
    if (h->nworld < 2 || (size_t)sb.st_size < (size_t)page + h->mbox_bytes) {
        fprintf(stderr, "mbox_intruder: not an inbox\n");
        return 1;
    }
    for (int k = 0; k < TD__MBOX_SLOTS; k++) {
        td__mbox_slot_t *s = &ring->slot[k];

        if (atomic_load(&s->state) == TD__MBOX_ACKED &&
            (last == NULL || (int32_t)(s->pos - last->pos) > 0)) {
            last = s;
        }
    }
    if (last == NULL) {
        fprintf(stderr, "mbox_intruder: rank 0 wrote nothing here\n");
        return 1;
    }
    next = &ring->slot[(last->pos + 1) % TD__MBOX_SLOTS];
    if (atomic_load(&next->state) == TD__MBOX_FULL) {
        fprintf(stderr, "mbox_intruder: the next slot is taken\n");
        return 1;
    }
    memcpy(next->w, last->w, sizeof(next->w));
    next->w[0] = 0;                        /* after no active message */
    next->len = last->len;
    memcpy(next->data, last->data, last->len);
    next->data[TAG_OFF] ^= 0xff;           /* we cannot make the tag */
    next->pos = last->pos + 1;
    atomic_store(&next->state, TD__MBOX_FULL);
    printf("mbox_intruder: wrote message %u into rank 0's mailbox of pid "
           "%s\n", next->pos, argv[1]);
    return 0;
}
