/* todist-run: the local launcher (torchrun's standalone mode, in C).
 *
 * Starts N copies of a program, each with the environment
 * td_rank_env_export() gives a rank (TODIST_*, torchrun's names,
 * OMP_NUM_THREADS, ...), optionally labels their output line by line,
 * forwards SIGINT/SIGTERM, tears the group down when one rank fails
 * (SIGTERM, then SIGKILL after a grace period) and exits with the failing
 * rank's status, restarting the whole group up to --max-restarts times.
 * With --nnodes it is one node's launcher of a multi-node job; with
 * --nnodes MIN:MAX, or several nodes and --max-restarts, the nodes'
 * launchers run the job in restart rounds agreed through a store of their
 * own (tools/rdzv.h: a failed rank or a lost host restarts every node's
 * workers with the new world). Accepts
 * torchrun's option spellings. Runs Python as torchrun does: a PROGRAM
 * ending in .py, or any PROGRAM with -m (a module), runs under the
 * interpreter $PYTHON (default python3 on PATH); --no-python runs PROGRAM
 * as given. Single-threaded. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "todist/rank_env.h"
#include "todist/store.h"
#include "tools/rdzv.h"

#define LINE_MAX_BYTES 65536

typedef struct {
    int    fd;          /* read end, -1 when closed */
    int    out_fd;      /* where labelled lines go (1 or 2) */
    char  *buf;
    size_t len;
} stream_t;

typedef struct {
    pid_t    pid;       /* 0 once reaped */
    int      status;    /* wait status once reaped */
    int      join;      /* a replacement: TODIST_ELASTIC_JOIN=1 */
    stream_t out, err;
} child_t;

typedef struct {
    int         nproc;
    int         nnodes;         /* MAX of --nnodes MIN:MAX */
    int         nnodes_min;
    int         rounds;         /* restart rounds across nodes (rdzv.h) */
    int         rdzv_port;      /* the agents' store, rounds only */
    double      rdzv_timeout;   /* s for MIN nodes to join a round */
    double      last_call;      /* s, round 0 */
    double      liveness;       /* TODIST_LIVENESS: s an agent may be silent */
    int         node_rank;
    const char *master_addr;
    int         master_port;    /* torch's MASTER_PORT */
    int         store_port;     /* todist's store (TODIST_MASTER_PORT) */
    int         label;
    int         max_restarts;
    int         no_kill;        /* --no-kill: a failed rank stops no other;
                                 * the launcher of node 0 serves todist's
                                 * store (TODIST_AGENT_STORE=1), so rank 0
                                 * may die too */
    int         replace;        /* --replace N: start a replacement for a
                                 * failed rank, N in all */
    double      grace;
    const char *bind;           /* --bind; NULL: leave TODIST_BIND */
    const char *run_id;         /* TORCHELASTIC_RUN_ID */
    int         omp_threads;    /* 0: OMP_NUM_THREADS was set */
    int         module;         /* -m: PROGRAM is a Python module */
    int         no_python;      /* --no-python: never add an interpreter */
    char      **argv;           /* what each rank executes */
    char      **argv_alloc;     /* argv when python_argv allocated it */
    char        token[TD_JOB_TOKEN_HEX + 1];   /* "": export none */
} opts_t;

/* Where one incarnation's ranks stand in the world. */
typedef struct {
    int         first_rank;     /* of this node's ranks */
    int         nproc;
    int         world_size;
    int         node_rank;
    int         nnodes;
    int         restart;        /* TODIST_RESTART_COUNT */
    const char *token;          /* the workers' TODIST_JOB_TOKEN; NULL: none */
    const char *host;           /* for messages in rounds; NULL: none */
} assign_t;

/* Called every tick while the group runs (rounds), with the local
 * failure once there is one (WHY NULL before) and its exit code: 0 go
 * on, 1 stop the group (the round is over), -1 stop it (the launchers'
 * store failed). */
typedef int (*watch_fn)(void *arg, const char *why, int code);

/* One incarnation of the group. */
typedef struct {
    const opts_t   *o;
    const assign_t *a;
    child_t        *c;
    int             n;
    int             alive;
    int             failed_rank;  /* local index, -1 */
    int             failed_status;
    char            failed_why[256];
    int             got_signal;
    int             watch_said;   /* the watch's last non-zero answer */
    double          kill_at;      /* 0: no teardown under way */
    watch_fn        watch;
    void           *watch_arg;
    double          watch_next;
    const sigset_t *mask;         /* for replacements (--replace) */
    int             replaced;     /* replacements started */
} group_t;

#define TICK_S 0.05     /* s between watches of the rounds' store */

static void
usage(FILE *f)
{
    fprintf(f,
"usage: todist-run [-n N] [--nnodes M --node-rank K --master-addr A\n"
"                  --master-port P] [--store-port Q] [--standalone]\n"
"                  [--label] [--max-restarts R] [--no-kill [--replace N]]\n"
"                  [--grace-period S]\n"
"                  [--rdzv-port Q2] [--rdzv-timeout S] [--rdzv-last-call S]\n"
"                  [--bind closest|none] [--run-id ID] [-m | --no-python]\n"
"                  [--] PROGRAM [ARGS...]\n"
"\n"
"Start N local processes of PROGRAM as ranks of one todist job. A PROGRAM\n"
"ending in .py runs as `$PYTHON PROGRAM ARGS` (PYTHON unset: python3 on\n"
"PATH), as torchrun runs it.\n"
"  -n, --nproc-per-node N  processes on this node (default 1)\n"
"  --nnodes M              nodes in the job (default 1); with M > 1 also\n"
"                          give --node-rank, --master-addr and\n"
"                          --master-port, and for todist's store the same\n"
"                          TODIST_JOB_TOKEN in every node's environment\n"
"  --nnodes MIN:MAX        restart rounds (also M > 1 with --max-restarts):\n"
"                          the launchers meet at --master-addr's node and\n"
"                          run the job in rounds of MIN to MAX nodes; a\n"
"                          failed rank, a lost or a joining node starts a\n"
"                          new round on every node (--node-rank is then\n"
"                          assigned each round: the master's node is 0)\n"
"  --node-rank K           this node's index, 0..M-1 (default 0)\n"
"  --master-addr A         address of rank 0's node (default 127.0.0.1)\n"
"  --master-port P         torch's MASTER_PORT (default: a free port)\n"
"  --store-port Q          todist's store port, TODIST_MASTER_PORT\n"
"                          (default P+1 with --master-port, else a free port)\n"
"  --standalone            one node, free ports (torchrun's --standalone)\n"
"  --label                 prefix each output line with '[RANK]: '\n"
"  --max-restarts R        restart the whole group up to R times on failure\n"
"                          (in rounds: every node's workers, together)\n"
"  --rdzv-port Q2          the launchers' store in rounds (default P+2)\n"
"  --rdzv-timeout S        seconds for MIN nodes to join a round (300)\n"
"  --rdzv-last-call S      the first round waits S seconds for more nodes\n"
"                          once MIN are in, unless MAX are (default 2)\n"
"  --no-kill               a failed rank stops no other: the survivors go\n"
"                          on (in-place recovery, todist/elastic.h; Slurm's\n"
"                          --no-kill); the exit code is still the first\n"
"                          failed rank's (unless replaced); the launcher\n"
"                          serves todist's store (TODIST_AGENT_STORE=1),\n"
"                          so rank 0 may fail too\n"
"  --replace N             with --no-kill: start a replacement for a failed\n"
"                          rank (rank 0 too) with TODIST_ELASTIC_JOIN=1, N\n"
"                          in all; it joins the survivors at a step\n"
"                          boundary (td_elastic_join)\n"
"  --grace-period S        seconds between SIGTERM and SIGKILL (default 3)\n"
"  --bind closest|none     TODIST_BIND for every rank (default: as inherited)\n"
"  --run-id ID             TORCHELASTIC_RUN_ID (default 'none')\n"
"  -m, --module            PROGRAM is a Python module: `$PYTHON -m PROGRAM`\n"
"  --no-python             run PROGRAM as given, even a .py\n"
"  -h, --help              this text\n"
"torchrun's spellings (--nproc_per_node, --node_rank, --master_addr,\n"
"--master_port, --max_restarts, --rdzv_id) are accepted too.\n");
}

static void
die_usage(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "todist-run: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    usage(stderr);
    exit(2);
}

static long
parse_long(const char *opt, const char *s, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        die_usage("%s expects an integer in %ld..%ld, got '%s'", opt, min, max,
                  s);
    }
    return v;
}

/* torchrun's --nnodes: N, or MIN:MAX. */
static void
parse_nnodes(const char *s, int *min_p, int *max_p)
{
    const char *colon = strchr(s, ':');
    char lo[32];
    long a, b;

    if (colon == NULL) {
        *min_p = *max_p = (int)parse_long("--nnodes", s, 1, 1 << 20);
        return;
    }
    if ((size_t)(colon - s) >= sizeof(lo)) {
        die_usage("--nnodes expects N or MIN:MAX, got '%s'", s);
    }
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = '\0';
    a = parse_long("--nnodes", lo, 1, RDZV_NODES_MAX);
    b = parse_long("--nnodes", colon + 1, 1, RDZV_NODES_MAX);
    if (a > b) {
        die_usage("--nnodes %s: MIN is above MAX", s);
    }
    *min_p = (int)a;
    *max_p = (int)b;
}

static double
parse_seconds(const char *opt, const char *s, double max)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !(v >= 0 && v <= max)) {
        die_usage("%s expects seconds in 0..%g, got '%s'", opt, max, s);
    }
    return v;
}

/* Two distinct ports nobody listens on now: bind port 0 twice (both
 * sockets open at once, so the kernel cannot hand out the same one). */
static int
free_ports(int *a_p, int *b_p)
{
    int fd[2] = { -1, -1 }, port[2] = { -1, -1 }, rc = -1;

    for (int i = 0; i < 2; i++) {
        struct sockaddr_in a = { .sin_family = AF_INET };
        socklen_t len = sizeof(a);

        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fd[i] < 0 || bind(fd[i], (struct sockaddr *)&a, sizeof(a)) != 0 ||
            getsockname(fd[i], (struct sockaddr *)&a, &len) != 0) {
            goto out;
        }
        port[i] = ntohs(a.sin_port);
    }
    *a_p = port[0];
    *b_p = port[1];
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        if (fd[i] >= 0) {
            close(fd[i]);
        }
    }
    return rc;
}

static int
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* What a rank executes for PROG (ARGC words): torchrun's rule, a script or
 * module under $PYTHON, narrowed to .py files and -m so that any other
 * program still runs as given. */
static char **
python_argv(const opts_t *o, char **prog, int argc)
{
    const char *py = getenv("PYTHON");
    char **av;
    int k = 0;

    if (o->no_python || (!o->module && !ends_with(prog[0], ".py"))) {
        return prog;
    }
    av = calloc((size_t)argc + 3, sizeof(*av));
    if (av == NULL) {
        fprintf(stderr, "todist-run: out of memory\n");
        exit(1);
    }
    av[k++] = (char *)(py != NULL && py[0] != '\0' ? py : "python3");
    if (o->module) {
        av[k++] = "-m";
    }
    memcpy(av + k, prog, (size_t)argc * sizeof(*av));   /* NULL follows */
    return av;
}

static void
parse_args(int argc, char **argv, opts_t *o)
{
    /* Both spellings of torchrun's options map to the same code. */
    static const struct option longopts[] = {
        { "nproc-per-node", required_argument, NULL, 'n' },
        { "nproc_per_node", required_argument, NULL, 'n' },
        { "nnodes",         required_argument, NULL, 'N' },
        { "node-rank",      required_argument, NULL, 'k' },
        { "node_rank",      required_argument, NULL, 'k' },
        { "master-addr",    required_argument, NULL, 'a' },
        { "master_addr",    required_argument, NULL, 'a' },
        { "master-port",    required_argument, NULL, 'p' },
        { "master_port",    required_argument, NULL, 'p' },
        { "store-port",     required_argument, NULL, 'q' },
        { "standalone",     no_argument,       NULL, 's' },
        { "label",          no_argument,       NULL, 'l' },
        { "no-kill",        no_argument,       NULL, 'K' },
        { "replace",        required_argument, NULL, 'X' },
        { "max-restarts",   required_argument, NULL, 'r' },
        { "max_restarts",   required_argument, NULL, 'r' },
        { "grace-period",   required_argument, NULL, 'g' },
        { "rdzv-port",      required_argument, NULL, 'R' },
        { "rdzv-timeout",   required_argument, NULL, 'T' },
        { "rdzv-last-call", required_argument, NULL, 'L' },
        { "bind",           required_argument, NULL, 'b' },
        { "run-id",         required_argument, NULL, 'i' },
        { "rdzv-id",        required_argument, NULL, 'i' },
        { "rdzv_id",        required_argument, NULL, 'i' },
        { "module",         no_argument,       NULL, 'm' },
        { "no-python",      no_argument,       NULL, 'P' },
        { "no_python",      no_argument,       NULL, 'P' },
        { "help",           no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int c, have_addr = 0, standalone = 0;
    const char *token, *live;

    memset(o, 0, sizeof(*o));
    o->nproc = 1;
    o->nnodes = o->nnodes_min = 1;
    o->rdzv_port = -1;
    o->rdzv_timeout = 300;
    o->last_call = 2;
    o->master_addr = "127.0.0.1";
    o->master_port = -1;
    o->store_port = -1;
    o->grace = 3.0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+n:mh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': o->nproc = (int)parse_long("-n", optarg, 1, 4096); break;
        case 'N': parse_nnodes(optarg, &o->nnodes_min, &o->nnodes); break;
        case 'R': o->rdzv_port = (int)parse_long("--rdzv-port", optarg, 1, 65535); break;
        case 'T': o->rdzv_timeout = parse_seconds("--rdzv-timeout", optarg, 86400); break;
        case 'L': o->last_call = parse_seconds("--rdzv-last-call", optarg, 3600); break;
        case 'k': o->node_rank = (int)parse_long("--node-rank", optarg, 0, 1 << 20); break;
        case 'a':
            if (optarg[0] == '\0' || strlen(optarg) >= TD_HOSTNAME_MAX) {
                die_usage("--master-addr expects a host name or address");
            }
            o->master_addr = optarg;
            have_addr = 1;
            break;
        case 'p': o->master_port = (int)parse_long("--master-port", optarg, 1, 65535); break;
        case 'q': o->store_port = (int)parse_long("--store-port", optarg, 1, 65535); break;
        case 's': standalone = 1; break;
        case 'l': o->label = 1; break;
        case 'K': o->no_kill = 1; break;
        case 'X': o->replace = (int)parse_long("--replace", optarg, 0, 1000000); break;
        case 'r': o->max_restarts = (int)parse_long("--max-restarts", optarg, 0, 1000); break;
        case 'g': o->grace = parse_seconds("--grace-period", optarg, 600); break;
        case 'b':
            if (strcmp(optarg, "closest") != 0 && strcmp(optarg, "none") != 0) {
                die_usage("--bind expects closest or none, got '%s'", optarg);
            }
            o->bind = optarg;
            break;
        case 'i':
            if (optarg[0] == '\0' || strlen(optarg) >= TD_HOSTNAME_MAX) {
                die_usage("--run-id expects 1 to %d characters",
                          TD_HOSTNAME_MAX - 1);
            }
            o->run_id = optarg;
            break;
        case 'm': o->module = 1; break;
        case 'P': o->no_python = 1; break;
        case 'h': usage(stdout); exit(0);
        default:
            if (optopt != 0) {
                die_usage("option -%c needs a valid argument", optopt);
            }
            die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        die_usage("no PROGRAM given");
    }
    if (o->module && o->no_python) {
        die_usage("-m runs a Python module; it cannot go with --no-python");
    }
    o->argv = python_argv(o, argv + optind, argc - optind);
    o->argv_alloc = o->argv != argv + optind ? o->argv : NULL;
    if (standalone && o->nnodes > 1) {
        die_usage("--standalone is one node, but --nnodes is %d", o->nnodes);
    }
    /* Rounds: a size range, or restarts across several nodes. */
    o->rounds = o->nnodes_min < o->nnodes ||
                (o->nnodes > 1 && o->max_restarts > 0);
    if (o->rounds) {
        o->node_rank = 0;       /* assigned each round */
    }
    if (o->replace > 0 && !o->no_kill) {
        die_usage("--replace starts replacements that join the survivors "
                  "in place: it needs --no-kill");
    }
    if (o->no_kill && (o->rounds || o->max_restarts > 0)) {
        die_usage("--no-kill keeps the survivors running; it cannot go with "
                  "restarts (--max-restarts, --nnodes MIN:MAX)");
    }
    if (o->node_rank >= o->nnodes) {
        die_usage("--node-rank %d is not below --nnodes %d", o->node_rank,
                  o->nnodes);
    }
    if ((long)o->nnodes * o->nproc > (1 << 24)) {
        die_usage("world of %ld ranks is too large", (long)o->nnodes * o->nproc);
    }
    if (o->rounds && (!have_addr || o->master_port < 0)) {
        die_usage("--nnodes %s%d needs --master-addr and --master-port",
                  o->nnodes_min < o->nnodes ? "MIN:" : "", o->nnodes);
    }
    if (o->nnodes > 1 && (!have_addr || o->master_port < 0)) {
        die_usage("--nnodes %d needs --master-addr and --master-port",
                  o->nnodes);
    }
    if (o->master_port == 65535 && o->store_port < 0) {
        die_usage("--master-port 65535 leaves no port above it for todist's "
                  "store; give --store-port");
    }
    if (o->master_port > 0 && o->store_port == o->master_port) {
        die_usage("--store-port %d is also --master-port; todist's store "
                  "needs a port of its own", o->store_port);
    }
    if (o->rounds) {
        if (o->rdzv_port < 0) {
            o->rdzv_port = o->master_port + 2;
        }
        if (o->rdzv_port > 65535) {
            die_usage("--master-port %d leaves no port P+2 for the launchers' "
                      "store; give --rdzv-port", o->master_port);
        }
        if (o->rdzv_port == o->master_port ||
            o->rdzv_port == (o->store_port > 0 ? o->store_port
                                               : o->master_port + 1)) {
            die_usage("--rdzv-port %d is also --master-port or --store-port; "
                      "the launchers' store needs a port of its own",
                      o->rdzv_port);
        }
    }
    live = getenv("TODIST_LIVENESS");
    o->liveness = 3;
    if (live != NULL && live[0] != '\0') {
        o->liveness = parse_seconds("TODIST_LIVENESS", live, 86400);
    }
    /* The job token: inherited, or made here for a one-node job. Several
     * nodes cannot agree on a fresh one, so without it none is exported
     * and td_init refuses to start its store across nodes, while a pure
     * PyTorch program (torch's own store) runs unhindered. */
    token = getenv("TODIST_JOB_TOKEN");
    if (token != NULL && token[0] != '\0') {
        if (strlen(token) >= sizeof(o->token)) {
            die_usage("TODIST_JOB_TOKEN is longer than %zu characters",
                      sizeof(o->token) - 1);
        }
        strcpy(o->token, token);
    } else if (o->nnodes == 1 &&
               td_job_token_make(o->token, sizeof(o->token)) != TD_OK) {
        fprintf(stderr, "todist-run: %s\n", td_last_error());
        exit(1);
    } else if (o->rounds) {
        die_usage("restart rounds across nodes need the same "
                  "TODIST_JOB_TOKEN in every node's environment (the "
                  "launchers' store admits only its holders)");
    }
    if (o->master_port < 0) {
        int a = -1, b = -1;
        if (free_ports(&a, &b) != 0) {
            fprintf(stderr, "todist-run: cannot find free ports: %s\n",
                    strerror(errno));
            exit(1);
        }
        if (o->store_port < 0) {
            o->store_port = b;
        }
        o->master_port = a != o->store_port ? a : b;
    } else if (o->store_port < 0) {
        o->store_port = o->master_port + 1;
    }
    /* As the plugin does: the cores this launcher may use, shared by the
     * local ranks, unless the user chose. More local ranks than those cores
     * make the ranks take turns on them (3 ranks on 2 cores ran slower than
     * 2): say so, once per launch (restarts do not repeat it). */
    {
        const char *omp = getenv("OMP_NUM_THREADS");
        cpu_set_t set;
        int cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set) : 0;

        if (omp == NULL || omp[0] == '\0') {
            o->omp_threads = td_omp_threads_default(cpus > 0 ? cpus : 1,
                                                    o->nproc);
        }
        if (cpus > 0 && o->nproc > cpus) {
            fprintf(stderr, "todist-run: warning: %d ranks on this node but "
                    "%d core%s to run them on (this launcher's CPU affinity): "
                    "the ranks will share cores, usually slower than one "
                    "rank per core\n", o->nproc, cpus, cpus == 1 ? "" : "s");
        }
    }
}

static int
env_set(const char *name, const char *value, void *arg)
{
    (void)arg;
    return setenv(name, value, 1);
}

/* In the child: the rank's environment, then exec. Never returns. */
static void
child_exec(const opts_t *o, const assign_t *a, int local_rank,
           const sigset_t *mask, int out_fd, int err_fd, int join)
{
    td_world_t w;
    td_rank_env_t re;

    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* no orphans if the launcher dies */
    sigprocmask(SIG_UNBLOCK, mask, NULL);
    signal(SIGPIPE, SIG_DFL);           /* the launcher ignores it */
    if (out_fd >= 0 && (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)) {
        _exit(127);
    }
    memset(&w, 0, sizeof(w));
    w.rank = a->first_rank + local_rank;
    w.world_size = a->world_size;
    w.local_rank = local_rank;
    w.local_world_size = a->nproc;
    w.node_rank = a->node_rank;
    w.nnodes = a->nnodes;
    snprintf(w.master_addr, sizeof(w.master_addr), "%s", o->master_addr);
    w.master_port = (uint16_t)o->store_port;
    memset(&re, 0, sizeof(re));
    re.world = &w;
    re.torch_port = (uint16_t)o->master_port;
    re.torchrun = true;
    re.token = a->token;
    re.bind = o->bind;
    re.omp_threads = o->omp_threads;
    re.restart_count = a->restart;
    re.max_restarts = o->max_restarts;
    re.run_id = o->run_id;
    if (td_rank_env_export(&re, env_set, NULL) != TD_OK) {
        fprintf(stderr, "todist-run: %s\n", td_last_error());
        _exit(127);
    }
    if (join) {
        setenv("TODIST_ELASTIC_JOIN", "1", 1);  /* todist/elastic.h */
    } else {
        unsetenv("TODIST_ELASTIC_JOIN");
    }
    if (o->no_kill) {
        setenv("TODIST_AGENT_STORE", "1", 1);   /* node 0's launcher's */
    } else {
        unsetenv("TODIST_AGENT_STORE");
    }
    execvp(o->argv[0], o->argv);
    fprintf(stderr, "todist-run: cannot run '%s': %s\n", o->argv[0],
            strerror(errno));
    _exit(127);
}

static void
write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Emit one labelled line with a single write, so lines never interleave. */
static void
emit_line(int fd, int rank, const char *line, size_t n)
{
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "[%d]: ", rank);
    char *out = malloc((size_t)plen + n + 1);

    if (out == NULL) {
        return;
    }
    memcpy(out, prefix, (size_t)plen);
    memcpy(out + plen, line, n);
    out[plen + n] = '\n';
    write_all(fd, out, (size_t)plen + n + 1);
    free(out);
}

/* Read what is available; emit whole lines. Returns 0 at EOF. */
static int
stream_pump(stream_t *s, int rank)
{
    ssize_t n = read(s->fd, s->buf + s->len, LINE_MAX_BYTES - s->len);
    size_t start = 0;

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return 1;
    }
    if (n > 0) {
        s->len += (size_t)n;
        for (size_t i = 0; i < s->len; i++) {
            if (s->buf[i] == '\n') {
                emit_line(s->out_fd, rank, s->buf + start, i - start);
                start = i + 1;
            }
        }
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
        if (s->len == LINE_MAX_BYTES) {     /* an overlong line: split it */
            emit_line(s->out_fd, rank, s->buf, s->len);
            s->len = 0;
        }
        return 1;
    }
    if (s->len > 0) {                       /* last line without newline */
        emit_line(s->out_fd, rank, s->buf, s->len);
        s->len = 0;
    }
    close(s->fd);
    s->fd = -1;
    return 0;
}

static void
signal_group(group_t *g, int sig)
{
    for (int i = 0; i < g->n; i++) {
        if (g->c[i].pid > 0) {
            kill(-g->c[i].pid, sig);
            kill(g->c[i].pid, sig);
        }
    }
}

/* Begin the teardown: SIGTERM now, SIGKILL after the grace period. */
static void
stop_group(group_t *g, int sig)
{
    signal_group(g, sig);
    g->kill_at = td_now_s() + g->o->grace;
}

/* "rank R (pid P) was killed by signal S (NAME)[ on host H]" into BUF. */
static void
describe_status(int rank, pid_t pid, int st, const char *host, char *buf,
                size_t cap)
{
    int n;

    if (WIFSIGNALED(st)) {
        n = snprintf(buf, cap, "rank %d (pid %d) was killed by signal %d (%s)",
                     rank, (int)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else {
        n = snprintf(buf, cap, "rank %d (pid %d) exited with code %d", rank,
                     (int)pid, WEXITSTATUS(st));
    }
    if (host != NULL && n >= 0 && (size_t)n < cap) {
        snprintf(buf + n, cap - (size_t)n, " on host %s", host);
    }
    fprintf(stderr, "todist-run: %s\n", buf);
}

static int
status_to_exit(int st)
{
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* Fork one rank (local index I), with pipes when labelling. */
static int
start_rank(group_t *g, int i, const sigset_t *mask)
{
    const opts_t *o = g->o;
    child_t *c = &g->c[i];
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 };

    c->out.fd = c->err.fd = -1;
    if (o->label && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)) {
        fprintf(stderr, "todist-run: pipe: %s\n", strerror(errno));
        return -1;
    }
    c->pid = fork();
    if (c->pid == 0) {
        child_exec(o, g->a, i, mask, po[1], pe[1], c->join);
    }
    if (c->pid < 0) {
        fprintf(stderr, "todist-run: fork: %s\n", strerror(errno));
        c->pid = 0;
        if (o->label) {
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        }
        return -1;
    }
    setpgid(c->pid, c->pid);        /* also here: no race with kill */
    g->alive++;
    if (o->label) {
        close(po[1]);
        close(pe[1]);
        c->out = (stream_t){ po[0], 1, malloc(LINE_MAX_BYTES), 0 };
        c->err = (stream_t){ pe[0], 2, malloc(LINE_MAX_BYTES), 0 };
        if (c->out.buf == NULL || c->err.buf == NULL) {
            fprintf(stderr, "todist-run: out of memory\n");
            return -1;
        }
    }
    return 0;
}

/* Start every rank; on a failure stop those already started. */
static void
start_ranks(group_t *g, const sigset_t *mask)
{
    for (int i = 0; i < g->n; i++) {
        if (start_rank(g, i, mask) != 0) {
            g->failed_rank = i;
            g->failed_status = 1 << 8;
            stop_group(g, SIGTERM);
            return;
        }
    }
}

/* Wait (bounded by the teardown deadline) and pump the labelled output.
 * Returns poll's result, or -2 when nothing is left to wait for. */
static int
pump_output(group_t *g, int sfd)
{
    int cap = 2 * g->n + 1, np = 0, streams_open = 0, timeout = -1, pr;
    struct pollfd *pf = calloc((size_t)cap, sizeof(*pf));
    stream_t **owner = calloc((size_t)cap, sizeof(*owner));
    int *owner_rank = calloc((size_t)cap, sizeof(*owner_rank));

    if (pf == NULL || owner == NULL || owner_rank == NULL) {
        free(pf); free(owner); free(owner_rank);
        return -1;
    }
    pf[np++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    for (int i = 0; i < g->n; i++) {
        stream_t *s[2] = { &g->c[i].out, &g->c[i].err };
        for (int k = 0; k < 2; k++) {
            if (s[k]->fd >= 0) {
                owner[np] = s[k];
                owner_rank[np] = g->a->first_rank + i;
                pf[np++] = (struct pollfd){ .fd = s[k]->fd, .events = POLLIN };
                streams_open++;
            }
        }
    }
    if (g->alive == 0 && streams_open == 0) {
        free(pf); free(owner); free(owner_rank);
        return -2;
    }
    if (g->kill_at > 0 && g->alive > 0) {
        double left = g->kill_at - td_now_s();
        timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
    } else if (g->alive == 0) {
        /* Children are gone; a grandchild may still hold a pipe. */
        timeout = 1000;
    }
    if (g->watch != NULL && (timeout < 0 || timeout > TICK_S * 1000)) {
        timeout = (int)(TICK_S * 1000);
    }
    pr = poll(pf, (nfds_t)np, timeout);
    if (pr == 0 && g->alive == 0) {
        for (int i = 1; i < np; i++) {   /* give up on stray holders */
            close(owner[i]->fd);
            owner[i]->fd = -1;
        }
    }
    for (int i = 1; pr > 0 && i < np; i++) {
        if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
            stream_pump(owner[i], owner_rank[i]);
        }
    }
    free(pf); free(owner); free(owner_rank);
    return pr;
}

/* "todist-run: got signal S (NAME); ranks still running: R...": a run
 * stopped from outside (a test's or a job's time limit) names the ranks
 * that had not ended, the ones that hung, before it stops them. */
static void
say_stopped(const group_t *g, int sig)
{
    char buf[512];
    int n, k = 0;

    n = snprintf(buf, sizeof(buf), "todist-run: got signal %d (%s); ranks "
                 "still running:", sig, strsignal(sig));
    for (int i = 0; i < g->n && n > 0 && (size_t)n < sizeof(buf) - 16; i++) {
        if (g->c[i].pid > 0) {
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, " %d",
                          g->a->first_rank + i);
            k++;
        }
    }
    if (k > 0) {
        fprintf(stderr, "%s\n", buf);
    }
}

/* Forward INT/TERM/HUP to the ranks (a second one kills); stop restarting. */
static void
handle_signals(group_t *g, int sfd)
{
    struct signalfd_siginfo si;

    while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGCHLD) {
            continue;
        }
        if (!g->got_signal) {
            g->got_signal = (int)si.ssi_signo;
            say_stopped(g, g->got_signal);
            stop_group(g, (int)si.ssi_signo);
        } else {
            signal_group(g, SIGKILL);
        }
    }
}

/* The last lines of a dead rank's labelled output, before its
 * replacement takes the slot (a second at most: a grandchild may hold the
 * pipe). */
static void
stream_drain(stream_t *s, int rank)
{
    while (s->fd >= 0) {
        struct pollfd pf = { .fd = s->fd, .events = POLLIN };

        if (poll(&pf, 1, 1000) <= 0) {
            close(s->fd);
            s->fd = -1;
        } else {
            stream_pump(s, rank);
        }
    }
    free(s->buf);
    s->buf = NULL;
}

/* --replace: start a replacement for local rank I, which failed. */
static int
replace_rank(group_t *g, int i)
{
    int rank = g->a->first_rank + i;

    if (g->replaced >= g->o->replace || g->got_signal) {
        return 0;
    }
    stream_drain(&g->c[i].out, rank);
    stream_drain(&g->c[i].err, rank);
    g->c[i].join = 1;
    if (start_rank(g, i, g->mask) != 0) {
        return 0;
    }
    g->replaced++;
    fprintf(stderr, "todist-run: --replace: started a replacement for rank "
            "%d (pid %d; %d of %d)\n", rank, (int)g->c[i].pid, g->replaced,
            g->o->replace);
    return 1;
}

/* Reap exited ranks; the first to fail starts the teardown. */
static void
reap_ranks(group_t *g)
{
    int st;
    pid_t pid;

    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < g->n; i++) {
            if (g->c[i].pid != pid) {
                continue;
            }
            g->c[i].pid = 0;
            g->c[i].status = st;
            g->alive--;
            if ((WIFSIGNALED(st) || WEXITSTATUS(st) != 0) && g->o->no_kill &&
                !g->got_signal) {
                /* the survivors shrink in place (todist/elastic.h); the
                 * first failure is the exit code, each one is named */
                char why[256];

                describe_status(g->a->first_rank + i, pid, st, g->a->host,
                                why, sizeof(why));      /* prints it */
                fprintf(stderr, "todist-run: --no-kill: the other %d "
                        "rank(s) go on\n", g->alive);
                if (replace_rank(g, i)) {
                    continue;   /* replaced: not the run's failure */
                }
                if (g->failed_rank < 0) {
                    g->failed_rank = i;
                    g->failed_status = st;
                    snprintf(g->failed_why, sizeof(g->failed_why), "%s", why);
                }
                continue;
            }
            if ((WIFSIGNALED(st) || WEXITSTATUS(st) != 0) &&
                g->failed_rank < 0 && !g->got_signal && !g->watch_said) {
                g->failed_rank = i;
                g->failed_status = st;
                describe_status(g->a->first_rank + i, pid, st, g->a->host,
                                g->failed_why, sizeof(g->failed_why));
                if (g->alive > 0) {
                    fprintf(stderr, "todist-run: stopping the other %d "
                            "rank(s)\n", g->alive);
                }
                stop_group(g, SIGTERM);
            }
        }
    }
}

/* What one incarnation of the group came to. */
typedef struct {
    int  rc;            /* the launcher's exit code for it */
    int  failed;        /* a rank failed on its own: a restart may help */
    int  signal;        /* the launcher got this signal; 0: none */
    char why[256];      /* the failure, named */
} outcome_t;

/* Run one incarnation of the group, placed by A. WATCH (may be NULL) is
 * called every tick with the failure once one happened (NULL before). */
static void
run_group(const opts_t *o, const assign_t *a, int sfd, const sigset_t *mask,
          watch_fn watch, void *watch_arg,
          outcome_t *out)
{
    group_t g = { .o = o, .a = a, .n = a->nproc, .failed_rank = -1 };
    int pr;

    memset(out, 0, sizeof(*out));
    g.c = calloc((size_t)g.n, sizeof(*g.c));
    if (g.c == NULL) {
        fprintf(stderr, "todist-run: out of memory\n");
        out->rc = 1;
        return;
    }
    g.watch = watch;
    g.watch_arg = watch_arg;
    g.mask = mask;
    for (int i = 0; i < g.n; i++) {
        g.c[i].out.fd = g.c[i].err.fd = -1;
    }
    start_ranks(&g, mask);
    while ((pr = pump_output(&g, sfd)) != -2) {
        if (pr == -1 && errno == ENOMEM) {
            signal_group(&g, SIGKILL);
            fprintf(stderr, "todist-run: out of memory\n");
            out->rc = 1;
            goto out;
        }
        if (pr > 0) {
            handle_signals(&g, sfd);
        }
        reap_ranks(&g);
        if (g.kill_at > 0 && g.alive > 0 && td_now_s() >= g.kill_at) {
            signal_group(&g, SIGKILL);
            g.kill_at = td_now_s() + 3600;      /* SIGKILL once */
        }
        /* Rounds: report a failure, keep the heartbeat, obey a stop. */
        if (watch != NULL && td_now_s() >= g.watch_next) {
            int v;
            g.watch_next = td_now_s() + TICK_S;
            v = watch(watch_arg, g.failed_rank >= 0 ? g.failed_why : NULL,
                      g.failed_rank >= 0 ? status_to_exit(g.failed_status)
                                         : 0);
            if (v != 0 && !g.watch_said && g.failed_rank < 0 &&
                !g.got_signal) {
                g.watch_said = v;
                if (g.alive > 0) {
                    stop_group(&g, SIGTERM);
                }
            }
        }
    }
    if (g.got_signal) {
        out->signal = g.got_signal;
        out->rc = 128 + g.got_signal;
    } else if (g.failed_rank >= 0) {
        out->rc = status_to_exit(g.failed_status);
        out->failed = 1;
        snprintf(out->why, sizeof(out->why), "%s", g.failed_why);
    }
out:
    for (int i = 0; i < g.n; i++) {
        free(g.c[i].out.buf);
        free(g.c[i].err.buf);
    }
    free(g.c);
}

/* ---- restart rounds across nodes (tools/rdzv.h) ------------------------- */

typedef struct {
    rdzv_t            *r;
    const rdzv_plan_t *plan;
    const opts_t      *o;
    int                reported;      /* our failure is in the store */
    int                store_failed;
    rdzv_event_t       ev;            /* the first STOP or END seen */
    int                code;
    char               reason[RDZV_REASON_MAX];
} round_watch_t;

static void
store_failed(round_watch_t *w)
{
    if (!w->store_failed) {
        fprintf(stderr, "todist-run: the launchers' store at %s:%d failed "
                "(is its node, the master's, gone?): %s\n", w->o->master_addr,
                w->o->rdzv_port, td_last_error());
    }
    w->store_failed = 1;
}

static int
round_watch(void *arg, const char *failed_why, int failed_code)
{
    round_watch_t *w = arg;
    rdzv_event_t ev;
    int code = 0;
    char reason[RDZV_REASON_MAX];

    if (w->store_failed) {
        return -1;
    }
    if (failed_why != NULL && !w->reported) {
        w->reported = 1;
        if (rdzv_fail(w->r, w->plan->round, failed_code != 0 ? failed_code
                      : 1, failed_why) != TD_OK) {
            store_failed(w);
            return -1;
        }
    }
    if (rdzv_watch(w->r, w->plan, &ev, &code, reason, sizeof(reason)) !=
        TD_OK) {
        store_failed(w);
        return -1;
    }
    if (ev != RDZV_WAITING && w->ev == RDZV_WAITING) {
        w->ev = ev;
        w->code = code;
        snprintf(w->reason, sizeof(w->reason), "%s", reason);
    }
    return w->ev != RDZV_WAITING;
}

/* A signal for the launcher, waiting at most TICK_S for one; 0: none. */
static int
wait_signal(int sfd)
{
    struct pollfd pf = { .fd = sfd, .events = POLLIN };
    struct signalfd_siginfo si;

    if (poll(&pf, 1, (int)(TICK_S * 1000)) > 0) {
        while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
            if (si.ssi_signo != SIGCHLD) {
                return (int)si.ssi_signo;
            }
        }
    }
    return 0;
}

/* Interrupted: the leader ends the job, another agent aborts the round. */
static int
round_interrupted(rdzv_t *r, int round, int sig, const char *host)
{
    char why[160];

    snprintf(why, sizeof(why), "the launcher on host %s got signal %d (%s)",
             host, sig, strsignal(sig));
    if (rdzv_is_leader(r)) {
        rdzv_end(r, 128 + sig, why);
    } else {
        rdzv_stop(r, round, 128 + sig, "abort", why);
    }
    return 128 + sig;
}

static void
round_log(const opts_t *o, const rdzv_plan_t *p, const rdzv_node_t *me,
          int was_world, int was_nodes)
{
    char was[64] = "";

    if (was_world > 0) {
        snprintf(was, sizeof(was), " (was %d on %d)", was_world, was_nodes);
    }
    fprintf(stderr, "todist-run: round %d (restart %d of %d): %s; world %d "
            "rank%s on %d node%s%s", p->round, p->restarts, o->max_restarts,
            p->reason, p->world_size, p->world_size == 1 ? "" : "s",
            p->nnodes, p->nnodes == 1 ? "" : "s", was);
    if (me == NULL) {
        fprintf(stderr, "; no room for this node (--nnodes ...:%d): it waits "
                "for the next round\n", o->nnodes);
    } else if (me->nproc == 1) {
        fprintf(stderr, "; this node is node %d, rank %d\n", me->node_rank,
                me->first_rank);
    } else {
        fprintf(stderr, "; this node is node %d, ranks %d-%d\n", me->node_rank,
                me->first_rank, me->first_rank + me->nproc - 1);
    }
}

static int
run_rounds(const opts_t *o, int sfd, const sigset_t *mask)
{
    rdzv_opts_t ro;
    rdzv_t *r = NULL;
    rdzv_plan_t *plan = calloc(1, sizeof(*plan));
    char host[64] = "", reason[RDZV_REASON_MAX];
    int round = 0, rc = 1, code, sig, was_world = 0, was_nodes = 0;
    rdzv_event_t ev;

    if (plan == NULL) {
        fprintf(stderr, "todist-run: out of memory\n");
        return 1;
    }
    gethostname(host, sizeof(host) - 1);
    memset(&ro, 0, sizeof(ro));
    ro.addr = o->master_addr;
    ro.port = (uint16_t)o->rdzv_port;
    ro.token = o->token;
    ro.host = host;
    ro.nproc = o->nproc;
    ro.min_nodes = o->nnodes_min;
    ro.max_nodes = o->nnodes;
    ro.max_restarts = o->max_restarts;
    ro.liveness = o->liveness;
    ro.last_call = o->last_call;
    ro.timeout = o->rdzv_timeout;
    if (rdzv_open(&ro, &r) != TD_OK ||
        rdzv_first_round(r, &round) != TD_OK) {
        fprintf(stderr, "todist-run: cannot meet the other launchers at "
                "%s:%d: %s\n", o->master_addr, o->rdzv_port, td_last_error());
        goto out;
    }
    for (;;) {
        const rdzv_node_t *me;
        round_watch_t w;
        outcome_t out;
        assign_t a;

        if (rdzv_join(r, round) != TD_OK) {
            goto store_err;
        }
        for (;;) {      /* E5: the plan first */
            if (rdzv_wait_plan(r, round, plan, &ev, &code, reason,
                               sizeof(reason)) != TD_OK) {
                goto store_err;
            }
            if (ev == RDZV_PLAN) {
                break;
            }
            if (ev == RDZV_END) {
                rc = code;
                goto ended;
            }
            if ((sig = wait_signal(sfd)) != 0) {
                rc = round_interrupted(r, round, sig, host);
                goto out;
            }
        }
        me = rdzv_plan_find(plan, rdzv_agent(r));
        round_log(o, plan, me, was_world, was_nodes);
        if (me == NULL) {
            round++;
            continue;
        }
        was_world = plan->world_size;
        was_nodes = plan->nnodes;
        a = (assign_t){ me->first_rank, me->nproc, plan->world_size,
                        me->node_rank, plan->nnodes, plan->restarts,
                        plan->token, host };
        memset(&w, 0, sizeof(w));
        w.r = r;
        w.plan = plan;
        w.o = o;
        run_group(o, &a, sfd, mask, round_watch, &w, &out);
        if (out.signal) {
            rc = round_interrupted(r, round, out.signal, host);
            goto out;
        }
        if (w.store_failed) {
            goto out;
        }
        if (out.failed && !w.reported &&
            rdzv_fail(r, round, out.rc != 0 ? out.rc : 1, out.why) !=
            TD_OK) {
            goto store_err;
        }
        if (w.ev == RDZV_END) {
            rc = w.code;
            snprintf(reason, sizeof(reason), "%s", w.reason);
            goto ended;
        }
        if (!out.failed && w.ev != RDZV_STOP) {
            /* Every local rank exited 0: wait for the others' end. */
            if (rdzv_done(r, round) != TD_OK) {
                goto store_err;
            }
            for (;;) {
                if (rdzv_watch(r, plan, &ev, &code, reason, sizeof(reason)) !=
                    TD_OK) {
                    goto store_err;
                }
                if (ev == RDZV_END) {
                    rc = code;
                    goto ended;
                }
                if (ev == RDZV_STOP) {
                    break;
                }
                if ((sig = wait_signal(sfd)) != 0) {
                    rc = round_interrupted(r, round, sig, host);
                    goto out;
                }
            }
        }
        round++;
    }
ended:
    if (rc != 0) {
        fprintf(stderr, "todist-run: the job ended: %s\n", reason);
    }
    goto out;
store_err:
    fprintf(stderr, "todist-run: the launchers' store at %s:%d failed (is its "
            "node, the master's, gone?): %s\n", o->master_addr, o->rdzv_port,
            td_last_error());
    rc = 1;
out:
    rdzv_close(r);
    free(plan);
    return rc;
}

int
main(int argc, char **argv)
{
    opts_t o;
    sigset_t mask;
    int sfd, rc = 0;
    outcome_t out;
    td_store_server_t *store = NULL;

    parse_args(argc, argv, &o);

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) != 0 ||
        (sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        fprintf(stderr, "todist-run: signalfd: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* --no-kill: todist's store lives here, not in rank 0, so the ranks
     * outlive any one of them, rank 0 included (TODIST_AGENT_STORE, as
     * torchrun's agent store); node 0's launcher serves every node. Its
     * thread starts after the mask above: signals stay for signalfd. */
    if (o.no_kill && o.node_rank == 0 &&
        td_store_server_start(o.master_addr, (uint16_t)o.store_port,
                              o.token[0] != '\0' ? o.token : NULL,
                              &store) != TD_OK) {
        fprintf(stderr, "todist-run: --no-kill: cannot serve todist's store "
                "at %s:%d: %s\n", o.master_addr, o.store_port,
                td_last_error());
        return 1;
    }

    if (o.rounds) {
        rc = run_rounds(&o, sfd, &mask);
    }
    for (int restart = 0; !o.rounds; restart++) {
        assign_t a = { o.node_rank * o.nproc, o.nproc, o.nnodes * o.nproc,
                       o.node_rank, o.nnodes, restart,
                       o.token[0] != '\0' ? o.token : NULL, NULL };

        run_group(&o, &a, sfd, &mask, NULL, NULL, &out);
        rc = out.rc;
        if (rc == 0 || !out.failed || restart >= o.max_restarts) {
            break;
        }
        fprintf(stderr, "todist-run: restarting the group (%d of %d), round "
                "%d: %s; world %d rank%s\n", restart + 1, o.max_restarts,
                restart + 1, out.why, a.world_size,
                a.world_size == 1 ? "" : "s");
    }
    close(sfd);
    td_store_server_stop(store);        /* after every rank is reaped */
    free(o.argv_alloc);
    return rc;
}
