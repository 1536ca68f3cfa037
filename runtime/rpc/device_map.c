/* runtime/rpc/device_map.c: per-peer device maps, their validation by
 * PyTorch's rules (M1-M5 in todist/device.h) and the environment form. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/device.h"
#include "runtime/rpc/device_map.h"
#include "kernels/device.h"
#include "kernels/module.h"

#define DEV_STR(d) td_device_str((d), (char[24]){0}, 24)

static int
dev_eq(td_device_t a, td_device_t b)
{
    return a.type == b.type && (a.type == TD_DEVICE_CPU || a.index == b.index);
}

const td_device_map_t *
td_device_maps_find(const td_device_maps_t *maps, int peer)
{
    if (maps == NULL) {
        return NULL;
    }
    for (int i = 0; i < maps->n_maps; i++) {
        if (maps->maps[i].peer == peer) {
            return &maps->maps[i];
        }
    }
    return NULL;
}

td_status_t
td_device_maps_add(td_device_maps_t *maps, int peer, td_device_t from,
                   td_device_t to)
{
    td_device_map_t *m = (td_device_map_t *)td_device_maps_find(maps, peer);

    if (peer < 0) {
        return td_error(TD_ERR_INVALID, "device map: peer rank %d is "
                        "negative (M4)", peer);
    }
    if (m == NULL) {
        if (maps->n_maps == TD_DEVICE_MAPS_MAX) {
            return td_error(TD_ERR_RANGE, "device map: more than %d peers "
                            "have maps (adding worker%d)", TD_DEVICE_MAPS_MAX,
                            peer);
        }
        m = &maps->maps[maps->n_maps++];
        memset(m, 0, sizeof(*m));
        m->peer = peer;
    }
    for (int i = 0; i < m->n_pairs; i++) {
        if (dev_eq(m->pairs[i].from, from)) {
            if (dev_eq(m->pairs[i].to, to)) {
                return TD_OK;          /* the same entry again */
            }
            return td_error(TD_ERR_INVALID, "device map for worker%d: entry "
                            "%s->%s: source %s already maps to %s (M1: "
                            "one-to-one, a source at most once)", peer,
                            DEV_STR(from), DEV_STR(to), DEV_STR(from),
                            DEV_STR(m->pairs[i].to));
        }
        if (dev_eq(m->pairs[i].to, to)) {
            return td_error(TD_ERR_INVALID, "device map for worker%d: entry "
                            "%s->%s: %s and %s both map to %s (M2: "
                            "one-to-one, a target at most once)", peer,
                            DEV_STR(from), DEV_STR(to), DEV_STR(m->pairs[i].from),
                            DEV_STR(from), DEV_STR(to));
        }
    }
    if (m->n_pairs == TD_DEVICE_MAP_PAIRS_MAX) {
        return td_error(TD_ERR_RANGE, "device map for worker%d: more than %d "
                        "entries", peer, TD_DEVICE_MAP_PAIRS_MAX);
    }
    m->pairs[m->n_pairs++] = (td_device_pair_t){from, to};
    return TD_OK;
}

/* [s, e) without surrounding spaces, into BUF (bounded). */
static int
token(const char *s, const char *e, char *buf, size_t len)
{
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    if ((size_t)(e - s) >= len) {
        return -1;
    }
    memcpy(buf, s, (size_t)(e - s));
    buf[e - s] = '\0';
    return (int)(e - s);
}

static td_status_t
parse_peer(const char *name, int *rank_p)
{
    const char *digits = strncmp(name, "worker", 6) == 0 ? name + 6 : name;
    char *end;
    long r;

    if (!isdigit((unsigned char)*digits)) {
        goto bad;
    }
    r = strtol(digits, &end, 10);
    if (*end != '\0' || r > 1 << 24) {
        goto bad;
    }
    *rank_p = (int)r;
    return TD_OK;
bad:
    return td_error(TD_ERR_INVALID, "device map: peer '%s' is not "
                    "'workerN' or a rank", name);
}

td_status_t
td_device_maps_parse(const char *spec, td_device_maps_t *maps)
{
    char peer_s[64], from_s[32], to_s[32];
    const char *p, *group_end, *eq, *pair_end, *arrow;
    td_device_t from, to;
    td_status_t status;
    int peer = -1;

    if (spec == NULL) {
        return TD_OK;
    }
    if (strlen(spec) > TD_DEVICE_MAPS_SPEC_MAX) {
        return td_error(TD_ERR_RANGE, "device map: the spec is %zu bytes, "
                        "more than %d", strlen(spec), TD_DEVICE_MAPS_SPEC_MAX);
    }
    for (p = spec; *p != '\0'; p = *group_end ? group_end + 1 : group_end) {
        group_end = strchr(p, ';');
        if (group_end == NULL) {
            group_end = p + strlen(p);
        }
        if (token(p, group_end, peer_s, 2) == 0) {
            continue;                  /* empty group ("a;;b", trailing ;) */
        }
        eq = memchr(p, '=', (size_t)(group_end - p));
        if (eq == NULL || token(p, eq, peer_s, sizeof(peer_s)) <= 0) {
            return td_error(TD_ERR_INVALID, "device map: '%.*s' is not "
                            "PEER=FROM->TO[,FROM->TO...]",
                            (int)(group_end - p), p);
        }
        if ((status = parse_peer(peer_s, &peer)) != TD_OK) {
            return status;
        }
        for (const char *q = eq + 1; q < group_end; q = pair_end + 1) {
            pair_end = memchr(q, ',', (size_t)(group_end - q));
            if (pair_end == NULL) {
                pair_end = group_end;
            }
            arrow = NULL;
            for (const char *a = q; a + 1 < pair_end; a++) {
                if (a[0] == '-' && a[1] == '>') {
                    arrow = a;
                    break;
                }
            }
            if (arrow == NULL ||
                token(q, arrow, from_s, sizeof(from_s)) <= 0 ||
                token(arrow + 2, pair_end, to_s, sizeof(to_s)) <= 0) {
                return td_error(TD_ERR_INVALID, "device map for %s: entry "
                                "'%.*s' is not FROM->TO (e.g. cuda:0->cuda:1)",
                                peer_s, (int)(pair_end - q), q);
            }
            if (td_device_parse(from_s, &from) != TD_OK ||
                td_device_parse(to_s, &to) != TD_OK) {
                return td_error(TD_ERR_INVALID, "device map for %s: entry "
                                "'%s->%s': a device is not cpu or cuda:N",
                                peer_s, from_s, to_s);
            }
            if ((status = td_device_maps_add(maps, peer, from, to)) != TD_OK) {
                return status;
            }
        }
    }
    return TD_OK;
}

static td_status_t
check_index(const td_device_map_t *m, int i, td_device_t d, int count,
            const char *side, const char *whose)
{
    if (d.type == TD_DEVICE_CPU) {
        return TD_OK;                  /* M3: cpu is allowed */
    }
    if (d.type != TD_DEVICE_CUDA || d.index < 0 || d.index >= count) {
        return td_error(TD_ERR_RANGE, "device map for worker%d: entry %d "
                        "(%s->%s): %s %s is not below %s device count %d "
                        "(M3)", m->peer, i, DEV_STR(m->pairs[i].from),
                        DEV_STR(m->pairs[i].to), side, DEV_STR(d), whose,
                        count);
    }
    return TD_OK;
}

td_status_t
td_device_maps_validate(const td_device_maps_t *maps, int self,
                        int world_size, const int *counts)
{
    td_status_t status;

    if (maps == NULL) {
        return TD_OK;
    }
    if (self < 0 || self >= world_size || counts == NULL) {
        return td_error(TD_ERR_INVALID, "device map: rank %d, world size %d "
                        "and the device counts are needed", self, world_size);
    }
    for (int k = 0; k < maps->n_maps; k++) {
        const td_device_map_t *m = &maps->maps[k];
        char whose[48];

        if (m->peer < 0 || m->peer >= world_size) {
            return td_error(TD_ERR_RANGE, "device map for worker%d: rank %d "
                            "is not in the world of %d (M4)", m->peer,
                            m->peer, world_size);
        }
        for (int j = 0; j < k; j++) {
            if (maps->maps[j].peer == m->peer) {
                return td_error(TD_ERR_INVALID, "device map for worker%d: "
                                "given twice (maps %d and %d)", m->peer, j,
                                k);
            }
        }
        snprintf(whose, sizeof(whose), "worker%d's", m->peer);
        for (int i = 0; i < m->n_pairs; i++) {
            const td_device_pair_t *p = &m->pairs[i];
            for (int j = 0; j < i; j++) {
                if (dev_eq(m->pairs[j].from, p->from)) {
                    return td_error(TD_ERR_INVALID, "device map for worker%d:"
                                    " entry %d (%s->%s): source %s already "
                                    "maps to %s in entry %d (M1: one-to-one)",
                                    m->peer, i, DEV_STR(p->from),
                                    DEV_STR(p->to), DEV_STR(p->from),
                                    DEV_STR(m->pairs[j].to), j);
                }
                if (dev_eq(m->pairs[j].to, p->to)) {
                    return td_error(TD_ERR_INVALID, "device map for worker%d:"
                                    " entry %d (%s->%s): target %s is already"
                                    " the target of %s in entry %d (M2: "
                                    "one-to-one)", m->peer, i,
                                    DEV_STR(p->from), DEV_STR(p->to),
                                    DEV_STR(p->to), DEV_STR(m->pairs[j].from),
                                    j);
                }
            }
            status = check_index(m, i, p->from, counts[self], "source",
                                 "this worker's");
            if (status == TD_OK) {
                status = check_index(m, i, p->to, counts[m->peer], "target",
                                     whose);
            }
            if (status != TD_OK) {
                return status;
            }
        }
    }
    return TD_OK;
}

td_status_t
td_device_map_reverse(const td_device_map_t *map, td_device_map_t *out)
{
    td_device_map_t r;

    memset(&r, 0, sizeof(r));
    r.peer = map->peer;
    for (int i = 0; i < map->n_pairs; i++) {
        for (int j = 0; j < i; j++) {
            if (dev_eq(map->pairs[j].to, map->pairs[i].to)) {
                return td_error(TD_ERR_INVALID, "device map for worker%d: "
                                "%s is the target of entries %d and %d, so "
                                "replies have no way back (M2)", map->peer,
                                DEV_STR(map->pairs[i].to), j, i);
            }
        }
        r.pairs[r.n_pairs++] = (td_device_pair_t){map->pairs[i].to,
                                                  map->pairs[i].from};
    }
    *out = r;
    return TD_OK;
}

td_status_t
td_device_map_lookup(const td_device_map_t *map, int peer, td_device_t from,
                     td_device_t *to_p)
{
    for (int i = 0; map != NULL && i < map->n_pairs; i++) {
        if (dev_eq(map->pairs[i].from, from)) {
            *to_p = map->pairs[i].to;
            return TD_OK;
        }
    }
    if (from.type == TD_DEVICE_CPU) {
        *to_p = TD_CPU;                /* cpu with no entry stays cpu */
        return TD_OK;
    }
    return td_error(TD_ERR_NOT_FOUND, "device map: a tensor on %s cannot go "
                    "to worker%d: its device map has no entry for %s (set "
                    "one with td_device_maps_add or TODIST_DEVICE_MAPS, or "
                    "move the tensor to the cpu first)", DEV_STR(from), peer,
                    DEV_STR(from));
}

/* ---- the maps of this worker, set up by td_init ------------------------ */

/* ACTIVE is written only while HAVE_ACTIVE is 0 (td_init, before the
 * release store that publishes it; td_finalize, after the transport's
 * threads are gone); readers load the flag with acquire. */
static td_device_maps_t active;
static int have_active;

const td_device_maps_t *
td_device_maps(void)
{
    return __atomic_load_n(&have_active, __ATOMIC_ACQUIRE) ? &active : NULL;
}

void
td__device_maps_reset(void)
{
    __atomic_store_n(&have_active, 0, __ATOMIC_RELEASE);
    memset(&active, 0, sizeof(active));
}

td_status_t
td__device_maps_peer(td_store_t *store, int r, double timeout, int *count_p,
                    int *nccl_p)
{
    char key[48], buf[24];
    void *v = NULL;
    size_t len = 0;
    int count, nccl;
    td_status_t status;

    snprintf(key, sizeof(key), "td/dev/%d", r);
    status = td_store_get(store, key, timeout, &v, &len);
    if (status != TD_OK) {
        return status;
    }
    if (len == 0 || len >= sizeof(buf)) {
        free(v);
        return td_error(TD_ERR_PROTOCOL, "device map: rank %d published "
                        "device facts of %zu bytes", r, len);
    }
    memcpy(buf, v, len);
    buf[len] = '\0';
    free(v);
    if (sscanf(buf, "%d %d", &count, &nccl) != 2 || count < 0 ||
        (nccl != 0 && nccl != 1)) {
        return td_error(TD_ERR_PROTOCOL, "device map: rank %d published "
                        "device facts '%s', not '<count> <0|1>'", r, buf);
    }
    *count_p = count;
    *nccl_p = nccl;
    return TD_OK;
}

td_status_t
td__device_maps_setup(td_store_t *store, const td_world_t *world,
                     const td_device_maps_t *given, double timeout)
{
    td_device_maps_t maps;
    char key[48], val[16];
    int *counts = NULL, local = 0, nccl;
    td_status_t status;

    td__device_maps_reset();
    /* what td_init loaded (runtime/init.c); never loads a module here */
    local = td__device_count_loaded(TD_DEVICE_CUDA);
    /* NCCL-capable: a real device (not the test backend) and a module with
     * NCCL; collectives route to NCCL only when every member of a group
     * says 1 (coll/nccl.h) */
    snprintf(key, sizeof(key), "td/dev/%d", world->rank);
    snprintf(val, sizeof(val), "%d %d", local,
             local > 0 && !td__device_test_backend() &&
             td__device_module_nccl(TD_DEVICE_CUDA) != NULL);
    status = td_store_set(store, key, val, strlen(val));
    if (status != TD_OK) {
        return status;
    }
    memset(&maps, 0, sizeof(maps));
    for (int i = 0; given != NULL && i < given->n_maps; i++) {
        for (int k = 0; k < given->maps[i].n_pairs; k++) {
            status = td_device_maps_add(&maps, given->maps[i].peer,
                                        given->maps[i].pairs[k].from,
                                        given->maps[i].pairs[k].to);
            if (status != TD_OK) {
                return status;
            }
        }
    }
    status = td_device_maps_parse(getenv("TODIST_DEVICE_MAPS"), &maps);
    if (status != TD_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(status, "TODIST_DEVICE_MAPS: %s", why);
    }
    if (maps.n_maps == 0) {
        /* no maps: cpu tensors only */
        __atomic_store_n(&have_active, 1, __ATOMIC_RELEASE);
        return TD_OK;
    }
    counts = calloc((size_t)world->world_size, sizeof(int));
    if (counts == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "device map: out of memory");
    }
    counts[world->rank] = local;
    for (int i = 0; i < maps.n_maps; i++) {
        int r = maps.maps[i].peer;
        if (r >= 0 && r < world->world_size && r != world->rank &&
            (status = td__device_maps_peer(store, r, timeout, &counts[r],
                                          &nccl)) != TD_OK) {
            goto out;
        }
    }
    status = td_device_maps_validate(&maps, world->rank, world->world_size,
                                     counts);
    if (status == TD_OK) {
        active = maps;
        __atomic_store_n(&have_active, 1, __ATOMIC_RELEASE);
    }
out:
    free(counts);
    return status;
}
