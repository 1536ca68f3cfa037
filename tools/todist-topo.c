/* todist-topo: show where each local rank of this node (or of a node given
 * as hwloc XML) would go: GPU, CPUs, NUMA node and NIC. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

static void
usage(FILE *f)
{
    fprintf(f,
"usage: todist-topo [--input FILE.xml] [--local-ranks N] [--policy closest|none]\n"
"                   [--share-gpus] [--allowed-cpus LIST] [--format table|env|json]\n"
"Print the placement todist gives each local rank of this node (or of the\n"
"node described by an hwloc XML file): GPU bus id, CPU list, NUMA node, NIC.\n"
"CUDA_VISIBLE_DEVICES restricts the GPUs as it would for the ranks.\n");
}

static const char *
getenv_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

static void
print_table(const td_topology_t *topo, const td_placement_t *plan,
            const char *input)
{
    int w = 4;

    for (int i = 0; i < plan->n; i++) {
        int l = (int)strlen(plan->ranks[i].cpus);

        w = l > w ? l : w;
    }
    printf("# %s%s\n", input ? input : "this machine",
           td_topology_is_thissystem(topo) ? "" :
           " (not this machine: nothing would be bound)");
    printf("%-10s  %-12s  %-*s  %-4s  %-12s  %s\n", "local_rank", "gpu", w,
           "cpus", "numa", "nic", "hops");
    for (int i = 0; i < plan->n; i++) {
        const td_rank_place_t *p = &plan->ranks[i];
        char numa[16], hops[16];

        snprintf(numa, sizeof(numa), "%d", p->numa);
        snprintf(hops, sizeof(hops), "%d", p->nic_hops);
        printf("%-10d  %-12s  %-*s  %-4s  %-12s  %s\n", p->local_rank,
               p->gpu[0] ? p->gpu : "-", w, p->cpus, p->numa >= 0 ? numa : "-",
               p->nic[0] ? p->nic : "-", p->nic_hops >= 0 ? hops : "-");
    }
}

static void
print_env(const td_placement_t *plan)
{
    for (int i = 0; i < plan->n; i++) {
        td_place_var_t vars[TD_PLACE_VARS_MAX];
        int n = td_placement_vars(&plan->ranks[i], getenv_lookup, NULL, vars);

        printf("TODIST_LOCAL_RANK=%d", plan->ranks[i].local_rank);
        for (int k = 0; k < n; k++) {
            printf(" %s=%s", vars[k].name, vars[k].value);
        }
        printf("\n");
    }
}

/* Bus ids, CPU lists and NIC names hold no JSON specials but quotes and
 * backslashes are escaped anyway (a NIC name comes from the system). */
static void
json_string(const char *s)
{
    if (s[0] == '\0') {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            putchar('\\');
        }
        if ((unsigned char)*s >= 0x20) {
            putchar(*s);
        }
    }
    putchar('"');
}

static void
print_json(const td_placement_t *plan)
{
    printf("[\n");
    for (int i = 0; i < plan->n; i++) {
        const td_rank_place_t *p = &plan->ranks[i];

        printf("  {\"local_rank\":%d,\"gpu\":", p->local_rank);
        json_string(p->gpu);
        printf(",\"cpus\":");
        json_string(p->cpus);
        if (p->numa >= 0) {
            printf(",\"numa\":%d,\"nic\":", p->numa);
        } else {
            printf(",\"numa\":null,\"nic\":");
        }
        json_string(p->nic);
        if (p->nic_hops >= 0) {
            printf(",\"hops\":%d}%s\n", p->nic_hops, i + 1 < plan->n ? "," : "");
        } else {
            printf(",\"hops\":null}%s\n", i + 1 < plan->n ? "," : "");
        }
    }
    printf("]\n");
}

int
main(int argc, char **argv)
{
    const char *input = NULL, *format = "table";
    td_placement_opts_t opts;
    td_topology_t *topo;
    td_placement_t plan;
    int rc = 1;

    memset(&opts, 0, sizeof(opts));
    opts.local_ranks = 1;
    opts.policy = TD_PLACEMENT_CLOSEST;
    opts.cuda_visible_devices = getenv("CUDA_VISIBLE_DEVICES");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--share-gpus") == 0) {
            opts.share_gpus = true;
            continue;
        } else if (strcmp(a, "--input") != 0 && strcmp(a, "--local-ranks") != 0 &&
                   strcmp(a, "--policy") != 0 && strcmp(a, "--format") != 0 &&
                   strcmp(a, "--allowed-cpus") != 0) {
            fprintf(stderr, "todist-topo: unknown argument '%s'\n", a);
            usage(stderr);
            return 1;
        }
        if (v == NULL) {
            fprintf(stderr, "todist-topo: %s needs a value\n", a);
            return 1;
        }
        i++;
        if (strcmp(a, "--input") == 0) {
            input = v;
        } else if (strcmp(a, "--allowed-cpus") == 0) {
            opts.allowed_cpus = v;
        } else if (strcmp(a, "--local-ranks") == 0) {
            char *end;
            long n;

            errno = 0;
            n = strtol(v, &end, 10);
            if (end == v || *end != '\0' || errno != 0 || n < 1 || n > 4096) {
                fprintf(stderr, "todist-topo: --local-ranks %s: need a number "
                        "from 1 to 4096\n", v);
                return 1;
            }
            opts.local_ranks = (int)n;
        } else if (strcmp(a, "--policy") == 0) {
            if (td_placement_policy_parse(v, &opts.policy) != TD_OK) {
                fprintf(stderr, "todist-topo: %s\n", td_last_error());
                return 1;
            }
        } else if (strcmp(v, "table") == 0 || strcmp(v, "env") == 0 ||
                   strcmp(v, "json") == 0) {
            format = v;
        } else {
            fprintf(stderr, "todist-topo: --format %s: not table, env or "
                    "json\n", v);
            return 1;
        }
    }

    if (td_topology_load(input, &topo) != TD_OK) {
        fprintf(stderr, "todist-topo: %s\n", td_last_error());
        return 1;
    }
    if (input == NULL) {
        input = getenv("HWLOC_XMLFILE");
        input = input && input[0] ? input : NULL;
    }
    if (td_placement_plan(topo, &opts, &plan) != TD_OK) {
        fprintf(stderr, "todist-topo: %s\n", td_last_error());
        goto out;
    }
    if (strcmp(format, "json") == 0) {
        print_json(&plan);
    } else if (strcmp(format, "env") == 0) {
        print_env(&plan);
    } else {
        print_table(topo, &plan, input);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    td_placement_free(&plan);
out:
    td_topology_destroy(topo);
    return rc;
}
