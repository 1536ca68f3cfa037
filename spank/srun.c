/* srun.c: the plugin's srun side (local context). It makes the step's job
 * token once, so that every task gets the same one: in srun,
 * spank_setenv() does not apply, but srun's own environment travels to
 * every task.
 * Joining (--todist=join[=STEP]): a kill_on_fail=no step's srun records
 * the step (its ids, the user's port options and its token: what no later
 * step can learn elsewhere) in a file of the user's,
 * ${TMPDIR:-/tmp}/todist-UID/JOB.STEP (directory 0700, file 0600), and
 * removes it when it exits. A later srun of the same job with
 * --todist=join reads it (so both sruns run on one host: a batch script's
 * or an salloc shell's), asks slurmctld for the step's nodes, reserved
 * ports and layout, and passes its tasks the step's store and layout
 * (TODIST_SPANK_JOIN) and token instead of a fresh one; stepd.c does the
 * rest. Why srun writes the record and not slurmstepd: only srun knows the
 * token without a task, and the later srun runs where it does, whereas the
 * step's first node may be any node; srun lacks the step's node list and
 * ports (its environment has neither when local_user_init runs), hence
 * slurmctld. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "spank/plugin.h"

/* This srun's record (kill_on_fail=no), removed by todist_srun_exit. */
static char record_path[512];

/* ${TMPDIR:-/tmp}/todist-UID, made 0700 if absent; refused unless it is a
 * directory of ours that nobody else may enter (not a link). */
static int
record_dir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    struct stat st;

    if (tmp == NULL || tmp[0] != '/') {
        tmp = "/tmp";
    }
    if ((size_t)snprintf(dir, len, "%s/todist-%u", tmp,
                         (unsigned)getuid()) >= len) {
        slurm_error("todist: TMPDIR is too long for the join record");
        return -1;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        slurm_error("todist: cannot make %s for the join record: %s", dir,
                    strerror(errno));
        return -1;
    }
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != getuid() || (st.st_mode & 077) != 0) {
        slurm_error("todist: %s is not a private directory of yours (mode "
                    "0700); the join record is not written there", dir);
        return -1;
    }
    return 0;
}

/* PID's start time (clock ticks after boot, /proc/PID/stat's field 22);
 * -1 with errno ENOENT when no such process runs (a zombie counts as
 * gone: it ran its last). */
static int
proc_start(pid_t pid, uint64_t *start)
{
    char path[64], text[1024], *p;
    unsigned long long v;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    f = fopen(path, "re");
    if (f == NULL) {
        return -1;
    }
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    /* "PID (COMM) STATE ...": COMM may hold spaces and ')', so from the
     * last ')': STATE is field 3, the start time field 22. */
    p = strrchr(text, ')');
    if (p == NULL || p[1] != ' ') {
        errno = EINVAL;
        return -1;
    }
    p += 2;
    if (*p == 'Z' || *p == 'X') {
        errno = ENOENT;
        return -1;
    }
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            errno = EINVAL;
            return -1;
        }
        p++;
    }
    if (sscanf(p, "%llu", &v) != 1) {
        errno = EINVAL;
        return -1;
    }
    *start = v;
    return 0;
}

/* This host's name as a record keeps it (at most 64 characters). */
static int
this_host(char *host, size_t len)
{
    char h[256];

    if (gethostname(h, sizeof(h)) != 0) {
        return -1;
    }
    h[sizeof(h) - 1] = '\0';
    snprintf(host, len, "%.64s", h);
    return host[0] != '\0' ? 0 : -1;
}

/* Whether the srun that wrote R still runs: 1 yes, 0 no (its pid is free,
 * a zombie, or another process's: the start time differs), -1 cannot tell
 * (a v1 record, or one written on another host: a TMPDIR shared between
 * hosts). A SIGKILLed srun cannot remove its record: such a record is
 * stale. */
static int
record_srun_alive(const td_slurm_record_t *r)
{
    char host[TD_SLURM_RECORD_HOST_MAX + 1];
    uint64_t start;

    if (r->pid == 0 || this_host(host, sizeof(host)) != 0 ||
        strcmp(host, r->host) != 0) {
        return -1;
    }
    if (proc_start((pid_t)r->pid, &start) != 0) {
        return errno == ENOENT ? 0 : -1;
    }
    return start == r->start;
}

/* kill_on_fail=no: record the step for --todist=join. */
static int
record_write(spank_t sp, const char *token)
{
    td_slurm_record_t r;
    uint32_t job = 0, step = 0;
    char dir[448], tmp[540], text[320];
    int fd, ok;

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
        slurm_error("todist: cannot read the job and step ids");
        return -1;
    }
    memset(&r, 0, sizeof(r));
    r.job = job;
    r.step = step;
    r.port = todist_state.opts.port;
    r.store_port = todist_state.opts.store_port;
    r.pid = (uint32_t)getpid();
    if (proc_start(getpid(), &r.start) != 0 ||
        this_host(r.host, sizeof(r.host)) != 0) {
        slurm_error("todist: cannot read this srun's start time or host "
                    "name for the join record");
        return -1;
    }
    memcpy(r.token, token, sizeof(r.token));
    ok = td_slurm_record_encode(&r, text, sizeof(text)) == TD_OK;
    memset(&r, 0, sizeof(r));
    if (!ok || record_dir(dir, sizeof(dir)) != 0) {
        if (!ok) {
            slurm_error("todist: %s", td_last_error());
        }
        memset(text, 0, sizeof(text));
        return -1;
    }
    snprintf(record_path, sizeof(record_path), "%s/%u.%u", dir, job, step);
    snprintf(tmp, sizeof(tmp), "%s.%ld", record_path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
    ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0 && close(fd) != 0) {
        ok = 0;
    }
    memset(text, 0, sizeof(text));
    if (!ok || rename(tmp, record_path) != 0) {
        slurm_error("todist: cannot write the join record %s: %s",
                    record_path, strerror(errno));
        unlink(tmp);
        record_path[0] = '\0';
        return -1;
    }
    return 0;
}

/* The steps of JOB with a record in DIR, latest first, into STEPS (at
 * most MAX); how many. */
static int
record_steps(const char *dir, uint32_t job, uint32_t *steps, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char want[24];
    size_t wl = (size_t)snprintf(want, sizeof(want), "%u.", job);
    int n = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char *end;
        unsigned long v;
        int i;

        if (strncmp(e->d_name, want, wl) != 0 ||
            e->d_name[wl] < '0' || e->d_name[wl] > '9') {
            continue;
        }
        v = strtoul(e->d_name + wl, &end, 10);
        if (*end != '\0' || v >= 0xfffffff0UL) {
            continue;            /* another file: a record being written */
        }
        for (i = n < max ? n : max - 1; i > 0 && steps[i - 1] < v; i--) {
            steps[i] = steps[i - 1];
        }
        if (i < max && (n < max || v > steps[max - 1])) {
            steps[i] = (uint32_t)v;
            n += n < max;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* The record of step STEP of JOB in DIR into *R (its path into PATH):
 * 0; -1 with the reason reported. */
static int
record_read(const char *dir, uint32_t job, uint32_t step,
            td_slurm_record_t *r, char *path, size_t path_len)
{
    char text[320];
    FILE *f;
    size_t n;
    int ok;

    snprintf(path, path_len, "%s/%u.%u", dir, job, step);
    f = fopen(path, "re");
    if (f == NULL) {
        slurm_error("todist: join: step %u.%u has no record (%s: %s): join "
                    "a running step of this job started with "
                    "--todist=kill_on_fail=no by an srun on this host", job,
                    step, path, strerror(errno));
        return -1;
    }
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    ok = td_slurm_record_decode(text, r) == TD_OK;
    memset(text, 0, sizeof(text));
    if (!ok || r->job != job || r->step != step) {
        slurm_error("todist: join: %s: %s", path,
                    ok ? "the record names another step" : td_last_error());
        return -1;
    }
    return 0;
}

/* A record whose srun is gone: say so and remove it (no srun will). */
static void
record_stale(const td_slurm_record_t *r, const char *path, bool named)
{
    if (unlink(path) != 0 && errno != ENOENT) {
        slurm_error("todist: join: cannot remove the stale record %s: %s",
                    path, strerror(errno));
    }
    if (named) {
        slurm_error("todist: join: step %u.%u's record is stale: the srun "
                    "that started the step (pid %u on %s) is gone, killed "
                    "before it could remove it, so the step cannot be "
                    "joined; the record is removed", r->job, r->step, r->pid,
                    r->host);
    } else {
        slurm_info("todist: join: skipping step %u.%u: its record is stale "
                   "(the srun that started it, pid %u on %s, is gone, "
                   "killed before it could remove it); removed it", r->job,
                   r->step, r->pid, r->host);
    }
}

static const char *
vars_lookup(const char *name, void *arg)
{
    char **v = arg;
    size_t len = strlen(name);

    for (; *v != NULL; v++) {
        if (strncmp(*v, name, len) == 0 && (*v)[len] == '=') {
            return *v + len + 1;
        }
    }
    return NULL;
}

/* The running step's facts from slurmctld, as the variables its tasks
 * had, into VARS (strings in BUF), and its layout "0,1;2,3" (malloc'ed). */
static int
step_facts(uint32_t job, uint32_t step, const char *token, bool quiet,
           char buf[8][512], char **vars, char **layout_p)
{
    job_step_info_response_msg_t *resp = NULL;
    slurm_step_layout_t *lay = NULL;
    slurm_step_id_t id = { .job_id = job, .step_het_comp = NO_VAL,
                           .step_id = step };
    const job_step_info_t *s;
    char *layout, *p;
    size_t cap;
    int rc = -1;

    if (slurm_get_job_steps(0, job, step, &resp, SHOW_ALL) != 0 ||
        resp == NULL || resp->job_step_count < 1 ||
        resp->job_steps[0].state != JOB_RUNNING) {
        if (quiet) {
            slurm_info("todist: join: skipping step %u.%u: slurmctld has it "
                       "not running", job, step);
        } else {
            slurm_error("todist: join: step %u.%u is not running (slurmctld "
                        "%s)", job, step, resp == NULL ||
                        resp->job_step_count < 1 ? "does not know it"
                                                 : "has it ended");
        }
        goto out;
    }
    s = &resp->job_steps[0];
    lay = slurm_job_step_layout_get(&id);
    if (lay == NULL || lay->node_cnt < 1 || lay->task_cnt < 1) {
        slurm_error("todist: join: slurmctld gives no layout for step %u.%u",
                    job, step);
        goto out;
    }
    snprintf(buf[0], 512, "SLURM_STEP_NODELIST=%s", lay->node_list);
    snprintf(buf[1], 512, "SLURM_STEP_NUM_NODES=%u", lay->node_cnt);
    snprintf(buf[2], 512, "SLURM_STEP_NUM_TASKS=%u", lay->task_cnt);
    snprintf(buf[3], 512, "SLURM_JOB_ID=%u", job);
    snprintf(buf[4], 512, "SLURM_STEP_ID=%u", step);
    if (s->resv_ports != NULL && s->resv_ports[0] != '\0') {
        snprintf(buf[5], 512, "SLURM_STEP_RESV_PORTS=%s", s->resv_ports);
    } else {
        snprintf(buf[5], 512, "-");     /* none: ports derived from the ids */
    }
    snprintf(buf[6], 512, "TODIST_JOB_TOKEN=%s", token);
    cap = 32;
    for (uint32_t n = 0; n < lay->node_cnt; n++) {
        cap += 12 * (size_t)lay->tasks[n] + 8;
    }
    layout = malloc(cap);
    if (layout == NULL) {
        slurm_error("todist: join: out of memory");
        goto out;
    }
    /* tasks per node as Slurm writes them unpacked: "3,2,2" */
    p = buf[7] + snprintf(buf[7], 512, "SLURM_STEP_TASKS_PER_NODE=");
    for (uint32_t n = 0; n < lay->node_cnt && p < buf[7] + 500; n++) {
        p += snprintf(p, (size_t)(buf[7] + 512 - p), "%s%u", n ? "," : "",
                      lay->tasks[n]);
    }
    p = layout;
    for (uint32_t n = 0; n < lay->node_cnt; n++) {
        for (uint32_t i = 0; i < lay->tasks[n]; i++) {
            p += sprintf(p, "%s%u", i ? "," : (n ? ";" : ""),
                         lay->tids[n][i]);
        }
    }
    for (int i = 0; i < 8; i++) {
        vars[i] = buf[i];
    }
    vars[8] = NULL;
    *layout_p = layout;
    rc = 0;
out:
    if (lay != NULL) {
        slurm_job_step_layout_free(lay);
    }
    if (resp != NULL) {
        slurm_free_job_step_info_response_msg(resp);
    }
    return rc;
}

/* The step to join: STEP's record, or the latest record (TD_SLURM_JOIN_LATEST)
 * of a step that runs, into *R with its facts (step_facts). A stale record
 * (its srun gone) is removed: named, the join fails saying so; otherwise
 * it is skipped, as is a step slurmctld has not running. */
#define JOIN_STEPS_MAX 64
static int
record_pick(uint32_t job, uint32_t step, td_slurm_record_t *r,
            char buf[8][512], char **vars, char **layout_p)
{
    uint32_t steps[JOIN_STEPS_MAX];
    char dir[448], path[540];
    int n;

    if (record_dir(dir, sizeof(dir)) != 0) {
        return -1;
    }
    if (step != TD_SLURM_JOIN_LATEST) {
        if (record_read(dir, job, step, r, path, sizeof(path)) != 0) {
            return -1;
        }
        if (record_srun_alive(r) == 0) {
            record_stale(r, path, true);
            return -1;
        }
        return step_facts(job, step, r->token, false, buf, vars, layout_p);
    }
    n = record_steps(dir, job, steps, JOIN_STEPS_MAX);
    for (int i = 0; i < n; i++) {
        if (record_read(dir, job, steps[i], r, path, sizeof(path)) != 0) {
            continue;
        }
        if (record_srun_alive(r) == 0) {
            record_stale(r, path, false);
            continue;
        }
        if (step_facts(job, steps[i], r->token, true, buf, vars,
                       layout_p) == 0) {
            return 0;
        }
    }
    slurm_error("todist: join: job %u has no running step started with "
                "--todist=kill_on_fail=no by an srun on this host (%s in "
                "%s)", job, n == 0 ? "no record" : "records skipped", dir);
    memset(r, 0, sizeof(*r));
    return -1;
}

/* --todist=join[=STEP]: pass the tasks the running step's store, layout
 * and token (stepd.c picks each task's rank). */
static int
join_init(spank_t sp)
{
    td_slurm_record_t r;
    td_slurm_opts_t o = todist_state.opts;
    td_slurm_join_t j;
    uint32_t job = 0;
    char buf[8][512], *vars[9], *layout = NULL, *text = NULL;
    int rc = -1;

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
        slurm_error("todist: cannot read the job id");
        return -1;
    }
    if (record_pick(job, o.join_step, &r, buf, vars, &layout) != 0) {
        goto out;
    }
    o.port = r.port;                /* the running step's port options */
    o.store_port = r.store_port;
    if (td_slurm_join_make(vars_lookup, vars, &o, layout, &j) != TD_OK) {
        slurm_error("todist: join: step %u.%u: %s", job, r.step,
                    td_last_error());
        goto out;
    }
    if (td_slurm_join_encode(&j, &text) != TD_OK) {
        slurm_error("todist: %s", td_last_error());
    } else if (setenv("TODIST_SPANK_JOIN", text, 1) != 0 ||
               setenv("TODIST_JOB_TOKEN", r.token, 1) != 0) {
        slurm_error("todist: cannot set TODIST_SPANK_JOIN and "
                    "TODIST_JOB_TOKEN in srun's environment");
    } else {
        if (o.verbose) {
            fprintf(stderr, "todist: join: step %u.%u (world %d, store "
                    "%s:%u)\n", job, r.step, j.world_size, j.master_addr,
                    j.master_port);
        }
        rc = 0;
    }
    free(text);
    td_slurm_join_free(&j);
out:
    free(layout);
    memset(buf[6], 0, sizeof(buf[6]));
    memset(&r, 0, sizeof(r));
    return rc;
}

int
todist_srun_user_init(spank_t sp)
{
    char token[TD_JOB_TOKEN_HEX + 1];

    if (todist_state.opts.join) {
        return join_init(sp);
    }
    if (td_job_token_make(token, sizeof(token)) != TD_OK) {
        slurm_error("todist: %s", td_last_error());
        return -1;
    }
    /* A fresh token per step: an inherited one (sbatch's, an outer srun's)
     * belongs to another world. */
    if (setenv("TODIST_JOB_TOKEN", token, 1) != 0) {
        slurm_error("todist: cannot set TODIST_JOB_TOKEN in srun's "
                    "environment");
        memset(token, 0, sizeof(token));
        return -1;
    }
    /* A join record is a convenience: without it the step runs, and a
     * later --todist=join names why it cannot join. */
    if (!todist_state.opts.kill_on_fail && record_write(sp, token) != 0) {
        slurm_error("todist: the step runs, but --todist=join cannot join "
                    "it");
    }
    memset(token, 0, sizeof(token));
    return 0;
}

void
todist_srun_exit(void)
{
    if (record_path[0] != '\0') {
        unlink(record_path);
        record_path[0] = '\0';
    }
}
