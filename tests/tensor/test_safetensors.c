/* test_safetensors: save/load round trip of every dtype, the checks on
 * load (name, dtype, shape), and malformed files rejected, never trusted;
 * a save killed mid-write leaves the old file whole (S1), a failed one
 * leaves no temporary file (S3).
 * (Files written by Python in the format are read in test_reference.) */
#include "config.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include <todist/todist.h>

static char dir[256];

static const char *
path_of(const char *name)
{
    static char p[512];

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return p;
}

/* write an 8-byte length + HEADER + DATA_LEN zero bytes */
static const char *
raw_file(const char *name, uint64_t claimed, const char *header,
         size_t data_len)
{
    const char *p = path_of(name);
    FILE *f = fopen(p, "wb");

    if (claimed == 0) {
        claimed = strlen(header);
    }
    fwrite(&claimed, 8, 1, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) {
        fputc(0, f);
    }
    fclose(f);
    return p;
}

/* Files in DIR whose name starts with PREFIX. */
static int
count_prefixed(const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* Save a 256 KiB tensor to PATH in a child whose files may not pass
 * 64 KiB (RLIMIT_FSIZE): with SIGXFSZ at its default the kernel kills it
 * mid-write; with it ignored the write fails (EFBIG). Returns the wait
 * status; with IGNORE the child exits 0 when the save returned TD_ERR_IO. */
static int
save_cut(const char *path, int ignore)
{
    int st = 0;
    pid_t pid = fork();

    if (pid == 0) {
        struct rlimit rl = {65536, 65536};
        const char *nm[] = {"w"};
        td_tensor_t *big;

        if (ignore) {
            signal(SIGXFSZ, SIG_IGN);
        }
        td_tensor_full((int64_t[]){1 << 16}, 1, TD_FLOAT32, 1.0, &big);
        setrlimit(RLIMIT_FSIZE, &rl);
        _exit(td_safetensors_save(path, nm, &big, 1) == TD_ERR_IO ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    return st;
}

int
main(void)
{
    td_tensor_t *a, *b, *c, *d, *ra, *rb, *rc, *rd, *got;
    const char *names[] = {"layer.weight", "layer.bias", "steps", "mask"};
    const char *p;

    plan(36);
    snprintf(dir, sizeof(dir), "%s/td_st_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        plan_skip_all("no temp dir");
    }
    td_tensor_empty((int64_t[]){3, 4}, 2, TD_FLOAT32, TD_CPU, &a);
    td_tensor_normal_(a, 0, 1, 1);
    td_tensor_empty((int64_t[]){4}, 1, TD_FLOAT64, TD_CPU, &b);
    td_tensor_normal_(b, 0, 1, 2);
    td_tensor_full((int64_t[]){2}, 1, TD_INT64, 123456789012LL, &c);
    td_tensor_full((int64_t[]){5}, 1, TD_UINT8, 7, &d);
    p = path_of("ck.safetensors");
    {
        /* save a transposed view: written contiguous */
        td_tensor_t *at, *ts[4];
        td_tensor_transpose(a, 0, 1, &at);
        ts[0] = at; ts[1] = b; ts[2] = c; ts[3] = d;
        is_int(td_safetensors_save(p, names, ts, 4), TD_OK, "save 4 tensors "
               "(f32 view, f64, i64, u8)");
        td_tensor_zeros((int64_t[]){4, 3}, 2, TD_FLOAT32, &ra);
        td_tensor_zeros((int64_t[]){4}, 1, TD_FLOAT64, &rb);
        td_tensor_zeros((int64_t[]){2}, 1, TD_INT64, &rc);
        td_tensor_zeros((int64_t[]){5}, 1, TD_UINT8, &rd);
        is_int(td_safetensors_load(p, names, (td_tensor_t *[]){ra, rb, rc, rd},
                                   4), TD_OK, "load them back");
        ok(td_tensor_get(ra, (int64_t[]){3, 2}) == td_tensor_get(at, (int64_t[]){3, 2}),
           "float32 view values survive");
        ok(memcmp(td_tensor_data(rb), td_tensor_data(b), 32) == 0,
           "float64 bit-exact");
        is_double(td_tensor_get(rc, (int64_t[]){1}), 123456789012.0, 0,
                  "int64 survives");
        is_double(td_tensor_get(rd, (int64_t[]){4}), 7, 0, "uint8 survives");
        td_tensor_release(at);
    }
    {
        FILE *f = fopen(p, "rb");
        uint64_t hl;
        char hdr[512] = {0};
        if (fread(&hl, 8, 1, f) != 1 || hl >= sizeof(hdr) ||
            fread(hdr, 1, hl, f) != hl) {
            hl = 0;
        }
        fclose(f);
        ok(hl % 8 == 0 && strstr(hdr, "\"layer.weight\":{\"dtype\":\"F32\","
                                 "\"shape\":[4,3],\"data_offsets\":[0,48]}"),
           "header is the documented JSON, padded to 8 bytes");
    }
    is_int(td_safetensors_get(p, "steps", &got), TD_OK, "get by name");
    ok(td_tensor_dtype(got) == TD_INT64 && td_tensor_numel(got) == 2,
       "with its stored dtype and shape");
    td_tensor_release(got);

    is_int(td_safetensors_load(p, (const char *[]){"nope"}, &ra, 1),
           TD_ERR_NOT_FOUND, "missing name");
    like(td_last_error(), "'nope'", "is named");
    is_int(td_safetensors_load(p, (const char *[]){"layer.bias"}, &ra, 1),
           TD_ERR_DTYPE, "dtype mismatch (F64 into float32)");
    is_int(td_safetensors_load(p, (const char *[]){"layer.weight"},
                               (td_tensor_t *[]){a}, 1),
           TD_ERR_SHAPE, "shape mismatch [4, 3] vs [3, 4]");
    like(td_last_error(), "\\[4, 3\\].*\\[3, 4\\]", "both shapes named");

    /* malformed files */
    p = raw_file("len.st", 1000, "{}", 0);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL, "header length "
           "past the end of the file");
    p = raw_file("json.st", 0, "{\"x\":{\"dtype\":", 8);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL, "truncated JSON");
    p = raw_file("off.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],"
                 "\"data_offsets\":[0,16]}}   ", 8);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL, "data offsets "
           "past the end");
    p = raw_file("shape.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1000000,"
                 "1000000],\"data_offsets\":[0,8]}}  ", 8);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL, "a shape that "
           "does not fit its bytes is refused before allocating");
    p = raw_file("key.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8],\"evil\":1}}   ", 8);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL, "unknown keys "
           "rejected");
    /* issue 18, finding 7: the format's layout rules */
    p = raw_file("overlap.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":"
                 "[2],\"data_offsets\":[4,12]}}", 12);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL,
           "overlapping data offsets rejected");
    like(td_last_error(), "overlap", "and called an overlap");
    p = raw_file("dup.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]},\"x\":{\"dtype\":\"F32\",\"shape\":"
                 "[1],\"data_offsets\":[4,8]}}", 8);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL,
           "a duplicate name rejected");
    like(td_last_error(), "'x' appears twice", "and named");
    p = raw_file("trail.st", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}", 12);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL,
           "unreferenced trailing data rejected");
    like(td_last_error(), "8 trailing data bytes", "and counted");
    {
        static const char nul_hdr[] = "{\"x\0y\":{\"dtype\":\"F32\","
            "\"shape\":[1],\"data_offsets\":[0,4]}}";
        const char *np = path_of("nul.st");
        FILE *f = fopen(np, "wb");
        uint64_t hl = sizeof(nul_hdr) - 1;
        fwrite(&hl, 8, 1, f);
        fwrite(nul_hdr, 1, sizeof(nul_hdr) - 1, f);
        fwrite("\0\0\0\0", 1, 4, f);
        fclose(f);
        is_int(td_safetensors_get(np, "x", &got), TD_ERR_PROTOCOL,
               "a name containing a NUL byte rejected");
    }
    p = raw_file("unul.st", 0, "{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\""
                 ":[1],\"data_offsets\":[0,4]}}", 4);
    is_int(td_safetensors_get(p, "x", &got), TD_ERR_PROTOCOL,
           "a name with an escaped NUL rejected");
    is_int(td_safetensors_save(path_of("bad"), (const char *[]){"a\"b"}, &a, 1),
           TD_ERR_INVALID, "a name that needs escaping is refused");

    td_tensor_release(a);
    td_tensor_release(b);
    td_tensor_release(c);
    td_tensor_release(d);
    td_tensor_release(ra);
    td_tensor_release(rb);
    td_tensor_release(rc);
    td_tensor_release(rd);
    /* S1-S3 (issue 36 defect 4): a checkpoint is replaced atomically */
    {
        const char *nm[] = {"w"};
        td_tensor_t *old, *back = NULL;
        char ck[600];
        int st;

        snprintf(ck, sizeof(ck), "%s", path_of("ckpt.safetensors"));
        td_tensor_full((int64_t[]){4}, 1, TD_FLOAT32, 7.0, &old);
        is_int(td_safetensors_save(ck, nm, &old, 1), TD_OK,
               "the old checkpoint is written");
        is_int(count_prefixed("ckpt.safetensors.tmp"), 0,
               "a successful save leaves no temporary file");
        st = save_cut(ck, 0);
        ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ, "a new save is "
           "killed mid-write (SIGXFSZ at 64 KiB of 256 KiB; status %#x)", st);
        is_int(td_safetensors_get(ck, "w", &back), TD_OK,
               "after it the checkpoint still loads");
        ok(back != NULL && td_tensor_numel(back) == 4 &&
           ((float *)td_tensor_data(back))[3] == 7.0f,
           "and it is the old one, whole (4 elements of 7)");
        td_tensor_release(back);
        back = NULL;
        is_int(count_prefixed("ckpt.safetensors.tmp"), 1,
               "the killed writer's temporary file is beside it, not it");
        st = save_cut(ck, 1);
        ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "a save whose write fails (EFBIG) returns TD_ERR_IO");
        is_int(count_prefixed("ckpt.safetensors.tmp"), 1,
               "a failed save removes its temporary file (S3)");
        td_tensor_release(old);
    }
    {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0) {
            diag("could not remove %s", dir);
        }
    }
    return exit_status();
}
