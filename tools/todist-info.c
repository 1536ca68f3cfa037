/* todist-info: print the world as libtodist resolves it from the
 * environment, as key=value pairs on one line or as JSON. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <todist/todist.h>

static void
usage(FILE *f)
{
    fprintf(f, "usage: todist-info [--json]\n"
               "Print this process's rank, world size, local rank, node rank "
               "and master\naddress as todist resolves them from the "
               "environment.\n");
}

int
main(int argc, char **argv)
{
    td_world_t w;
    int json = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "todist-info: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (td_world_from_env(&w) != TD_OK) {
        fprintf(stderr, "todist-info: %s\n", td_last_error());
        return 1;
    }
    if (json) {
        /* master_addr comes from a validated host name or address; escape
         * the two JSON specials anyway. */
        printf("{\"rank\":%d,\"world_size\":%d,\"local_rank\":%d,"
               "\"local_world_size\":%d,\"node_rank\":%d,\"nnodes\":%d,"
               "\"master_addr\":\"", w.rank, w.world_size, w.local_rank,
               w.local_world_size, w.node_rank, w.nnodes);
        for (const char *p = w.master_addr; *p; p++) {
            if (*p == '"' || *p == '\\') {
                putchar('\\');
            }
            putchar(*p);
        }
        printf("\",\"master_port\":%u,\"worker\":\"%s\",\"source\":\"%s\"}\n",
               w.master_port, w.worker_name, td_world_source_name(w.source));
    } else {
        printf("rank=%d world_size=%d local_rank=%d local_world_size=%d "
               "node_rank=%d nnodes=%d master_addr=%s master_port=%u "
               "worker=%s source=%s\n", w.rank, w.world_size, w.local_rank,
               w.local_world_size, w.node_rank, w.nnodes, w.master_addr,
               w.master_port, w.worker_name, td_world_source_name(w.source));
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
