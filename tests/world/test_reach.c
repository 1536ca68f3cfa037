/* test_reach.c: the loopback check of the store's master address
 * (runtime/world/reach.h): which addresses count as loopback, and the
 * warning td_init prints when a job spans several hosts and the master
 * address resolves to one (names the host, the address and the fix). Only
 * numeric addresses and "localhost", so no test needs DNS. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/world/reach.h"
#include "tests/tap.h"

/* Run td__reach_warn_loopback(W) with stderr captured into OUT. */
static int
warn_captured(const td_world_t *w, char *out, size_t cap)
{
    char path[] = "/tmp/td_reach_XXXXXX";
    int fd = mkstemp(path), saved = dup(2), rc;
    ssize_t n;

    fflush(stderr);
    dup2(fd, 2);
    rc = td__reach_warn_loopback(w);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return rc;
}

static td_world_t
world(int nnodes, const char *master)
{
    td_world_t w;

    memset(&w, 0, sizeof(w));
    w.world_size = nnodes;
    w.nnodes = nnodes;
    snprintf(w.master_addr, sizeof(w.master_addr), "%s", master);
    return w;
}

int
main(void)
{
    char addr[64], out[4096];
    td_world_t w;

    plan(17);
    is_int(td__reach_is_loopback("127.0.1.1", addr, sizeof(addr)), 1,
           "127.0.1.1 (Debian's hostname line) is loopback");
    is_str(addr, "127.0.1.1", "its numeric address is given back");
    is_int(td__reach_is_loopback("127.0.0.1", NULL, 0), 1, "127.0.0.1 too");
    is_int(td__reach_is_loopback("::1", addr, sizeof(addr)), 1, "::1 too");
    is_int(td__reach_is_loopback("::ffff:127.0.1.1", NULL, 0), 1,
           "a v4-mapped 127.x address too");
    is_int(td__reach_is_loopback("localhost", NULL, 0), 1, "localhost too");
    is_int(td__reach_is_loopback("192.0.2.2", addr, sizeof(addr)), 0,
           "192.0.2.2 is not loopback");
    is_str(addr, "192.0.2.2", "and its address is given back");
    is_int(td__reach_is_loopback("10.1.2.3", NULL, 0), 0, "10.1.2.3 is not");
    is_int(td__reach_is_loopback("", addr, sizeof(addr)), -1,
           "an empty name does not resolve");

    w = world(1, "127.0.0.1");
    is_int(warn_captured(&w, out, sizeof(out)), 0,
           "one host on loopback: no warning");
    is_str(out, "", "nothing printed");
    w = world(2, "10.1.2.3");
    is_int(warn_captured(&w, out, sizeof(out)), 0,
           "two hosts, a routable master address: no warning");
    w = world(2, "127.0.1.1");
    is_int(warn_captured(&w, out, sizeof(out)), 1,
           "two hosts, master address on loopback: a warning");
    like(out, "spans 2 hosts but the store's master address '127\\.0\\.1\\.1' "
         "resolves to the loopback address 127\\.0\\.1\\.1 on host [^ ]+",
         "it names the master address, the loopback address and the host");
    like(out, "set MASTER_ADDR / TODIST_MASTER_ADDR to an address the other "
         "hosts can reach", "it gives the fix");
    like(out, "^todist[^:]*: world: [^\n]*\n$", "one line, through the log");
    return exit_status();
}
