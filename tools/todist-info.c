/* todist-info: print the world as libtodist resolves it from the
 * environment, as key=value pairs on one line or as JSON; with
 * TODIST_BIND=closest (or --placement) also this rank's placement; with
 * --devices the CUDA devices it sees, or why none (this loads the CUDA
 * module, kernels/module.h, as any device request does). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

static void
usage(FILE *f)
{
    fprintf(f, "usage: todist-info [--json] [--placement] [--devices]\n"
               "Print this process's rank, world size, local rank, node rank "
               "and master\naddress as todist resolves them from the "
               "environment; with TODIST_BIND=closest\nor --placement, also "
               "the GPU, CPUs, NUMA node and NIC its local rank gets;\nwith "
               "--devices, the CUDA devices it sees or why it sees none.\n");
}

/* This rank's placement on this node (HWLOC_XMLFILE honoured). */
static int
placement(const td_world_t *w, td_rank_place_t *p)
{
    td_topology_t *topo;
    td_status_t status;

    if (td_topology_load(NULL, &topo) != TD_OK) {
        return 1;
    }
    status = td_placement_for_rank(topo, w, p);
    td_topology_destroy(topo);
    return status == TD_OK ? 0 : 1;
}

static void
json_str(const char *key, const char *v)
{
    printf(",\"%s\":", key);
    if (v[0] == '\0') {
        printf("null");
        return;
    }
    putchar('"');
    for (; *v; v++) {
        if (*v == '"' || *v == '\\') {
            putchar('\\');
        }
        putchar(*v);
    }
    putchar('"');
}

int
main(int argc, char **argv)
{
    const char *bind = getenv("TODIST_BIND");
    td_rank_place_t rp;
    td_world_t w;
    int json = 0, place, devices = 0, n_cuda = 0;
    char cuda_why[512] = "";

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--placement") == 0) {
            bind = "closest";
        } else if (strcmp(argv[i], "--devices") == 0) {
            devices = 1;
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
    place = bind != NULL && strcmp(bind, "closest") == 0;
    if (place && placement(&w, &rp) != 0) {
        fprintf(stderr, "todist-info: %s\n", td_last_error());
        return 1;
    }
    if (devices && td_device_count(TD_DEVICE_CUDA, &n_cuda) != TD_OK) {
        snprintf(cuda_why, sizeof(cuda_why), "%s", td_last_error());
        n_cuda = 0;
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
        printf("\",\"master_port\":%u,\"worker\":\"%s\",\"source\":\"%s\"",
               w.master_port, w.worker_name, td_world_source_name(w.source));
        if (place) {
            json_str("gpu", rp.gpu);
            json_str("cpus", rp.cpus);
            if (rp.numa >= 0) {
                printf(",\"numa\":%d", rp.numa);
            } else {
                printf(",\"numa\":null");
            }
            json_str("nic", rp.nic);
        }
        if (devices) {
            printf(",\"cuda\":%d", n_cuda);
            json_str("cuda_error", cuda_why);
        }
        printf("}\n");
    } else {
        printf("rank=%d world_size=%d local_rank=%d local_world_size=%d "
               "node_rank=%d nnodes=%d master_addr=%s master_port=%u "
               "worker=%s source=%s", w.rank, w.world_size, w.local_rank,
               w.local_world_size, w.node_rank, w.nnodes, w.master_addr,
               w.master_port, w.worker_name, td_world_source_name(w.source));
        if (place) {
            char numa[16];

            snprintf(numa, sizeof(numa), "%d", rp.numa);
            printf(" gpu=%s cpus=%s numa=%s nic=%s", rp.gpu[0] ? rp.gpu : "none",
                   rp.cpus, rp.numa >= 0 ? numa : "none",
                   rp.nic[0] ? rp.nic : "none");
        }
        if (devices) {
            printf(" cuda=%d", n_cuda);
        }
        printf("\n");
        if (cuda_why[0] != '\0') {
            printf("cuda: %s\n", cuda_why);
        }
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
