/* test_spank_join: the SPANK plugin's join path (spank/srun.c and
 * spank/stepd.c, compiled into this program) through the plugin's own
 * entry points, with Slurm's side played here: spank_get_item and the
 * task's environment, slurmctld's step facts, the log. The cluster tests
 * (test_spank_slurm.sh) skip in a sanitizer build, where slurmstepd cannot
 * load the plugin; this one runs in every build, so the sanitizers see the
 * join records and the claims.
 *  1. srun of a kill_on_fail=no step writes its record (0600, its pid,
 *     start and host, the token it gave the step), and its slurmstepd on
 *     node 0 serves the step's store.
 *  2. a join srun picks the live record and passes its tasks the step's
 *     store, layout and token (TODIST_SPANK_JOIN).
 *  3. join tasks claim the vacancies of the current epoch (quorum.h Q12)
 *     under their own names and get those ranks' variables; none left is
 *     refused, naming why.
 *  4. a join task that ends releases its claim (task_exit), so the rank is
 *     vacant again; another task's end releases nothing of it.
 *  5. a stale record (its srun gone, or its pid reused) is removed: a
 *     join naming its step fails saying so, a join of the latest step
 *     skips it at info; another host's record cannot be checked and is
 *     kept; a step slurmctld has not running is refused or skipped.
 *  6. srun's exit removes its record; a task that ends after the store is
 *     gone releases nothing and says so only at debug. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "todist/store.h"
#include "spank/plugin.h"
#include "tests/tap.h"

plugin_state_t todist_state;          /* todist.c's, not compiled in */

/* ---- Slurm, played ------------------------------------------------------ */

static struct {
    uint32_t job, step, nodeid, global_id;
    pid_t    task_pid;
    int      exit_status;
    char    *env[64];                 /* S_JOB_ENV, NULL-terminated */
    int      running;                 /* slurmctld: the step runs */
    int      signals;                 /* slurm_signal_job_step calls */
    uint32_t asked;                   /* the step whose layout was asked */
} F;

static char logged[16384];            /* every message, one a line */

static void
env_clear(void)
{
    for (int i = 0; F.env[i] != NULL; i++) {
        free(F.env[i]);
        F.env[i] = NULL;
    }
}

static void
env_put(const char *name, const char *value)
{
    size_t len = strlen(name);
    char *v = malloc(len + strlen(value) + 2);
    int i;

    sprintf(v, "%s=%s", name, value);
    for (i = 0; F.env[i] != NULL; i++) {
        if (strncmp(F.env[i], name, len) == 0 && F.env[i][len] == '=') {
            free(F.env[i]);
            F.env[i] = v;
            return;
        }
    }
    if (i < 63) {
        F.env[i] = v;
        F.env[i + 1] = NULL;
    } else {
        free(v);
    }
}

static const char *
env_get(const char *name)
{
    size_t len = strlen(name);

    for (int i = 0; F.env[i] != NULL; i++) {
        if (strncmp(F.env[i], name, len) == 0 && F.env[i][len] == '=') {
            return F.env[i] + len + 1;
        }
    }
    return NULL;
}

spank_err_t
spank_get_item(spank_t sp, spank_item_t item, ...)
{
    spank_err_t rc = ESPANK_SUCCESS;
    va_list ap;

    (void)sp;
    va_start(ap, item);
    switch (item) {
    case S_JOB_ID:           *va_arg(ap, uint32_t *) = F.job; break;
    case S_JOB_STEPID:       *va_arg(ap, uint32_t *) = F.step; break;
    case S_JOB_NODEID:       *va_arg(ap, uint32_t *) = F.nodeid; break;
    case S_TASK_GLOBAL_ID:   *va_arg(ap, uint32_t *) = F.global_id; break;
    case S_JOB_ENV:          *va_arg(ap, char ***) = F.env; break;
    case S_TASK_PID:         *va_arg(ap, pid_t *) = F.task_pid; break;
    case S_TASK_EXIT_STATUS: *va_arg(ap, int *) = F.exit_status; break;
    default:                 rc = ESPANK_BAD_ARG; break;
    }
    va_end(ap);
    return rc;
}

spank_err_t
spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
    (void)sp;
    if (!overwrite && env_get(var) != NULL) {
        return ESPANK_ENV_EXISTS;
    }
    env_put(var, val);
    return ESPANK_SUCCESS;
}

spank_err_t
spank_unsetenv(spank_t sp, const char *var)
{
    size_t len = strlen(var);
    int i, j;

    (void)sp;
    for (i = 0; F.env[i] != NULL; i++) {
        if (strncmp(F.env[i], var, len) == 0 && F.env[i][len] == '=') {
            free(F.env[i]);
            for (j = i; F.env[j] != NULL; j++) {
                F.env[j] = F.env[j + 1];
            }
            break;
        }
    }
    return ESPANK_SUCCESS;
}

static void
log_add(const char *level, const char *fmt, va_list ap)
{
    size_t n = strlen(logged);

    if (n + 200 < sizeof(logged)) {
        n += (size_t)snprintf(logged + n, sizeof(logged) - n, "%s: ", level);
        vsnprintf(logged + n, sizeof(logged) - n - 1, fmt, ap);
        strcat(logged, "\n");
    }
}

#define LOG_FN(name, level)                                                  \
    void name(const char *fmt, ...)                                          \
    {                                                                        \
        va_list ap;                                                          \
        va_start(ap, fmt);                                                   \
        log_add(level, fmt, ap);                                             \
        va_end(ap);                                                          \
    }
LOG_FN(slurm_error, "error")
LOG_FN(slurm_info, "info")
LOG_FN(slurm_debug, "debug")

int
slurm_get_job_steps(time_t t, uint32_t job, uint32_t step,
                    job_step_info_response_msg_t **resp, uint16_t flags)
{
    job_step_info_response_msg_t *m = calloc(1, sizeof(*m));

    (void)t;
    (void)flags;
    m->job_step_count = 1;
    m->job_steps = calloc(1, sizeof(*m->job_steps));
    m->job_steps[0].step_id.job_id = job;
    m->job_steps[0].step_id.step_id = step;
    m->job_steps[0].state = F.running ? JOB_RUNNING : JOB_COMPLETE;
    *resp = m;
    return 0;
}

void
slurm_free_job_step_info_response_msg(job_step_info_response_msg_t *m)
{
    if (m != NULL) {
        free(m->job_steps);
        free(m);
    }
}

/* The running step's layout: 4 tasks on one node, 127.0.0.1. */
slurm_step_layout_t *
slurm_job_step_layout_get(slurm_step_id_t *id)
{
    slurm_step_layout_t *l = calloc(1, sizeof(*l));

    F.asked = id->step_id;
    l->node_list = strdup("127.0.0.1");
    l->node_cnt = 1;
    l->task_cnt = 4;
    l->tasks = calloc(1, sizeof(*l->tasks));
    l->tasks[0] = 4;
    l->tids = calloc(1, sizeof(*l->tids));
    l->tids[0] = calloc(4, sizeof(**l->tids));
    for (uint32_t i = 0; i < 4; i++) {
        l->tids[0][i] = i;
    }
    return l;
}

void
slurm_job_step_layout_free(slurm_step_layout_t *l)
{
    free(l->node_list);
    free(l->tids[0]);
    free(l->tids);
    free(l->tasks);
    free(l);
}

int
slurm_signal_job_step(uint32_t job, uint32_t step, uint32_t sig)
{
    (void)job;
    (void)step;
    (void)sig;
    F.signals++;
    return 0;
}

/* ---- helpers ------------------------------------------------------------ */

static char recdir[512];

/* A TCP port of loopback nobody listens on now. */
static uint16_t
free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint16_t p = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        p = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return p;
}

/* Write a record for STEP of job 42 (pid PID, start START, host HOST). */
static void
record_put(uint32_t step, uint32_t pid, uint64_t start, const char *host,
           const char *token)
{
    td_slurm_record_t r;
    char path[600], text[320];
    FILE *f;

    memset(&r, 0, sizeof(r));
    r.job = 42;
    r.step = step;
    r.pid = pid;
    r.start = start;
    snprintf(r.host, sizeof(r.host), "%s", host);
    snprintf(r.token, sizeof(r.token), "%s", token);
    if (td_slurm_record_encode(&r, text, sizeof(text)) != TD_OK) {
        diag("encode: %s", td_last_error());
        return;
    }
    snprintf(path, sizeof(path), "%s/42.%u", recdir, step);
    f = fopen(path, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static int
record_exists(uint32_t step)
{
    char path[600];

    snprintf(path, sizeof(path), "%s/42.%u", recdir, step);
    return access(path, F_OK) == 0;
}

/* Read the record of STEP into *R: 0 ok. */
static int
record_get(uint32_t step, td_slurm_record_t *r)
{
    char path[600], text[320];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/42.%u", recdir, step);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return td_slurm_record_decode(text, r) == TD_OK ? 0 : -1;
}

/* The join srun of step JSTEP (joining STEP, or the latest): its return,
 * TODIST_SPANK_JOIN cleared first. */
static int
join_srun(uint32_t jstep, uint32_t step)
{
    F.step = jstep;
    todist_state.opts.join = true;
    todist_state.opts.join_step = step;
    unsetenv("TODIST_SPANK_JOIN");
    logged[0] = '\0';
    return todist_srun_user_init(NULL);
}

/* A join task: task PROCID of join step 8, its environment from srun. */
static int
join_task(int procid)
{
    char id[16];
    const char *spec = getenv("TODIST_SPANK_JOIN");

    env_clear();
    F.step = 8;
    snprintf(id, sizeof(id), "%d", procid);
    env_put("SLURM_PROCID", id);
    env_put("SLURM_JOB_ID", "42");
    env_put("SLURM_STEP_ID", "8");
    env_put("SLURM_STEP_NUM_TASKS", "2");
    env_put("OMP_NUM_THREADS", "1");
    env_put("TODIST_SPANK_JOIN", spec != NULL ? spec : "");
    env_put("TODIST_JOB_TOKEN", getenv("TODIST_JOB_TOKEN"));
    logged[0] = '\0';
    return todist_stepd_task_init(NULL);
}

/* join_task(PROCID) in a child process (another pid: another claimer,
 * as each task of a join step is): its return, into RANK its TODIST_RANK
 * ("" if none), into LOG what it logged; *PID its pid. */
static int
join_task_child(int procid, char *rank, size_t rank_len, char *log,
                size_t log_len, pid_t *pid)
{
    int fd[2], status = 0;
    char buf[4096];
    ssize_t n, got = 0;
    pid_t p;

    rank[0] = log[0] = '\0';
    if (pipe(fd) != 0) {
        return -2;
    }
    fflush(stdout);
    p = fork();
    if (p == 0) {
        int rc;
        const char *r;

        close(fd[0]);
        rc = join_task(procid);
        r = env_get("TODIST_RANK");
        n = snprintf(buf, sizeof(buf), "%s\n%s", r != NULL ? r : "",
                     logged);
        if (write(fd[1], buf, (size_t)n) != n) {
            _exit(3);
        }
        _exit(rc == 0 ? 0 : 1);
    }
    close(fd[1]);
    while (p > 0 && got < (ssize_t)sizeof(buf) - 1 &&
           (n = read(fd[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0) {
        got += n;
    }
    close(fd[0]);
    buf[got] = '\0';
    if (p < 0 || waitpid(p, &status, 0) != p || !WIFEXITED(status) ||
        WEXITSTATUS(status) > 1) {
        return -2;
    }
    *pid = p;
    {
        char *nl = strchr(buf, '\n');

        if (nl != NULL) {
            *nl = '\0';
            size_t l = strlen(nl + 1);

            l = l < log_len - 1 ? l : log_len - 1;
            memcpy(log, nl + 1, l);
            log[l] = '\0';
        }
        snprintf(rank, rank_len, "%.15s", buf);
    }
    return WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The store's value at KEY as a string ("" when absent). */
static void
store_text(td_store_t *c, const char *key, char *buf, size_t len)
{
    void *v = NULL;
    size_t n = 0;

    buf[0] = '\0';
    if (td_store_get(c, key, 0, &v, &n) == TD_OK) {
        snprintf(buf, len, "%.*s", (int)n, (const char *)v);
        free(v);
    }
}

int
main(void)
{
    char tmp[] = "/tmp/todist-test.spankjoin.XXXXXX", me[300], host[256];
    char val[700], token[TD_JOB_TOKEN_HEX + 1], want[700];
    char *spec_saved = NULL, rank_b[16], clog[4096];
    pid_t pid_b = 0, pid_c = 0;
    uint16_t port, sport;
    td_slurm_record_t r;
    td_slurm_join_t j;
    td_store_t *c = NULL;
    struct stat st;
    pid_t gone;

    plan(51);
    if (mkdtemp(tmp) == NULL) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    setenv("TMPDIR", tmp, 1);
    snprintf(recdir, sizeof(recdir), "%s/todist-%u", tmp, (unsigned)getuid());
    gethostname(host, sizeof(host) - 1);
    host[64] = '\0';
    td_slurm_opts_init(&todist_state.opts);
    todist_state.opts.enabled = true;
    todist_state.opts.kill_on_fail = false;
    sport = free_port();
    port = free_port();
    if (port == sport) {
        port = (uint16_t)(sport + 1);
    }
    todist_state.opts.port = port;
    todist_state.opts.store_port = sport;
    F.job = 42;
    F.running = 1;

    /* ---- 1: the running step: srun's record, node 0's store ---------- */
    F.step = 7;
    unsetenv("TODIST_JOB_TOKEN");
    is_int(todist_srun_user_init(NULL), 0, "srun of step 7 (kill_on_fail=no)");
    ok(getenv("TODIST_JOB_TOKEN") != NULL &&
       strlen(getenv("TODIST_JOB_TOKEN")) == TD_JOB_TOKEN_HEX,
       "it made the step's token");
    snprintf(token, sizeof(token), "%s",
             getenv("TODIST_JOB_TOKEN") ? getenv("TODIST_JOB_TOKEN") : "");
    ok(stat(recdir, &st) == 0 && (st.st_mode & 0777) == 0700,
       "the record directory is private (0700)");
    ok(record_get(7, &r) == 0 && r.job == 42 && r.step == 7 &&
       r.pid == (uint32_t)getpid() && strcmp(r.host, host) == 0 &&
       strcmp(r.token, token) == 0 && r.port == port &&
       r.store_port == sport && r.start > 0,
       "the record names step 42.7, this srun (pid, start, host), its "
       "ports and token");
    {
        char path[600];

        snprintf(path, sizeof(path), "%s/42.7", recdir);
        ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600,
           "the record is 0600");
    }
    env_clear();
    env_put("SLURM_STEP_NODELIST", "127.0.0.1");
    env_put("SLURM_STEP_NUM_NODES", "1");
    env_put("SLURM_STEP_NUM_TASKS", "4");
    env_put("SLURM_STEP_TASKS_PER_NODE", "4");
    env_put("SLURM_JOB_ID", "42");
    env_put("SLURM_STEP_ID", "7");
    env_put("TODIST_JOB_TOKEN", token);
    F.nodeid = 0;
    is_int(todist_stepd_user_init(NULL), 0,
           "slurmstepd of node 0 serves the step's store");
    if (td_store_connect("127.0.0.1", sport, token, 10, &c) != TD_OK) {
        diag("store: %s", td_last_error());
        c = NULL;
    }
    ok(c != NULL, "the store answers at store_port with the step's token");
    if (c == NULL) {
        todist_stepd_exit();
        skip(44, "no store");
        goto out;
    }

    /* ---- 2: a join srun picks the live record ------------------------- */
    is_int(join_srun(8, TD_SLURM_JOIN_LATEST), 0,
           "--todist=join (latest): step 7 is picked");
    ok(getenv("TODIST_SPANK_JOIN") != NULL &&
       td_slurm_join_decode(getenv("TODIST_SPANK_JOIN"), &j) == TD_OK,
       "srun passes TODIST_SPANK_JOIN");
    ok(j.job == 42 && j.step == 7 && j.world_size == 4 && j.nnodes == 1 &&
       j.master_port == sport && strcmp(j.master_addr, "127.0.0.1") == 0,
       "it names step 42.7, world 4, its store %s:%u", j.master_addr,
       j.master_port);
    td_slurm_join_free(&j);
    is_str(getenv("TODIST_JOB_TOKEN"), token, "and the step's token");
    is_int(F.asked, 7, "from slurmctld's layout of step 7");
    spec_saved = strdup(getenv("TODIST_SPANK_JOIN"));

    /* ---- 3: claims ----------------------------------------------------- */
    is_int(join_task(0), -1, "epoch 0 lacks no rank: the join task fails");
    like(logged, "join: step 42.7's store at 127.0.0.1:[0-9]+: elastic: "
         "epoch 0 of a world of 4 lacks no rank", "naming why");
    td_store_set(c, "td/el/1/plan", "v1 1 7 0 0 2 0 2", 16);  /* {0, 2} */
    is_int(join_task(0), 0, "epoch 1 = {0, 2}: join task 0 takes a rank");
    is_str(env_get("TODIST_RANK"), "1", "the first vacancy, rank 1");
    is_str(env_get("TODIST_ELASTIC_JOIN"), "1", "as a replacement joins");
    is_str(env_get("TODIST_AGENT_STORE"), "1", "the store is the step's");
    is_str(env_get("TODIST_MASTER_PORT") ? env_get("TODIST_MASTER_PORT") : "",
           (snprintf(val, sizeof(val), "%u", sport), val),
           "at the step's store port");
    ok(env_get("TODIST_SPANK_JOIN") == NULL,
       "TODIST_SPANK_JOIN is not passed to the program");
    snprintf(me, sizeof(me), "%ld@%.200s", (long)getpid(), host);
    store_text(c, "td/el/1/claim/1", val, sizeof(val));
    is_str(val, me, "the claim names the task (PID@HOST)");
    is_int(join_task_child(0, rank_b, sizeof(rank_b), clog, sizeof(clog),
                           &pid_b), 0,
           "a second join task (another process, same first vacancy)");
    is_str(rank_b, "3", "takes the other one, rank 3");
    store_text(c, "td/el/1/claim/3", val, sizeof(val));
    snprintf(want, sizeof(want), "%ld@%.200s", (long)pid_b, host);
    is_str(val, want, "under its own name");
    is_int(join_task_child(1, val, sizeof(val), clog, sizeof(clog), &pid_c),
           -1, "a third finds none left");
    like(clog, "lacks ranks, but a replacement holds each already",
         "naming why");

    /* ---- 4: a join task's end releases its claim ---------------------- */
    env_clear();
    env_put("TODIST_SPANK_JOIN", spec_saved);
    env_put("TODIST_JOB_TOKEN", token);
    F.step = 8;
    F.task_pid = 999999;                    /* not the claimer */
    F.exit_status = 9;                      /* SIGKILLed */
    logged[0] = '\0';
    is_int(todist_stepd_task_exit(NULL), 0, "another task ends");
    store_text(c, "td/el/1/claim/1", val, sizeof(val));
    is_str(val, me, "its end releases nothing it did not claim");
    F.task_pid = getpid();
    logged[0] = '\0';
    is_int(todist_stepd_task_exit(NULL), 0, "the claimer ends (killed)");
    store_text(c, "td/el/1/claim/1", val, sizeof(val));
    ok(strcmp(val, me) != 0, "its claims are released (claim/1: %s)", val);
    snprintf(want, sizeof(want), "join: task %s ended; its claim of a rank "
             "of step 42.7 is released", me);
    like(logged, want, "the release is logged");
    is_int(F.signals, 0, "kill_on_fail=no: the step is not stopped");
    is_int(join_task_child(1, rank_b, sizeof(rank_b), clog, sizeof(clog),
                           &pid_c), 0, "a new join task");
    is_str(rank_b, "1", "takes the released rank 1");

    /* ---- 5: stale records ---------------------------------------------- */
    gone = fork();
    if (gone == 0) {
        _exit(0);
    }
    waitpid(gone, NULL, 0);
    record_put(9, (uint32_t)gone, 1, host, token);
    is_int(join_srun(10, 9), -1, "join=9: its srun (pid %d) is gone",
           (int)gone);
    like(logged, "step 42.9's record is stale: the srun that started the "
         "step \\(pid [0-9]+ on [^)]*\\) is gone", "the join says so");
    ok(!record_exists(9), "and removes the stale record");
    record_put(9, (uint32_t)gone, 1, host, token);
    is_int(join_srun(10, TD_SLURM_JOIN_LATEST), 0,
           "join (latest): a stale later record is skipped");
    like(logged, "info: todist: join: skipping step 42.9: its record is "
         "stale", "quietly, at info");
    ok(!record_exists(9) && record_exists(7),
       "the stale one is removed, step 7's kept");
    ok(getenv("TODIST_SPANK_JOIN") != NULL &&
       strstr(getenv("TODIST_SPANK_JOIN"), "v1 42 7 ") ==
       getenv("TODIST_SPANK_JOIN"), "and step 7 is joined");
    record_get(7, &r);
    record_put(11, r.pid, r.start + 1, host, token);
    is_int(join_srun(12, 11), -1,
           "join=11: its pid runs but started later (reused): stale");
    ok(!record_exists(11), "removed");
    record_put(13, 1, 1, "another-host", token);
    is_int(join_srun(14, 13), 0,
           "join=13: a record of another host cannot be checked: joined");
    ok(record_exists(13), "and kept");
    unlink((snprintf(val, sizeof(val), "%s/42.13", recdir), val));
    F.running = 0;
    is_int(join_srun(10, 7), -1, "join=7 while slurmctld has it ended");
    like(logged, "step 42.7 is not running \\(slurmctld has it ended\\)",
         "refused, naming why");
    is_int(join_srun(10, TD_SLURM_JOIN_LATEST), -1,
           "join (latest) with no running step");
    like(logged, "job 42 has no running step started with "
         "--todist=kill_on_fail=no", "refused, naming why");
    F.running = 1;

    /* ---- 6: the ends ---------------------------------------------------- */
    td_store_close(c);
    c = NULL;
    todist_stepd_exit();
    todist_srun_exit();
    ok(!record_exists(7), "srun's exit removes its record");
    env_clear();
    env_put("TODIST_SPANK_JOIN", spec_saved);
    env_put("TODIST_JOB_TOKEN", token);
    F.task_pid = getpid();
    logged[0] = '\0';
    todist_stepd_task_exit(NULL);
    ok(strstr(logged, "error:") == NULL && strstr(logged, "debug:") != NULL,
       "a task ending after its step's store: nothing held, said at debug");

out:
    free(spec_saved);
    env_clear();
    td_store_close(c);
    {
        char cmd[600];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        if (system(cmd) != 0) {
            diag("could not remove %s", tmp);
        }
    }
    return exit_status();
}
