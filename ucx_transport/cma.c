/* cma.c: one-copy reads from another process of this host (cma.h: M1,
 * M2). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ucx_transport/cma.h"
#include "base/clock.h"
#include "base/log.h"

static uint64_t       cma_token;
static pthread_once_t cma_once = PTHREAD_ONCE_INIT;

static void
token_make(void)
{
    cma_token = ((uint64_t)getpid() << 32) ^ (uint64_t)(td_now_s() * 1e9) ^
                (uint64_t)(uintptr_t)&cma_token;
    if (cma_token == 0) {
        cma_token = 1;          /* 0 would match unread memory */
    }
}

void
td__cma_self(td__cma_src_t *src)
{
    pthread_once(&cma_once, token_make);             /* M1 */
    src->pid = (uint32_t)getpid();
    src->token_addr = (uint64_t)(uintptr_t)&cma_token;
    src->token = cma_token;
}

int
td__cma_check(const td__cma_src_t *src)
{
    uint64_t tok = 0;
    struct iovec l = { &tok, sizeof(tok) };
    struct iovec r = { (void *)(uintptr_t)src->token_addr, sizeof(tok) };

    if (src->pid == 0 || src->token == 0) {
        return 0;
    }
    return process_vm_readv((pid_t)src->pid, &l, 1, &r, 1, 0) ==
               (ssize_t)sizeof(tok) && tok == src->token;
}

td_status_t
td__cma_read(uint32_t pid, uint64_t addr, void *dst, size_t n)
{
    size_t done = 0;

    while (done < n) {                               /* M2 */
        struct iovec l = { (char *)dst + done, n - done };
        struct iovec r = { (void *)(uintptr_t)(addr + done), n - done };
        ssize_t got = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);

        if (got <= 0) {
            int e = got < 0 ? errno : EFAULT;

            return td_error(e == ESRCH ? TD_ERR_PEER : TD_ERR_IO,
                            "cma: reading %zu bytes from pid %u failed "
                            "after %zu: %s", n, pid, done, strerror(e));
        }
        done += (size_t)got;
    }
    return TD_OK;
}
