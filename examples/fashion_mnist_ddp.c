/* examples/fashion_mnist_ddp: seed 001's data-parallel recipe in C.
 *
 * Every rank holds the MLP (784-256-10) wrapped in DistributedDataParallel,
 * reads its share of each epoch through a DistributedSampler (set_epoch
 * every epoch), and steps SGD on averaged gradients; rank 0 logs, writes a
 * checkpoint every epoch, and the test accuracy is reduced over the ranks
 * with all_reduce. Run it with `todist-run -n N` or `srun --todist`:
 *   step=100 loss=0.6123 samples_per_s=84500
 *   epoch=1 train_loss=0.5123 test_accuracy=0.8531 seconds=0.7
 * (step counts this rank's steps from the start of the run, loss is the mean
 * over the steps since the last line).
 * Options: those of examples/fashion_mnist (--epochs --batch-size (per
 * rank) --lr --optimizer --threads --seed --data --hidden --max-batches)
 * and --log-every N (steps; 0: off), --metrics FILE (JSON lines, rank 0: a
 * first record {"workers", "batch_per_worker", "cores"}, then one per
 * progress line {"epoch", "step", "time", "loss", "samples_per_s"} and one
 * per epoch {"epoch", "train_loss", "test_accuracy", "samples_per_s",
 * "time", "seconds"}; time is wall-clock seconds since training started,
 * what scripts/plot-metrics.sh draws runs of different sizes against),
 * --metrics-every N (steps between progress records; default --log-every),
 * --checkpoint FILE (rank 0 saves the whole training state with
 * todist/checkpoint.h after every epoch, every --checkpoint-every N steps
 * and at --max-steps: parameters, optimizer state, DDP's bucket order, the
 * sampler's epoch and position, the step), --resume (every rank loads FILE
 * when it exists and continues at the very next batch, so the losses are
 * those of an uninterrupted run, bit for bit: restarted jobs, `todist-run
 * --max-restarts`, continue where they stopped), --max-steps N (stop after
 * this rank's step N, counted from the start of the run), --loss-log FILE
 * (rank 0 appends "STEP LOSS" a step, LOSS in C's exact %a notation),
 * --elastic (with --checkpoint FILE: --resume, a checkpoint every
 * --checkpoint-every steps, 10 unless given, and a resume at another world
 * size re-shards the sampler's position, todist/checkpoint.h's
 * td_checkpoint_allow_reshard: for `todist-run --max-restarts`, and
 * `--nnodes MIN:MAX` where a lost node shrinks the world), --in-place
 * (todist/elastic.h: when a rank dies the survivors agree on who is
 * alive, shrink the world in this process, drop the step that failed,
 * heal a survivor behind from the most advanced one, re-shard the sampler
 * and go on: run under `todist-run --no-kill`), --die-at R:S (a test
 * aid: world rank R SIGKILLs itself after the forward of step S, naming
 * the wall-clock time on stderr; in the first incarnation only, so a
 * restarted group goes past it), --pause-at R:S (a test aid: world rank
 * R stops itself with SIGSTOP at the same point, so a test can fail a host
 * while it is known to be mid-step, then continue it), --die-joined FILE
 * (a test aid: the grown group's members take part in one all_reduce,
 * then the first replacement to create FILE SIGKILLs itself, admitted
 * and before its heal; the members' heal fails and they recover as
 * after a failed step). After a recovery or a resume, rank 0
 * prints the wall-clock time its first step completed; a recovery adds a
 * {"membership": {...}} record to --metrics FILE. */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>
#include "examples/fmnist_options.h"

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

static int rank, world;           /* in GRP: they change at a shrink */
static td_group_t *grp;           /* the world's, or the elastic epoch's */
/* --loss-log and --metrics: written by GRP's rank 0, which is another
 * process once world rank 0 was lost (--in-place under todist-run
 * --no-kill): each opens them when it becomes rank 0 (rank0_files),
 * appending, and every line is flushed, so the file goes on in order. */
static const char *loss_path, *metrics_path;
static FILE *lf, *mf;

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The steps since the last progress line or metrics record: their mean
 * loss and their samples per second. */
typedef struct {
    long    every;       /* steps between reports; 0: none */
    double  loss, t;     /* sum of the losses; when the window opened */
    int64_t samples;     /* this rank's samples in the window */
} window_t;

static void
window_add(window_t *w, double loss, int64_t samples)
{
    w->loss += loss;
    w->samples += samples;
}

/* Report due at STEP? Then the window's mean loss and samples/s (RANKS
 * ranks alike), and a new window opens at NOW. */
static int
window_due(window_t *w, int64_t step, int ranks, double now_s,
           double *mean_p, double *sps_p)
{
    if (w->every <= 0 || step % w->every != 0) {
        return 0;
    }
    *mean_p = w->loss / (double)w->every;
    *sps_p = now_s > w->t ? (double)(w->samples * ranks) / (now_s - w->t) : 0;
    w->loss = 0;
    w->samples = 0;
    w->t = now_s;
    return 1;
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: fashion_mnist_ddp [--epochs N] [--batch-size N] "
            "[--lr X] [--optimizer sgd|adam] [--threads N] [--seed N] "
            "[--data DIR] [--hidden N] [--max-batches N] [--log-every N] "
            "[--metrics FILE] [--metrics-every N] [--checkpoint FILE] "
            "[--resume] [--checkpoint-every N] [--max-steps N] "
            "[--loss-log FILE] [--elastic] [--in-place] [--die-at R:S]\n"
            "[--pause-at R:S] [--die-joined FILE]\n"
            "run under todist-run -n N or srun --todist\n");
}

static int
die(const char *what)
{
    fprintf(stderr, "fashion_mnist_ddp: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

/* --die-at and --die-joined kill this rank with SIGKILL from an inline
 * RPC handler it calls on itself: an inline handler runs on the holder of
 * the transport's progress token (todist/rpc.h TD_RPC_INLINE), so no UCX
 * send of this process is half done as it dies. One killed half done,
 * even a keepalive UCX sends to a rank of this host, can wedge that rank's
 * UCX shared-memory receive ring for good, and the survivors of an
 * in-place recovery would wait for their collectives' timeout
 * (docs/elastic.md, "A rank killed inside a UCX send"). */
#define KILL_SELF "fashion_mnist_ddp.kill_self"

static td_status_t
kill_self_inline(void *arg, const td_rpc_call_info_t *info,
                 const td_rpc_list_t *args, td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args; (void)result;
    raise(SIGKILL);
    return TD_OK;
}

static void
kill_self(void)
{
    td_future_t *f = NULL;

    if (td_rpc_async(td_world()->rank, KILL_SELF, NULL, 0, &f) == TD_OK) {
        (void)td_future_wait(f, -1);
    }
    raise(SIGKILL);                 /* the call failed: die all the same */
}

/* Test accuracy over the whole test set: rank r scores samples r, r + n,
 * ... (no padding, so nothing counts twice), then the counts are summed
 * with all_reduce. */
static td_status_t
evaluate(td_mlp_t *m, td_tensor_t *images, td_tensor_t *labels, double *acc)
{
    td_batcher_t *b;
    td_tensor_t *x, *y, *logits, *val, *idx, *counts;
    int64_t n = td_tensor_shape(labels)[0], mine = 0, two = 2;
    int64_t *order;
    double correct = 0;
    int was = td_grad_set_enabled(0), r;
    td_status_t status;

    order = malloc((size_t)(n / world + 1) * sizeof(*order));
    if (order == NULL) {
        td_grad_set_enabled(was);
        return td_error(TD_ERR_NO_MEMORY, "evaluate: out of memory");
    }
    for (int64_t i = rank; i < n; i += world) {
        order[mine++] = i;
    }
    status = td_batcher_create(images, labels, 1000, 0, 0, FMNIST_MEAN,
                               FMNIST_STD, &b);
    if (status == TD_OK) {
        status = td_batcher_set_order(b, order, mine);
    }
    while (status == TD_OK && (r = td_batcher_next(b, &x, &y)) == 1) {
        status = td_mlp_forward(m, x, &logits);
        if (status == TD_OK) {
            status = td_max_dim(logits, 1, 0, &val, &idx);
            td_tensor_release(logits);
        }
        if (status == TD_OK) {
            const int64_t *p = td_tensor_data(idx), *t = td_tensor_data(y);
            for (int64_t i = 0; i < td_tensor_numel(y); i++) {
                correct += p[i] == t[i];
            }
            td_tensor_release(val);
            td_tensor_release(idx);
        }
        td_tensor_release(x);
        td_tensor_release(y);
    }
    td_batcher_free(b);
    free(order);
    td_grad_set_enabled(was);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(&two, 1, TD_FLOAT64, TD_CPU, &counts);
    if (status != TD_OK) {
        return status;
    }
    ((double *)td_tensor_data(counts))[0] = correct;
    ((double *)td_tensor_data(counts))[1] = (double)mine;
    status = td_all_reduce(grp, counts, TD_REDUCE_SUM);
    if (status == TD_OK) {
        double *c = td_tensor_data(counts);
        *acc = c[1] > 0 ? c[0] / c[1] : 0;
    }
    td_tensor_release(counts);
    return status;
}

/* this example's own options */
typedef struct {
    long        ckpt_every;  /* steps; 0: at epoch ends only; -1: unset */
    long        max_steps;   /* 0: no limit */
    const char *loss_log;
    int         elastic;     /* --elastic */
    int         in_place;    /* --in-place */
    long        die_rank;    /* --die-at R:S; -1: none */
    long        die_step;
    long        pause_rank;  /* --pause-at R:S; -1: none */
    long        pause_step;
    const char *die_joined;  /* --die-joined FILE; NULL: none */
} own_opts_t;

/* parse RANK:STEP for OPT into *r and *s */
static int
rank_step(const char *opt, const char *v, long *r, long *s)
{
    char *end;

    if (v == NULL || (*r = strtol(v, &end, 10)) < 0 || *end != ':' ||
        (*s = strtol(end + 1, &end, 10)) < 1 || *end != '\0') {
        fprintf(stderr, "fashion_mnist_ddp: %s expects RANK:STEP, got '%s'\n",
                opt, v != NULL ? v : "");
        return 2;
    }
    return 0;
}

/* Pull this example's own options out of ARGV (the rest are
 * fashion_mnist's); returns 2 on a bad value. */
static int
own_options(int *argc, char **argv, long *log_every, long *metrics_every,
            const char **metrics, const char **ckpt, int *resume,
            own_opts_t *oo)
{
    int k = 1;

    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--resume") == 0) {
            *resume = 1;
        } else if (strcmp(a, "--elastic") == 0) {
            oo->elastic = 1;
        } else if (strcmp(a, "--in-place") == 0) {
            oo->in_place = 1;
        } else if (strcmp(a, "--die-at") == 0 ||
                   strcmp(a, "--pause-at") == 0) {
            int die = strcmp(a, "--die-at") == 0;
            if (rank_step(a, v, die ? &oo->die_rank : &oo->pause_rank,
                          die ? &oo->die_step : &oo->pause_step) != 0) {
                return 2;
            }
            i++;
        } else if (strcmp(a, "--log-every") == 0 ||
                   strcmp(a, "--metrics-every") == 0 ||
                   strcmp(a, "--metrics") == 0 ||
                   strcmp(a, "--checkpoint") == 0 ||
                   strcmp(a, "--checkpoint-every") == 0 ||
                   strcmp(a, "--max-steps") == 0 ||
                   strcmp(a, "--loss-log") == 0 ||
                   strcmp(a, "--die-joined") == 0) {
            if (v == NULL) {
                fprintf(stderr, "fashion_mnist_ddp: %s needs a value\n", a);
                return 2;
            }
            if (strcmp(a, "--log-every") == 0 ||
                strcmp(a, "--metrics-every") == 0 ||
                strcmp(a, "--checkpoint-every") == 0 ||
                strcmp(a, "--max-steps") == 0) {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end != '\0' || n < 0) {
                    fprintf(stderr, "fashion_mnist_ddp: %s %s: not "
                            "a step count\n", a, v);
                    return 2;
                }
                *(a[2] == 'l' ? log_every : a[2] == 'c' ? &oo->ckpt_every :
                  a[3] == 'a' ? &oo->max_steps : metrics_every) = n;
            } else if (strcmp(a, "--loss-log") == 0) {
                oo->loss_log = v;
            } else if (strcmp(a, "--die-joined") == 0) {
                oo->die_joined = v;
            } else if (strcmp(a, "--metrics") == 0) {
                *metrics = v;
            } else {
                *ckpt = v;
            }
            i++;
        } else {
            argv[k++] = argv[i];
        }
    }
    *argc = k;
    return -1;
}

/* TODIST_RESTART_COUNT: --die-at fires in the first incarnation only */
static int
restart_count(void)
{
    const char *r = getenv("TODIST_RESTART_COUNT");

    return r != NULL ? atoi(r) : 0;
}

static double
wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Open the files rank 0 writes, if this rank is rank 0 now and has not. */
static int
rank0_files(void)
{
    if (rank == 0 && loss_path != NULL && lf == NULL &&
        (lf = fopen(loss_path, "a")) == NULL) {
        perror(loss_path);
        return 1;
    }
    if (rank == 0 && metrics_path != NULL && mf == NULL &&
        (mf = fopen(metrics_path, "a")) == NULL) {
        perror(metrics_path);
        return 1;
    }
    return 0;
}

/* --in-place: a step failed (a member died): agree on the survivors
 * (td_elastic_recover), heal those behind from the most advanced one
 * (td_checkpoint_broadcast), re-shard the sampler's position and move
 * DDP to the new group. A death during the recovery fails the heal:
 * recover again. *T_FAIL gets the wall clock the failure was seen at. */
static int
recover_in_place(td_elastic_t *el, td_checkpoint_t *ck, td_ddp_t *ddp,
                 td_optim_t *opt, td_distributed_sampler_t *s,
                 int64_t *position, double *t_fail)
{
    int old_world = world;
    td_status_t st;

    *t_fail = wall();
    fprintf(stderr, "fashion_mnist_ddp: rank %d: step failed: %s\n", rank,
            td_last_error());
    td_optim_zero_grad(opt);
    for (int tries = 0;; tries++) {
        td_elastic_change_t ch;
        double t_heal = now(), heal_s;

        st = td_elastic_recover(el, &ch);
        if (st != TD_OK) {
            return die("in-place recovery");
        }
        grp = td_elastic_group(el);
        rank = ch.new_rank;
        world = ch.new_size;
        t_heal = now();
        st = ch.behind ? td_checkpoint_broadcast(ck, grp, ch.source) : TD_OK;
        if (st != TD_OK && tries < 16) {
            fprintf(stderr, "fashion_mnist_ddp: rank %d: heal failed (%s): "
                    "recovering again\n", rank, td_last_error());
            continue;
        }
        if (st != TD_OK) {
            return die("heal");
        }
        if (ch.self_behind) {
            td_elastic_commit(el, ch.step);      /* healed: it counts */
        }
        heal_s = now() - t_heal;
        /* this epoch goes on at the new size (todist/sampler.h) */
        if (td_distributed_sampler_reshard(s, world, rank, position) != TD_OK
            || td_ddp_set_group(ddp, grp) != TD_OK) {
            return die("in-place recovery");
        }
        if (rank0_files() != 0) {
            return 1;
        }
        if (rank == 0) {
            printf("in-place: epoch %lld at step %lld: world %d -> %d (lost "
                   "%d rank%s, first %d); failure seen at %.6f; agreement "
                   "%.1f ms, rebuild %.1f ms, heal %.1f ms%s\n",
                   (long long)ch.epoch, (long long)ch.step, old_world,
                   world, ch.n_lost, ch.n_lost == 1 ? "" : "s",
                   ch.n_lost > 0 ? ch.lost[0] : -1, *t_fail,
                   ch.agree_s * 1e3, ch.rebuild_s * 1e3, heal_s * 1e3,
                   ch.behind ? " (from a survivor ahead)" : "");
            fflush(stdout);
        }
        if (rank == 0 && mf != NULL) {
            fprintf(mf, "{\"membership\": {\"epoch\": %lld, \"step\": %lld, "
                    "\"old_world\": %d, \"new_world\": %d, \"lost\": %d, "
                    "\"agreement_ms\": %.3f, \"rebuild_ms\": %.3f, "
                    "\"heal_ms\": %.3f}}\n", (long long)ch.epoch,
                    (long long)ch.step, old_world, world, ch.n_lost,
                    ch.agree_s * 1e3, ch.rebuild_s * 1e3, heal_s * 1e3);
            fflush(mf);
        }
        return 0;
    }
}

/* --in-place, the world grows: a replacement joined at this step
 * boundary (td_elastic_admit on the members, td_elastic_join on the
 * replacement, CH from either). Every member heals from the source (the
 * replacement gets the parameters, the optimizer state, the sampler and
 * the step; the others already hold them), re-shards the sampler at the
 * new size and moves DDP to the new group. */
static const char *die_joined;      /* --die-joined FILE */

/* --die-joined: every member of the grown group takes part in one
 * all_reduce (the group's first collective: the joiner dies after it,
 * inplace_worker regrow covers a death before it), then
 * the first replacement to create the file SIGKILLs itself, before its
 * heal. TD_OK, or the all_reduce's failure (the joiner died as it
 * ended). */
static td_status_t
die_joined_point(const td_elastic_change_t *ch)
{
    int64_t one = 1;
    td_tensor_t *t;
    td_status_t st = td_tensor_empty(&one, 1, TD_FLOAT32, TD_CPU, &t);
    int fd;

    if (st != TD_OK) {
        return st;
    }
    st = td_all_reduce(grp, t, TD_REDUCE_SUM);
    td_tensor_release(t);
    if (st != TD_OK || !ch->self_behind ||
        (fd = open(die_joined, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0) {
        return st;
    }
    close(fd);                      /* the first replacement only */
    fprintf(stderr, "fashion_mnist_ddp: rank %d: --die-joined: SIGKILL once "
            "admitted (epoch %lld, step %lld)\n", td_world()->rank,
            (long long)ch->epoch, (long long)ch->step);
    fflush(stderr);
    kill_self();
    return TD_OK;
}

static int
grow_in_place(td_elastic_t *el, const td_elastic_change_t *ch,
              td_checkpoint_t *ck, td_ddp_t *ddp, td_distributed_sampler_t *s,
              int64_t *position)
{
    int old_world = ch->old_size;
    double t_heal = now(), heal_s;

    grp = td_elastic_group(el);
    rank = ch->new_rank;
    world = ch->new_size;
    /* the replacement's sampler was made for the world at start */
    td_checkpoint_allow_reshard(ck, 1);
    if ((die_joined != NULL && die_joined_point(ch) != TD_OK) ||
        td_checkpoint_broadcast(ck, grp, ch->source) != TD_OK) {
        if (ch->self_behind) {
            return die("in-place growth: heal");
        }
        /* a joiner died before its heal: the members hold the step
         * they committed; the caller recovers as after a failed step */
        fprintf(stderr, "fashion_mnist_ddp: rank %d: heal of the joiners "
                "failed (%s): recovering\n", rank, td_last_error());
        return 2;
    }
    if (ch->self_behind) {
        td_elastic_commit(el, ch->step);         /* healed: it counts */
    }
    heal_s = now() - t_heal;
    if (td_distributed_sampler_reshard(s, world, rank, position) != TD_OK ||
        td_ddp_set_group(ddp, grp) != TD_OK) {
        return die("in-place growth");
    }
    if (rank0_files() != 0) {
        return 1;
    }
    if (rank == 0) {
        printf("in-place: epoch %lld at step %lld: world %d -> %d (joined "
               "%d rank%s, first %d); agreement %.1f ms, rebuild %.1f ms, "
               "heal %.1f ms\n", (long long)ch->epoch, (long long)ch->step,
               old_world, world, ch->n_joined, ch->n_joined == 1 ? "" : "s",
               ch->n_joined > 0 ? ch->joined[0] : -1, ch->agree_s * 1e3,
               ch->rebuild_s * 1e3, heal_s * 1e3);
        fflush(stdout);
    }
    if (rank == 0 && mf != NULL) {
        fprintf(mf, "{\"membership\": {\"epoch\": %lld, \"step\": %lld, "
                "\"old_world\": %d, \"new_world\": %d, \"lost\": %d, "
                "\"joined\": %d, \"agreement_ms\": %.3f, \"rebuild_ms\": "
                "%.3f, \"heal_ms\": %.3f}}\n", (long long)ch->epoch,
                (long long)ch->step, old_world, world, ch->n_lost,
                ch->n_joined, ch->agree_s * 1e3, ch->rebuild_s * 1e3,
                heal_s * 1e3);
        fflush(mf);
    }
    return 0;
}

static const char *param_names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                                    "fc2.bias"};

/* The training state a resume needs (todist/checkpoint.h): the model
 * under readable names, the optimizer, DDP's bucket order, the sampler's
 * epoch and position (indices of the epoch already consumed), the step,
 * and the running epoch loss, so the epoch line is the same too. The
 * batches themselves are drawn without randomness. */
static td_status_t
checkpoint_setup(td_checkpoint_t *ck, td_mlp_t *mlp, td_optim_t *opt,
                 td_ddp_t *ddp, td_distributed_sampler_t *sampler,
                 int64_t *position, int64_t *step, double *loss_sum)
{
    td_status_t status = TD_OK;

    for (int i = 0; status == TD_OK && i < 4; i++) {
        status = td_checkpoint_add_tensor(ck, param_names[i],
                                          td_mlp_params(mlp)[i]);
    }
    if (status == TD_OK) {
        status = td_checkpoint_add_optim(ck, "optim", opt);
    }
    if (status == TD_OK) {
        status = td_checkpoint_add_ddp(ck, "ddp", ddp);
    }
    if (status == TD_OK) {
        status = td_checkpoint_add_sampler(ck, "sampler", sampler, position);
    }
    if (status == TD_OK) {
        status = td_checkpoint_add_int64(ck, "step", step, 1);
    }
    if (status == TD_OK) {
        status = td_checkpoint_add_bytes(ck, "epoch_loss_sum", loss_sum,
                                         sizeof(*loss_sum));
    }
    if (status == TD_OK) {
        status = td_checkpoint_set_meta(ck, "example", "fashion_mnist_ddp");
    }
    return status;
}

int
main(int argc, char **argv)
{
    fmnist_opts_t o;
    long log_every = 100, metrics_every = -1;   /* -1: as --log-every */
    const char *metrics = NULL, *ckpt = NULL;
    int resume = 0, first_epoch = 1, rc;
    td_tensor_t *tr_x, *tr_y, *te_x, *te_y;
    td_batcher_t *batcher;
    td_mlp_t *mlp;
    td_ddp_t *ddp;
    td_optim_t *opt;
    td_distributed_sampler_t sampler;
    int64_t *indices;
    td_status_t status;

    own_opts_t oo = {-1, 0, NULL, 0, 0, -1, 0, -1, 0, NULL};
    td_elastic_t *el = NULL;
    double t_fail = 0;               /* wall clock of the last failure */
    int t_resumed = 0;               /* resumed: time the first step */
    int joining = 0;                 /* a replacement (--in-place) */
    td_checkpoint_t *ck = NULL;
    int64_t position = 0, step = 0;   /* step: this rank's since the start */
    double loss_sum = 0;

    rc = own_options(&argc, argv, &log_every, &metrics_every, &metrics, &ckpt,
                     &resume, &oo);
    if (rc >= 0) {
        return rc;
    }
    loss_path = oo.loss_log;
    metrics_path = metrics;
    rc = fmnist_parse_options("fashion_mnist_ddp", argc, argv, usage, &o);
    if (rc >= 0) {
        return rc;
    }
    if (oo.elastic && ckpt == NULL) {
        fprintf(stderr, "fashion_mnist_ddp: --elastic needs --checkpoint FILE\n");
        return 2;
    }
    if (oo.elastic) {
        resume = 1;
        if (oo.ckpt_every < 0) {
            oo.ckpt_every = 10;
        }
    }
    if (oo.ckpt_every < 0) {
        oo.ckpt_every = 0;
    }
    if (resume && ckpt == NULL) {
        fprintf(stderr, "fashion_mnist_ddp: --resume needs --checkpoint FILE\n");
        return 2;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(o.threads);
    }
    if ((oo.die_rank >= 0 || oo.die_joined != NULL) &&
        td_rpc_register_flags(KILL_SELF, kill_self_inline, NULL,
                              TD_RPC_INLINE) != TD_OK) {
        return die("td_rpc_register_flags");
    }
    if (td_init(NULL) != TD_OK) {
        return die("td_init");
    }
    rank = td_world()->rank;
    world = td_world()->world_size;
    grp = td_group_world();
    /* a replacement (todist-run --replace) joins once its state is made */
    joining = oo.in_place && td_elastic_replacement();
    die_joined = oo.die_joined;
    if (oo.in_place && !joining && td_elastic_create(NULL, &el) != TD_OK) {
        return die("elastic");
    }

    if (td_fashion_mnist_load(o.data, 1, &tr_x, &tr_y) != TD_OK) {
        return die("training set");
    }
    if (td_fashion_mnist_load(o.data, 0, &te_x, &te_y) != TD_OK) {
        return die("test set");
    }
    {
        int64_t sizes[3] = {784, o.hidden, 10};
        if (td_mlp_create(sizes, 3, TD_FLOAT32, o.seed, &mlp) != TD_OK) {
            return die("model");
        }
    }
    {
        td_ddp_opts_t dop = td_ddp_defaults();

        /* a replacement talks to nobody before it joins: it is healed */
        dop.broadcast_parameters = !joining;
        status = td_ddp_create_mlp(mlp, &dop, &ddp);
    }
    if (status != TD_OK) {
        return die("DistributedDataParallel");
    }
    if (o.use_adam) {
        td_adam_opts_t ao = td_adam_defaults();
        ao.lr = o.lr;
        status = td_optim_adam(td_mlp_params(mlp), td_mlp_num_params(mlp), &ao,
                               &opt);
    } else {
        td_sgd_opts_t so = {o.lr, 0.9, 0, 0, 0};   /* momentum 0.9 */
        status = td_optim_sgd(td_mlp_params(mlp), td_mlp_num_params(mlp), &so,
                              &opt);
    }
    if (status != TD_OK) {
        return die("optimizer");
    }
    if (td_distributed_sampler_init(&sampler, td_tensor_shape(tr_y)[0], world,
                                    rank, 1, o.seed, 0) != TD_OK ||
        td_batcher_create(tr_x, tr_y, o.batch, 0, 0, FMNIST_MEAN, FMNIST_STD,
                          &batcher) != TD_OK) {
        return die("sampler");
    }
    td_distributed_sampler_set_epoch(&sampler, first_epoch);
    /* --in-place heals a survivor behind from the list, without a file */
    if ((ckpt != NULL || oo.in_place) &&
        (td_checkpoint_create(&ck) != TD_OK ||
         checkpoint_setup(ck, mlp, opt, ddp, &sampler, &position, &step,
                          &loss_sum) != TD_OK)) {
        return die("checkpoint");
    }
    /* Every rank loads rank 0's file (replicated state), after DDP's
     * creation (its bucket order is restored) and before any step. */
    if (resume && access(ckpt, R_OK) == 0) {
        /* a restart round may have another world: re-shard the sampler */
        td_checkpoint_allow_reshard(ck, oo.elastic);
        if (td_checkpoint_load(ck, ckpt) != TD_OK) {
            return die("resume");
        }
        t_resumed = 1;
        first_epoch = (int)sampler.epoch;
        if (rank == 0) {
            printf("resumed from %s after epoch %d step %lld (restart %s, "
                   "world %d, epoch position %lld)\n", ckpt, first_epoch - 1,
                   (long long)step, getenv("TODIST_RESTART_COUNT") ?
                   getenv("TODIST_RESTART_COUNT") : "0", world,
                   (long long)position);
        }
    }
    if (joining) {
        td_elastic_change_t ch;

        if (td_elastic_join(NULL, &el, &ch) != TD_OK) {
            return die("in-place: join");
        }
        if (grow_in_place(el, &ch, ck, ddp, &sampler, &position) != 0) {
            return 1;
        }
        first_epoch = (int)sampler.epoch;
    }
    if (rank0_files() != 0) {      /* a replacement has joined by now */
        return 1;
    }
    indices = malloc((size_t)sampler.num_samples * sizeof(*indices) + 1);
    if (mf != NULL && !joining) {
        fprintf(mf, "{\"workers\": %d, \"batch_per_worker\": %d, "
                "\"cores\": %ld}\n", world, (int)o.batch,
                sysconf(_SC_NPROCESSORS_ONLN));
        fflush(mf);
    }
    double t_start = now();          /* the wall clock of the metrics */
    window_t logw = {log_every, 0, t_start, 0};
    window_t metw = {metrics_every < 0 ? log_every : metrics_every, 0,
                     t_start, 0};
    int again = 0;                   /* the epoch goes on after a shrink */
    for (int ep = first_epoch; ep <= o.epochs; ep++) {
        double t0 = now(), acc = 0;
        double t_eval;
        int64_t nb, epoch_samples = 0;
        int stop = 0;
        td_tensor_t *x, *y, *logits, *loss;
        int r;

        td_distributed_sampler_set_epoch(&sampler, ep);
        if (again) {
            again = 0;
        } else if (ep != first_epoch || position == 0) {
            position = 0;
            loss_sum = 0;
        }
        nb = (position + o.batch - 1) / o.batch;   /* batches done */
        if (position > sampler.num_samples) {
            return die("resume: the position is past the epoch");
        }
        /* a resumed epoch continues at the saved position */
        if (td_distributed_sampler_indices(&sampler, indices) != TD_OK ||
            td_batcher_set_order(batcher, indices + position,
                                 sampler.num_samples - position) != TD_OK) {
            return die("sampler");
        }
        r = 0;
        /* < not !=: a resume at a smaller world re-shards the position,
         * which may put this epoch's batches done past --max-batches */
        while ((o.max_batches < 0 || nb < o.max_batches) &&
               (r = td_batcher_next(batcher, &x, &y)) == 1) {
            double lv = 0;
            int64_t y_n_ = td_tensor_numel(y);
            epoch_samples += y_n_;
            status = td_mlp_forward(mlp, x, &logits);
            if (status == TD_OK) {
                status = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss);
                td_tensor_release(logits);
            }
            if (oo.die_rank == td_world()->rank && step + 1 == oo.die_step &&
                restart_count() == 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                fprintf(stderr, "fashion_mnist_ddp: rank %d: --die-at: "
                        "SIGKILL at step %lld at %.6f\n", td_world()->rank,
                        (long long)step + 1,
                        (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
                fflush(stderr);
                kill_self();
            }
            if (oo.pause_rank == td_world()->rank &&
                step + 1 == oo.pause_step && restart_count() == 0) {
                fprintf(stderr, "fashion_mnist_ddp: rank %d: --pause-at: "
                        "SIGSTOP at step %lld\n", td_world()->rank,
                        (long long)step + 1);
                fflush(stderr);
                raise(SIGSTOP);
            }
            if (status == TD_OK) {
                status = td_ddp_backward(ddp, loss);
                td_tensor_item(loss, &lv);
                loss_sum += lv;
                window_add(&logw, lv, td_tensor_numel(y));
                window_add(&metw, lv, td_tensor_numel(y));
                td_tensor_release(loss);
            }
            if (status == TD_OK) {
                status = td_ddp_wait(ddp);     /* gradients averaged */
            }
            if (status == TD_OK) {
                status = td_optim_step(opt);
            }
            if (status == TD_OK) {
                status = td_optim_zero_grad(opt);
            }
            td_tensor_release(x);
            td_tensor_release(y);
            if (status != TD_OK && el != NULL) {
                /* the step is dropped: shrink, heal, re-shard, go on */
                loss_sum -= lv;
                if (recover_in_place(el, ck, ddp, opt, &sampler, &position,
                                     &t_fail) != 0) {
                    return 1;
                }
                free(indices);
                indices = malloc((size_t)sampler.num_samples *
                                 sizeof(*indices) + 1);
                again = 1;
                break;
            }
            if (status != TD_OK) {
                return die("training step");
            }
            nb++;
            step++;
            if (el != NULL) {
                td_elastic_commit(el, step);
            }
            if (t_resumed && rank == 0) {
                printf("resume: step %lld done at %.6f\n", (long long)step,
                       wall());
                fflush(stdout);
            }
            t_resumed = 0;
            if (t_fail > 0) {
                if (rank == 0) {
                    printf("in-place: step %lld done %.1f ms after the "
                           "failure was seen, at %.6f\n", (long long)step,
                           (wall() - t_fail) * 1e3, wall());
                    fflush(stdout);
                }
                t_fail = 0;
            }
            position += y_n_;
            if (lf != NULL && rank == 0) {
                fprintf(lf, "%lld %a\n", (long long)step, lv);
                fflush(lf);
            }
            double t = now(), mean, sps;
            if (window_due(&logw, step, world, t, &mean, &sps) && rank == 0) {
                printf("step=%lld loss=%.4f samples_per_s=%.0f\n",
                       (long long)step, mean, sps);
                fflush(stdout);
            }
            if (window_due(&metw, step, world, t, &mean, &sps) &&
                mf != NULL && rank == 0) {
                fprintf(mf, "{\"epoch\": %d, \"step\": %lld, \"time\": %.3f, "
                        "\"loss\": %.6f, \"samples_per_s\": %.0f}\n", ep,
                        (long long)step, t - t_start, mean, sps);
                fflush(mf);
            }
            stop = oo.max_steps > 0 && step >= oo.max_steps;
            if (rank == 0 && ckpt != NULL &&
                (stop || (oo.ckpt_every > 0 && step % oo.ckpt_every == 0)) &&
                td_checkpoint_save(ck, ckpt) != TD_OK) {
                return die("checkpoint");
            }
            if (el != NULL) {
                td_elastic_change_t ch;
                int grew;

                if (td_elastic_admit(el, &ch, &grew) != TD_OK) {
                    return die("in-place: admit");
                }
                if (grew) {
                    /* the epoch goes on at the new size */
                    int g = grow_in_place(el, &ch, ck, ddp, &sampler,
                                          &position);

                    if (g == 2 && recover_in_place(el, ck, ddp, opt,
                                                   &sampler, &position,
                                                   &t_fail) != 0) {
                        return 1;
                    }
                    if (g == 1) {
                        return 1;
                    }
                    free(indices);
                    indices = malloc((size_t)sampler.num_samples *
                                     sizeof(*indices) + 1);
                    again = !stop;
                    break;
                }
            }
            if (stop || nb == o.max_batches) {
                break;
            }
        }
        if (again) {
            ep--;           /* the same epoch, at the re-sharded position */
            continue;
        }
        if (r < 0) {
            return die("batch");
        }
        if (stop) {
            break;
        }
        t_eval = now();
        if (evaluate(mlp, te_x, te_y, &acc) != TD_OK) {
            return die("evaluation");
        }
        if (rank == 0) {
            double secs = now() - t0;
            printf("epoch=%d train_loss=%.4f test_accuracy=%.4f seconds=%.2f\n",
                   ep, nb > 0 ? loss_sum / (double)nb : 0.0, acc, secs);
            fflush(stdout);
            if (mf != NULL) {      /* rank 0's own, open */
                fprintf(mf, "{\"epoch\": %d, \"train_loss\": %.6f, "
                        "\"test_accuracy\": %.6f, \"samples_per_s\": %.0f, "
                        "\"time\": %.3f, \"seconds\": %.3f}\n", ep,
                        nb > 0 ? loss_sum / (double)nb : 0.0, acc,
                        epoch_samples * world / (t_eval - t0),
                        now() - t_start, secs);
                fflush(mf);
            }
            /* the next run starts at the next epoch's first batch */
            td_distributed_sampler_set_epoch(&sampler, ep + 1);
            position = 0;
            if (ckpt != NULL && td_checkpoint_save(ck, ckpt) != TD_OK) {
                return die("checkpoint");
            }
        }
    }
    if (mf != NULL) {
        fclose(mf);
    }
    if (lf != NULL) {
        fclose(lf);
    }
    td_checkpoint_free(ck);
    free(indices);
    td_batcher_free(batcher);
    td_optim_free(opt);
    td_ddp_destroy(ddp);
    td_elastic_free(el);
    td_mlp_free(mlp);
    td_tensor_release(tr_x);
    td_tensor_release(tr_y);
    td_tensor_release(te_x);
    td_tensor_release(te_y);
    if (td_finalize() != TD_OK) {
        return die("td_finalize");
    }
    return 0;
}
