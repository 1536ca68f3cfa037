/* runtime/elastic/ckzero.c: ZeRO shards in checkpoints (ckzero.h): the
 * per-rank shard files, the save id that ties them to the replicated
 * file, and the re-cut of the flat optimizer state at another world
 * size. */
#include "config.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/ddp/ddp_internal.h"
#include "runtime/elastic/ckzero.h"
#include <todist/optim.h>
#include <todist/safetensors.h>

#define ZC_FORMAT "todist.checkpoint.zero.v1"
enum { ZC_ITEM_KEYS = 4, ZC_VAL = 32, ZC_MAX_SLOTS = 4 };

/* zero.h Z1: where shard R of a flat vector of TOTAL over SIZE starts */
static int64_t
z1_start(int64_t total, int size, int r)
{
    int64_t base = total / size, rem = total % size;

    return r * base + (r < rem ? r : rem);
}

static void
shard_file(char *out, size_t cap, const char *path, int r, int w, uint64_t id)
{
    snprintf(out, cap, "%s.zero-%d-of-%d.%016" PRIx64, path, r, w, id);
}

td_status_t
ckzero_new_id(td_group_t *g, uint64_t *id_p)
{
    int64_t one = 1;
    uint64_t id = 0;
    td_tensor_t *t;
    td_status_t st;

    if (td_group_rank(g) == 0 &&
        getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        /* no entropy source: time and pid still tell saves apart */
        id = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^
             (uint64_t)getpid() ^ (uint64_t)clock();
    }
    if ((st = td_tensor_empty(&one, 1, TD_INT64, TD_CPU, &t)) != TD_OK) {
        return st;
    }
    memcpy(td_tensor_data(t), &id, sizeof(id));
    st = td_broadcast(g, t, 0);
    if (st == TD_OK) {
        memcpy(id_p, td_tensor_data(t), sizeof(*id_p));
    }
    td_tensor_release(t);
    return st;
}

td_status_t
ckzero_save_shard(const char *path, uint64_t id, td_group_t *g,
                  const ckzero_item_t *it, int n)
{
    int me = td_group_rank(g), w = td_group_size(g), nt = 0, nkv = 0;
    int cap = n * (2 + ZC_MAX_SLOTS);
    const char **names = calloc((size_t)cap, sizeof(*names));
    td_tensor_t **ts = calloc((size_t)cap, sizeof(*ts));
    char (*nbuf)[256] = calloc((size_t)cap, sizeof(*nbuf));
    const char **kv = calloc((size_t)(2 * (4 + ZC_ITEM_KEYS * n)), sizeof(*kv));
    char (*kbuf)[256] = calloc((size_t)(ZC_ITEM_KEYS * n), sizeof(*kbuf));
    char (*vbuf)[ZC_VAL] = calloc((size_t)(4 + ZC_ITEM_KEYS * n),
                                  sizeof(*vbuf));
    char file[4096];
    td_status_t st = TD_OK;

    if (names == NULL || ts == NULL || nbuf == NULL || kv == NULL ||
        kbuf == NULL || vbuf == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    kv[0] = "format";
    kv[1] = ZC_FORMAT;
    kv[2] = "save_id";
    snprintf(vbuf[0], ZC_VAL, "%016" PRIx64, id);
    kv[3] = vbuf[0];
    kv[4] = "rank";
    snprintf(vbuf[1], ZC_VAL, "%d", me);
    kv[5] = vbuf[1];
    kv[6] = "world_size";
    snprintf(vbuf[2], ZC_VAL, "%d", w);
    kv[7] = vbuf[2];
    nkv = 4;
    for (int i = 0; i < n && st == TD_OK; i++) {
        td_optim_t *opt = td_zero_optim(it[i].zero);
        int slots = opt != NULL ? td_optim_num_buffers(opt) : 0;
        int64_t off, len, total, one = 1;
        int64_t v[ZC_ITEM_KEYS];
        static const char *key[ZC_ITEM_KEYS] = {"offset", "length", "total",
                                                "slots"};

        td_zero_shard(it[i].zero, &off, &len, &total);
        v[0] = off;
        v[1] = len;
        v[2] = total;
        v[3] = slots;
        for (int k = 0; k < ZC_ITEM_KEYS; k++) {
            snprintf(kbuf[ZC_ITEM_KEYS * i + k], 256, "%s.%s", it[i].prefix,
                     key[k]);
            snprintf(vbuf[4 + ZC_ITEM_KEYS * i + k], ZC_VAL, "%" PRId64, v[k]);
            kv[2 * nkv] = kbuf[ZC_ITEM_KEYS * i + k];
            kv[2 * nkv + 1] = vbuf[4 + ZC_ITEM_KEYS * i + k];
            nkv++;
        }
        /* the step count and lr (an empty shard has no optimizer: 0) */
        snprintf(nbuf[nt], 256, "%s.step", it[i].prefix);
        if ((st = td_tensor_empty(&one, 1, TD_INT64, TD_CPU, &ts[nt])) !=
            TD_OK) {
            break;
        }
        *(int64_t *)td_tensor_data(ts[nt]) =
            opt != NULL ? td_optim_param_step(opt, 0) : 0;
        names[nt] = nbuf[nt];
        nt++;
        snprintf(nbuf[nt], 256, "%s.lr", it[i].prefix);
        if ((st = td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &ts[nt])) !=
            TD_OK) {
            break;
        }
        *(double *)td_tensor_data(ts[nt]) = opt != NULL ? td_optim_lr(opt) : 0;
        names[nt] = nbuf[nt];
        nt++;
        for (int b = 0; b < slots && st == TD_OK; b++) {
            snprintf(nbuf[nt], 256, "%s.buf.%d", it[i].prefix, b);
            st = td_optim_buffer(opt, 0, b, &ts[nt]);
            if (st == TD_OK) {
                td_tensor_retain(ts[nt]);
                names[nt] = nbuf[nt];
                nt++;
            }
        }
    }
    if (st == TD_OK) {
        shard_file(file, sizeof(file), path, me, w, id);
        st = td_safetensors_save_meta(file, names, ts, nt, kv, nkv);
    }
out:
    for (int i = 0; ts != NULL && i < nt; i++) {
        td_tensor_release(ts[i]);
    }
    free(names);
    free(ts);
    free(nbuf);
    free(kv);
    free(kbuf);
    free(vbuf);
    return st;
}

td_status_t
ckzero_agree(td_group_t *g, td_status_t st, const char *what)
{
    int64_t n = td_group_size(g);
    td_tensor_t *t;
    td_status_t ast;
    int64_t *v;

    if ((ast = td_tensor_zeros(&n, 1, TD_INT64, &t)) != TD_OK) {
        return ast;
    }
    v = td_tensor_data(t);
    v[td_group_rank(g)] = st != TD_OK;
    ast = td_all_reduce(g, t, TD_REDUCE_MAX);
    for (int64_t r = 0; ast == TD_OK && st == TD_OK && r < n; r++) {
        if (v[r] != 0) {
            ast = td_error(TD_ERR_STATE, "checkpoint: group rank %d (world "
                           "rank %d) failed to %s (its log says why)", (int)r,
                           td_group_world_rank(g, (int)r), what);
        }
    }
    td_tensor_release(t);
    return st != TD_OK ? st : ast;
}

/* Whether S is exactly a temporary file's suffix, ".tmp.PID.N" (the name
 * td_safetensors_save writes aside under, safetensors.c S1). */
static int
tmp_suffix(const char *s)
{
    unsigned long pid, n;
    int used = 0;

    return sscanf(s, ".tmp.%lu.%lu%n", &pid, &n, &used) == 2 &&
           s[used] == '\0' && s[5] >= '0' && s[5] <= '9';
}

void
ckzero_clean(const char *path, uint64_t id)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    char dir[4096], pre[4096], file[8192];
    struct dirent *d;
    DIR *dp;
    size_t np, nb = strlen(base);

    snprintf(dir, sizeof(dir), "%.*s", slash == NULL ? 1 :
             slash == path ? 1 : (int)(slash - path),
             slash == NULL ? "." : path);
    np = (size_t)snprintf(pre, sizeof(pre), "%s.zero-", base);
    if ((dp = opendir(dir)) == NULL) {
        return;
    }
    while ((d = readdir(dp)) != NULL) {
        int r, w, used = 0, old;
        char hex[17];

        /* BASE.zero-R-of-W.ID of another save, or its .tmp.PID.N (a save
         * killed mid-write); BASE.tmp.PID.N: a killed write of PATH. The
         * group's next save cannot have begun: its id is broadcast from
         * this rank, after this. */
        if (strncmp(d->d_name, pre, np) == 0 &&
            sscanf(d->d_name + np, "%d-of-%d.%16[0-9a-f]%n", &r, &w, hex,
                   &used) == 3 && strlen(hex) == 16) {
            const char *rest = d->d_name + np + (size_t)used;

            old = strtoull(hex, NULL, 16) != id &&
                  (*rest == '\0' || tmp_suffix(rest));
        } else {
            old = strncmp(d->d_name, base, nb) == 0 &&
                  tmp_suffix(d->d_name + nb);
        }
        if (old) {
            snprintf(file, sizeof(file), "%s/%s", dir, d->d_name);
            if (unlink(file) != 0) {
                td_log_warn("checkpoint: could not remove %s, left by "
                            "an older save", file);
            }
        }
    }
    closedir(dp);
}

/* "__metadata__"[KEY] of FILE as an integer into *V. */
static td_status_t
meta_int(const char *file, const char *key, int64_t *v)
{
    char s[ZC_VAL], *end;
    td_status_t st = td_safetensors_metadata(file, key, s, sizeof(s));

    if (st != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: ZeRO shard file %s "
                        "has no valid \"%s\" in its metadata", file, key);
    }
    *v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: ZeRO shard file %s: "
                        "\"%s\" is \"%s\", not an integer", file, key, s);
    }
    return TD_OK;
}

/* ZC2: FILE is old rank R of W's shard file of save ID and holds item
 * PREFIX's elements [OFF, OFF + LEN) of TOTAL with SLOTS buffers. */
static td_status_t
shard_check(const char *file, const char *path, uint64_t id, int r, int w,
            const char *prefix, int64_t off, int64_t len, int64_t total,
            int slots)
{
    char s[ZC_VAL], key[300];
    int64_t got[ZC_ITEM_KEYS], want[ZC_ITEM_KEYS] = {off, len, total, slots};
    static const char *what[ZC_ITEM_KEYS] = {"offset", "length", "total",
                                             "slots"};
    int64_t v;
    td_status_t st;

    if (access(file, F_OK) != 0) {
        return td_error(TD_ERR_NOT_FOUND, "checkpoint: the ZeRO shard file "
                        "of rank %d (of %d) is missing: %s (the checkpoint "
                        "%s names save %016" PRIx64 ")", r, w, file, path, id);
    }
    st = td_safetensors_metadata(file, "format", s, sizeof(s));
    if (st != TD_OK || strcmp(s, ZC_FORMAT) != 0) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s (rank %d of %d) is "
                        "not a todist ZeRO shard file (its format is not \""
                        ZC_FORMAT "\")", file, r, w);
    }
    st = td_safetensors_metadata(file, "save_id", s, sizeof(s));
    if (st != TD_OK || strtoull(s, NULL, 16) != id || strlen(s) != 16) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s (rank %d of %d) "
                        "holds save id %s, but %s names save %016" PRIx64
                        ": a shard of another save or run", file, r, w,
                        st == TD_OK ? s : "(none)", path, id);
    }
    if ((st = meta_int(file, "rank", &v)) != TD_OK) {
        return st;
    }
    if (v != r) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s was written by "
                        "rank %" PRId64 ", not rank %d", file, v, r);
    }
    if ((st = meta_int(file, "world_size", &v)) != TD_OK) {
        return st;
    }
    if (v != w) {
        return td_error(TD_ERR_PROTOCOL, "checkpoint: %s (rank %d) was cut "
                        "for world size %" PRId64 ", %s says %d", file, r, v,
                        path, w);
    }
    for (int k = 0; k < ZC_ITEM_KEYS; k++) {
        snprintf(key, sizeof(key), "%s.%s", prefix, what[k]);
        if ((st = meta_int(file, key, &got[k])) != TD_OK) {
            return st;
        }
        /* an empty old shard has no optimizer: its slots are not known */
        if (got[k] != want[k] && !(k == 3 && len == 0)) {
            return td_error(TD_ERR_INVALID, "checkpoint: %s (rank %d of %d): "
                            "'%s' has %s %" PRId64 ", this run's needs %"
                            PRId64 "%s", file, r, w, prefix, what[k], got[k],
                            want[k], k == 2 ? " (another model)" :
                            k == 3 ? " (another optimizer)" : "");
        }
    }
    return TD_OK;
}

/* Stored tensor NAME of FILE, of DTYPE and N elements (new reference). */
static td_status_t
shard_get(const char *file, const char *name, td_dtype_t dtype, int64_t n,
          td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t st = td_safetensors_get(file, name, &t);

    if (st != TD_OK) {
        return st;
    }
    if (td_tensor_dtype(t) != dtype || td_tensor_numel(t) != n) {
        td_tensor_release(t);
        return td_error(TD_ERR_SHAPE, "checkpoint: %s: '%s' is not %" PRId64
                        " %s elements", file, name, n,
                        dtype == TD_INT64 ? "int64" : "float64");
    }
    *out = t;
    return TD_OK;
}

td_status_t
ckzero_read(const char *path, uint64_t id, int old_w, const ckzero_item_t *it,
            ckzero_state_t *out)
{
    td_optim_t *opt = td_zero_optim(it->zero), *ropt;
    int64_t off, len, total, roff, rlen;
    char file[4096], name[300];
    ckzero_state_t s;
    td_status_t st = TD_OK;

    memset(&s, 0, sizeof(s));
    s.step = -1;
    s.slots = opt != NULL ? td_optim_num_buffers(opt) : 0;
    td_zero_shard(it->zero, &off, &len, &total);
    td__zero_replica(it->zero, &roff, &rlen, &ropt);
    if (s.slots > ZC_MAX_SLOTS) {
        return td_error(TD_ERR_STATE, "checkpoint: '%s' has %d state "
                        "buffers", it->prefix, s.slots);
    }
    for (int b = 0; b < s.slots && st == TD_OK; b++) {
        st = td_tensor_empty(&len, 1, TD_FLOAT64, TD_CPU, &s.buf[b]);
        if (st == TD_OK && rlen > 0) {
            st = td_tensor_empty(&rlen, 1, TD_FLOAT64, TD_CPU, &s.rbuf[b]);
        }
    }
    /* ZC3: every old shard overlapping [off, off + len) or the replica's
     * [roff, roff + rlen) */
    for (int r = 0; st == TD_OK && r < old_w; r++) {
        int64_t o = z1_start(total, old_w, r), e = z1_start(total, old_w, r + 1);
        int64_t lo = o > off ? o : off, hi = e < off + len ? e : off + len;
        int64_t rlo = o > roff ? o : roff;
        int64_t rhi = e < roff + rlen ? e : roff + rlen;
        td_tensor_t *t = NULL;

        if (lo >= hi && rlo >= rhi) {
            continue;
        }
        shard_file(file, sizeof(file), path, r, old_w, id);
        st = shard_check(file, path, id, r, old_w, it->prefix, o, e - o,
                         total, s.slots);
        snprintf(name, sizeof(name), "%s.step", it->prefix);
        if (st == TD_OK && (st = shard_get(file, name, TD_INT64, 1, &t)) ==
            TD_OK) {
            int64_t step = *(int64_t *)td_tensor_data(t);

            if (step < 0 || (s.step >= 0 && step != s.step)) {
                st = td_error(TD_ERR_PROTOCOL, "checkpoint: %s (rank %d of "
                              "%d): '%s' step %" PRId64 " (the other shards "
                              "say %" PRId64 ")", file, r, old_w, name, step,
                              s.step);
            }
            s.step = step;
            td_tensor_release(t);
        }
        snprintf(name, sizeof(name), "%s.lr", it->prefix);
        if (st == TD_OK && (st = shard_get(file, name, TD_FLOAT64, 1, &t)) ==
            TD_OK) {
            s.lr = *(double *)td_tensor_data(t);
            td_tensor_release(t);
        }
        for (int b = 0; st == TD_OK && b < s.slots; b++) {
            snprintf(name, sizeof(name), "%s.buf.%d", it->prefix, b);
            if ((st = shard_get(file, name, TD_FLOAT64, e - o, &t)) == TD_OK) {
                if (lo < hi) {
                    memcpy((double *)td_tensor_data(s.buf[b]) + (lo - off),
                           (const double *)td_tensor_data(t) + (lo - o),
                           (size_t)(hi - lo) * sizeof(double));
                }
                if (rlo < rhi) {
                    memcpy((double *)td_tensor_data(s.rbuf[b]) + (rlo - roff),
                           (const double *)td_tensor_data(t) + (rlo - o),
                           (size_t)(rhi - rlo) * sizeof(double));
                }
                td_tensor_release(t);
            }
        }
    }
    if (st != TD_OK) {
        ckzero_state_free(&s);
        return st;
    }
    *out = s;
    return TD_OK;
}

td_status_t
ckzero_apply(const ckzero_item_t *it, const ckzero_state_t *s)
{
    td_optim_t *opt = td_zero_optim(it->zero), *ropt;
    int64_t roff, rlen;
    td_status_t st = TD_OK;

    td__zero_replica(it->zero, &roff, &rlen, &ropt);
    for (int b = 0; opt != NULL && b < s->slots && st == TD_OK; b++) {
        td_tensor_t *buf;

        if ((st = td_optim_buffer(opt, 0, b, &buf)) == TD_OK) {
            memcpy(td_tensor_data(buf), td_tensor_data(s->buf[b]),
                   td_tensor_nbytes(buf));
        }
    }
    for (int b = 0; ropt != NULL && b < s->slots && st == TD_OK; b++) {
        td_tensor_t *buf;

        if ((st = td_optim_buffer(ropt, 0, b, &buf)) == TD_OK) {
            memcpy(td_tensor_data(buf), td_tensor_data(s->rbuf[b]),
                   td_tensor_nbytes(buf));
        }
    }
    if (opt != NULL && st == TD_OK) {
        st = td_optim_set_param_step(opt, 0, s->step);
        td_optim_set_lr(opt, s->lr);
    }
    if (ropt != NULL && st == TD_OK) {
        st = td_optim_set_param_step(ropt, 0, s->step);
        td_optim_set_lr(ropt, s->lr);
    }
    if (st == TD_OK) {
        /* an empty shard read no file: its step is not known here */
        td__zero_loaded(it->zero, s->step >= 0 ? s->step : 0); /* Z4, R3 */
    }
    return st;
}

void
ckzero_state_free(ckzero_state_t *s)
{
    for (int b = 0; b < ZC_MAX_SLOTS; b++) {
        td_tensor_release(s->buf[b]);
        s->buf[b] = NULL;
        td_tensor_release(s->rbuf[b]);
        s->rbuf[b] = NULL;
    }
}
