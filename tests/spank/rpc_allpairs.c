/* Every rank calls every rank (itself included) once: the end-to-end
 * check that a launcher (todist-run, srun --todist) wired a working job.
 * Prints "rank=R node=HOST calls_ok=N world=W". */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <todist/todist.h>

static td_status_t
fn_hello(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    int64_t caller;
    td_status_t st;

    (void)arg; (void)info;
    if ((st = td_rpc_list_int(args, 0, &caller)) != TD_OK) {
        return st;
    }
    return td_rpc_list_add_int(result, td_world()->rank * 1000 + caller);
}

int
main(void)
{
    const char *node = getenv("SLURMD_NODENAME");
    char host[256] = "";
    int ok = 0, rank, world;

    if (td_rpc_register("hello", fn_hello, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "rpc_allpairs: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    world = td_world()->world_size;
    for (int peer = 0; peer < world; peer++) {
        td_rpc_list_t *args = NULL, *res = NULL;
        int64_t v = -1;

        if (td_rpc_list_create(&args) == TD_OK &&
            td_rpc_list_add_int(args, rank) == TD_OK &&
            td_rpc_sync(peer, "hello", args, 60, &res) == TD_OK &&
            td_rpc_list_int(res, 0, &v) == TD_OK && v == peer * 1000 + rank) {
            ok++;
        } else {
            fprintf(stderr, "rpc_allpairs: rank %d -> %d: %s (got %lld)\n",
                    rank, peer, td_last_error(), (long long)v);
        }
        td_rpc_list_free(args);
        td_rpc_list_free(res);
    }
    if (node == NULL) {
        gethostname(host, sizeof(host) - 1);
        node = host;
    }
    printf("rank=%d node=%s calls_ok=%d world=%d\n", rank, node, ok, world);
    fflush(stdout);
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "rpc_allpairs: %s\n", td_last_error());
        return 1;
    }
    return ok == world ? 0 : 1;
}
