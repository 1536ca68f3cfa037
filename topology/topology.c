/* topology.c: load a node's topology with hwloc, find its GPUs and NICs,
 * plan where each local rank goes and bind the calling process to it.
 * See include/todist/topology.h for the algorithm. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "todist/topology.h"

#define NVIDIA_VENDOR   0x10de
#define PCI_CLASS_VGA   0x0300
#define PCI_CLASS_3D    0x0302

typedef struct {
    hwloc_obj_t obj;                 /* the PCI device */
    char        busid[TD_BUSID_MAX];
    char        uuid[64];
} gpu_t;

typedef struct {
    hwloc_obj_t osdev;
    hwloc_obj_t dev;                 /* the PCI device (or osdev's parent) */
    char        busid[TD_BUSID_MAX];
    bool        openfabrics;
} nic_t;

struct td_topology {
    hwloc_topology_t topo;
    gpu_t           *gpus;           /* bus-id order */
    int              n_gpus;
    nic_t           *nics;           /* bus-id, then name order */
    int              n_nics;
    char             source[200];    /* "this machine" or the XML path */
};

static void
busid_format(hwloc_obj_t pci, char *buf)
{
    snprintf(buf, TD_BUSID_MAX, "%04x:%02x:%02x.%01x",
             pci->attr->pcidev.domain & 0xffffu, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func & 0xfu);
}

static int
busid_cmp(hwloc_obj_t a, hwloc_obj_t b)
{
    const struct hwloc_pcidev_attr_s *x = &a->attr->pcidev, *y = &b->attr->pcidev;

    if (x->domain != y->domain) {
        return x->domain < y->domain ? -1 : 1;
    }
    if (x->bus != y->bus) {
        return x->bus < y->bus ? -1 : 1;
    }
    if (x->dev != y->dev) {
        return x->dev < y->dev ? -1 : 1;
    }
    return (int)x->func - (int)y->func;
}

static int
gpu_cmp(const void *a, const void *b)
{
    return busid_cmp(((const gpu_t *)a)->obj, ((const gpu_t *)b)->obj);
}

static int
nic_cmp(const void *a, const void *b)
{
    const nic_t *x = a, *y = b;
    int c = strcmp(x->busid, y->busid);

    return c != 0 ? c : strcmp(x->osdev->name, y->osdev->name);
}

static bool
is_nvidia_gpu(hwloc_obj_t obj)
{
    return obj->type == HWLOC_OBJ_PCI_DEVICE &&
           obj->attr->pcidev.vendor_id == NVIDIA_VENDOR &&
           (obj->attr->pcidev.class_id == PCI_CLASS_VGA ||
            obj->attr->pcidev.class_id == PCI_CLASS_3D);
}

/* The GPU's UUID, from the NVML OS device hwloc hangs below it. */
static void
gpu_uuid(hwloc_obj_t pci, char *buf, size_t len)
{
    buf[0] = '\0';
    for (hwloc_obj_t c = pci->io_first_child; c != NULL; c = c->next_sibling) {
        const char *u = hwloc_obj_get_info_by_name(c, "NVIDIAUUID");

        if (c->type == HWLOC_OBJ_OS_DEVICE && u != NULL) {
            snprintf(buf, len, "%s", u);
            return;
        }
    }
}

static td_status_t
find_devices(td_topology_t *t)
{
    hwloc_obj_t obj;
    int n_gpus = 0, n_of = 0, n_net = 0;
    bool want_of;

    for (obj = NULL; (obj = hwloc_get_next_pcidev(t->topo, obj)) != NULL;) {
        n_gpus += is_nvidia_gpu(obj);
    }
    for (obj = NULL; (obj = hwloc_get_next_osdev(t->topo, obj)) != NULL;) {
        if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
            n_of++;
        } else if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
                   obj->parent != NULL &&
                   obj->parent->type == HWLOC_OBJ_PCI_DEVICE) {
            n_net++;
        }
    }
    /* RDMA devices when there are any; plain PCI interfaces otherwise. */
    want_of = n_of > 0;

    t->gpus = calloc(n_gpus > 0 ? n_gpus : 1, sizeof(*t->gpus));
    t->nics = calloc((want_of ? n_of : n_net) + 1, sizeof(*t->nics));
    if (t->gpus == NULL || t->nics == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "topology: out of memory");
    }
    for (obj = NULL; (obj = hwloc_get_next_pcidev(t->topo, obj)) != NULL;) {
        if (is_nvidia_gpu(obj)) {
            gpu_t *g = &t->gpus[t->n_gpus++];

            g->obj = obj;
            busid_format(obj, g->busid);
            gpu_uuid(obj, g->uuid, sizeof(g->uuid));
        }
    }
    qsort(t->gpus, t->n_gpus, sizeof(*t->gpus), gpu_cmp);

    for (obj = NULL; (obj = hwloc_get_next_osdev(t->topo, obj)) != NULL;) {
        bool of = obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
        bool net = obj->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
                   obj->parent != NULL &&
                   obj->parent->type == HWLOC_OBJ_PCI_DEVICE;
        nic_t *n;

        if (obj->name == NULL || obj->parent == NULL ||
            (want_of ? !of : !net)) {
            continue;
        }
        n = &t->nics[t->n_nics++];
        n->osdev = obj;
        n->dev = obj->parent;
        n->openfabrics = of;
        if (n->dev->type == HWLOC_OBJ_PCI_DEVICE) {
            busid_format(n->dev, n->busid);
        }
    }
    qsort(t->nics, t->n_nics, sizeof(*t->nics), nic_cmp);
    return TD_OK;
}

td_status_t
td_topology_load(const char *path, td_topology_t **topo_p)
{
    td_topology_t *t;
    td_status_t status;

    if (path == NULL) {
        path = getenv("HWLOC_XMLFILE");
        if (path != NULL && path[0] == '\0') {
            path = NULL;
        }
    }
    /* hwloc's own message for a missing file is vague; check first. */
    if (path != NULL && access(path, R_OK) != 0) {
        return td_error(TD_ERR_IO, "topology: cannot read '%s': %s", path,
                        strerror(errno));
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "topology: out of memory");
    }
    if (hwloc_topology_init(&t->topo) != 0) {
        status = td_error(TD_ERR_NO_MEMORY, "topology: hwloc_topology_init "
                          "failed: %s", strerror(errno));
        goto err_free;
    }
    /* Without this filter hwloc drops PCI devices; with disallowed PUs kept
     * we can tell a GPU outside the allowed set from one without CPUs. */
    hwloc_topology_set_io_types_filter(t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_set_flags(t->topo,
                                 HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0) {
        status = td_error(TD_ERR_UNSUPPORTED, "topology: hwloc refuses "
                          "INCLUDE_DISALLOWED: %s", strerror(errno));
        goto err_destroy;
    }
    /* GPUs are found as PCI devices, which Linux's sysfs gives hwloc's
     * linux backend: the libpciaccess, OpenCL and GL backends add nothing
     * but start-up time (and leak on this system). */
    hwloc_topology_set_components(t->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  "pci");
    hwloc_topology_set_components(t->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  "opencl");
    hwloc_topology_set_components(t->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  "gl");
    if (path != NULL) {
        if (hwloc_topology_set_xml(t->topo, path) != 0) {
            status = td_error(TD_ERR_INVALID, "topology: '%s' cannot be used "
                              "as hwloc XML: %s", path, strerror(errno));
            goto err_destroy;
        }
        snprintf(t->source, sizeof(t->source), "%s", path);
    } else {
        snprintf(t->source, sizeof(t->source), "this machine");
    }
    if (hwloc_topology_load(t->topo) != 0) {
        /* With libxml2 (libhwloc-plugins) hwloc rejects bad XML in set_xml;
         * its built-in parser only notices in load: one message either way. */
        if (path != NULL) {
            status = td_error(TD_ERR_INVALID, "topology: '%s' cannot be used "
                              "as hwloc XML: %s", path, strerror(errno));
        } else {
            status = td_error(TD_ERR_INVALID, "topology: hwloc cannot load "
                              "this machine's topology: %s", strerror(errno));
        }
        goto err_destroy;
    }
    status = find_devices(t);
    if (status != TD_OK) {
        goto err_devices;
    }
    *topo_p = t;
    return TD_OK;

err_devices:
    free(t->gpus);
    free(t->nics);
err_destroy:
    hwloc_topology_destroy(t->topo);
err_free:
    free(t);
    return status;
}

void
td_topology_destroy(td_topology_t *topo)
{
    if (topo == NULL) {
        return;
    }
    free(topo->gpus);
    free(topo->nics);
    hwloc_topology_destroy(topo->topo);
    free(topo);
}

bool
td_topology_is_thissystem(const td_topology_t *topo)
{
    return hwloc_topology_is_thissystem(topo->topo) != 0;
}

int
td_topology_gpu_count(const td_topology_t *topo)
{
    return topo->n_gpus;
}

static td_status_t
list_format(hwloc_const_bitmap_t set, char *buf, size_t len, const char *what)
{
    int n = hwloc_bitmap_list_snprintf(buf, len, set);

    if (n < 0) {
        return td_error(TD_ERR_NO_MEMORY, "topology: cannot format %s", what);
    }
    if ((size_t)n >= len) {
        return td_error(TD_ERR_RANGE, "topology: CPU list of %s is longer "
                        "than %zu characters", what, len - 1);
    }
    return TD_OK;
}

/* The NUMA node of a locality object: its only node, else the first one
 * whose CPUs meet CPUS (NULL: the first one). */
static int
locality_numa(const td_topology_t *t, hwloc_obj_t loc, hwloc_const_cpuset_t cpus)
{
    hwloc_obj_t node = NULL;
    int first = -1;

    if (loc->nodeset == NULL || hwloc_bitmap_iszero(loc->nodeset)) {
        return -1;
    }
    if (hwloc_bitmap_weight(loc->nodeset) == 1) {
        return hwloc_bitmap_first(loc->nodeset);
    }
    while ((node = hwloc_get_next_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE,
                                              node)) != NULL) {
        if (!hwloc_bitmap_isset(loc->nodeset, node->os_index)) {
            continue;
        }
        if (first < 0) {
            first = (int)node->os_index;
        }
        if (cpus != NULL && hwloc_bitmap_intersects(node->cpuset, cpus)) {
            return (int)node->os_index;
        }
    }
    return first;
}

td_status_t
td_topology_gpu(const td_topology_t *topo, int index, td_gpu_info_t *info_p)
{
    td_gpu_info_t info;
    hwloc_obj_t loc;
    td_status_t status;

    if (index < 0 || index >= topo->n_gpus) {
        return td_error(TD_ERR_RANGE, "topology: GPU index %d is not below "
                        "the %d GPUs", index, topo->n_gpus);
    }
    memset(&info, 0, sizeof(info));
    snprintf(info.busid, sizeof(info.busid), "%s", topo->gpus[index].busid);
    snprintf(info.uuid, sizeof(info.uuid), "%s", topo->gpus[index].uuid);
    loc = hwloc_get_non_io_ancestor_obj(topo->topo, topo->gpus[index].obj);
    status = list_format(loc->cpuset, info.cpus, sizeof(info.cpus), "a GPU");
    if (status != TD_OK) {
        return status;
    }
    info.numa = locality_numa(topo, loc, NULL);
    *info_p = info;
    return TD_OK;
}

td_status_t
td_topology_allowed_cpus(const td_topology_t *topo, char *buf, size_t len)
{
    return list_format(hwloc_topology_get_allowed_cpuset(topo->topo), buf, len,
                       "the allowed set");
}

td_status_t
td_placement_policy_parse(const char *name, td_placement_policy_t *policy_p)
{
    if (name != NULL && strcmp(name, "closest") == 0) {
        *policy_p = TD_PLACEMENT_CLOSEST;
    } else if (name != NULL && strcmp(name, "none") == 0) {
        *policy_p = TD_PLACEMENT_NONE;
    } else {
        return td_error(TD_ERR_INVALID, "placement: policy '%s' is not "
                        "closest or none", name ? name : "(null)");
    }
    return TD_OK;
}

/* ---- planning ----------------------------------------------------------- */

/* Tree steps between two objects: up from A and from B to their first
 * common ancestor. hwloc_get_common_ancestor_obj() crashes on I/O objects in
 * hwloc 2.9, so walk ->parent ourselves. */
static int
tree_hops(hwloc_obj_t a, hwloc_obj_t b)
{
    int da = 0;

    for (hwloc_obj_t x = a; x != NULL; x = x->parent, da++) {
        int db = 0;

        for (hwloc_obj_t y = b; y != NULL; y = y->parent, db++) {
            if (x == y) {
                return da + db;
            }
        }
    }
    return -1;
}

/* The usable GPUs: indexes into topo->gpus in bus-id order, and the CUDA
 * ordinal of each (its position in CUDA_VISIBLE_DEVICES). */
static td_status_t
usable_gpus(const td_topology_t *t, const char *cvd, int *idx, int *ordinal,
            int *n_p)
{
    char *copy, *tok, *save = NULL;
    int n = 0, pos = 0;
    td_status_t status = TD_OK;

    if (cvd == NULL) {
        for (int i = 0; i < t->n_gpus; i++) {
            idx[i] = i;
            ordinal[i] = i;
        }
        *n_p = t->n_gpus;
        return TD_OK;
    }
    copy = strdup(cvd);
    if (copy == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
    }
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save), pos++) {
        int g = -1;

        while (*tok == ' ') {
            tok++;
        }
        if (strncmp(tok, "GPU-", 4) == 0) {
            for (int i = 0; i < t->n_gpus; i++) {
                /* CUDA accepts a unique prefix of the UUID. */
                if (t->gpus[i].uuid[0] != '\0' &&
                    strncmp(t->gpus[i].uuid, tok, strlen(tok)) == 0) {
                    if (g >= 0) {
                        status = td_error(TD_ERR_INVALID, "placement: "
                                          "CUDA_VISIBLE_DEVICES=%s: '%s' "
                                          "matches more than one GPU", cvd, tok);
                        goto out;
                    }
                    g = i;
                }
            }
            if (g < 0) {
                status = td_error(TD_ERR_NOT_FOUND, "placement: "
                                  "CUDA_VISIBLE_DEVICES=%s: no GPU has UUID "
                                  "'%s' in this topology", cvd, tok);
                goto out;
            }
        } else {
            char *end;
            long v;

            errno = 0;
            v = strtol(tok, &end, 10);
            if (end == tok || *end != '\0' || errno != 0 || v < 0) {
                status = td_error(TD_ERR_INVALID, "placement: "
                                  "CUDA_VISIBLE_DEVICES=%s: '%s' is neither "
                                  "a GPU index nor a GPU-... UUID", cvd, tok);
                goto out;
            }
            if (v >= t->n_gpus) {
                status = td_error(TD_ERR_RANGE, "placement: "
                                  "CUDA_VISIBLE_DEVICES=%s: index %ld but this "
                                  "node has %d GPUs", cvd, v, t->n_gpus);
                goto out;
            }
            g = (int)v;
        }
        for (int i = 0; i < n; i++) {
            if (idx[i] == g) {
                status = td_error(TD_ERR_INVALID, "placement: "
                                  "CUDA_VISIBLE_DEVICES=%s names GPU %s twice",
                                  cvd, t->gpus[g].busid);
                goto out;
            }
        }
        idx[n] = g;
        ordinal[n] = pos;
        n++;
    }
    /* Bus-id order: gpus[] is sorted, so sort by index. */
    for (int i = 1; i < n; i++) {
        for (int j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
            int x = idx[j], o = ordinal[j];

            idx[j] = idx[j - 1];
            ordinal[j] = ordinal[j - 1];
            idx[j - 1] = x;
            ordinal[j - 1] = o;
        }
    }
    *n_p = n;
out:
    free(copy);
    return status;
}

/* The j-th of m shares of the whole cores of DOMAIN (of k cores: cores
 * [j*k/m, (j+1)*k/m), at least one), into OUT. */
static void
core_share(const td_topology_t *t, hwloc_const_cpuset_t domain, int j, int m,
           hwloc_bitmap_t out)
{
    hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_CORE) > 0
                            ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    hwloc_obj_t core = NULL;
    int k = 0, lo, hi, i = 0;

    while ((core = hwloc_get_next_obj_by_type(t->topo, type, core)) != NULL) {
        k += hwloc_bitmap_intersects(core->cpuset, domain);
    }
    lo = (int)((long)j * k / m);
    hi = (int)((long)(j + 1) * k / m);
    if (hi <= lo) {
        hi = lo + 1;
    }
    hwloc_bitmap_zero(out);
    while ((core = hwloc_get_next_obj_by_type(t->topo, type, core)) != NULL) {
        if (!hwloc_bitmap_intersects(core->cpuset, domain)) {
            continue;
        }
        if (i >= lo && i < hi) {
            hwloc_bitmap_or(out, out, core->cpuset);
        }
        i++;
    }
    hwloc_bitmap_and(out, out, domain);
}

typedef struct {
    hwloc_bitmap_t domain;      /* locality & allowed */
    hwloc_obj_t    from;        /* GPU, or the object covering the domain */
    hwloc_obj_t    loc;         /* locality object, for the NUMA node */
    int            gpu;         /* index into topo->gpus, -1 */
    int            ordinal;
} rank_work_t;

/* Step 1 with GPUs: local rank i takes the (i mod usable)-th usable GPU;
 * its domain is the GPU's locality within the allowed CPUs. */
static td_status_t
domains_from_gpus(const td_topology_t *t, const td_placement_opts_t *opts,
                  hwloc_const_cpuset_t allowed, const int *idx,
                  const int *ordinal, int n_usable, rank_work_t *w)
{
    int N = opts->local_ranks;

    if (N > n_usable && !opts->share_gpus) {
        return td_error(TD_ERR_RANGE, "placement: %d local ranks but %d "
                        "usable GPU%s (share them round-robin with "
                        "--share-gpus or TODIST_SHARE_GPUS=1)", N,
                        n_usable, n_usable == 1 ? "" : "s");
    }
    for (int i = 0; i < N; i++) {
        int u = i % n_usable;
        const gpu_t *g = &t->gpus[idx[u]];

        w[i].gpu = idx[u];
        w[i].ordinal = ordinal[u];
        w[i].from = g->obj;
        w[i].loc = hwloc_get_non_io_ancestor_obj(t->topo, g->obj);
        hwloc_bitmap_and(w[i].domain, w[i].loc->cpuset, allowed);
        if (hwloc_bitmap_iszero(w[i].domain)) {
            char a[TD_CPULIST_MAX], l[TD_CPULIST_MAX];

            hwloc_bitmap_list_snprintf(a, sizeof(a), allowed);
            hwloc_bitmap_list_snprintf(l, sizeof(l), w[i].loc->cpuset);
            return td_error(TD_ERR_INVALID, "placement: GPU %s (local rank "
                            "%d) is local to CPUs %s, outside the allowed "
                            "CPU set %s", g->busid, i, l, a);
        }
    }
    return TD_OK;
}

/* Step 1 without GPUs: spread the ranks over the NUMA nodes that have
 * allowed CPUs (several ranks per node, or several nodes per rank). */
static td_status_t
domains_from_numa(const td_topology_t *t, int N, hwloc_const_cpuset_t allowed,
                  rank_work_t *w)
{
    hwloc_obj_t node = NULL, *nodes;
    int nn = 0;

    nodes = calloc(hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE) + 1,
                   sizeof(*nodes));
    if (nodes == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
    }
    while ((node = hwloc_get_next_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE,
                                              node)) != NULL) {
        if (hwloc_bitmap_intersects(node->cpuset, allowed)) {
            nodes[nn++] = node;
        }
    }
    for (int i = 0; i < N; i++) {
        int lo, hi;

        w[i].gpu = -1;
        w[i].ordinal = -1;
        hwloc_bitmap_zero(w[i].domain);
        if (nn == 0) {          /* no NUMA information: all of it */
            hwloc_bitmap_copy(w[i].domain, allowed);
            lo = hi = 0;
        } else if (N >= nn) {
            lo = (int)((long)i * nn / N);
            hi = lo + 1;
        } else {
            lo = (int)((long)i * nn / N);
            hi = (int)((long)(i + 1) * nn / N);
        }
        for (int k = lo; k < hi; k++) {
            hwloc_bitmap_or(w[i].domain, w[i].domain, nodes[k]->cpuset);
        }
        hwloc_bitmap_and(w[i].domain, w[i].domain, allowed);
        w[i].from = hwloc_get_obj_covering_cpuset(t->topo, w[i].domain);
        w[i].loc = hi - lo == 1 ? nodes[lo] : NULL;
    }
    free(nodes);
    return TD_OK;
}

/* Step 2: rank I's CPUs (its share of the cores of its domain, among the
 * ranks with the same domain in bus-id order, so ranks sharing a GPU get
 * neighbouring cores) and NUMA node. CPUS is scratch. */
static td_status_t
place_cpus(const td_topology_t *t, const rank_work_t *w, int N, int i,
           hwloc_bitmap_t cpus, td_rank_place_t *p)
{
    int j = 0, m = 0;
    td_status_t status;

    for (int k = 0; k < N; k++) {
        if (hwloc_bitmap_isequal(w[k].domain, w[i].domain)) {
            j += w[k].gpu < w[i].gpu || (w[k].gpu == w[i].gpu && k < i);
            m++;
        }
    }
    core_share(t, w[i].domain, j, m, cpus);
    status = list_format(cpus, p->cpus, sizeof(p->cpus), "a local rank");
    if (status != TD_OK) {
        return status;
    }
    if (w[i].loc == NULL) {
        p->numa = -1;
    } else if (w[i].loc->type == HWLOC_OBJ_NUMANODE) {
        p->numa = (int)w[i].loc->os_index;
    } else {
        p->numa = locality_numa(t, w[i].loc, cpus);
    }
    return TD_OK;
}

/* Step 3: the NIC nearest to the rank's GPU (or domain) by tree hops;
 * among equals the least used so far (round-robin over NIC_USE). */
static void
place_nic(const td_topology_t *t, const rank_work_t *wi, int *nic_use,
          td_rank_place_t *p)
{
    int best = -1, best_hops = -1;

    for (int n = 0; n < t->n_nics && wi->from != NULL; n++) {
        int h = tree_hops(wi->from, t->nics[n].dev);

        if (h < 0) {
            continue;
        }
        if (best < 0 || h < best_hops ||
            (h == best_hops && nic_use[n] < nic_use[best])) {
            best = n;
            best_hops = h;
        }
    }
    p->nic_hops = -1;
    if (best >= 0) {
        nic_use[best]++;
        snprintf(p->nic, sizeof(p->nic), "%s", t->nics[best].osdev->name);
        p->nic_openfabrics = t->nics[best].openfabrics;
        p->nic_hops = best_hops;
    }
}

/* Plan every local rank: a locality domain each (step 1), then CPUs and
 * NUMA node (step 2) and NIC (step 3) per rank. */
static td_status_t
plan_ranks(const td_topology_t *t, const td_placement_opts_t *opts,
           hwloc_const_cpuset_t allowed, rank_work_t *w, td_rank_place_t *r)
{
    int N = opts->local_ranks;
    int *idx = NULL, *ordinal = NULL, n_usable = 0, *nic_use = NULL;
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    td_status_t status;

    idx = calloc(t->n_gpus + 1, sizeof(*idx));
    ordinal = calloc(t->n_gpus + 1, sizeof(*ordinal));
    nic_use = calloc(t->n_nics + 1, sizeof(*nic_use));
    if (idx == NULL || ordinal == NULL || nic_use == NULL || cpus == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
        goto out;
    }
    status = usable_gpus(t, opts->cuda_visible_devices, idx, ordinal, &n_usable);
    if (status != TD_OK) {
        goto out;
    }
    status = n_usable > 0
             ? domains_from_gpus(t, opts, allowed, idx, ordinal, n_usable, w)
             : domains_from_numa(t, N, allowed, w);
    if (status != TD_OK) {
        goto out;
    }
    for (int i = 0; i < N; i++) {
        td_rank_place_t *p = &r[i];

        memset(p, 0, sizeof(*p));
        p->local_rank = i;
        p->gpu_index = w[i].gpu;
        p->cuda_ordinal = w[i].ordinal;
        if (w[i].gpu >= 0) {
            snprintf(p->gpu, sizeof(p->gpu), "%s", t->gpus[w[i].gpu].busid);
        }
        status = place_cpus(t, w, N, i, cpus, p);
        if (status != TD_OK) {
            goto out;
        }
        place_nic(t, &w[i], nic_use, p);
    }
    status = TD_OK;
out:
    hwloc_bitmap_free(cpus);
    free(nic_use);
    free(ordinal);
    free(idx);
    return status;
}

td_status_t
td_placement_plan(const td_topology_t *topo, const td_placement_opts_t *opts,
                  td_placement_t *plan_p)
{
    int N = opts->local_ranks;
    hwloc_bitmap_t allowed;
    rank_work_t *w = NULL;
    td_rank_place_t *r = NULL;
    td_status_t status;

    if (N < 1) {
        return td_error(TD_ERR_INVALID, "placement: %d local ranks; need at "
                        "least 1", N);
    }
    if (N > 4096) {
        return td_error(TD_ERR_RANGE, "placement: %d local ranks is more "
                        "than 4096", N);
    }
    allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo->topo));
    if (allowed == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
    }
    if (opts->allowed_cpus != NULL) {
        hwloc_bitmap_t given = hwloc_bitmap_alloc();

        if (given == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
            goto err_allowed;
        }
        /* hwloc's parser stops quietly at junk: check the characters. */
        if (opts->allowed_cpus[strspn(opts->allowed_cpus, "0123456789,-")] != '\0' ||
            hwloc_bitmap_list_sscanf(given, opts->allowed_cpus) != 0 ||
            hwloc_bitmap_isfull(given) || hwloc_bitmap_last(given) < 0) {
            hwloc_bitmap_free(given);
            status = td_error(TD_ERR_INVALID, "placement: allowed CPU list "
                              "'%s' is not a list like 0-5,48-53",
                              opts->allowed_cpus);
            goto err_allowed;
        }
        hwloc_bitmap_and(allowed, allowed, given);
        hwloc_bitmap_free(given);
    }
    hwloc_bitmap_and(allowed, allowed,
                     hwloc_topology_get_complete_cpuset(topo->topo));
    if (hwloc_bitmap_iszero(allowed)) {
        status = td_error(TD_ERR_INVALID, "placement: the allowed CPU set is "
                          "empty%s%s%s", opts->allowed_cpus ? " (given '" : "",
                          opts->allowed_cpus ? opts->allowed_cpus : "",
                          opts->allowed_cpus ? "')" : "");
        goto err_allowed;
    }

    r = calloc(N, sizeof(*r));
    w = calloc(N, sizeof(*w));
    if (r == NULL || w == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
        goto err_arrays;
    }
    for (int i = 0; i < N; i++) {
        w[i].domain = hwloc_bitmap_alloc();
        if (w[i].domain == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
            goto err_work;
        }
    }

    if (opts->policy == TD_PLACEMENT_NONE) {
        for (int i = 0; i < N; i++) {
            r[i].local_rank = i;
            r[i].gpu_index = r[i].cuda_ordinal = -1;
            r[i].numa = r[i].nic_hops = -1;
            status = list_format(allowed, r[i].cpus, sizeof(r[i].cpus),
                                 "the allowed set");
            if (status != TD_OK) {
                goto err_work;
            }
        }
    } else if (opts->policy == TD_PLACEMENT_CLOSEST) {
        status = plan_ranks(topo, opts, allowed, w, r);
        if (status != TD_OK) {
            goto err_work;
        }
    } else {
        status = td_error(TD_ERR_INVALID, "placement: unknown policy %d",
                          (int)opts->policy);
        goto err_work;
    }

    for (int i = 0; i < N; i++) {
        hwloc_bitmap_free(w[i].domain);
    }
    free(w);
    hwloc_bitmap_free(allowed);
    plan_p->n = N;
    plan_p->ranks = r;
    return TD_OK;

err_work:
    for (int i = 0; i < N; i++) {
        hwloc_bitmap_free(w[i].domain);
    }
err_arrays:
    free(w);
    free(r);
err_allowed:
    hwloc_bitmap_free(allowed);
    return status;
}

void
td_placement_free(td_placement_t *plan)
{
    if (plan != NULL) {
        free(plan->ranks);
        plan->ranks = NULL;
        plan->n = 0;
    }
}

/* ---- applying ----------------------------------------------------------- */

int
td_placement_vars(const td_rank_place_t *place, td_env_lookup_fn lookup,
                  void *arg, td_place_var_t vars[TD_PLACE_VARS_MAX])
{
    int n = 0;

    /* A user's CUDA_VISIBLE_DEVICES stays: the rank then uses cuda_ordinal. */
    if (place->gpu_index >= 0 && lookup("CUDA_VISIBLE_DEVICES", arg) == NULL) {
        if (lookup("CUDA_DEVICE_ORDER", arg) == NULL) {
            vars[n].name = "CUDA_DEVICE_ORDER";
            snprintf(vars[n].value, sizeof(vars[n].value), "PCI_BUS_ID");
            n++;
        }
        vars[n].name = "CUDA_VISIBLE_DEVICES";
        snprintf(vars[n].value, sizeof(vars[n].value), "%d", place->gpu_index);
        n++;
    }
    /* Only an RDMA device: pinning UCX to one Ethernet interface would also
     * take loopback away from its TCP transport. */
    if (place->nic[0] != '\0' && place->nic_openfabrics &&
        lookup("UCX_NET_DEVICES", arg) == NULL) {
        vars[n].name = "UCX_NET_DEVICES";
        snprintf(vars[n].value, sizeof(vars[n].value), "%s:1", place->nic);
        n++;
    }
    return n;
}

static const char *
getenv_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

td_status_t
td_placement_apply(const td_topology_t *topo, const td_rank_place_t *place,
                   td_place_report_t *report_p)
{
    td_place_report_t rep;
    hwloc_bitmap_t cpus;
    td_status_t status = TD_OK;

    memset(&rep, 0, sizeof(rep));
    rep.place = *place;
    if (!td_topology_is_thissystem(topo)) {
        snprintf(rep.note, sizeof(rep.note), "topology %s is not this "
                 "machine's: nothing was bound", topo->source);
        goto out;
    }
    cpus = hwloc_bitmap_alloc();
    if (cpus == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "placement: out of memory");
    }
    if (place->cpus[0] != '\0') {
        if (hwloc_bitmap_list_sscanf(cpus, place->cpus) != 0 ||
            hwloc_bitmap_iszero(cpus)) {
            status = td_error(TD_ERR_INVALID, "placement: local rank %d: CPU "
                              "list '%s' is not valid", place->local_rank,
                              place->cpus);
            goto out_free;
        }
        if (hwloc_set_cpubind(topo->topo, cpus, HWLOC_CPUBIND_PROCESS) != 0) {
            status = td_error(TD_ERR_IO, "placement: local rank %d: binding "
                              "to CPUs %s failed: %s", place->local_rank,
                              place->cpus, strerror(errno));
            goto out_free;
        }
        rep.cpus_bound = true;
    }
    if (place->numa >= 0) {
        hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo->topo,
                                                              place->numa);

        /* Linux has no process-wide memory policy: without PROCESS/THREAD
         * hwloc sets the calling thread's, which threads created later
         * inherit (td_init runs before the program starts its own).
         * Containers often forbid set_mempolicy: report, do not fail. */
        if (node == NULL ||
            hwloc_set_membind(topo->topo, node->nodeset, HWLOC_MEMBIND_BIND,
                              HWLOC_MEMBIND_BYNODESET) != 0) {
            snprintf(rep.note, sizeof(rep.note), "memory not bound to NUMA "
                     "node %d: %s", place->numa,
                     node == NULL ? "no such node" : strerror(errno));
        } else {
            rep.mem_bound = true;
        }
    }
    rep.n_vars = td_placement_vars(place, getenv_lookup, NULL, rep.vars);
    for (int i = 0; i < rep.n_vars; i++) {
        if (setenv(rep.vars[i].name, rep.vars[i].value, 1) != 0) {
            status = td_error(TD_ERR_IO, "placement: setenv %s failed: %s",
                              rep.vars[i].name, strerror(errno));
            goto out_free;
        }
    }
    rep.applied = true;
out_free:
    hwloc_bitmap_free(cpus);
    if (status != TD_OK) {
        return status;
    }
out:
    if (report_p != NULL) {
        *report_p = rep;
    }
    return TD_OK;
}

/* Entries in a CUDA_VISIBLE_DEVICES list. */
static int
visible_count(const char *cvd)
{
    int n = 1;

    for (; *cvd; cvd++) {
        n += *cvd == ',';
    }
    return n;
}

td_status_t
td_placement_for_rank(const td_topology_t *topo, const td_world_t *world,
                      td_rank_place_t *place_p)
{
    const char *share = getenv("TODIST_SHARE_GPUS");
    td_placement_opts_t opts;
    td_placement_t plan;
    td_status_t status;

    if (share != NULL && share[0] != '\0' && strcmp(share, "0") != 0 &&
        strcmp(share, "1") != 0) {
        return td_error(TD_ERR_INVALID, "placement: TODIST_SHARE_GPUS=%s is "
                        "not 0 or 1", share);
    }
    if (world->local_rank < 0 || world->local_rank >= world->local_world_size) {
        return td_error(TD_ERR_RANGE, "placement: local rank %d is not below "
                        "the local world size %d", world->local_rank,
                        world->local_world_size);
    }
    memset(&opts, 0, sizeof(opts));
    opts.local_ranks = world->local_world_size;
    opts.policy = TD_PLACEMENT_CLOSEST;
    opts.share_gpus = share != NULL && strcmp(share, "1") == 0;
    opts.cuda_visible_devices = getenv("CUDA_VISIBLE_DEVICES");

    /* Fewer visible GPUs than local ranks: the launcher (Slurm's
     * --gpu-bind, say) already gave each task its own GPU, and the other
     * ranks see others. Plan this rank alone on what it sees. */
    if (opts.cuda_visible_devices != NULL && !opts.share_gpus &&
        opts.cuda_visible_devices[0] != '\0' &&
        visible_count(opts.cuda_visible_devices) < opts.local_ranks) {
        opts.local_ranks = 1;
    }
    status = td_placement_plan(topo, &opts, &plan);
    if (status != TD_OK) {
        return status;
    }
    *place_p = plan.ranks[opts.local_ranks == 1 ? 0 : world->local_rank];
    place_p->local_rank = world->local_rank;
    td_placement_free(&plan);
    return TD_OK;
}

td_status_t
td_placement_apply_env(const td_world_t *world, td_place_report_t *report_p)
{
    const char *bind = getenv("TODIST_BIND");
    td_rank_place_t place;
    td_topology_t *topo;
    td_status_t status;

    if (bind == NULL || bind[0] == '\0' || strcmp(bind, "none") == 0) {
        if (report_p != NULL) {
            memset(report_p, 0, sizeof(*report_p));
            snprintf(report_p->note, sizeof(report_p->note),
                     "TODIST_BIND is not closest: nothing was bound");
        }
        return TD_OK;
    }
    if (strcmp(bind, "closest") != 0) {
        return td_error(TD_ERR_INVALID, "placement: TODIST_BIND=%s is not "
                        "closest or none", bind);
    }
    status = td_topology_load(NULL, &topo);
    if (status != TD_OK) {
        return status;
    }
    status = td_placement_for_rank(topo, world, &place);
    if (status == TD_OK) {
        status = td_placement_apply(topo, &place, report_p);
    }
    td_topology_destroy(topo);
    return status;
}
