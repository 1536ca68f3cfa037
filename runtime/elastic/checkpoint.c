/* runtime/elastic/checkpoint.c: training checkpoints (todist/checkpoint.h)
 * as one safetensors file. Every item becomes one named tensor; scalars
 * and small states are int64 / uint8 tensors made at save time. A load
 * reads every entry into scratch tensors first and checks them all, so a
 * rejected file changes nothing; only then are the values copied in.
 *
 * Invariants:
 *   CK1  A save is exactly one td_safetensors_save_meta call: the file on
 *        disk is the old checkpoint or the whole new one.
 *   CK2  A load changes no listed object unless every entry was read,
 *        has its dtype and shape, and passed its check (sampler, DDP
 *        order, step counts); the copies then cannot fail but for DDP's
 *        bucket rebuild (out of memory), which comes after the rest (a
 *        failure there is reported; the rest is then loaded).
 *   CK3  Entry names are unique within an object ("__metadata__" holds
 *        "format" = CK_FORMAT, which a load requires).
 *   CK4  A sampler saved at world size W and loaded at W' (re-sharding
 *        allowed) resumes at position ceil(pos * W / W'), at most the
 *        new epoch length: the W ranks had consumed the first pos * W
 *        entries of the epoch's order (DDP steps in lockstep), so no
 *        entry is seen twice and fewer than W' units are skipped
 *        (td_distributed_sampler_position_at).
 *   CK5  A broadcast (td_checkpoint_broadcast) sends every item from the
 *        root: the small entries first, one td_broadcast each (in the
 *        list's order), which the others check as a load does before any
 *        tensor is written; then the tensors, in list order along a
 *        pipelined chain of point-to-point messages (heal.h H1-H5),
 *        straight into the others' tensors (a heal moves the model once,
 *        no scratch; a rank that refused an entry takes part into scratch
 *        and changes nothing);
 *        then the small entries are copied in. A failure after the checks leaves the
 *        tensors part-written (todist/elastic.h's EL6 keeps such a rank
 *        from being a heal source). The root changes nothing.
 *   CK6  ZeRO items (td_checkpoint_add_zero) are not in PATH: their shards
 *        go to per-rank files (ckzero.h ZC1-ZC3) and PATH's metadata
 *        names the set (zero_save_id, zero_world_size). A load reads and
 *        checks every shard it needs into scratch with the other entries
 *        (CK2), and copies them in after the tensors (the shard's copy of
 *        the parameters is re-taken from the loaded ones, zero.h Z4). A
 *        broadcast skips them: a shard exists on its owner (and its
 *        replica keeper) only; td_zero_set_group re-shards them over the
 *        new group (zero.h R4). */
#include "config.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/ddp/ddp_internal.h"
#include "runtime/elastic/ckzero.h"
#include "runtime/elastic/heal.h"
#include <todist/checkpoint.h>
#include <todist/coll.h>
#include <todist/safetensors.h>

#define CK_FORMAT "todist.checkpoint.v1"
#define CK_ZERO_ID "zero_save_id"
#define CK_ZERO_W  "zero_world_size"

enum { IT_TENSOR, IT_INT64, IT_BYTES, IT_OPT_STEP, IT_OPT_LR, IT_DDP,
       IT_SAMPLER, IT_ZERO };
enum { SAMPLER_FIELDS = 7 };

typedef struct {
    int          kind;
    char        *name;
    td_tensor_t *t;          /* IT_TENSOR (retained) */
    void        *p;          /* IT_INT64, IT_BYTES: caller's memory; else
                                the optimizer, DDP object, sampler or
                                ZeRO optimizer (IT_ZERO: not in PATH) */
    int64_t     *pos;        /* IT_SAMPLER: caller's position */
    int64_t      n;          /* elements (IT_INT64, IT_BYTES, IT_DDP) */
    int          index;      /* IT_OPT_STEP: the parameter */
} item_t;

struct td_checkpoint {
    item_t *items;
    int     n, cap;
    char  **meta;            /* key, value, ... */
    int     nmeta;
    int     reshard;         /* a sampler may come from another world size */
};

td_status_t
td_checkpoint_create(td_checkpoint_t **out)
{
    td_checkpoint_t *ck = calloc(1, sizeof(*ck));

    if (ck == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    *out = ck;
    return TD_OK;
}

void
td_checkpoint_free(td_checkpoint_t *ck)
{
    if (ck == NULL) {
        return;
    }
    for (int i = 0; i < ck->n; i++) {
        td_tensor_release(ck->items[i].t);
        free(ck->items[i].name);
    }
    for (int i = 0; i < 2 * ck->nmeta; i++) {
        free(ck->meta[i]);
    }
    free(ck->meta);
    free(ck->items);
    free(ck);
}

/* Append an item of KIND named NAME (copied, unique); *OUT points at it. */
static td_status_t
item_add(td_checkpoint_t *ck, int kind, const char *name, item_t **out)
{
    if (name == NULL || name[0] == '\0') {
        return td_error(TD_ERR_INVALID, "checkpoint: empty entry name");
    }
    for (int i = 0; i < ck->n; i++) {
        if (strcmp(ck->items[i].name, name) == 0) {
            return td_error(TD_ERR_EXISTS, "checkpoint: entry '%s' added "
                            "twice", name);
        }
    }
    if (ck->n == ck->cap) {
        int cap = ck->cap ? 2 * ck->cap : 16;
        item_t *ni = realloc(ck->items, (size_t)cap * sizeof(*ni));
        if (ni == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
        }
        ck->items = ni;
        ck->cap = cap;
    }
    item_t *it = &ck->items[ck->n];
    memset(it, 0, sizeof(*it));
    it->kind = kind;
    it->name = strdup(name);
    if (it->name == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    ck->n++;
    *out = it;
    return TD_OK;
}

td_status_t
td_checkpoint_add_tensor(td_checkpoint_t *ck, const char *name,
                         td_tensor_t *t)
{
    item_t *it;
    td_status_t status;

    if (t == NULL || !td_tensor_is_contiguous(t) ||
        td_tensor_device(t).type != TD_DEVICE_CPU) {
        return td_error(TD_ERR_INVALID, "checkpoint: tensor '%s' must be a "
                        "contiguous CPU tensor", name ? name : "");
    }
    status = item_add(ck, IT_TENSOR, name, &it);
    if (status == TD_OK) {
        it->t = td_tensor_retain(t);
    }
    return status;
}

td_status_t
td_checkpoint_add_tensors(td_checkpoint_t *ck, const char *prefix,
                          td_tensor_t *const *t, int n)
{
    char name[256];

    for (int i = 0; i < n; i++) {
        td_status_t status;
        snprintf(name, sizeof(name), "%s.%d", prefix, i);
        status = td_checkpoint_add_tensor(ck, name, t[i]);
        if (status != TD_OK) {
            return status;
        }
    }
    return TD_OK;
}

td_status_t
td_checkpoint_add_optim(td_checkpoint_t *ck, const char *prefix,
                        td_optim_t *opt)
{
    char name[256];
    item_t *it;
    td_status_t status;

    for (int i = 0; i < td_optim_num_params(opt); i++) {
        snprintf(name, sizeof(name), "%s.%d.step", prefix, i);
        status = item_add(ck, IT_OPT_STEP, name, &it);
        if (status != TD_OK) {
            return status;
        }
        it->p = opt;
        it->index = i;
        it->n = 1;
        for (int b = 0; b < td_optim_num_buffers(opt); b++) {
            td_tensor_t *buf;
            status = td_optim_buffer(opt, i, b, &buf);
            if (status != TD_OK) {
                return status;
            }
            snprintf(name, sizeof(name), "%s.%d.buf.%d", prefix, i, b);
            status = td_checkpoint_add_tensor(ck, name, buf);
            if (status != TD_OK) {
                return status;
            }
        }
    }
    snprintf(name, sizeof(name), "%s.lr", prefix);
    status = item_add(ck, IT_OPT_LR, name, &it);
    if (status == TD_OK) {
        it->p = opt;
        it->n = 1;
    }
    return status;
}

td_status_t
td_checkpoint_add_ddp(td_checkpoint_t *ck, const char *prefix, td_ddp_t *ddp)
{
    char name[256];
    item_t *it;
    td_status_t status;

    snprintf(name, sizeof(name), "%s.bucket_order", prefix);
    status = item_add(ck, IT_DDP, name, &it);
    if (status == TD_OK) {
        it->p = ddp;
        it->n = 1 + td_ddp_num_params(ddp);
    }
    return status;
}

td_status_t
td_checkpoint_add_sampler(td_checkpoint_t *ck, const char *prefix,
                          td_distributed_sampler_t *s, int64_t *position)
{
    char name[256];
    item_t *it;
    td_status_t status;

    if (s == NULL || position == NULL) {
        return td_error(TD_ERR_INVALID, "checkpoint: sampler '%s' needs the "
                        "sampler and a position", prefix);
    }
    snprintf(name, sizeof(name), "%s.state", prefix);
    status = item_add(ck, IT_SAMPLER, name, &it);
    if (status == TD_OK) {
        it->p = s;
        it->pos = position;
        it->n = SAMPLER_FIELDS;
    }
    return status;
}

td_status_t
td_checkpoint_add_zero(td_checkpoint_t *ck, const char *prefix,
                       td_zero_t *zero)
{
    item_t *it;
    td_status_t status;

    if (zero == NULL) {
        return td_error(TD_ERR_INVALID, "checkpoint: ZeRO optimizer '%s' is "
                        "NULL", prefix ? prefix : "");
    }
    for (int i = 0; i < ck->n; i++) {
        if (ck->items[i].kind == IT_ZERO &&
            td__zero_group(ck->items[i].p) != td__zero_group(zero)) {
            return td_error(TD_ERR_INVALID, "checkpoint: ZeRO optimizer '%s' "
                            "is sharded over another group than '%s' (one "
                            "group per checkpoint)", prefix ? prefix : "",
                            ck->items[i].name);
        }
    }
    status = item_add(ck, IT_ZERO, prefix, &it);
    if (status == TD_OK) {
        it->p = zero;
    }
    return status;
}

td_status_t
td_checkpoint_add_int64(td_checkpoint_t *ck, const char *name, int64_t *v,
                        int n)
{
    item_t *it;
    td_status_t status;

    if (v == NULL || n < 1) {
        return td_error(TD_ERR_INVALID, "checkpoint: '%s': %d integers",
                        name ? name : "", n);
    }
    status = item_add(ck, IT_INT64, name, &it);
    if (status == TD_OK) {
        it->p = v;
        it->n = n;
    }
    return status;
}

td_status_t
td_checkpoint_add_bytes(td_checkpoint_t *ck, const char *name, void *p,
                        size_t size)
{
    item_t *it;
    td_status_t status;

    if (p == NULL || size == 0) {
        return td_error(TD_ERR_INVALID, "checkpoint: '%s': %zu bytes",
                        name ? name : "", size);
    }
    status = item_add(ck, IT_BYTES, name, &it);
    if (status == TD_OK) {
        it->p = p;
        it->n = (int64_t)size;
    }
    return status;
}

td_status_t
td_checkpoint_set_meta(td_checkpoint_t *ck, const char *key,
                       const char *value)
{
    char **nm, *k, *v;

    if (key == NULL || value == NULL || strcmp(key, "format") == 0) {
        return td_error(TD_ERR_INVALID, "checkpoint: metadata key '%s' is "
                        "reserved or empty", key ? key : "");
    }
    for (int i = 0; i < ck->nmeta; i++) {
        if (strcmp(ck->meta[2 * i], key) == 0) {
            if ((v = strdup(value)) == NULL) {
                return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
            }
            free(ck->meta[2 * i + 1]);
            ck->meta[2 * i + 1] = v;
            return TD_OK;
        }
    }
    nm = realloc(ck->meta, (size_t)(2 * ck->nmeta + 2) * sizeof(*nm));
    if (nm == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    ck->meta = nm;
    k = strdup(key);
    v = strdup(value);
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    nm[2 * ck->nmeta] = k;
    nm[2 * ck->nmeta + 1] = v;
    ck->nmeta++;
    return TD_OK;
}

/* A scratch CPU tensor shaped for item IT (IT_TENSOR: like its tensor). */
static td_status_t
item_scratch(const item_t *it, td_tensor_t **out)
{
    int64_t n = it->n;

    switch (it->kind) {
    case IT_TENSOR:
        return td_tensor_empty(td_tensor_shape(it->t), td_tensor_ndim(it->t),
                               td_tensor_dtype(it->t), TD_CPU, out);
    case IT_BYTES:
        return td_tensor_empty(&n, 1, TD_UINT8, TD_CPU, out);
    case IT_OPT_LR:
        return td_tensor_empty(&n, 1, TD_FLOAT64, TD_CPU, out);
    default:
        return td_tensor_empty(&n, 1, TD_INT64, TD_CPU, out);
    }
}

/* Fill scratch tensor T with IT's current value. */
static void
item_get(const item_t *it, td_tensor_t *t)
{
    int64_t *v = td_tensor_data(t);
    const td_distributed_sampler_t *s = it->p;
    int rebuilt, *order;

    switch (it->kind) {
    case IT_INT64:
        memcpy(v, it->p, (size_t)it->n * sizeof(int64_t));
        break;
    case IT_BYTES:
        memcpy(v, it->p, (size_t)it->n);
        break;
    case IT_OPT_STEP:
        v[0] = td_optim_param_step(it->p, it->index);
        break;
    case IT_OPT_LR:
        *(double *)td_tensor_data(t) = td_optim_lr(it->p);
        break;
    case IT_DDP:
        /* the int order is written over the int64 slots, then widened
         * from the end so no slot is read after it is overwritten */
        order = (int *)(v + 1);
        td__ddp_bucket_order(it->p, order, &rebuilt);
        for (int64_t i = it->n - 2; i >= 0; i--) {
            v[1 + i] = order[i];
        }
        v[0] = rebuilt;
        break;
    case IT_SAMPLER:
        v[0] = s->epoch;
        v[1] = *it->pos;
        v[2] = s->dataset_len;
        v[3] = s->num_replicas;
        v[4] = s->shuffle;
        v[5] = s->drop_last;
        v[6] = (int64_t)s->seed;
        break;
    default:
        break;
    }
}

/* Scratch tensors for every item (filled with the current values when
 * FILL); released with scratch_free. */
static td_status_t
scratch_make_(td_checkpoint_t *ck, int fill, int no_tensors,
              td_tensor_t ***ts_p, const char ***names_p)
{
    td_tensor_t **ts = calloc((size_t)ck->n + 1, sizeof(*ts));
    const char **names = calloc((size_t)ck->n + 1, sizeof(*names));
    td_status_t status = TD_OK;

    if (ts == NULL || names == NULL) {
        free(ts);
        free(names);
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    for (int i = 0; i < ck->n && status == TD_OK; i++) {
        names[i] = ck->items[i].name;
        if (ck->items[i].kind == IT_ZERO) {
            continue;                                   /* CK6: not here */
        }
        if ((fill || no_tensors) && ck->items[i].kind == IT_TENSOR) {
            ts[i] = td_tensor_retain(ck->items[i].t);
            continue;
        }
        status = item_scratch(&ck->items[i], &ts[i]);
        if (status == TD_OK && fill) {
            item_get(&ck->items[i], ts[i]);
        }
    }
    *ts_p = ts;
    *names_p = names;
    return status;
}

static td_status_t
scratch_make(td_checkpoint_t *ck, int fill, td_tensor_t ***ts_p,
             const char ***names_p)
{
    return scratch_make_(ck, fill, 0, ts_p, names_p);
}

static void
scratch_free(td_checkpoint_t *ck, td_tensor_t **ts, const char **names)
{
    for (int i = 0; i < ck->n; i++) {
        td_tensor_release(ts[i]);
    }
    free(ts);
    free(names);
}

/* PATH's entries (CK6: all but the ZeRO items) of TS/NAMES into
 * CTS/CNAMES (borrowed); their count. */
static int
main_entries(const td_checkpoint_t *ck, td_tensor_t **ts, const char **names,
             td_tensor_t **cts, const char **cnames)
{
    int cn = 0;

    for (int i = 0; i < ck->n; i++) {
        if (ck->items[i].kind != IT_ZERO) {
            cts[cn] = ts[i];
            cnames[cn++] = names[i];
        }
    }
    return cn;
}

/* The ZeRO items (CK6) in *ZI (freed by the caller), their count. */
static td_status_t
zero_items(const td_checkpoint_t *ck, ckzero_item_t **zi_p, int *nz_p)
{
    ckzero_item_t *zi = calloc((size_t)ck->n + 1, sizeof(*zi));
    int nz = 0;

    if (zi == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    for (int i = 0; i < ck->n; i++) {
        if (ck->items[i].kind == IT_ZERO) {
            zi[nz].prefix = ck->items[i].name;
            zi[nz++].zero = ck->items[i].p;
        }
    }
    *zi_p = zi;
    *nz_p = nz;
    return TD_OK;
}

/* Write PATH (the replicated entries) with ZeRO save ID at world size W
 * in its metadata when W > 0. */
static td_status_t
save_main(td_checkpoint_t *ck, const char *path, uint64_t id, int w)
{
    td_tensor_t **ts, **cts;
    const char **names, **kv, **cnames;
    char idtxt[32], wtxt[32];
    int nkv = 1, cn;
    td_status_t status;

    kv = calloc((size_t)(2 * ck->nmeta + 6), sizeof(*kv));
    cts = calloc((size_t)ck->n + 1, sizeof(*cts));
    cnames = calloc((size_t)ck->n + 1, sizeof(*cnames));
    if (kv == NULL || cts == NULL || cnames == NULL) {
        free(kv);
        free(cts);
        free(cnames);
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    kv[0] = "format";
    kv[1] = CK_FORMAT;
    for (int i = 0; i < 2 * ck->nmeta; i++) {
        kv[2 + i] = ck->meta[i];
    }
    nkv += ck->nmeta;
    if (w > 0) {
        snprintf(idtxt, sizeof(idtxt), "%016" PRIx64, id);
        snprintf(wtxt, sizeof(wtxt), "%d", w);
        kv[2 * nkv] = CK_ZERO_ID;
        kv[2 * nkv + 1] = idtxt;
        kv[2 * nkv + 2] = CK_ZERO_W;
        kv[2 * nkv + 3] = wtxt;
        nkv += 2;
    }
    status = scratch_make(ck, 1, &ts, &names);
    if (status == TD_OK) {
        cn = main_entries(ck, ts, names, cts, cnames);
        status = td_safetensors_save_meta(path, cnames, cts, cn, kv, nkv);
    }
    scratch_free(ck, ts, names);
    free(kv);
    free(cts);
    free(cnames);
    return status;
}

td_status_t
td_checkpoint_save(td_checkpoint_t *ck, const char *path)
{
    ckzero_item_t *zi;
    td_group_t *g;
    uint64_t id;
    int nz;
    td_status_t status;

    if ((status = zero_items(ck, &zi, &nz)) != TD_OK) {
        return status;
    }
    if (nz == 0) {
        free(zi);
        return save_main(ck, path, 0, 0);
    }
    /* ZC1: every shard renamed in, then PATH, then the old sets removed */
    g = td__zero_group(zi[0].zero);
    status = ckzero_new_id(g, &id);
    if (status == TD_OK) {
        status = ckzero_agree(g, ckzero_save_shard(path, id, g, zi, nz),
                              "write its ZeRO shard file");
        if (status == TD_OK) {
            status = ckzero_agree(g, td_group_rank(g) == 0 ?
                                  save_main(ck, path, id, td_group_size(g)) :
                                  TD_OK, "write the replicated checkpoint");
        }
        if (status == TD_OK && td_group_rank(g) == 0) {
            ckzero_clean(path, id);
        }
    }
    free(zi);
    return status;
}

/* Check a loaded sampler state V against the sampler S. */
static td_status_t
sampler_check(const char *path, const item_t *it, const int64_t *v,
              int reshard)
{
    const td_distributed_sampler_t *s = it->p;
    static const char *what[SAMPLER_FIELDS] = {
        "epoch", "position", "dataset_len", "num_replicas", "shuffle",
        "drop_last", "seed"};
    int64_t now[SAMPLER_FIELDS] = {0, 0, s->dataset_len, s->num_replicas,
                                   s->shuffle, s->drop_last, (int64_t)s->seed};

    if (v[0] < 0 || v[1] < 0 || v[3] < 1 || v[3] > (1 << 24) ||
        v[1] > (INT64_MAX >> 25)) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s: '%s' holds epoch "
                        "%lld position %lld", path, it->name, (long long)v[0],
                        (long long)v[1]);
    }
    for (int f = 2; f < SAMPLER_FIELDS; f++) {
        if (v[f] != now[f] && !(f == 3 && reshard)) {
            return td_error(TD_ERR_INVALID, "checkpoint: %s: '%s' was saved "
                            "with %s %lld, this run's sampler has %lld%s",
                            path, it->name, what[f], (long long)v[f],
                            (long long)now[f], f == 3 ? " (resuming at "
                            "another world size needs "
                            "td_checkpoint_allow_reshard)" : "");
        }
    }
    return TD_OK;
}

/* Check the loaded bucket order V (rebuilt flag, then n indices). */
static td_status_t
ddp_check(const char *path, const item_t *it, const int64_t *v)
{
    int64_t n = it->n - 1;
    char *seen = calloc((size_t)n + 1, 1);
    td_status_t status = TD_OK;

    if (seen == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    if (v[0] != 0 && v[0] != 1) {
        status = td_error(TD_ERR_PROTOCOL, "checkpoint: %s: '%s' rebuilt "
                          "flag %lld", path, it->name, (long long)v[0]);
    }
    for (int64_t i = 0; status == TD_OK && i < n; i++) {
        if (v[1 + i] < 0 || v[1 + i] >= n || seen[v[1 + i]]++) {
            status = td_error(TD_ERR_PROTOCOL, "checkpoint: %s: '%s' is not "
                              "an order of the %lld parameters (entry %lld "
                              "is %lld)", path, it->name, (long long)n,
                              (long long)i, (long long)v[1 + i]);
        }
    }
    free(seen);
    return status;
}

/* Copy the checked scratch value T into item IT. */
static td_status_t
item_set(item_t *it, td_tensor_t *t)
{
    int64_t *v = td_tensor_data(t);
    td_status_t status = TD_OK;
    int *order;

    switch (it->kind) {
    case IT_TENSOR:
        memcpy(td_tensor_data(it->t), td_tensor_data(t), td_tensor_nbytes(t));
        break;
    case IT_INT64:
        memcpy(it->p, v, (size_t)it->n * sizeof(int64_t));
        break;
    case IT_BYTES:
        memcpy(it->p, v, (size_t)it->n);
        break;
    case IT_OPT_STEP:
        status = td_optim_set_param_step(it->p, it->index, v[0]);
        break;
    case IT_OPT_LR:
        td_optim_set_lr(it->p, *(double *)td_tensor_data(t));
        break;
    case IT_DDP:
        order = malloc((size_t)it->n * sizeof(int));
        if (order == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
        }
        for (int64_t i = 0; i < it->n - 1; i++) {
            order[i] = (int)v[1 + i];
        }
        status = td__ddp_set_bucket_order(it->p, order, (int)v[0]);
        free(order);
        break;
    case IT_SAMPLER:
        td_distributed_sampler_set_epoch(it->p, v[0]);
        *it->pos = v[1];
        if (v[3] != ((td_distributed_sampler_t *)it->p)->num_replicas) {
            *it->pos = td_distributed_sampler_position_at(it->p, v[1],
                                                             (int)v[3]);
            td_log_info("checkpoint: '%s' saved at world size %lld resumes "
                        "at %d: epoch %lld position %lld -> %lld", it->name,
                        (long long)v[3],
                        ((td_distributed_sampler_t *)it->p)->num_replicas,
                        (long long)v[0], (long long)v[1],
                        (long long)*it->pos);
        }
        break;
    default:
        break;
    }
    return status;
}

void
td_checkpoint_allow_reshard(td_checkpoint_t *ck, int allow)
{
    ck->reshard = allow != 0;
}

/* PATH's ZeRO save id and world size (CK6), for a list with ZeRO item
 * FIRST. */
static td_status_t
zero_meta(const char *path, const char *first, uint64_t *id, int *w)
{
    char idtxt[32], wtxt[32], *end;
    long v;

    if (td_safetensors_metadata(path, CK_ZERO_ID, idtxt, sizeof(idtxt)) !=
            TD_OK ||
        td_safetensors_metadata(path, CK_ZERO_W, wtxt, sizeof(wtxt)) != TD_OK) {
        td_error_clear();
        return td_error(TD_ERR_INVALID, "checkpoint: %s holds no ZeRO shards "
                        "(saved without td_checkpoint_add_zero), but this "
                        "run lists ZeRO optimizer '%s'", path, first);
    }
    *id = strtoull(idtxt, &end, 16);
    if (strlen(idtxt) != 16 || *end != '\0') {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s: " CK_ZERO_ID " is "
                        "\"%s\"", path, idtxt);
    }
    v = strtol(wtxt, &end, 10);
    if (*end != '\0' || v < 1 || v > (1 << 24)) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s: " CK_ZERO_W " is "
                        "\"%s\"", path, wtxt);
    }
    *w = (int)v;
    return TD_OK;
}

td_status_t
td_checkpoint_load(td_checkpoint_t *ck, const char *path)
{
    char fmt[64];
    td_tensor_t **ts = NULL, **cts = NULL;
    const char **names = NULL, **cnames = NULL;
    ckzero_item_t *zi = NULL;
    ckzero_state_t *zs = NULL;
    uint64_t zid = 0;
    int nz = 0, zw = 0, nread = 0;
    td_status_t status;

    status = td_safetensors_metadata(path, "format", fmt, sizeof(fmt));
    if (status == TD_ERR_NOT_FOUND || status == TD_ERR_INVALID ||
        (status == TD_OK && strcmp(fmt, CK_FORMAT) != 0)) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s is a safetensors "
                        "file but not a todist checkpoint (its __metadata__ "
                        "format is not \"" CK_FORMAT "\")", path);
    }
    if (status != TD_OK) {
        return status;      /* unreadable, truncated, malformed: named */
    }
    if ((status = zero_items(ck, &zi, &nz)) != TD_OK) {
        return status;
    }
    if (nz > 0) {
        status = zero_meta(path, zi[0].prefix, &zid, &zw);
    }
    cts = calloc((size_t)ck->n + 1, sizeof(*cts));
    cnames = calloc((size_t)ck->n + 1, sizeof(*cnames));
    zs = calloc((size_t)nz + 1, sizeof(*zs));
    if (status == TD_OK && (cts == NULL || cnames == NULL || zs == NULL)) {
        status = td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    if (status == TD_OK) {
        status = scratch_make(ck, 0, &ts, &names);
    }
    if (status == TD_OK) {
        int cn = main_entries(ck, ts, names, cts, cnames);

        status = td_safetensors_load(path, cnames, cts, cn);
    }
    for (int i = 0; status == TD_OK && i < ck->n; i++) {
        if (ck->items[i].kind == IT_SAMPLER) {
            status = sampler_check(path, &ck->items[i], td_tensor_data(ts[i]),
                                   ck->reshard);
        } else if (ck->items[i].kind == IT_DDP) {
            status = ddp_check(path, &ck->items[i], td_tensor_data(ts[i]));
        } else if (ck->items[i].kind == IT_OPT_STEP &&
                   *(int64_t *)td_tensor_data(ts[i]) < 0) {
            status = td_error(TD_ERR_PROTOCOL, "checkpoint: %s: '%s' is "
                              "negative", path, ck->items[i].name);
        }
    }
    /* CK6: the shards, read and checked before anything is written */
    for (; status == TD_OK && nread < nz; nread++) {
        status = ckzero_read(path, zid, zw, &zi[nread], &zs[nread]);
    }
    /* CK2: DDP's rebuild, the one copy that can fail, last; the ZeRO
     * shards after the parameters (zero.h Z4) */
    for (int i = 0; status == TD_OK && i < ck->n; i++) {
        if (ck->items[i].kind != IT_DDP && ck->items[i].kind != IT_ZERO) {
            status = item_set(&ck->items[i], ts[i]);
        }
    }
    for (int k = 0; status == TD_OK && k < nz; k++) {
        status = ckzero_apply(&zi[k], &zs[k]);
    }
    for (int i = 0; status == TD_OK && i < ck->n; i++) {
        if (ck->items[i].kind == IT_DDP) {
            status = item_set(&ck->items[i], ts[i]);
        }
    }
    for (int k = 0; zs != NULL && k < nread; k++) {
        ckzero_state_free(&zs[k]);
    }
    if (ts != NULL) {
        scratch_free(ck, ts, names);
    }
    free(zs);
    free(zi);
    free(cts);
    free(cnames);
    return status;
}

td_status_t
td_checkpoint_broadcast(td_checkpoint_t *ck, td_group_t *group, int root)
{
    int me = td_group_rank(group);
    char what[64], why[512];
    td_status_t refused = TD_OK;       /* a small entry this rank refused */
    td_tensor_t **ts;
    const char **names;
    td_status_t status;

    if (ck == NULL || group == NULL || me < 0) {
        return td_error(TD_ERR_INVALID, "checkpoint: broadcast: %s",
                        ck == NULL ? "the checkpoint is NULL" :
                        group == NULL ? "the group is NULL" :
                        "this rank is not in the group");
    }
    if (root < 0 || root >= td_group_size(group)) {
        return td_error(TD_ERR_RANGE, "checkpoint: broadcast: root %d is "
                        "not a rank of the group of %d", root,
                        td_group_size(group));
    }
    /* the root sends its objects as they are (tensors without a copy) */
    status = scratch_make_(ck, me == root, 1, &ts, &names);
    /* CK5: the small entries first, checked before a tensor is written */
    for (int i = 0; status == TD_OK && i < ck->n; i++) {
        if (ck->items[i].kind != IT_TENSOR &&
            ck->items[i].kind != IT_ZERO) {                   /* CK6 */
            status = td_broadcast(group, ts[i], root);
        }
    }
    snprintf(what, sizeof(what), "broadcast from group rank %d", root);
    for (int i = 0; me != root && status == TD_OK && refused == TD_OK &&
                    i < ck->n; i++) {
        if (ck->items[i].kind == IT_SAMPLER) {
            refused = sampler_check(what, &ck->items[i],
                                    td_tensor_data(ts[i]), ck->reshard);
        } else if (ck->items[i].kind == IT_DDP) {
            refused = ddp_check(what, &ck->items[i], td_tensor_data(ts[i]));
        }
    }
    if (refused != TD_OK) {
        snprintf(why, sizeof(why), "%s", td_last_error());
    }
    /* the tensors land in place: a heal moves the model once; a rank that
     * refused an entry still takes part (the others wait for it), into
     * scratch, and changes nothing */
    if (status == TD_OK) {
        td_tensor_t **dst = calloc((size_t)ck->n + 1, sizeof(*dst));
        int nt = 0;

        if (dst == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
        }
        for (int i = 0; status == TD_OK && i < ck->n; i++) {
            if (ck->items[i].kind != IT_TENSOR) {
                continue;
            }
            if (refused != TD_OK) {
                status = item_scratch(&ck->items[i], &dst[nt]);
            } else {
                dst[nt] = td_tensor_retain(ck->items[i].t);
            }
            nt += status == TD_OK;
        }
        if (status == TD_OK) {
            status = elastic_heal_tensors(group, root, dst, nt);  /* heal.h */
        }
        for (int i = 0; dst != NULL && i < nt; i++) {
            td_tensor_release(dst[i]);
        }
        free(dst);
    }
    if (status == TD_OK && refused != TD_OK) {
        scratch_free(ck, ts, names);
        return td_error(refused, "%s", why);
    }
    for (int pass = 0; me != root && pass < 2; pass++) {
        for (int i = 0; status == TD_OK && i < ck->n; i++) {
            if ((ck->items[i].kind == IT_DDP) == pass &&
                ck->items[i].kind != IT_TENSOR &&
                ck->items[i].kind != IT_ZERO) {
                status = item_set(&ck->items[i], ts[i]);
            }
        }
    }
    scratch_free(ck, ts, names);
    return status;
}
