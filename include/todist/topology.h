/* todist/topology.h: placement of local ranks on this node's GPUs, cores,
 * memory and NICs (hwloc).
 *
 * A node's topology is loaded from this machine or from an hwloc XML file,
 * keeping PCI devices. td_placement_plan() is a pure function of (topology,
 * number of local ranks, restrictions, policy):
 *   - GPUs are NVIDIA PCI devices (vendor 0x10de, class 0x0300 or 0x0302;
 *     NVSwitches are bridges, not GPUs), sorted by PCI bus id. When
 *     CUDA_VISIBLE_DEVICES restricts them, indices are taken in PCI order
 *     (CUDA_DEVICE_ORDER=PCI_BUS_ID is assumed) and GPU-... UUIDs are matched
 *     against the NVIDIAUUID that hwloc's NVML backend records.
 *   - Local rank i gets the i-th usable GPU (with share_gpus, GPU i mod n;
 *     without it, more ranks than GPUs is an error).
 *   - Its CPU set is the GPU's locality (its first non-I/O ancestor)
 *     intersected with the allowed CPU set (cgroup, or a given list), split
 *     by whole cores (with their hardware threads) among the ranks that share
 *     that locality, in rank (bus-id) order: of k cores and m ranks, the
 *     j-th rank gets cores [j*k/m, (j+1)*k/m) (at least one core; when k < m
 *     ranks share cores).
 *   - Its memory node is the GPU's NUMA node.
 *   - Its NIC is the OpenFabrics device (or, when the node has none, the PCI
 *     network interface) fewest PCI/CPU tree hops from the GPU; ties go to
 *     the least used so far, in bus-id order (round-robin).
 *   - With no usable GPU, ranks are spread over the NUMA nodes that have
 *     allowed CPUs (rank i on node i*n/N) and split each node's cores as
 *     above; fewer ranks than nodes get several nodes each (numa = -1).
 *   - Policy none places nothing: every rank gets the whole allowed set.
 * td_placement_apply() binds the calling process (CPUs, memory) and sets
 * CUDA_VISIBLE_DEVICES (the GPU's PCI-order index, with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID) and, for an RDMA NIC, UCX_NET_DEVICES=NIC:1,
 * each unless already set, and only when the topology is this machine's.
 *
 * Thread safety: loading, planning and querying are thread-safe on distinct
 * topologies, and planning is safe on a shared one. td_placement_apply() and
 * td_placement_apply_env() change the process (binding, environment) and are
 * not thread-safe. */
#ifndef TODIST_TOPOLOGY_H
#define TODIST_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>

#include <todist/status.h>
#include <todist/world.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_BUSID_MAX    16    /* "0000:18:00.0" and its NUL */
#define TD_NIC_NAME_MAX 64
#define TD_CPULIST_MAX  4096  /* "0-5,48-53" */

typedef struct td_topology td_topology_t;

typedef enum {
    TD_PLACEMENT_CLOSEST = 0,
    TD_PLACEMENT_NONE    = 1
} td_placement_policy_t;

/* One NVIDIA GPU of the topology. */
typedef struct {
    char busid[TD_BUSID_MAX];   /* "0000:18:00.0" */
    char uuid[64];              /* "GPU-..." when hwloc knows it, else "" */
    char cpus[TD_CPULIST_MAX];  /* locality (all PUs, allowed or not) */
    int  numa;                  /* NUMA node OS index, -1 when unknown */
} td_gpu_info_t;

typedef struct {
    int                   local_ranks;   /* 1 <= N <= 4096 */
    td_placement_policy_t policy;
    bool                  share_gpus;    /* N > GPUs: share round-robin */
    /* CUDA_VISIBLE_DEVICES as the ranks will see it; NULL: unrestricted,
     * "": no GPU visible. */
    const char           *cuda_visible_devices;
    /* A further restriction of the allowed CPUs ("0-11,48-59"), as a
     * cgroup would give; NULL: the topology's allowed set alone. */
    const char           *allowed_cpus;
} td_placement_opts_t;

/* Where one local rank goes. Strings are "" and numbers -1 when absent. */
typedef struct {
    int  local_rank;
    char gpu[TD_BUSID_MAX];       /* PCI bus id of its GPU */
    int  gpu_index;               /* that GPU's index in PCI order */
    int  cuda_ordinal;            /* its CUDA device number when
                                   * CUDA_VISIBLE_DEVICES is kept as given */
    char cpus[TD_CPULIST_MAX];    /* "0-5,48-53" */
    int  numa;                    /* NUMA node OS index */
    char nic[TD_NIC_NAME_MAX];    /* "mlx5_0" */
    bool nic_openfabrics;         /* UCX names it "NIC:1" */
    int  nic_hops;                /* tree steps from GPU (or cores) to NIC */
} td_rank_place_t;

typedef struct {
    int              n;           /* local ranks */
    td_rank_place_t *ranks;       /* n entries */
} td_placement_t;

/* One variable td_placement_apply() sets. */
typedef struct {
    const char *name;
    char        value[TD_NIC_NAME_MAX + 8];
} td_place_var_t;

#define TD_PLACE_VARS_MAX 3

/* What td_placement_apply() did. */
typedef struct {
    bool applied;          /* anything was bound or set */
    bool cpus_bound;
    bool mem_bound;
    int  n_vars;           /* variables set (CUDA_VISIBLE_DEVICES, ...) */
    td_place_var_t vars[TD_PLACE_VARS_MAX];
    td_rank_place_t place; /* the calling rank's placement */
    char note[256];        /* why something was not done, or "" */
} td_place_report_t;

/* Load a topology. PATH names an hwloc XML file; NULL takes HWLOC_XMLFILE
 * when set, else this machine. PCI devices and disallowed PUs are kept. */
td_status_t td_topology_load(const char *path, td_topology_t **topo_p);
void td_topology_destroy(td_topology_t *topo);

/* True when the topology describes the machine this process runs on. */
bool td_topology_is_thissystem(const td_topology_t *topo);

/* NVIDIA GPUs in bus-id order (all of them, before any restriction). */
int td_topology_gpu_count(const td_topology_t *topo);
td_status_t td_topology_gpu(const td_topology_t *topo, int index,
                            td_gpu_info_t *info_p);

/* The allowed CPU set as a list string. */
td_status_t td_topology_allowed_cpus(const td_topology_t *topo, char *buf,
                                     size_t len);

/* Plan OPTS->local_ranks ranks. On success *plan_p is filled (free its
 * ranks with td_placement_free()). */
td_status_t td_placement_plan(const td_topology_t *topo,
                              const td_placement_opts_t *opts,
                              td_placement_t *plan_p);
void td_placement_free(td_placement_t *plan);

/* The variables PLACE would set, given the environment seen through LOOKUP
 * (a variable already set there is left alone). */
int td_placement_vars(const td_rank_place_t *place, td_env_lookup_fn lookup,
                      void *arg, td_place_var_t vars[TD_PLACE_VARS_MAX]);

/* Bind the calling process to PLACE: CPUs, memory (best effort: a refused
 * memory binding is reported in the note, not an error), then set the
 * variables of td_placement_vars(). Does nothing but say so when TOPO is
 * not this machine's. REPORT_P may be NULL. */
td_status_t td_placement_apply(const td_topology_t *topo,
                               const td_rank_place_t *place,
                               td_place_report_t *report_p);

/* WORLD's local rank's placement (policy closest) among WORLD's local
 * ranks, with CUDA_VISIBLE_DEVICES and TODIST_SHARE_GPUS=1 from this
 * process's environment: what td_placement_apply_env() would apply. When
 * CUDA_VISIBLE_DEVICES lists fewer GPUs than there are local ranks (and
 * sharing is off), the launcher bound a GPU per task (Slurm's --gpu-bind):
 * the rank is then planned alone on its visible GPU, with that GPU's whole
 * locality within the allowed set. */
td_status_t td_placement_for_rank(const td_topology_t *topo,
                                  const td_world_t *world,
                                  td_rank_place_t *place_p);

/* td_init's entry point. TODIST_BIND=closest: load this node's topology
 * (HWLOC_XMLFILE honoured), plan WORLD's local ranks (CUDA_VISIBLE_DEVICES
 * and TODIST_SHARE_GPUS=1 honoured) and apply the plan of WORLD's local
 * rank. TODIST_BIND unset, empty or "none": nothing, TD_OK. Any other value:
 * TD_ERR_INVALID. REPORT_P may be NULL. */
td_status_t td_placement_apply_env(const td_world_t *world,
                                   td_place_report_t *report_p);

/* Parse a policy name ("closest", "none"). */
td_status_t td_placement_policy_parse(const char *name,
                                      td_placement_policy_t *policy_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_TOPOLOGY_H */
