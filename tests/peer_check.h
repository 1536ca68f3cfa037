/* tests/peer_check.h: the check every RPC-family peer prints (rpc_peer,
 * async_peer, dist_peer, dist_optim_peer, remote_module_peer,
 * rref_async_peer): one line "PASS name" or "FAIL name: detail" on
 * stdout, flushed at once, that the shell test counts; n_fail counts the
 * failures for the exit code. */
#ifndef TD_TESTS_PEER_CHECK_H
#define TD_TESTS_PEER_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int n_fail;

static void check(int cond, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), unused));

static void
check(int cond, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (cond) {
        printf("PASS %s\n", name);
    } else {
        n_fail++;
        printf("FAIL %s: ", name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

#endif
