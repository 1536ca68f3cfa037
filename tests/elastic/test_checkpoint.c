/* tests/elastic/test_checkpoint: todist/checkpoint.h in one process (a
 * world of 1): every state round trips (parameters, SGD momentum and Adam
 * moments with their step counts and lr, DDP's rebuilt bucket order, the
 * sampler's epoch and position, integers, bytes, metadata) and the
 * restored objects take the next step exactly as the saved ones; a
 * truncated, a foreign, a non-checkpoint file, a missing entry and another
 * world size are rejected with clear errors and change nothing, unless
 * re-sharding is allowed: then the sampler's position is re-sharded
 * (ceil(position * W / W'), computed here by hand); a writer
 * killed mid-save (a file size limit) leaves the old file whole. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/ddp/ddp_internal.h"
#include "tests/tap.h"
#include <todist/todist.h>

typedef struct {
    td_mlp_t                *mlp;
    td_ddp_t                *ddp;
    td_optim_t              *sgd, *adam;
    td_distributed_sampler_t sampler;
    int64_t                  position, step;
    unsigned char            rng[16];
    td_checkpoint_t         *ck;
} state_t;

static int64_t sizes[4] = {6, 5, 4, 3};

/* One DDP step of both optimizers (SGD on layers 0-1's, Adam on the rest). */
static td_status_t
train_step(state_t *s, int k)
{
    int64_t xs[2] = {8, 6}, ys = 8;
    td_tensor_t *x, *y, *logits, *loss;
    td_status_t st;

    st = td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x);
    if (st == TD_OK) {
        st = td_tensor_normal_(x, 0, 1, 100 + (uint64_t)k);
    }
    if (st == TD_OK) {
        st = td_tensor_empty(&ys, 1, TD_INT64, TD_CPU, &y);
    }
    if (st != TD_OK) {
        return st;
    }
    for (int i = 0; i < 8; i++) {
        ((int64_t *)td_tensor_data(y))[i] = (i + k) % 3;
    }
    st = td_mlp_forward(s->mlp, x, &logits);
    if (st == TD_OK) {
        st = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss);
        td_tensor_release(logits);
    }
    if (st == TD_OK) {
        st = td_ddp_backward(s->ddp, loss);
        td_tensor_release(loss);
    }
    if (st == TD_OK) st = td_ddp_wait(s->ddp);
    if (st == TD_OK) st = td_optim_step(s->sgd);
    if (st == TD_OK) st = td_optim_step(s->adam);
    if (st == TD_OK) st = td_optim_zero_grad(s->sgd);
    if (st == TD_OK) st = td_optim_zero_grad(s->adam);
    td_tensor_release(x);
    td_tensor_release(y);
    s->step++;
    s->position += 8;
    return st;
}

static td_status_t
state_new(state_t *s, uint64_t seed, int replicas)
{
    td_ddp_opts_t d = td_ddp_defaults();
    td_sgd_opts_t so = {0.1, 0.9, 0, 0, 0};
    td_adam_opts_t ao = td_adam_defaults();
    td_tensor_t **p;
    td_status_t st;

    memset(s, 0, sizeof(*s));
    d.first_bucket_bytes = 64;   /* several buckets, rebuilt after step 1 */
    d.bucket_cap_bytes = 64;
    ao.amsgrad = 1;
    st = td_mlp_create(sizes, 4, TD_FLOAT32, seed, &s->mlp);
    if (st != TD_OK) return st;
    p = td_mlp_params(s->mlp);
    if ((st = td_ddp_create_mlp(s->mlp, &d, &s->ddp)) != TD_OK ||
        (st = td_optim_sgd(p, 4, &so, &s->sgd)) != TD_OK ||
        (st = td_optim_adam(p + 4, 2, &ao, &s->adam)) != TD_OK ||
        (st = td_distributed_sampler_init(&s->sampler, 100, replicas, 0, 1,
                                          7, 0)) != TD_OK ||
        (st = td_checkpoint_create(&s->ck)) != TD_OK ||
        (st = td_checkpoint_add_tensors(s->ck, "model", p, 6)) != TD_OK ||
        (st = td_checkpoint_add_optim(s->ck, "sgd", s->sgd)) != TD_OK ||
        (st = td_checkpoint_add_optim(s->ck, "adam", s->adam)) != TD_OK ||
        (st = td_checkpoint_add_ddp(s->ck, "ddp", s->ddp)) != TD_OK ||
        (st = td_checkpoint_add_sampler(s->ck, "sampler", &s->sampler,
                                        &s->position)) != TD_OK ||
        (st = td_checkpoint_add_int64(s->ck, "step", &s->step, 1)) != TD_OK ||
        (st = td_checkpoint_add_bytes(s->ck, "rng", s->rng,
                                      sizeof(s->rng))) != TD_OK) {
        return st;
    }
    return td_checkpoint_set_meta(s->ck, "note", "unit test");
}

static void
state_free(state_t *s)
{
    td_checkpoint_free(s->ck);
    td_optim_free(s->sgd);
    td_optim_free(s->adam);
    td_ddp_destroy(s->ddp);
    td_mlp_free(s->mlp);
}

static int
same_tensor(td_tensor_t *a, td_tensor_t *b)
{
    return td_tensor_nbytes(a) == td_tensor_nbytes(b) &&
           memcmp(td_tensor_data(a), td_tensor_data(b),
                  td_tensor_nbytes(a)) == 0;
}

static int
same_params(state_t *a, state_t *b)
{
    for (int i = 0; i < 6; i++) {
        if (!same_tensor(td_mlp_params(a->mlp)[i], td_mlp_params(b->mlp)[i])) {
            return 0;
        }
    }
    return 1;
}

static int
same_optim(td_optim_t *a, td_optim_t *b)
{
    for (int i = 0; i < td_optim_num_params(a); i++) {
        if (td_optim_param_step(a, i) != td_optim_param_step(b, i)) {
            return 0;
        }
        for (int k = 0; k < td_optim_num_buffers(a); k++) {
            td_tensor_t *x, *y;
            if (td_optim_buffer(a, i, k, &x) != TD_OK ||
                td_optim_buffer(b, i, k, &y) != TD_OK || !same_tensor(x, y)) {
                return 0;
            }
        }
    }
    return td_optim_lr(a) == td_optim_lr(b);
}

static int
same_buckets(td_ddp_t *a, td_ddp_t *b)
{
    if (td_ddp_num_buckets(a) != td_ddp_num_buckets(b)) {
        return 0;
    }
    for (int k = 0; k < td_ddp_num_buckets(a); k++) {
        int na, nb;
        const int *pa = td_ddp_bucket_params(a, k, &na);
        const int *pb = td_ddp_bucket_params(b, k, &nb);
        if (na != nb || memcmp(pa, pb, (size_t)na * sizeof(int)) != 0) {
            return 0;
        }
    }
    return 1;
}

static int
file_bytes(const char *path, char **buf, long *n)
{
    FILE *f = fopen(path, "rb");

    if (f == NULL) return -1;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)*n + 1);
    if (fread(*buf, 1, (size_t)*n, f) != (size_t)*n) {
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static void
write_bytes(const char *path, const char *buf, long n)
{
    FILE *f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(buf, 1, (size_t)n, f);
        fclose(f);
    }
}

int
main(void)
{
    char dir[] = "/tmp/td-ckpt-XXXXXX", path[256], bad[256], meta[64];
    state_t a, b;
    char *orig = NULL, *now = NULL;
    long n_orig = 0, n_now = 0;
    td_status_t st;

    plan(26);
    if (mkdtemp(dir) == NULL || td_init(NULL) != TD_OK) {
        plan_skip_all("no temporary folder or td_init failed");
    }
    snprintf(path, sizeof(path), "%s/ck.safetensors", dir);
    st = state_new(&a, 1, 1);
    ok(st == TD_OK, "checkpoint of every state set up: %s",
       st == TD_OK ? "" : td_last_error());
    for (int k = 0; k < 3 && st == TD_OK; k++) {
        st = train_step(&a, k);
    }
    memcpy(a.rng, "0123456789abcdef", 16);
    {
        /* an order neither a fresh DDP nor the rebuild gives */
        int order[6] = {0, 1, 2, 3, 4, 5};
        if (st == TD_OK) {
            st = td__ddp_set_bucket_order(a.ddp, order, 1);
        }
    }
    td_distributed_sampler_set_epoch(&a.sampler, 3);
    td_optim_set_lr(a.sgd, 0.05);
    ok(st == TD_OK, "3 training steps");
    st = td_checkpoint_save(a.ck, path);
    ok(st == TD_OK, "saved: %s", st == TD_OK ? "" : td_last_error());

    st = state_new(&b, 2, 1);       /* other weights, fresh state */
    ok(st == TD_OK && !same_params(&a, &b) && !same_buckets(a.ddp, b.ddp),
       "a fresh run differs (weights, bucket order)");
    st = td_checkpoint_load(b.ck, path);
    ok(st == TD_OK, "loaded: %s", st == TD_OK ? "" : td_last_error());
    ok(same_params(&a, &b), "parameters round trip bit for bit");
    ok(same_optim(a.sgd, b.sgd), "SGD momentum, step counts, lr round trip");
    ok(same_optim(a.adam, b.adam), "Adam moments (amsgrad), steps round trip");
    ok(same_buckets(a.ddp, b.ddp), "DDP's rebuilt bucket order round trips");
    ok(b.sampler.epoch == 3 && b.position == 24, "sampler epoch %lld "
       "position %lld", (long long)b.sampler.epoch, (long long)b.position);
    ok(b.step == 3 && memcmp(b.rng, a.rng, 16) == 0, "step and rng bytes");
    ok(td_safetensors_metadata(path, "format", meta, sizeof(meta)) == TD_OK &&
       strcmp(meta, "todist.checkpoint.v1") == 0 &&
       td_safetensors_metadata(path, "note", meta, sizeof(meta)) == TD_OK &&
       strcmp(meta, "unit test") == 0, "__metadata__ holds format and "
       "the user's keys");
    st = train_step(&a, 3);
    if (st == TD_OK) {
        st = train_step(&b, 3);
    }
    ok(st == TD_OK && same_params(&a, &b) && same_optim(a.adam, b.adam) &&
       same_optim(a.sgd, b.sgd), "the next step is the same on the saved and "
       "the restored run");

    /* rejected files change nothing */
    file_bytes(path, &orig, &n_orig);
    snprintf(bad, sizeof(bad), "%s/bad.safetensors", dir);
    write_bytes(bad, orig, n_orig - 10);
    st = td_checkpoint_load(b.ck, bad);
    ok(st != TD_OK && strstr(td_last_error(), "bad.safetensors") != NULL,
       "a truncated file is rejected: %s", td_last_error());
    ok(same_params(&a, &b) && b.step == 4, "and changes nothing");
    {
        td_tensor_t *one = td_mlp_params(a.mlp)[5];
        const char *nm = "w";
        td_safetensors_save(bad, &nm, &one, 1);
    }
    st = td_checkpoint_load(b.ck, bad);
    ok(st == TD_ERR_PROTOCOL &&
       strstr(td_last_error(), "not a todist checkpoint") != NULL,
       "a foreign safetensors file is rejected: %s", td_last_error());
    {
        const char *zip = "PK\003\004 this is a zip, not a checkpoint";
        write_bytes(bad, zip, (long)strlen(zip));
    }
    st = td_checkpoint_load(b.ck, bad);
    ok(st != TD_OK, "a foreign file is rejected: %s", td_last_error());
    {
        int64_t extra = 0;
        td_checkpoint_add_int64(b.ck, "extra", &extra, 1);
        st = td_checkpoint_load(b.ck, path);
        ok(st == TD_ERR_NOT_FOUND && strstr(td_last_error(), "extra"),
           "a missing entry is named: %s", td_last_error());
        ok(same_params(&a, &b) && b.step == 4, "and changes nothing");
    }
    {
        state_t c;
        st = state_new(&c, 1, 2);
        if (st == TD_OK) {
            st = td_checkpoint_load(c.ck, path);
        }
        ok(st == TD_ERR_INVALID && strstr(td_last_error(), "num_replicas"),
           "another world size is refused: %s", td_last_error());
        state_free(&c);
    }
    /* re-sharded on request: 1 rank consumed the first 24 entries of
     * epoch 3's order; 3 ranks go on at ceil(24 / 3) = 8 each, 5 ranks
     * at ceil(24 / 5) = 5 (entry 24 skipped, none seen twice) */
    for (int w = 3; w <= 5; w += 2) {
        state_t c;
        st = state_new(&c, 2, w);
        if (st == TD_OK) {
            td_checkpoint_allow_reshard(c.ck, 1);
            st = td_checkpoint_load(c.ck, path);
        }
        ok(st == TD_OK && c.sampler.epoch == 3 &&
           c.position == (w == 3 ? 8 : 5) && c.step == 3,
           "at %d ranks the load re-shards: epoch %lld position "
           "%lld (%s)", w, (long long)c.sampler.epoch,
           (long long)c.position, st == TD_OK ? "ok" : td_last_error());
        state_free(&c);
    }

    /* a writer killed mid-save leaves the old file whole */
    {
        pid_t pid = fork();
        int ws = 0;
        if (pid == 0) {
            struct rlimit rl = {(rlim_t)n_orig / 2, (rlim_t)n_orig / 2};
            setrlimit(RLIMIT_FSIZE, &rl);
            td_checkpoint_save(a.ck, path);    /* SIGXFSZ kills it */
            _exit(0);
        }
        waitpid(pid, &ws, 0);
        ok(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGXFSZ,
           "the writer was killed mid-write (status %#x)", ws);
        ok(file_bytes(path, &now, &n_now) == 0 && n_now == n_orig &&
           memcmp(now, orig, (size_t)n_orig) == 0,
           "the old checkpoint is byte for byte whole");
        st = td_checkpoint_load(a.ck, path);
        ok(st == TD_OK && a.step == 3, "and loads (step %lld)",
           (long long)a.step);
    }
    ok(td_checkpoint_set_meta(a.ck, "format", "x") == TD_ERR_INVALID,
       "the format key is reserved");
    free(orig);
    free(now);
    state_free(&a);
    state_free(&b);
    td_finalize();
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0) {
            diag("could not remove %s", dir);
        }
    }
    return exit_status();
}
