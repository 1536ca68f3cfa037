/* The placement library: loading, GPU discovery, CUDA_VISIBLE_DEVICES,
 * errors, the variables, and binding this very process (in children, so
 * the test's own affinity is left alone). Expected plans of whole nodes are
 * checked against hwloc's tools in tests/topology/test_topo.sh. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwloc.h>

#include <todist/topology.h>
#include "tests/tap.h"

static char path_buf[4096];

static const char *
data(const char *name)
{
    const char *top = getenv("top_srcdir");

    snprintf(path_buf, sizeof(path_buf), "%s/tests/data/topology/%s",
             top ? top : ".", name);
    return path_buf;
}

static td_topology_t *
load(const char *name)
{
    td_topology_t *t = NULL;

    if (td_topology_load(data(name), &t) != TD_OK) {
        diag("load %s: %s", name, td_last_error());
        exit(1);
    }
    return t;
}

/* Plan; "" on success, else the error message. */
static td_placement_t pl;

static const char *
plan_of(const td_topology_t *t, int n, const char *cvd, bool share,
        const char *allowed)
{
    td_placement_opts_t o = { n, TD_PLACEMENT_CLOSEST, share, cvd, allowed };

    td_placement_free(&pl);
    if (td_placement_plan(t, &o, &pl) != TD_OK) {
        return td_last_error();
    }
    return "";
}

static const char *
env_of(const char *name, void *arg)
{
    char *const *kv = arg;

    for (; *kv != NULL; kv++) {
        size_t l = strlen(name);

        if (strncmp(*kv, name, l) == 0 && (*kv)[l] == '=') {
            return *kv + l + 1;
        }
    }
    return NULL;
}

/* This process's CPU binding as hwloc sees it, as a list. */
static void
my_cpus(char *buf, size_t len)
{
    hwloc_topology_t t;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();

    hwloc_topology_init(&t);
    hwloc_topology_load(t);
    hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS);
    hwloc_bitmap_list_snprintf(buf, len, set);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
}

/* Child process for the binding tests: writes "cpus|var|note|applied". */
static int
child_apply(int fd, int local_rank, int local_size)
{
    td_world_t w;
    td_place_report_t rep;
    char got[TD_CPULIST_MAX], out[2 * TD_CPULIST_MAX + 512];
    const char *cvd;
    int n;

    memset(&w, 0, sizeof(w));
    w.local_rank = local_rank;
    w.local_world_size = local_size;
    if (td_placement_apply_env(&w, &rep) != TD_OK) {
        n = snprintf(out, sizeof(out), "error: %s", td_last_error());
    } else {
        my_cpus(got, sizeof(got));
        cvd = getenv("CUDA_VISIBLE_DEVICES");
        n = snprintf(out, sizeof(out), "%s|%s|%s|%s|%d|%s|%s", got,
                     rep.place.cpus, cvd ? cvd : "-", rep.note, rep.applied,
                     rep.cpus_bound ? "bound" : "unbound",
                     rep.mem_bound ? "membound" : "memunbound");
    }
    return write(fd, out, n) == n ? 0 : 1;
}

static char child_out[2 * TD_CPULIST_MAX + 512];

static const char *
in_child(int local_rank, int local_size, const char *bind, const char *xml)
{
    int fds[2], st;
    ssize_t n;
    pid_t pid;

    if (pipe(fds) != 0) {
        return "pipe failed";
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        bind ? setenv("TODIST_BIND", bind, 1) : unsetenv("TODIST_BIND");
        xml ? setenv("HWLOC_XMLFILE", xml, 1) : unsetenv("HWLOC_XMLFILE");
        unsetenv("CUDA_VISIBLE_DEVICES");
        unsetenv("UCX_NET_DEVICES");
        /* as the parent's plan: on a GPU node (the GPU kit runs this test
         * there) two local ranks share its one GPU */
        setenv("TODIST_SHARE_GPUS", "1", 1);
        _exit(child_apply(fds[1], local_rank, local_size));
    }
    close(fds[1]);
    n = read(fds[0], child_out, sizeof(child_out) - 1);
    close(fds[0]);
    waitpid(pid, &st, 0);
    child_out[n > 0 ? n : 0] = '\0';
    return child_out;
}

int
main(void)
{
    td_topology_t *t, *g4, *sys;
    td_gpu_info_t gi;
    td_place_var_t vars[TD_PLACE_VARS_MAX];
    td_place_report_t rep;
    char allowed[TD_CPULIST_MAX], want[2 * TD_CPULIST_MAX + 64];
    td_status_t st;

    plan(57);
    unsetenv("HWLOC_XMLFILE");

    /* loading */
    st = td_topology_load(data("no-such.xml"), &t);
    is_int(st, TD_ERR_IO, "missing file: TD_ERR_IO");
    like(td_last_error(), "cannot read '.*no-such.xml': No such file",
         "... naming the file");
    t = load("2s2n-8gpu-8nic.xml");
    ok(!td_topology_is_thissystem(t), "an XML topology is not this system");
    is_int(td_topology_gpu_count(t), 8, "8 GPUs; the NVSwitch is not one");
    is_int(td_topology_gpu(t, 0, &gi), TD_OK, "GPU 0 info");
    is_str(gi.busid, "0000:22:00.0", "GPU 0 is the lowest bus id, not the first in the tree");
    is_str(gi.cpus, "0-3,16-19", "GPU 0 locality");
    is_int(gi.numa, 0, "GPU 0 NUMA node");
    is_str(gi.uuid, "GPU-000000a1-1111-2222-3333-000000000022", "GPU 0 UUID from its NVML device");
    is_int(td_topology_gpu(t, 7, &gi), TD_OK, "GPU 7 info");
    is_int(gi.numa, 3, "GPU 7 on NUMA node 3");
    is_int(td_topology_gpu(t, 8, &gi), TD_ERR_RANGE, "GPU 8 does not exist");
    g4 = load("g4dnmetal-cgroup.xml");
    is_int(td_topology_allowed_cpus(g4, allowed, sizeof(allowed)), TD_OK, "allowed set");
    is_str(allowed, "24-47,72-95", "cgroup allowed set read from the XML");

    /* plans: shape and restrictions */
    is_str(plan_of(t, 8, NULL, false, NULL), "", "8 ranks on 8 GPUs");
    is_int(pl.n, 8, "8 entries");
    is_int(pl.ranks[5].gpu_index, 5, "rank 5 gets GPU 5");
    is_str(pl.ranks[5].cpus, "10-11,26-27", "rank 5: second half of NUMA node 2's cores");
    is_int(pl.ranks[5].nic_hops, 4, "rank 5's NIC is behind its switch");
    ok(pl.ranks[5].nic_openfabrics, "an OpenFabrics NIC");
    is_str(plan_of(t, 2, "3,1", false, NULL), "", "CUDA_VISIBLE_DEVICES=3,1");
    is_int(pl.ranks[0].gpu_index, 1, "rank 0 gets the lower bus id (GPU 1)");
    is_int(pl.ranks[0].cuda_ordinal, 1, "... which is CUDA device 1 in that list");
    is_int(pl.ranks[1].cuda_ordinal, 0, "rank 1 gets GPU 3, CUDA device 0");
    is_str(plan_of(t, 1, "GPU-000000a7", false, NULL), "", "a UUID prefix selects a GPU");
    is_str(pl.ranks[0].gpu, "0000:b2:00.0", "... the 8th GPU in tree order (bus b2)");
    like(plan_of(t, 1, "GPU-0000", false, NULL), "'GPU-0000' matches more than one GPU",
         "an ambiguous UUID prefix is an error");
    like(plan_of(t, 2, "1,1", false, NULL), "names GPU 0000:32:00.0 twice",
         "a GPU listed twice is an error");
    like(plan_of(t, 9, NULL, false, NULL), "9 local ranks but 8 usable GPUs",
         "more ranks than GPUs is an error");
    is_str(plan_of(t, 9, NULL, true, NULL), "", "... unless GPUs are shared");
    is_int(pl.ranks[8].gpu_index, 0, "rank 8 shares GPU 0");
    is_str(pl.ranks[0].cpus, "0,16", "rank 0 and 8 (on GPU 0) split GPU 0's share...");
    is_str(pl.ranks[8].cpus, "1,17", "... with neighbouring cores");
    is_str(plan_of(t, 2, NULL, false, "0-1,16-17"), "", "a given allowed list");
    is_str(pl.ranks[0].cpus, "0,16", "rank 0 gets core 0 with its thread");
    like(plan_of(t, 2, NULL, false, "0-40x"), "allowed CPU list '0-40x' is not a list",
         "a malformed allowed list is an error");
    like(plan_of(t, 0, NULL, false, NULL), "0 local ranks; need at least 1", "0 ranks");
    like(plan_of(t, 4097, NULL, true, NULL), "4097 local ranks is more than 4096",
         "more than 4096 ranks");
    is_str(plan_of(t, 4096, NULL, true, NULL), "", "4096 ranks sharing 8 GPUs");
    is_str(pl.ranks[4095].cpus, "15,31", "... the last shares GPU 7's last core");

    /* one rank's placement from the environment */
    {
        td_world_t w;
        td_rank_place_t rp;

        memset(&w, 0, sizeof(w));
        w.local_rank = 5;
        w.local_world_size = 8;
        unsetenv("CUDA_VISIBLE_DEVICES");
        unsetenv("TODIST_SHARE_GPUS");
        is_int(td_placement_for_rank(t, &w, &rp), TD_OK, "for_rank: rank 5 of 8");
        is_str(rp.cpus, "10-11,26-27", "... the same as the plan's entry 5");
        setenv("CUDA_VISIBLE_DEVICES", "6", 1);
        is_int(td_placement_for_rank(t, &w, &rp), TD_OK,
               "for_rank: one GPU per task (Slurm --gpu-bind)");
        ok(strcmp(rp.gpu, "0000:b2:00.0") == 0 && strcmp(rp.cpus, "12-15,28-31") == 0 &&
           rp.local_rank == 5 && rp.cuda_ordinal == 0,
           "... its own GPU, the GPU's whole locality, CUDA device 0 (%s %s)",
           rp.gpu, rp.cpus);
        setenv("TODIST_SHARE_GPUS", "yes", 1);
        like(td_placement_for_rank(t, &w, &rp) == TD_OK ? "" : td_last_error(),
             "TODIST_SHARE_GPUS=yes is not 0 or 1", "TODIST_SHARE_GPUS checked");
        unsetenv("TODIST_SHARE_GPUS");
        unsetenv("CUDA_VISIBLE_DEVICES");
    }

    /* variables */
    plan_of(t, 1, NULL, false, NULL);
    is_int(td_placement_vars(&pl.ranks[0], env_of,
                             (void *)(char *const[]){ "A=1", NULL }, vars), 3,
           "three variables for a GPU and an RDMA NIC");
    snprintf(want, sizeof(want), "%s=%s %s=%s %s=%s", vars[0].name, vars[0].value,
             vars[1].name, vars[1].value, vars[2].name, vars[2].value);
    is_str(want, "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 "
           "UCX_NET_DEVICES=mlx5_1:1", "their values");
    is_int(td_placement_vars(&pl.ranks[0], env_of, (void *)(char *const[]){
               "CUDA_VISIBLE_DEVICES=2", "UCX_NET_DEVICES=x", NULL }, vars), 0,
           "none when the user set them");

    /* applying */
    is_int(td_placement_apply(t, &pl.ranks[0], &rep), TD_OK, "apply an XML topology's plan");
    ok(!rep.applied && !rep.cpus_bound, "... binds nothing");
    like(rep.note, "is not this machine's: nothing was bound", "... and says so");
    ok(getenv("CUDA_VISIBLE_DEVICES") == NULL || strcmp(getenv("CUDA_VISIBLE_DEVICES"), "0") != 0,
       "... nor sets CUDA_VISIBLE_DEVICES");

    /* this machine: plan 2 local ranks and bind the last one, in a child */
    if (td_topology_load(NULL, &sys) != TD_OK) {
        diag("this machine: %s", td_last_error());
        return 1;
    }
    ok(td_topology_is_thissystem(sys), "this machine's topology is this system");
    {
        td_placement_opts_t o = { 2, TD_PLACEMENT_CLOSEST, true, NULL, NULL };
        td_placement_t mine;
        const char *out;

        td_placement_plan(sys, &o, &mine);
        /* Its CPUs as hwloc sees them, the placement's own, and no GPU
         * variable unless the plan gave it a GPU. */
        snprintf(want, sizeof(want), "%s|%s|%s", mine.ranks[1].cpus,
                 mine.ranks[1].cpus, mine.ranks[1].gpu[0] != '\0' ? "" : "-|");
        out = in_child(1, 2, "closest", NULL);
        ok(strncmp(out, want, strlen(want)) == 0 && strstr(out, "|bound") != NULL,
           "TODIST_BIND=closest binds local rank 1 to its CPUs");
        diag("child: %s", out);
        if (strncmp(out, want, strlen(want)) != 0) {
            diag("got '%s', want prefix '%s'", out, want);
        }
        td_placement_free(&mine);
        like(in_child(0, 1, NULL, NULL), "TODIST_BIND is not closest: nothing was bound\\|0\\|",
             "TODIST_BIND unset: nothing");
        like(in_child(0, 1, "far", NULL), "^error: placement: TODIST_BIND=far is not closest or none",
             "TODIST_BIND=far is an error");
        like(in_child(3, 4, "closest", data("2s2n-8gpu-8nic.xml")),
             "\\|6-7,22-23\\|-\\|topology .*2s2n-8gpu-8nic.xml is not this machine's: nothing was bound\\|0\\|",
             "HWLOC_XMLFILE: planned from the file, nothing bound");
    }

    td_placement_free(&pl);
    td_topology_destroy(sys);
    td_topology_destroy(g4);
    td_topology_destroy(t);
    return exit_status();
}
