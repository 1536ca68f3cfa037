/* stepd.c: the plugin's slurmstepd side (remote context). task_init runs
 * in each task after fork, just before exec, the only point that sees the
 * task's own SLURM_PROCID and Slurm's per-task CUDA_VISIBLE_DEVICES; it
 * maps them with td_slurm_env_map(). Failures are reported here, not in
 * user_init, because only a failing task reaches srun's exit status.
 * task_exit runs in slurmstepd when a task ends: with kill_on_fail (the
 * default) the first task of the step to fail makes slurmctld send SIGTERM
 * to every task of the step on every node (slurm_signal_job_step, which
 * slurmstepd's own libslurm provides), as todist-run stops its group.
 * SIGTERM, not SIGKILL, so programs can clean up; Slurm then reports the
 * step cancelled and srun exits 143, its usual status for -K.
 * With kill_on_fail=no the step's tasks outlive one another, rank 0
 * included: slurmstepd on the step's first node serves todist's store
 * (a thread started in user_init, before any task, and stopped in exit,
 * after the last: the step owns it), and every task gets
 * TODIST_AGENT_STORE=1, as under todist-run --no-kill.
 * A join step's task (--todist=join, srun.c) connects to the running
 * step's store with its token, takes a rank that step lost and no other
 * replacement holds (elastic_vacant_claim, quorum.h Q12: the task of join
 * step rank i tries the i-th vacancy first), and gets that rank's
 * variables with TODIST_ELASTIC_JOIN=1 and TODIST_AGENT_STORE=1: the
 * program joins as todist-run --replace's replacements do. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "todist/store.h"
#include "runtime/elastic/quorum.h"
#include "spank/plugin.h"

/* kill_on_fail=no, the step's first node: its store (user_init .. exit). */
static td_store_server_t *step_store;

static const char *
envp_lookup(const char *name, void *arg)
{
    char **envp = arg;
    size_t len = strlen(name);

    for (; envp != NULL && *envp != NULL; envp++) {
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') {
            return *envp + len + 1;
        }
    }
    return NULL;
}

static int
spank_set(const char *name, const char *value, void *arg)
{
    return spank_setenv((spank_t)arg, name, value, 1) == ESPANK_SUCCESS ? 0 : -1;
}

/* Report on the task's stderr (srun shows it) and in slurmd's log. */
static int
task_fail(uint32_t job, uint32_t step, const char *what)
{
    fprintf(stderr, "todist: job %u step %u: %s\n", job, step, what);
    fflush(stderr);
    slurm_error("todist: job %u step %u: %s", job, step, what);
    return -1;
}

/* How long a joiner waits for the running step's store to answer; and its
 * slurmstepd at its end, to release its claim (a store that does not
 * answer then went with its step, and the claim with it). */
#define JOIN_CONNECT_S 10.0
#define RELEASE_CONNECT_S 2.0

/* A join task's name in its claim (quorum.h Q12): "PID@HOST", the task's
 * process, which its slurmstepd sees end (join_task_exit). */
static void
claimer_name(long pid, char *buf, size_t len)
{
    char host[256] = "";

    gethostname(host, sizeof(host) - 1);
    snprintf(buf, len, "%ld@%.200s", pid, host);
}

static int
join_task_init(spank_t sp, uint32_t job, uint32_t step, char **envp)
{
    const char *spec = envp_lookup("TODIST_SPANK_JOIN", envp);
    const char *token = envp_lookup("TODIST_JOB_TOKEN", envp);
    const char *procid = envp_lookup("SLURM_PROCID", envp);
    td_slurm_join_t j;
    td_slurm_task_t task;
    td_store_t *store = NULL;
    int rank = -1, n_vacant = 0, first;
    int64_t epoch = -1;
    char what[512], claimer[ELASTIC_CLAIMER_MAX + 1];

    if (spec == NULL || token == NULL || procid == NULL) {
        return task_fail(job, step, "join: TODIST_SPANK_JOIN is not set: "
                         "srun's side of the plugin did not run");
    }
    first = atoi(procid);
    if (td_slurm_join_decode(spec, &j) != TD_OK) {
        return task_fail(job, step, td_last_error());
    }
    /* the task's own pid: the program after exec, and what task_exit sees */
    claimer_name((long)getpid(), claimer, sizeof(claimer));
    if (td_store_connect(j.master_addr, j.master_port, token, JOIN_CONNECT_S,
                         &store) != TD_OK ||
        elastic_vacant_claim(store, j.world_size, first, claimer, &rank,
                             &epoch, &n_vacant) != TD_OK) {
        snprintf(what, sizeof(what), "join: step %u.%u's store at %s:%u: %s",
                 j.job, j.step, j.master_addr, j.master_port,
                 td_last_error());
        td_store_close(store);
        td_slurm_join_free(&j);
        return task_fail(job, step, what);
    }
    td_store_close(store);
    /* every lookup (in ENVP) is done before the first spank_setenv() */
    if (td_slurm_join_map(envp_lookup, envp, &todist_state.opts, &j, rank,
                          spank_set, sp, &task) != TD_OK) {
        td_slurm_join_free(&j);
        return task_fail(job, step, td_last_error());
    }
    spank_unsetenv(sp, "TODIST_SPANK_JOIN");
    if (todist_state.opts.verbose) {
        fprintf(stderr, "todist: job %u step %u: task %d joins step %u.%u as "
                "rank %d/%d (a vacancy of epoch %lld, of %d) store %s:%u\n",
                job, step, first, j.job, j.step, rank, j.world_size,
                (long long)epoch, n_vacant, j.master_addr, j.master_port);
        fflush(stderr);
    }
    td_slurm_join_free(&j);
    return 0;
}

int
todist_stepd_task_init(spank_t sp)
{
    uint32_t job = 0, step = 0;
    char **envp = NULL;
    td_slurm_task_t task;
    const td_world_t *w = &task.world;

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
        return task_fail(job, step, "cannot read the job and step ids");
    }
    /* The batch script and the extern step are not a world of tasks; the
     * sbatch script's inner srun steps are. */
    if (step == SLURM_BATCH_SCRIPT || step == SLURM_EXTERN_CONT) {
        return 0;
    }
    if (spank_get_item(sp, S_JOB_ENV, &envp) != ESPANK_SUCCESS ||
        envp == NULL) {
        return task_fail(job, step, "cannot read the task's environment");
    }
    if (todist_state.opts.join) {
        return join_task_init(sp, job, step, envp);
    }
    /* Every lookup happens before the first spank_setenv(), which may
     * reallocate ENVP. */
    if (td_slurm_env_map(envp_lookup, envp, &todist_state.opts, spank_set, sp,
                         &task) != TD_OK) {
        return task_fail(job, step, td_last_error());
    }
    if (!todist_state.opts.kill_on_fail &&
        spank_setenv(sp, "TODIST_AGENT_STORE", "1", 1) != ESPANK_SUCCESS) {
        return task_fail(job, step, "cannot set TODIST_AGENT_STORE");
    }
    if (todist_state.opts.verbose) {
        fprintf(stderr, "todist: job %u step %u: rank %d/%d local %d/%d "
                "node %d/%d master %s:%u gpu %s%s omp %d\n", job, step,
                w->rank, w->world_size, w->local_rank, w->local_world_size,
                w->node_rank, w->nnodes, w->master_addr, w->master_port,
                task.gpu[0] ? task.gpu : "-",
                task.gpu_chosen ? " (chosen)" : "",
                task.omp_threads);
        fflush(stderr);
    }
    return 0;
}

/* How long a failed task's output may take to leave this slurmstepd
 * before kill_on_fail stops the step anyway. */
#define DRAIN_LIMIT_S 5.0

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 1 while this slurmstepd holds output it has not passed on: bytes unread
 * in a pipe it reads (a task's stdout or stderr; a task that exited left
 * them for the I/O thread) or bytes a stream socket's peer has not
 * acknowledged (srun's I/O connection); else 0. */
static int
output_pending(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int pending = 0;

    if (d == NULL) {
        return 0;
    }
    while (!pending && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name), fl, type = 0, q = 0;
        socklen_t len = sizeof(type);
        struct stat st;

        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) ||
            fstat(fd, &st) != 0) {
            continue;
        }
        if (S_ISFIFO(st.st_mode)) {
            fl = fcntl(fd, F_GETFL);
            pending = fl >= 0 && (fl & O_ACCMODE) == O_RDONLY &&
                      ioctl(fd, FIONREAD, &q) == 0 && q > 0;
        } else if (S_ISSOCK(st.st_mode) &&
                   getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
                   type == SOCK_STREAM) {
            pending = ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0;
        }
    }
    closedir(d);
    return pending;
}

/* kill_on_fail's stop must not lose the failed task's last words (why it
 * failed): once every task has exited and one died of SIGTERM or SIGKILL,
 * srun stops reading output (Slurm's step_launch.c aborts its I/O
 * handler), and what a slurmstepd had not yet passed on was dropped: seen
 * as test_spank_slurm 61's rank 1 "exiting 1 without a message". So wait,
 * boundedly, until this slurmstepd's output has left: task_exit runs on its
 * main thread before it reports the task's exit to srun, while its I/O
 * thread goes on. The wait is usually one delayed TCP acknowledgement
 * (~40 ms). Output srun's host has acknowledged but srun has not yet read
 * can still be dropped (a reader of srun's output that falls behind). */
static void
output_drain(uint32_t job, uint32_t step)
{
    double t0 = now_s();

    while (output_pending()) {
        if (now_s() - t0 > DRAIN_LIMIT_S) {
            slurm_info("todist: job %u step %u: output still pending after "
                       "%.0f s; stopping the step anyway", job, step,
                       DRAIN_LIMIT_S);
            return;
        }
        nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
    }
    slurm_debug("todist: job %u step %u: output passed on in %.1f ms", job,
                step, (now_s() - t0) * 1e3);
}

/* A join task ended: release the rank it claimed (quorum.h Q12) unless it
 * asked for it, so that a replacement that died before it asked (want/)
 * does not hold the rank for the epoch. slurmstepd sees every task end,
 * whatever killed it. */
static void
join_task_exit(spank_t sp, uint32_t job, uint32_t step)
{
    char **envp = NULL, claimer[ELASTIC_CLAIMER_MAX + 1];
    const char *spec, *token;
    td_slurm_join_t j;
    td_store_t *store = NULL;
    pid_t pid = 0;
    int n = 0;

    if (spank_get_item(sp, S_JOB_ENV, &envp) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS ||
        (spec = envp_lookup("TODIST_SPANK_JOIN", envp)) == NULL ||
        (token = envp_lookup("TODIST_JOB_TOKEN", envp)) == NULL ||
        td_slurm_join_decode(spec, &j) != TD_OK) {
        return;                  /* task_init failed first, and said why */
    }
    claimer_name((long)pid, claimer, sizeof(claimer));
    if (td_store_connect(j.master_addr, j.master_port, token, RELEASE_CONNECT_S,
                         &store) != TD_OK) {
        /* the step and its store are gone: nothing is held any more */
        slurm_debug("todist: job %u step %u: join: step %u.%u's store: %s",
                    job, step, j.job, j.step, td_last_error());
    } else if (elastic_vacant_release(store, j.world_size, claimer, &n) !=
               TD_OK) {
        slurm_error("todist: job %u step %u: join: cannot release the rank "
                    "task %s claimed in step %u.%u's store (%s): it stays "
                    "held for that epoch", job, step, claimer, j.job, j.step,
                    td_last_error());
    } else if (n > 0) {
        slurm_info("todist: job %u step %u: join: task %s ended; its claim "
                   "of a rank of step %u.%u is released", job, step,
                   claimer, j.job, j.step);
    }
    td_store_close(store);
    td_slurm_join_free(&j);
}

int
todist_stepd_task_exit(spank_t sp)
{
    /* One slurmstepd runs one step: stop it once, on its first failure. */
    static bool stopping;
    uint32_t job = 0, step = 0, rank = 0;
    int status = 0;
    char what[64];

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS) {
        return 0;
    }
    if (step == SLURM_BATCH_SCRIPT || step == SLURM_EXTERN_CONT) {
        return 0;
    }
    if (todist_state.opts.join) {
        join_task_exit(sp, job, step);
    }
    if (stopping || !todist_state.opts.kill_on_fail ||
        (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        return 0;
    }
    stopping = true;
    if (spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) != ESPANK_SUCCESS) {
        rank = (uint32_t)-1;
    }
    if (WIFSIGNALED(status)) {
        snprintf(what, sizeof(what), "was killed by signal %d",
                 WTERMSIG(status));
    } else {
        snprintf(what, sizeof(what), "exited with code %d",
                 WEXITSTATUS(status));
    }
    slurm_error("todist: job %u step %u: rank %d %s; stopping the step "
                "(--todist=kill_on_fail=no keeps it running)", job, step,
                (int)rank, what);
    output_drain(job, step);
    if (slurm_signal_job_step(job, step, SIGTERM) != 0) {
        slurm_error("todist: job %u step %u: cannot stop the step after rank "
                    "%d failed", job, step, (int)rank);
    }
    return 0;
}

int
todist_stepd_user_init(spank_t sp)
{
    uint32_t job = 0, step = 0, node = 1;
    char **envp = NULL;
    const char *token = NULL;
    td_world_t w;

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_NODEID, &node) != ESPANK_SUCCESS) {
        return task_fail(job, step, "cannot read the job, step and node ids");
    }
    if (step == SLURM_BATCH_SCRIPT || step == SLURM_EXTERN_CONT ||
        node != 0) {
        return 0;
    }
    if (spank_get_item(sp, S_JOB_ENV, &envp) != ESPANK_SUCCESS ||
        envp == NULL) {
        return task_fail(job, step, "cannot read the step's environment");
    }
    if (td_slurm_store_of(envp_lookup, envp, &todist_state.opts, &w,
                          &token) != TD_OK ||
        td_store_server_start(w.master_addr, w.master_port, token,
                              &step_store) != TD_OK) {
        char what[512];

        snprintf(what, sizeof(what), "kill_on_fail=no: cannot serve the "
                 "step's store: %s", td_last_error());
        return task_fail(job, step, what);
    }
    if (todist_state.opts.verbose) {
        fprintf(stderr, "todist: job %u step %u: the store is served by "
                "slurmstepd at %s:%u (kill_on_fail=no)\n", job, step,
                w.master_addr, w.master_port);
        fflush(stderr);
    }
    return 0;
}

void
todist_stepd_exit(void)
{
    if (step_store != NULL) {
        td_store_server_stop(step_store);
        step_store = NULL;
    }
}
