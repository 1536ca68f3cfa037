/* examples/ddp_rpc.c: seed 002's program, PyTorch's "Combining Distributed
 * DataParallel with Distributed RPC Framework" tutorial, in C.
 *
 *   todist-run -n 4 examples/ddp_rpc [--epochs N] [--ref FILE] [--check]
 *                                    [--seed S]
 *   srun --todist -n 4 examples/ddp_rpc ...
 *
 * Four processes, as in the tutorial: trainers on ranks 0 and 1, the master
 * on rank 2, the parameter server on rank 3. Every rank makes the trainers'
 * process group ({0, 1}: td_group_new is collective over the world). The
 * master creates a RemoteModule EmbeddingBag(100, 16, mode sum) on the
 * parameter server and starts the training on each trainer by RPC
 * ("ddp_rpc.run_trainer", with the module as an argument), then waits for
 * both. A trainer wraps its Linear(16, 8) in DDP over the trainers' group,
 * and builds one distributed optimizer (SGD, lr 0.05) over the remote
 * embedding's parameters (remote_parameters) and references to its own
 * linear parameters. Every step runs in a distributed autograd context:
 * the embedding lookup on the parameter server, the local linear, the
 * cross-entropy loss, the distributed backward with DDP (the linear's
 * gradients in the context are averaged over the trainers), the
 * distributed optimizer's step. 100 epochs of 10 batches by default, each
 * batch made as the tutorial's get_next_batch makes it (20-50 indices in
 * 0..99, bags of 1-10 of them, targets in 0..7).
 *
 * Determinism. The tutorial's trainers race: a trainer may read the
 * embedding before or after the other's optimizer step arrived, and the
 * parameter server may apply the two trainers' updates to the same weight
 * at the same time (one per-owner optimizer per trainer, each stepping in
 * place). Here, after its backward (whose DDP all-reduce already waits for
 * both trainers, so both forwards read the same weights), trainer 0 steps,
 * the trainers meet at a barrier, trainer 1 steps, and they meet again: the
 * embedding gets trainer 0's update then trainer 1's, before either
 * trainer's next forward, every run. That is what the reference
 * (tests/data/gen_ddp_rpc_ref.py) computes, so the losses can be compared
 * exactly.
 *
 * --ref FILE replays a reference made by tests/data/gen_ddp_rpc_ref.py with
 * PyTorch (initial weights, every batch; the number of epochs it holds)
 * and checks, at every step, each trainer's loss against PyTorch's (1e-5)
 * and its linear weights against PyTorch's (1e-5), and (as --check alone
 * does) that the two trainers' linear weights are identical (all-gathered
 * on the trainers' group). The master prints "check=ok ..." or
 * "check=FAILED ..." and exits 1 on failure. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/todist.h>

#define TRAINER0   0
#define TRAINER1   1
#define MASTER     2
#define PS         3
#define NUM_EMB    100
#define EMB_DIM    16
#define NUM_CLS    8
#define BATCHES    10
#define LR         0.05
#define TOL        1e-5
#define TIMEOUT_S  3600.0     /* a whole training run, as one call */

static td_group_t *trainers;      /* {0, 1}, made by every rank */

/* A trainer's main thread waits until the master says the run is over
 * ("ddp_rpc.finish", sent after both trainers answered, or after a
 * failure), so the group outlives every collective on it. */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  done_cond = PTHREAD_COND_INITIALIZER;
static int             trainer_done;
static int             trainers_made;   /* `trainers` is set (done_lock) */

/* The trainers' group, once this rank's td_group_new has returned: the
 * master's call may start the training on a handler thread before it has
 * (td_group_new returns on the master first), and a NULL group would be
 * the world's (the trainers then broadcast on different groups). */
static td_group_t *
trainers_group(void)
{
    td_group_t *g;

    pthread_mutex_lock(&done_lock);
    while (!trainers_made) {
        pthread_cond_wait(&done_cond, &done_lock);
    }
    g = trainers;
    pthread_mutex_unlock(&done_lock);
    return g;
}

/* A trainer's linear, Linear(16, 8): W [8, 16], b [8], float32 leaves. */
static td_tensor_t *fc[2];

/* ---- batches ----------------------------------------------------------- */

typedef struct {
    td_tensor_t *indices, *offsets, *targets;
} batch_t;

static void
batch_free(batch_t *b)
{
    td_tensor_release(b->indices);
    td_tensor_release(b->offsets);
    td_tensor_release(b->targets);
    memset(b, 0, sizeof(*b));
}

static uint64_t
mix(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int64_t
randint(uint64_t *s, int64_t lo, int64_t hi)      /* lo..hi inclusive */
{
    return lo + (int64_t)(mix(s) % (uint64_t)(hi - lo + 1));
}

/* The tutorial's get_next_batch, with our own generator. */
static td_status_t
batch_make(uint64_t *s, batch_t *b)
{
    int64_t ind[50], off[50], tgt[50], n = randint(s, 20, 50), nb = 0;
    td_status_t st;

    for (int64_t i = 0; i < n; i++) {
        ind[i] = randint(s, 0, NUM_EMB - 1);
    }
    for (int64_t start = 0; start < n; start += randint(s, 1, 10)) {
        off[nb++] = start;
    }
    for (int64_t i = 0; i < nb; i++) {
        tgt[i] = randint(s, 0, NUM_CLS - 1);
    }
    if ((st = td_tensor_from_data(ind, &n, 1, TD_INT64, &b->indices)) ==
            TD_OK &&
        (st = td_tensor_from_data(off, &nb, 1, TD_INT64, &b->offsets)) ==
            TD_OK) {
        st = td_tensor_from_data(tgt, &nb, 1, TD_INT64, &b->targets);
    }
    return st;
}

/* ---- the reference file (tests/data/gen_ddp_rpc_ref.py) ------------------ */

typedef struct {
    int          steps;
    td_tensor_t *indices, *offsets, *targets, *n_indices, *n_bags, *loss;
    td_tensor_t *w_after, *b_after;
    int64_t      at_ind, at_bag;     /* where the next step's part starts */
} ref_t;

static void
ref_free(ref_t *r)
{
    td_tensor_release(r->indices);
    td_tensor_release(r->offsets);
    td_tensor_release(r->targets);
    td_tensor_release(r->n_indices);
    td_tensor_release(r->n_bags);
    td_tensor_release(r->loss);
    td_tensor_release(r->w_after);
    td_tensor_release(r->b_after);
    memset(r, 0, sizeof(*r));
}

static td_status_t
ref_get(const char *path, const char *name, int t, td_dtype_t dt,
        td_tensor_t **out)
{
    char full[64];
    td_status_t st;

    if (t >= 0) {
        snprintf(full, sizeof(full), "t%d.%s", t, name);
    } else {
        snprintf(full, sizeof(full), "%s", name);
    }
    st = td_safetensors_get(path, full, out);
    if (st == TD_OK && td_tensor_dtype(*out) != dt) {
        td_tensor_release(*out);
        st = td_error(TD_ERR_DTYPE, "ddp_rpc: %s: %s is not %s", path, full,
                      td_dtype_name(dt));
    }
    return st;
}

static td_status_t
ref_open(const char *path, int t, ref_t *r)
{
    td_status_t st;
    int64_t total_ind = 0, total_bag = 0;

    memset(r, 0, sizeof(*r));
    if ((st = ref_get(path, "indices", t, TD_INT64, &r->indices)) != TD_OK ||
        (st = ref_get(path, "offsets", t, TD_INT64, &r->offsets)) != TD_OK ||
        (st = ref_get(path, "targets", t, TD_INT64, &r->targets)) != TD_OK ||
        (st = ref_get(path, "n_indices", t, TD_INT64, &r->n_indices)) !=
            TD_OK ||
        (st = ref_get(path, "n_bags", t, TD_INT64, &r->n_bags)) != TD_OK ||
        (st = ref_get(path, "loss", t, TD_FLOAT32, &r->loss)) != TD_OK ||
        (st = ref_get(path, "fc.weight.after", -1, TD_FLOAT32,
                      &r->w_after)) != TD_OK ||
        (st = ref_get(path, "fc.bias.after", -1, TD_FLOAT32, &r->b_after)) !=
            TD_OK) {
        ref_free(r);
        return st;
    }
    r->steps = (int)td_tensor_numel(r->n_indices);
    /* the lengths must add up to what the file holds (never trust a file) */
    for (int s = 0; s < r->steps; s++) {
        int64_t ni = ((int64_t *)td_tensor_data(r->n_indices))[s];
        int64_t nb = s < td_tensor_numel(r->n_bags)
                     ? ((int64_t *)td_tensor_data(r->n_bags))[s] : -1;

        if (ni < 1 || ni > 50 || nb < 1 || nb > ni) {
            ref_free(r);
            return td_error(TD_ERR_PROTOCOL, "ddp_rpc: %s: trainer %d step "
                            "%d has %lld indices in %lld bags", path, t, s,
                            (long long)ni, (long long)nb);
        }
        total_ind += ni;
        total_bag += nb;
    }
    if (r->steps < 1 || td_tensor_numel(r->n_bags) != r->steps ||
        td_tensor_numel(r->indices) != total_ind ||
        td_tensor_numel(r->offsets) != total_bag ||
        td_tensor_numel(r->targets) != total_bag ||
        td_tensor_numel(r->loss) != r->steps ||
        td_tensor_numel(r->w_after) != (int64_t)r->steps * NUM_CLS * EMB_DIM ||
        td_tensor_numel(r->b_after) != (int64_t)r->steps * NUM_CLS) {
        ref_free(r);
        return td_error(TD_ERR_PROTOCOL, "ddp_rpc: %s: trainer %d's arrays "
                        "do not match its %d steps", path, t,
                        r->steps);
    }
    return TD_OK;
}

static td_status_t
ref_slice(td_tensor_t *all, int64_t at, int64_t n, td_tensor_t **out)
{
    td_tensor_t *v = NULL;
    td_status_t st = td_tensor_narrow(all, 0, at, n, &v);

    if (st == TD_OK) {
        st = td_tensor_clone(v, out);
    }
    td_tensor_release(v);
    return st;
}

/* Step S's batch from the file (steps are read in order). */
static td_status_t
ref_batch(ref_t *r, int s, batch_t *b)
{
    int64_t ni = ((int64_t *)td_tensor_data(r->n_indices))[s];
    int64_t nb = ((int64_t *)td_tensor_data(r->n_bags))[s];
    td_status_t st;

    if ((st = ref_slice(r->indices, r->at_ind, ni, &b->indices)) == TD_OK &&
        (st = ref_slice(r->offsets, r->at_bag, nb, &b->offsets)) == TD_OK) {
        st = ref_slice(r->targets, r->at_bag, nb, &b->targets);
    }
    r->at_ind += ni;
    r->at_bag += nb;
    return st;
}

/* ---- handlers ------------------------------------------------------------ */

/* On a trainer: its linear parameter K, the value of a reference the
 * trainer's distributed optimizer holds (owned by the trainer itself, as
 * RRef(param) in the tutorial). */
static td_status_t
fn_fc_param(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
            td_rpc_list_t *result)
{
    int64_t k;
    td_status_t st;

    (void)arg;
    if ((st = td_rpc_list_int(a, 0, &k)) != TD_OK) {
        return st;
    }
    if (k < 0 || k > 1 || fc[k] == NULL) {
        return td_error(TD_ERR_RANGE, "ddp_rpc: rank %d asked for linear "
                        "parameter %lld", info->caller, (long long)k);
    }
    return td_rpc_list_add_tensor(result, fc[k]);
}

/* On the parameter server, through a reference to a parameter: (param,
 * values) -> copy VALUES into it (the reference's initial weights). */
static td_status_t
fn_load(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
        td_rpc_list_t *result)
{
    td_tensor_t *p, *v;
    td_status_t st;
    int was;

    (void)arg;
    (void)info;
    (void)result;
    if ((st = td_rpc_list_tensor(a, 0, &p)) != TD_OK ||
        (st = td_rpc_list_tensor(a, 1, &v)) != TD_OK) {
        return st;
    }
    was = td_grad_set_enabled(0);
    st = td_tensor_copy_(p, v);
    td_grad_set_enabled(was);
    return st;
}

static double
max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;

    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = isnan(d) ? INFINITY : fmax(m, d);
    }
    return m;
}

typedef struct {
    int     steps;
    double  seconds;                            /* the training loop's */
    double  first_loss, last_epoch_loss;
    double  loss_diff, fc_diff, replica_diff;   /* --ref only */
} stats_t;

/* --ref: the two replicas' linear, all-gathered on the trainers' group. */
static td_status_t
replica_diff(double *d_p)
{
    int64_t n = NUM_CLS * EMB_DIM + NUM_CLS, two = 2 * n;
    td_tensor_t *mine = NULL, *both = NULL;
    td_status_t st;

    if ((st = td_tensor_empty(&n, 1, TD_FLOAT32, TD_CPU, &mine)) != TD_OK ||
        (st = td_tensor_empty(&two, 1, TD_FLOAT32, TD_CPU, &both)) != TD_OK) {
        goto out;
    }
    memcpy(td_tensor_data(mine), td_tensor_data(fc[0]),
           NUM_CLS * EMB_DIM * sizeof(float));
    memcpy((float *)td_tensor_data(mine) + NUM_CLS * EMB_DIM,
           td_tensor_data(fc[1]), NUM_CLS * sizeof(float));
    if ((st = td_all_gather(trainers, both, mine)) == TD_OK) {
        const float *b = td_tensor_data(both);

        *d_p = max_abs_diff(b, b + n, n);
    }
out:
    td_tensor_release(mine);
    td_tensor_release(both);
    return st;
}

/* One training step of this trainer (see the file's comment). */
static td_status_t
step(td_remote_module_t *rm, td_ddp_t *ddp, td_dist_optimizer_t *opt,
     int me, batch_t *b, double *loss_p)
{
    td_tensor_t *emb = NULL, *out = NULL, *loss = NULL;
    td_status_t st, st2;
    int64_t ctx;

    if ((st = td_dist_autograd_begin(&ctx)) != TD_OK) {
        return st;
    }
    if ((st = td_remote_module_forward(rm, b->indices, b->offsets, &emb)) ==
            TD_OK &&
        (st = td_linear(emb, fc[0], fc[1], &out)) == TD_OK &&
        (st = td_cross_entropy(out, b->targets, TD_REDUCTION_MEAN, &loss)) ==
            TD_OK &&
        (st = td_ddp_dist_backward(ddp, ctx, loss)) == TD_OK) {
        *loss_p = *(const float *)td_tensor_data(loss);
        /* trainer 0's update, then trainer 1's, each before anyone's
         * next forward */
        for (int turn = 0; turn < 2 && st == TD_OK; turn++) {
            if (turn == me) {
                st = td_dist_optimizer_step(opt, ctx);
            }
            st2 = td_group_barrier(trainers);
            st = st != TD_OK ? st : st2;
        }
    }
    td_tensor_release(emb);
    td_tensor_release(out);
    td_tensor_release(loss);
    st2 = td_dist_autograd_end(ctx);
    return st != TD_OK ? st : st2;
}

static td_status_t
train(td_remote_module_t *rm, int epochs, const char *ref_path, int check,
      uint64_t seed, stats_t *s)
{
    int me = td_world()->rank;
    const char *names[2] = {"fc.weight", "fc.bias"};
    int64_t ws[2] = {NUM_CLS, EMB_DIM}, bs[1] = {NUM_CLS};
    td_ddp_opts_t o = td_ddp_defaults();
    td_ddp_t *ddp = NULL;
    td_rref_t **emb_rr = NULL, *rr[3] = {0};
    td_dist_optimizer_t *opt = NULL;
    td_sgd_opts_t sgd = {LR, 0, 0, 0, 0};
    td_rpc_list_t *args = NULL;
    ref_t ref = {0};
    uint64_t rng = seed * 1000003u + (uint64_t)me;
    int n_emb = 0, steps;
    double epoch_loss = 0;
    struct timespec t0, t1;
    td_status_t st;

    memset(s, 0, sizeof(*s));
    /* the linear: the reference's initial weights, or PyTorch's default
     * init range U(-1/sqrt(16), 1/sqrt(16)); DDP then broadcasts rank 0's */
    if ((st = td_tensor_empty(ws, 2, TD_FLOAT32, TD_CPU, &fc[0])) != TD_OK ||
        (st = td_tensor_empty(bs, 1, TD_FLOAT32, TD_CPU, &fc[1])) != TD_OK) {
        goto out;
    }
    if (ref_path != NULL) {
        td_tensor_t *dst[2] = {fc[0], fc[1]};

        if ((st = td_safetensors_load(ref_path, names, dst, 2)) != TD_OK ||
            (st = ref_open(ref_path, me, &ref)) != TD_OK) {
            goto out;
        }
        steps = ref.steps;
    } else {
        td_tensor_uniform_(fc[0], -0.25, 0.25, seed * 7 + (uint64_t)me);
        td_tensor_uniform_(fc[1], -0.25, 0.25, seed * 11 + (uint64_t)me);
        steps = epochs * BATCHES;
    }
    td_tensor_set_requires_grad(fc[0], 1);
    td_tensor_set_requires_grad(fc[1], 1);
    o.group = trainers_group();
    o.names = names;
    if ((st = td_ddp_create(fc, 2, &o, &ddp)) != TD_OK ||
        (st = td_remote_module_parameters(rm, &emb_rr, &n_emb)) != TD_OK) {
        goto out;
    }
    if (n_emb != 1) {
        st = td_error(TD_ERR_STATE, "ddp_rpc: the embedding has %d "
                      "parameters", n_emb);
        goto out;
    }
    rr[0] = emb_rr[0];
    for (int k = 0; k < 2; k++) {
        td_rpc_list_free(args);
        args = NULL;
        if ((st = td_rpc_list_create(&args)) != TD_OK ||
            (st = td_rpc_list_add_int(args, k)) != TD_OK ||
            (st = td_remote(me, "ddp_rpc.fc_param", args,
                            TD_RPC_DEFAULT_TIMEOUT, &rr[1 + k])) != TD_OK) {
            goto out;
        }
    }
    if ((st = td_dist_optimizer_sgd(rr, 3, &sgd, &opt)) != TD_OK) {
        goto out;
    }
    s->loss_diff = s->fc_diff = s->replica_diff = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < steps; i++) {
        batch_t b = {0};
        double loss = 0, d;

        st = ref_path != NULL ? ref_batch(&ref, i, &b) : batch_make(&rng, &b);
        if (st == TD_OK) {
            st = step(rm, ddp, opt, me, &b, &loss);
        }
        batch_free(&b);
        if (st != TD_OK) {
            goto out;
        }
        if (i == 0) {
            s->first_loss = loss;
        }
        epoch_loss += loss;
        if (ref_path != NULL) {
            s->loss_diff = fmax(s->loss_diff, fabs(loss - (double)((float *)
                                td_tensor_data(ref.loss))[i]));
            d = fmax(max_abs_diff(td_tensor_data(fc[0]),
                                  (float *)td_tensor_data(ref.w_after) +
                                  (int64_t)i * NUM_CLS * EMB_DIM,
                                  NUM_CLS * EMB_DIM),
                     max_abs_diff(td_tensor_data(fc[1]),
                                  (float *)td_tensor_data(ref.b_after) +
                                  (int64_t)i * NUM_CLS, NUM_CLS));
            s->fc_diff = fmax(s->fc_diff, d);
        }
        if (check) {
            if ((st = replica_diff(&d)) != TD_OK) {
                goto out;
            }
            s->replica_diff = fmax(s->replica_diff, d);
        }
        if ((i + 1) % BATCHES == 0 || i + 1 == steps) {
            int n = (i % BATCHES) + 1;

            s->last_epoch_loss = epoch_loss / n;
            printf("trainer %d: training done for epoch %d, mean loss %.6f\n",
                   me, i / BATCHES, epoch_loss / n);
            fflush(stdout);
            epoch_loss = 0;
        }
        s->steps = i + 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->seconds = (double)(t1.tv_sec - t0.tv_sec) +
                 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
out:
    td_rpc_list_free(args);
    td_dist_optimizer_destroy(opt);
    for (int k = 0; k < 3; k++) {
        td_rref_release(rr[k]);
    }
    free(emb_rr);
    td_ddp_destroy(ddp);
    ref_free(&ref);
    return st;
}

/* "ddp_rpc.run_trainer"(module (3 ints), epochs, ref path or "", seed,
 * check) ->
 * (steps, first loss, last epoch's mean loss, loss diff, fc diff, replica
 * diff, seconds): the tutorial's _run_trainer, started by the master. */
static td_status_t
fn_run_trainer(void *arg, const td_rpc_call_info_t *info,
               const td_rpc_list_t *a, td_rpc_list_t *result)
{
    td_remote_module_t *rm = NULL;
    const char *ref;
    int64_t epochs, seed, check;
    stats_t s;
    td_status_t st;

    (void)arg;
    (void)info;
    if ((st = td_remote_module_from_list(a, 0, &rm)) == TD_OK &&
        (st = td_rpc_list_int(a, 3, &epochs)) == TD_OK &&
        (st = td_rpc_list_string(a, 4, &ref)) == TD_OK &&
        (st = td_rpc_list_int(a, 5, &seed)) == TD_OK &&
        (st = td_rpc_list_int(a, 6, &check)) == TD_OK) {
        st = train(rm, (int)epochs, *ref != '\0' ? ref : NULL, check != 0,
                   (uint64_t)seed, &s);
    }
    if (st == TD_OK &&
        (st = td_rpc_list_add_int(result, s.steps)) == TD_OK &&
        (st = td_rpc_list_add_double(result, s.first_loss)) == TD_OK &&
        (st = td_rpc_list_add_double(result, s.last_epoch_loss)) == TD_OK &&
        (st = td_rpc_list_add_double(result, s.loss_diff)) == TD_OK &&
        (st = td_rpc_list_add_double(result, s.fc_diff)) == TD_OK &&
        (st = td_rpc_list_add_double(result, s.replica_diff)) == TD_OK) {
        st = td_rpc_list_add_double(result, s.seconds);
    }
    td_remote_module_free(rm);
    return st;
}

static td_status_t
fn_finish(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
          td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)a;
    (void)result;
    pthread_mutex_lock(&done_lock);
    trainer_done = 1;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
    return TD_OK;
}

/* ---- the master ---------------------------------------------------------- */

static int
master(int epochs, const char *ref_path, int check, uint64_t seed)
{
    int64_t cfg[3] = {NUM_EMB, EMB_DIM, TD_BAG_SUM};
    td_remote_module_t *rm = NULL;
    td_rref_t **rr = NULL;
    td_rpc_list_t *args = NULL;
    td_future_t *fut[2] = {0};
    int n = 0, failed = 0;
    double loss_diff = 0, fc_diff = 0, replica = 0;
    td_status_t st;

    if ((st = td_remote_module_create(PS, TD_RM_EMBEDDING_BAG, cfg, 3,
                                      TD_FLOAT32, seed, &rm)) != TD_OK) {
        goto out;
    }
    if (ref_path != NULL) {
        /* the reference's initial embedding, copied in on its owner */
        td_tensor_t *w = NULL;

        if ((st = td_safetensors_get(ref_path, "emb.weight", &w)) == TD_OK &&
            (st = td_remote_module_parameters(rm, &rr, &n)) == TD_OK &&
            (st = td_rpc_list_create(&args)) == TD_OK &&
            (st = td_rpc_list_add_tensor(args, w)) == TD_OK) {
            td_rpc_list_t *res = NULL;

            st = td_rref_rpc_sync(rr[0], "ddp_rpc.load", args,
                                  TD_RPC_DEFAULT_TIMEOUT, &res);
            td_rpc_list_free(res);
        }
        td_tensor_release(w);
        td_rpc_list_free(args);
        args = NULL;
        if (st != TD_OK) {
            goto out;
        }
    }
    if ((st = td_rpc_list_create(&args)) != TD_OK ||
        (st = td_remote_module_add_to_list(rm, args)) != TD_OK ||
        (st = td_rpc_list_add_int(args, epochs)) != TD_OK ||
        (st = td_rpc_list_add_string(args, ref_path ? ref_path : "")) !=
            TD_OK ||
        (st = td_rpc_list_add_int(args, (int64_t)seed)) != TD_OK ||
        (st = td_rpc_list_add_int(args, check)) != TD_OK) {
        goto out;
    }
    for (int t = 0; t < 2; t++) {
        if ((st = td_rpc_async(t, "ddp_rpc.run_trainer", args, TIMEOUT_S,
                               &fut[t])) != TD_OK) {
            goto out;
        }
    }
    for (int t = 0; t < 2; t++) {
        const td_rpc_list_t *v;
        int64_t steps = 0;
        double first = 0, last = 0, ld = 0, fd = 0, rd = 0, sec = 0;

        if ((st = td_future_wait(fut[t], -1)) != TD_OK) {
            fprintf(stderr, "master: trainer %d: %s\n", t, td_last_error());
            failed = 1;
            continue;
        }
        v = td_future_value(fut[t]);
        if (td_rpc_list_int(v, 0, &steps) != TD_OK ||
            td_rpc_list_double(v, 1, &first) != TD_OK ||
            td_rpc_list_double(v, 2, &last) != TD_OK ||
            td_rpc_list_double(v, 3, &ld) != TD_OK ||
            td_rpc_list_double(v, 4, &fd) != TD_OK ||
            td_rpc_list_double(v, 5, &rd) != TD_OK ||
            td_rpc_list_double(v, 6, &sec) != TD_OK) {
            fprintf(stderr, "master: trainer %d's answer: %s\n", t,
                    td_last_error());
            failed = 1;
            continue;
        }
        printf("master: trainer %d: %lld steps, loss %.6f at the first, "
               "%.6f over the last epoch, %.3f s (%.3f ms per step)\n", t,
               (long long)steps, first, last, sec,
               steps > 0 ? 1e3 * sec / (double)steps : 0.0);
        loss_diff = fmax(loss_diff, ld);
        fc_diff = fmax(fc_diff, fd);
        replica = fmax(replica, rd);
    }
    st = failed ? TD_ERR_STATE : TD_OK;
    if (!failed && ref_path != NULL) {
        int good = loss_diff <= TOL && fc_diff <= TOL && replica == 0;

        printf("check=%s loss_max_abs_diff=%.3g fc_max_abs_diff=%.3g "
               "replicas_max_abs_diff=%.3g (PyTorch reference %s; tolerance "
               "%g, replicas must be identical)\n", good ? "ok" : "FAILED",
               loss_diff, fc_diff, replica, ref_path, TOL);
        failed = !good;
    } else if (!failed && check) {
        printf("check=%s replicas_max_abs_diff=%.3g (the trainers' linear "
               "after every step; must be identical)\n",
               replica == 0 ? "ok" : "FAILED", replica);
        failed = replica != 0;
    }
out:
    if (st != TD_OK && !failed) {
        fprintf(stderr, "master: %s\n", td_last_error());
        failed = 1;
    }
    fflush(stdout);
    for (int t = 0; t < 2; t++) {
        /* after the answers (or a failure): the trainers may leave */
        if (td_rpc_sync(t, "ddp_rpc.finish", NULL, TD_RPC_DEFAULT_TIMEOUT,
                        NULL) != TD_OK) {
            fprintf(stderr, "master: finish on trainer %d: %s\n", t,
                    td_last_error());
            failed = 1;
        }
    }
    td_future_release(fut[0]);
    td_future_release(fut[1]);
    td_rpc_list_free(args);
    for (int k = 0; k < n; k++) {
        td_rref_release(rr[k]);
    }
    free(rr);
    td_remote_module_free(rm);
    return failed;
}

static void
usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--epochs N] [--ref FILE] [--check] "
            "[--seed S]\n"
            "  run on 4 ranks: trainers 0 and 1, master 2, parameter "
            "server 3\n"
            "  --epochs N  epochs of %d batches (default 100; with --ref, "
            "what the file holds)\n"
            "  --ref FILE  replay and check a reference made by "
            "tests/data/gen_ddp_rpc_ref.py (implies --check)\n"
            "  --check     check after every step that the trainers' "
            "linear weights are identical\n"
            "  --seed S    initial weights and batches without --ref "
            "(default 1)\n", argv0, BATCHES);
}

int
main(int argc, char **argv)
{
    int epochs = 100, rc = 0, rank, check = 0;
    const char *ref_path = NULL;
    uint64_t seed = 1;
    int ranks[2] = {TRAINER0, TRAINER1};
    td_status_t st;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--epochs") == 0 && i + 1 < argc) {
            epochs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--ref") == 0 && i + 1 < argc) {
            ref_path = argv[++i];
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    check |= ref_path != NULL;
    if (epochs < 1 || epochs > 1000000) {
        fprintf(stderr, "ddp_rpc: --epochs %d is not in 1..1000000\n", epochs);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (td_rpc_register("ddp_rpc.run_trainer", fn_run_trainer, NULL) !=
            TD_OK ||
        td_rpc_register("ddp_rpc.fc_param", fn_fc_param, NULL) != TD_OK ||
        td_rpc_register("ddp_rpc.load", fn_load, NULL) != TD_OK ||
        td_rpc_register("ddp_rpc.finish", fn_finish, NULL) != TD_OK ||
        (st = td_init(NULL)) != TD_OK) {
        fprintf(stderr, "ddp_rpc: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    if (td_world()->world_size != 4) {
        if (rank == 0) {
            fprintf(stderr, "ddp_rpc: needs 4 ranks (trainers 0 and 1, "
                    "master 2, parameter server 3), got %d\n",
                    td_world()->world_size);
        }
        td_finalize();
        return 2;
    }
    {
        td_group_t *g = NULL;

        if ((st = td_group_new(ranks, 2, &g)) != TD_OK) {
            fprintf(stderr, "rank %d: td_group_new: %s\n", rank,
                    td_last_error());
            td_finalize();
            return 1;
        }
        pthread_mutex_lock(&done_lock);
        trainers = g;
        trainers_made = 1;
        pthread_cond_broadcast(&done_cond);
        pthread_mutex_unlock(&done_lock);
    }
    if (rank == MASTER) {
        rc = master(epochs, ref_path, check, seed);
    } else if (rank == TRAINER0 || rank == TRAINER1) {
        /* the master's call runs the training on a handler thread */
        pthread_mutex_lock(&done_lock);
        while (!trainer_done) {
            pthread_cond_wait(&done_cond, &done_lock);
        }
        pthread_mutex_unlock(&done_lock);
    }
    td_group_destroy(trainers);
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        rc = 1;
    }
    td_tensor_release(fc[0]);
    td_tensor_release(fc[1]);
    return rc;
}
