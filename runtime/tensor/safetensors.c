/* runtime/tensor/safetensors.c: safetensors writer and a strict reader. The
 * header parser accepts exactly the JSON shape the format defines (an
 * object of {dtype, shape, data_offsets} objects plus an optional
 * "__metadata__" object of strings) and checks every number against the
 * file. Assumes a little-endian host, like the format. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/safetensors.h>

#define ST_MAX_HEADER (100 * 1024 * 1024)   /* as the Python reader */

static const char *
st_dtype(td_dtype_t d)
{
    switch (d) {
    case TD_FLOAT32: return "F32";
    case TD_FLOAT64: return "F64";
    case TD_INT64: return "I64";
    case TD_INT32: return "I32";
    case TD_UINT8: return "U8";
    default: return NULL;
    }
}

/* Flush PATH's folder to disk, so that a rename into it survives a power
 * loss. A file system that cannot sync a folder (EINVAL) has nothing more
 * to do. */
static td_status_t
st_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    int fd;

    if (slash == NULL) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else if ((size_t)(slash - path) < sizeof(dir)) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    } else {
        return td_error(TD_ERR_INVALID, "safetensors: path too long: %s", path);
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return td_error(TD_ERR_IO, "safetensors: cannot open folder %s to "
                        "sync it: %s", dir, strerror(errno));
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return td_error(TD_ERR_IO, "safetensors: syncing folder %s: %s", dir,
                        strerror(e));
    }
    close(fd);
    return TD_OK;
}

/* S1 atomic: the file is written beside PATH under a name of its own
 *    (PATH.tmp.PID.N) and renamed over PATH only once complete, so PATH is
 *    always the old file or the new one, whatever kills the writer.
 * S2 durable: the new file is fsync'ed before the rename and PATH's folder
 *    after it, so a power loss after success cannot lose either.
 * S3 a failed save removes its temporary file and leaves PATH untouched. */
td_status_t
td_safetensors_save(const char *path, const char *const *names,
                    td_tensor_t *const *tensors, int n)
{
    return td_safetensors_save_meta(path, names, tensors, n, NULL, 0);
}

/* Whether S can go into the header unescaped. */
static int
st_plain(const char *s)
{
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\' || !isprint((unsigned char)*c)) {
            return 0;
        }
    }
    return 1;
}

td_status_t
td_safetensors_save_meta(const char *path, const char *const *names,
                         td_tensor_t *const *tensors, int n,
                         const char *const *kv, int nmeta)
{
    static atomic_uint seq;
    char *hdr = NULL, tmp[4096], part[4096];
    size_t cap = 256, len = 0;
    uint64_t off = 0, hlen;
    td_status_t status = TD_OK;
    FILE *f = NULL;
    int fd, made = 0;

#define APPEND(...)                                                         \
    do {                                                                    \
        int w_ = snprintf(tmp, sizeof(tmp), __VA_ARGS__);                   \
        if (w_ < 0 || (size_t)w_ >= sizeof(tmp)) {                          \
            status = td_error(TD_ERR_INVALID, "safetensors: name too long"); \
            goto out;                                                       \
        }                                                                   \
        while (len + (size_t)w_ + 8 > cap) {                                \
            char *nh = realloc(hdr, cap * 2);                               \
            if (nh == NULL) {                                               \
                status = td_error(TD_ERR_NO_MEMORY, "safetensors: out of memory"); \
                goto out;                                                   \
            }                                                               \
            hdr = nh;                                                       \
            cap *= 2;                                                       \
        }                                                                   \
        memcpy(hdr + len, tmp, (size_t)w_);                                 \
        len += (size_t)w_;                                                  \
    } while (0)

    hdr = malloc(cap);
    if (hdr == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "safetensors: out of memory");
    }
    APPEND("{");
    if (nmeta > 0) {
        APPEND("\"__metadata__\":{");
        for (int m = 0; m < nmeta; m++) {
            if (!st_plain(kv[2 * m]) || !st_plain(kv[2 * m + 1])) {
                status = td_error(TD_ERR_INVALID, "safetensors: metadata "
                                  "'%s' needs escaping; use plain text",
                                  kv[2 * m]);
                goto out;
            }
            APPEND("%s\"%s\":\"%s\"", m ? "," : "", kv[2 * m], kv[2 * m + 1]);
        }
        APPEND("}%s", n > 0 ? "," : "");
    }
    for (int i = 0; i < n; i++) {
        const char *dt = st_dtype(tensors[i]->dtype);
        for (const char *c = names[i]; *c; c++) {
            if (*c == '"' || *c == '\\' || !isprint((unsigned char)*c)) {
                status = td_error(TD_ERR_INVALID, "safetensors: name '%s' "
                                  "needs escaping; use plain names", names[i]);
                goto out;
            }
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(names[i], names[j]) == 0) {
                status = td_error(TD_ERR_EXISTS, "safetensors: name '%s' "
                                  "given twice", names[i]);
                goto out;
            }
        }
        APPEND("%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
               names[i], dt);
        for (int d = 0; d < tensors[i]->ndim; d++) {
            APPEND("%s%lld", d ? "," : "", (long long)tensors[i]->shape[d]);
        }
        APPEND("],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
               (unsigned long long)(off + td_tensor_nbytes(tensors[i])));
        off += td_tensor_nbytes(tensors[i]);
    }
    APPEND("}");
    while (len % 8 != 0) {      /* pad to 8 bytes with spaces, as Python */
        hdr[len++] = ' ';
    }
    if (snprintf(part, sizeof(part), "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&seq, 1)) >= (int)sizeof(part)) {
        status = td_error(TD_ERR_INVALID, "safetensors: path too long: %s",
                          path);
        goto out;
    }
    fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 || (f = fdopen(fd, "wb")) == NULL) {
        status = td_error(TD_ERR_IO, "safetensors: cannot create %s: %s", part,
                          strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(part);
        }
        goto out;
    }
    made = 1;
    hlen = len;
    if (fwrite(&hlen, 8, 1, f) != 1 || fwrite(hdr, 1, len, f) != len) {
        goto io;
    }
    for (int i = 0; i < n; i++) {
        td_tensor_t *c;
        status = td_tensor_contiguous(tensors[i], &c);
        if (status != TD_OK) {
            goto out;
        }
        if (td_tensor_nbytes(c) > 0 &&
            fwrite(td_tensor_data(c), 1, td_tensor_nbytes(c), f) != td_tensor_nbytes(c)) {
            td_tensor_release(c);
            goto io;
        }
        td_tensor_release(c);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        goto io;
    }
    if (fclose(f) != 0) {
        f = NULL;
        goto io;
    }
    f = NULL;
    if (rename(part, path) != 0) {
        status = td_error(TD_ERR_IO, "safetensors: cannot rename %s to %s: %s",
                          part, path, strerror(errno));
        goto out;
    }
    made = 0;
    status = st_sync_dir(path);
    goto out;
io:
    status = td_error(TD_ERR_IO, "safetensors: writing %s: %s", part,
                      strerror(errno));
out:
    if (f != NULL) {
        fclose(f);
    }
    if (made) {
        unlink(part);
    }
    free(hdr);
    return status;
#undef APPEND
}

/* ---- reader ------------------------------------------------------------- */

typedef struct {
    const char *start, *p, *end;
    const char *path;
} parser_t;

typedef struct {
    char     name[256];
    char     dtype[8];
    int      ndim;
    int64_t  shape[TD_MAX_DIMS];
    uint64_t begin, stop;
} entry_t;

static void
ws(parser_t *ps)
{
    while (ps->p < ps->end && isspace((unsigned char)*ps->p)) {
        ps->p++;
    }
}

static td_status_t
bad(parser_t *ps, const char *what)
{
    return td_error(TD_ERR_PROTOCOL, "safetensors: %s: malformed header: %s "
                    "at byte %ld", ps->path, what, (long)(ps->p - ps->start));
}

static td_status_t
expect(parser_t *ps, char c)
{
    ws(ps);
    if (ps->p >= ps->end || *ps->p != c) {
        return td_error(TD_ERR_PROTOCOL, "safetensors: %s: malformed header: "
                        "expected '%c'", ps->path, c);
    }
    ps->p++;
    return TD_OK;
}

static td_status_t
string(parser_t *ps, char *out, size_t cap)
{
    size_t n = 0;

    if (expect(ps, '"') != TD_OK) {
        return TD_ERR_PROTOCOL;
    }
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) {   /* JSON forbids; a NUL would cut */
            return bad(ps, "control character in a string");
        }
        if (c == '\\') {
            if (ps->p >= ps->end) {
                break;
            }
            c = *ps->p++;   /* keep escaped char (names here are plain) */
            if (c == 'u' && ps->end - ps->p >= 4 &&
                memcmp(ps->p, "0000", 4) == 0) {
                return bad(ps, "NUL in a string");
            }
        }
        if (n + 1 >= cap) {
            return bad(ps, "string too long");
        }
        out[n++] = c;
    }
    if (ps->p >= ps->end) {
        return bad(ps, "unterminated string");
    }
    ps->p++;
    out[n] = '\0';
    return TD_OK;
}

static td_status_t
number(parser_t *ps, uint64_t *v)
{
    uint64_t x = 0;
    int digits = 0;

    ws(ps);
    while (ps->p < ps->end && isdigit((unsigned char)*ps->p)) {
        if (x > (UINT64_MAX - 9) / 10) {
            return bad(ps, "number too large");
        }
        x = x * 10 + (uint64_t)(*ps->p++ - '0');
        digits++;
    }
    if (digits == 0) {
        return bad(ps, "expected a non-negative integer");
    }
    *v = x;
    return TD_OK;
}

/* [n, n, ...] into V (at most MAX) */
static td_status_t
int_array(parser_t *ps, uint64_t *v, int max, int *n_p)
{
    int n = 0;

    if (expect(ps, '[') != TD_OK) {
        return TD_ERR_PROTOCOL;
    }
    ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        *n_p = 0;
        return TD_OK;
    }
    for (;;) {
        if (n >= max) {
            return bad(ps, "array too long");
        }
        if (number(ps, &v[n++]) != TD_OK) {
            return TD_ERR_PROTOCOL;
        }
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        break;
    }
    if (expect(ps, ']') != TD_OK) {
        return TD_ERR_PROTOCOL;
    }
    *n_p = n;
    return TD_OK;
}

/* Parse the "__metadata__" object; when KEY is found its value goes to
 * OUT[CAP] and *FOUND is set (1, or -1 when it did not fit). */
static td_status_t
skip_string_object(parser_t *ps, const char *key, char *out, size_t cap,
                   int *found)
{
    char k[1024], v[4096];

    if (expect(ps, '{') != TD_OK) {
        return TD_ERR_PROTOCOL;
    }
    ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return TD_OK;
    }
    for (;;) {
        if (string(ps, k, sizeof(k)) != TD_OK || expect(ps, ':') != TD_OK ||
            string(ps, v, sizeof(v)) != TD_OK) {
            return TD_ERR_PROTOCOL;
        }
        if (key != NULL && strcmp(k, key) == 0) {
            *found = strlen(v) < cap ? 1 : -1;
            if (*found == 1) {
                memcpy(out, v, strlen(v) + 1);
            }
        }
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, '}');
    }
}

static td_status_t
parse_entry(parser_t *ps, entry_t *e)
{
    char key[64];
    uint64_t v[TD_MAX_DIMS];
    int n, seen = 0;

    if (expect(ps, '{') != TD_OK) {
        return TD_ERR_PROTOCOL;
    }
    for (;;) {
        if (string(ps, key, sizeof(key)) != TD_OK || expect(ps, ':') != TD_OK) {
            return TD_ERR_PROTOCOL;
        }
        if (strcmp(key, "dtype") == 0) {
            if (string(ps, e->dtype, sizeof(e->dtype)) != TD_OK) {
                return TD_ERR_PROTOCOL;
            }
            seen |= 1;
        } else if (strcmp(key, "shape") == 0) {
            if (int_array(ps, v, TD_MAX_DIMS, &n) != TD_OK) {
                return TD_ERR_PROTOCOL;
            }
            e->ndim = n;
            for (int d = 0; d < n; d++) {
                if (v[d] > (uint64_t)INT64_MAX / 16) {
                    return bad(ps, "dimension too large");
                }
                e->shape[d] = (int64_t)v[d];
            }
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0) {
            if (int_array(ps, v, 2, &n) != TD_OK || n != 2 || v[0] > v[1]) {
                return bad(ps, "data_offsets must be [begin, end]");
            }
            e->begin = v[0];
            e->stop = v[1];
            seen |= 4;
        } else {
            return bad(ps, "unknown key in a tensor entry");
        }
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        break;
    }
    if (seen != 7) {
        return bad(ps, "a tensor entry lacks dtype, shape or data_offsets");
    }
    return expect(ps, '}');
}

typedef struct {
    FILE    *f;
    uint64_t hlen;
    long     fsize;
    entry_t *ents;
    int      nents;
} st_file_t;

static void
st_close(st_file_t *sf)
{
    free(sf->ents);
    if (sf->f != NULL) {
        fclose(sf->f);
    }
}

static int
by_name(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->name, ((const entry_t *)b)->name);
}

static int
by_begin(const void *a, const void *b)
{
    const entry_t *x = *(entry_t *const *)a, *y = *(entry_t *const *)b;

    if (x->begin != y->begin) {
        return x->begin < y->begin ? -1 : 1;
    }
    return x->stop < y->stop ? -1 : x->stop > y->stop;
}

/* The format's rules beyond each entry: names are unique, and the entries'
 * byte ranges neither overlap nor leave any of the DATA bytes unused. */
static td_status_t
check_layout(const char *path, entry_t *ents, int nents, uint64_t data)
{
    entry_t **order;
    uint64_t at = 0;
    td_status_t status = TD_OK;

    if (nents == 0) {
        return data == 0 ? TD_OK
            : td_error(TD_ERR_PROTOCOL, "safetensors: %s: %llu trailing data "
                       "bytes belong to no tensor", path,
                       (unsigned long long)data);
    }
    qsort(ents, (size_t)nents, sizeof(*ents), by_name);
    for (int k = 1; k < nents; k++) {
        if (strcmp(ents[k - 1].name, ents[k].name) == 0) {
            return td_error(TD_ERR_PROTOCOL, "safetensors: %s: the name '%s' "
                            "appears twice", path, ents[k].name);
        }
    }
    order = malloc((size_t)(nents ? nents : 1) * sizeof(*order));
    if (order == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "safetensors: out of memory for %d "
                        "entries", nents);
    }
    for (int k = 0; k < nents; k++) {
        order[k] = &ents[k];
    }
    qsort(order, (size_t)nents, sizeof(*order), by_begin);
    for (int k = 0; k < nents && status == TD_OK; k++) {
        if (order[k]->begin != at) {
            status = td_error(TD_ERR_PROTOCOL, "safetensors: %s: '%s' data "
                              "starts at %llu, but the data before it ends at "
                              "%llu (%s)", path, order[k]->name,
                              (unsigned long long)order[k]->begin,
                              (unsigned long long)at,
                              order[k]->begin < at ? "overlap" : "a hole");
        }
        at = order[k]->stop;
    }
    if (status == TD_OK && at != data) {
        status = td_error(TD_ERR_PROTOCOL, "safetensors: %s: %llu trailing "
                          "data bytes belong to no tensor", path,
                          (unsigned long long)(data - at));
    }
    free(order);
    return status;
}

/* Open PATH and parse its header into SF (closed again on failure). */
static td_status_t
st_open_meta(const char *path, st_file_t *sf, const char *key, char *out,
             size_t cap, int *found);

static td_status_t
st_open(const char *path, st_file_t *sf)
{
    return st_open_meta(path, sf, NULL, NULL, 0, NULL);
}

/* st_open, and "__metadata__"[KEY] into OUT[CAP] (see
 * skip_string_object). */
static td_status_t
st_open_meta(const char *path, st_file_t *sf, const char *key, char *out,
             size_t out_cap, int *found)
{
    FILE *f;
    uint64_t hlen;
    long fsize;
    char *hdr = NULL;
    entry_t *ents = NULL;
    int nents = 0, cap = 0;
    td_status_t status = TD_OK;
    parser_t ps;

    memset(sf, 0, sizeof(*sf));

    f = fopen(path, "rb");
    if (f == NULL) {
        return td_error(TD_ERR_IO, "safetensors: cannot open %s: %s", path,
                        strerror(errno));
    }
    if (fseek(f, 0, SEEK_END) != 0 || (fsize = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        status = td_error(TD_ERR_IO, "safetensors: cannot size %s", path);
        goto out;
    }
    if (fsize < 8 || fread(&hlen, 8, 1, f) != 1) {
        status = td_error(TD_ERR_PROTOCOL, "safetensors: %s is too short "
                          "(%ld bytes)", path, fsize);
        goto out;
    }
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > (uint64_t)fsize - 8) {
        status = td_error(TD_ERR_PROTOCOL, "safetensors: %s claims a %llu-byte "
                          "header in a %ld-byte file", path,
                          (unsigned long long)hlen, fsize);
        goto out;
    }
    hdr = malloc(hlen);
    if (hdr == NULL || fread(hdr, 1, hlen, f) != hlen) {
        status = td_error(TD_ERR_IO, "safetensors: cannot read the header of "
                          "%s", path);
        goto out;
    }
    ps.start = ps.p = hdr;
    ps.end = hdr + hlen;
    ps.path = path;
    if ((status = expect(&ps, '{')) != TD_OK) {
        goto out;
    }
    ws(&ps);
    if (ps.p < ps.end && *ps.p == '}') {
        ps.p++;
    } else {
        for (;;) {
            entry_t e = {0};
            if ((status = string(&ps, e.name, sizeof(e.name))) != TD_OK ||
                (status = expect(&ps, ':')) != TD_OK) {
                goto out;
            }
            if (strcmp(e.name, "__metadata__") == 0) {
                status = skip_string_object(&ps, key, out, out_cap, found);
            } else {
                status = parse_entry(&ps, &e);
                if (status == TD_OK) {
                    if (nents == cap) {
                        cap = cap ? cap * 2 : 16;
                        entry_t *ne = realloc(ents, (size_t)cap * sizeof(*ne));
                        if (ne == NULL) {
                            status = td_error(TD_ERR_NO_MEMORY, "safetensors: "
                                              "out of memory");
                            goto out;
                        }
                        ents = ne;
                    }
                    ents[nents++] = e;
                }
            }
            if (status != TD_OK) {
                goto out;
            }
            ws(&ps);
            if (ps.p < ps.end && *ps.p == ',') {
                ps.p++;
                continue;
            }
            if ((status = expect(&ps, '}')) != TD_OK) {
                goto out;
            }
            break;
        }
    }
    ws(&ps);
    if (ps.p != ps.end) {
        status = bad(&ps, "bytes after the header object");
        goto out;
    }
    /* every entry's bytes must lie inside the data section */
    for (int k = 0; k < nents; k++) {
        if (ents[k].stop > (uint64_t)fsize - 8 - hlen) {
            status = td_error(TD_ERR_PROTOCOL, "safetensors: %s: '%s' data "
                              "ends at %llu, past the %llu data bytes", path,
                              ents[k].name, (unsigned long long)ents[k].stop,
                              (unsigned long long)((uint64_t)fsize - 8 - hlen));
            goto out;
        }
    }
    status = check_layout(path, ents, nents, (uint64_t)fsize - 8 - hlen);
    if (status != TD_OK) {
        goto out;
    }
    sf->f = f;
    sf->hlen = hlen;
    sf->fsize = fsize;
    sf->ents = ents;
    sf->nents = nents;
    free(hdr);
    return TD_OK;
out:
    free(ents);
    free(hdr);
    fclose(f);
    return status;
}

static td_dtype_t
td_from_st(const char *s)
{
    for (int d = 0; d < TD_NUM_DTYPES; d++) {
        if (strcmp(st_dtype((td_dtype_t)d), s) == 0) {
            return (td_dtype_t)d;
        }
    }
    return TD_NUM_DTYPES;
}

/* Read entry E's bytes into DST (same dtype and shape checked by caller). */
static td_status_t
st_read(st_file_t *sf, const char *path, const entry_t *e, td_tensor_t *dst)
{
    uint64_t bytes = (uint64_t)td_tensor_nbytes(dst);
    td_tensor_t *tmp;
    td_status_t status;

    if (e->stop - e->begin != bytes) {
        return td_error(TD_ERR_PROTOCOL, "safetensors: %s: '%s' data [%llu, "
                        "%llu) does not hold the %llu bytes of its shape",
                        path, e->name, (unsigned long long)e->begin,
                        (unsigned long long)e->stop, (unsigned long long)bytes);
    }
    status = td_tensor_empty(dst->shape, dst->ndim, dst->dtype, TD_CPU, &tmp);
    if (status != TD_OK) {
        return status;
    }
    if (fseek(sf->f, (long)(8 + sf->hlen + e->begin), SEEK_SET) != 0 ||
        (bytes > 0 && fread(td_tensor_data(tmp), 1, bytes, sf->f) != bytes)) {
        td_tensor_release(tmp);
        return td_error(TD_ERR_IO, "safetensors: reading '%s' from %s",
                        e->name, path);
    }
    status = td_tensor_copy_(dst, tmp);
    td_tensor_release(tmp);
    return status;
}

static const entry_t *
st_find(const st_file_t *sf, const char *name)
{
    for (int k = 0; k < sf->nents; k++) {
        if (strcmp(sf->ents[k].name, name) == 0) {
            return &sf->ents[k];
        }
    }
    return NULL;
}

td_status_t
td_safetensors_get(const char *path, const char *name, td_tensor_t **out)
{
    st_file_t sf;
    const entry_t *e;
    td_tensor_t *t;
    td_dtype_t dt;
    td_status_t status = st_open(path, &sf);

    if (status != TD_OK) {
        return status;
    }
    e = st_find(&sf, name);
    if (e == NULL) {
        status = td_error(TD_ERR_NOT_FOUND, "safetensors: %s has no tensor "
                          "'%s'", path, name);
        goto out;
    }
    dt = td_from_st(e->dtype);
    if (dt == TD_NUM_DTYPES) {
        status = td_error(TD_ERR_DTYPE, "safetensors: %s: '%s' has dtype %s, "
                          "not one of F32 F64 I64 I32 U8", path, name, e->dtype);
        goto out;
    }
    {
        /* check the shape against the stored bytes before allocating */
        uint64_t want = td_dtype_size(dt);
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] != 0 && want > (e->stop - e->begin) / (uint64_t)e->shape[d]) {
                want = UINT64_MAX;
                break;
            }
            want *= (uint64_t)e->shape[d];
        }
        if (want != e->stop - e->begin) {
            status = td_error(TD_ERR_PROTOCOL, "safetensors: %s: '%s' shape %s "
                              "does not match its %llu data bytes", path, name,
                              td__shape_str(e->shape, e->ndim, (char[96]){0}, 96),
                              (unsigned long long)(e->stop - e->begin));
            goto out;
        }
    }
    status = td_tensor_empty(e->shape, e->ndim, dt, TD_CPU, &t);
    if (status != TD_OK) {
        goto out;
    }
    status = st_read(&sf, path, e, t);
    if (status != TD_OK) {
        td_tensor_release(t);
        goto out;
    }
    *out = t;
out:
    st_close(&sf);
    return status;
}

td_status_t
td_safetensors_load(const char *path, const char *const *names,
                    td_tensor_t *const *dst, int n)
{
    st_file_t sf;
    td_status_t status = st_open(path, &sf);

    if (status != TD_OK) {
        return status;
    }
    for (int i = 0; i < n; i++) {
        const entry_t *e = st_find(&sf, names[i]);
        const char *want = st_dtype(dst[i]->dtype);

        if (e == NULL) {
            status = td_error(TD_ERR_NOT_FOUND, "safetensors: %s has no tensor "
                              "'%s'", path, names[i]);
            break;
        }
        if (want == NULL || strcmp(e->dtype, want) != 0) {
            status = td_error(TD_ERR_DTYPE, "safetensors: %s: '%s' is %s, "
                              "expected %s", path, names[i], e->dtype,
                              want ? want : "?");
            break;
        }
        if (e->ndim != dst[i]->ndim ||
            memcmp(e->shape, dst[i]->shape, (size_t)e->ndim * sizeof(int64_t))) {
            status = td_error(TD_ERR_SHAPE, "safetensors: %s: '%s' has shape "
                              "%s, expected %s", path, names[i],
                              td__shape_str(e->shape, e->ndim, (char[96]){0}, 96),
                              TD_SHAPE_STR(dst[i]));
            break;
        }
        status = st_read(&sf, path, e, dst[i]);
        if (status != TD_OK) {
            break;
        }
    }
    st_close(&sf);
    return status;
}

td_status_t
td_safetensors_metadata(const char *path, const char *key, char *out,
                        size_t cap)
{
    st_file_t sf;
    int found = 0;
    td_status_t status;

    status = st_open_meta(path, &sf, key, out, cap, &found);
    if (status != TD_OK) {
        return status;
    }
    st_close(&sf);
    if (found == 0) {
        return td_error(TD_ERR_NOT_FOUND, "safetensors: %s has no metadata "
                        "'%s'", path, key);
    }
    if (found < 0) {
        return td_error(TD_ERR_INVALID, "safetensors: %s: metadata '%s' is "
                        "longer than %zu bytes", path, key, cap - 1);
    }
    return TD_OK;
}
