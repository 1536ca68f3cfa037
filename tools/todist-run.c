/* todist-run: the local launcher (torchrun's standalone mode, in C).
 *
 * Starts N copies of a program with the TODIST_* and torchrun variables,
 * optionally labels their output line by line, forwards SIGINT/SIGTERM,
 * tears the group down when one rank fails (SIGTERM, then SIGKILL after a
 * grace period) and exits with the failing rank's status, restarting the
 * whole group up to --max-restarts times. With --nnodes it is one node's
 * launcher of a multi-node job. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    stream_t out, err;
} child_t;

typedef struct {
    int         nproc;
    int         nnodes;
    int         node_rank;
    const char *master_addr;
    int         master_port;
    int         label;
    int         max_restarts;
    double      grace;
    char      **argv;
    char        token[65];
} opts_t;

static void
usage(FILE *f)
{
    fprintf(f,
"usage: todist-run [-n N] [--nnodes M --node-rank K --master-addr A\n"
"                  --master-port P] [--label] [--max-restarts R]\n"
"                  [--grace-period S] [--] PROGRAM [ARGS...]\n"
"\n"
"Start N local processes of PROGRAM as ranks of one todist job.\n"
"  -n, --nproc-per-node N  processes on this node (default 1)\n"
"  --nnodes M              nodes in the job (default 1); with M > 1 also give\n"
"                          --node-rank, --master-addr, --master-port and the\n"
"                          same TODIST_JOB_TOKEN in every node's environment\n"
"  --node-rank K           this node's index, 0..M-1 (default 0)\n"
"  --master-addr A         address of rank 0's node (default 127.0.0.1)\n"
"  --master-port P         rendezvous port (default: a free port)\n"
"  --label                 prefix each output line with '[RANK]: '\n"
"  --max-restarts R        restart the whole group up to R times on failure\n"
"  --grace-period S        seconds between SIGTERM and SIGKILL (default 3)\n"
"  -h, --help              this text\n");
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

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

/* A port nobody listens on now: bind port 0 and read what the kernel gave. */
static int
free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = -1;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

static int
make_token(char *hex)
{
    unsigned char raw[32];
    size_t got = 0;

    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    }
    return 0;
}

static void
parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        { "nproc-per-node", required_argument, NULL, 'n' },
        { "nnodes",         required_argument, NULL, 'N' },
        { "node-rank",      required_argument, NULL, 'k' },
        { "master-addr",    required_argument, NULL, 'a' },
        { "master-port",    required_argument, NULL, 'p' },
        { "label",          no_argument,       NULL, 'l' },
        { "max-restarts",   required_argument, NULL, 'r' },
        { "grace-period",   required_argument, NULL, 'g' },
        { "help",           no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int c, have_addr = 0;
    const char *token;

    memset(o, 0, sizeof(*o));
    o->nproc = 1;
    o->nnodes = 1;
    o->master_addr = "127.0.0.1";
    o->master_port = -1;
    o->grace = 3.0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+n:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': o->nproc = (int)parse_long("-n", optarg, 1, 4096); break;
        case 'N': o->nnodes = (int)parse_long("--nnodes", optarg, 1, 1 << 20); break;
        case 'k': o->node_rank = (int)parse_long("--node-rank", optarg, 0, 1 << 20); break;
        case 'a':
            if (optarg[0] == '\0' || strlen(optarg) > 255) {
                die_usage("--master-addr expects a host name or address");
            }
            o->master_addr = optarg;
            have_addr = 1;
            break;
        case 'p': o->master_port = (int)parse_long("--master-port", optarg, 1, 65535); break;
        case 'l': o->label = 1; break;
        case 'r': o->max_restarts = (int)parse_long("--max-restarts", optarg, 0, 1000); break;
        case 'g': {
            char *end;
            o->grace = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(o->grace >= 0 && o->grace <= 600)) {
                die_usage("--grace-period expects seconds in 0..600, got '%s'", optarg);
            }
            break;
        }
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
    o->argv = argv + optind;
    if (o->node_rank >= o->nnodes) {
        die_usage("--node-rank %d is not below --nnodes %d", o->node_rank,
                  o->nnodes);
    }
    if ((long)o->nnodes * o->nproc > (1 << 24)) {
        die_usage("world of %ld ranks is too large", (long)o->nnodes * o->nproc);
    }
    token = getenv("TODIST_JOB_TOKEN");
    if (o->nnodes > 1) {
        if (!have_addr || o->master_port < 0) {
            die_usage("--nnodes %d needs --master-addr and --master-port",
                      o->nnodes);
        }
        if (token == NULL || token[0] == '\0') {
            die_usage("--nnodes %d needs the same TODIST_JOB_TOKEN in every "
                      "node's environment", o->nnodes);
        }
    }
    if (token != NULL && token[0] != '\0') {
        if (strlen(token) >= sizeof(o->token)) {
            die_usage("TODIST_JOB_TOKEN is longer than %zu characters",
                      sizeof(o->token) - 1);
        }
        strcpy(o->token, token);
    } else if (make_token(o->token) != 0) {
        fprintf(stderr, "todist-run: cannot read random bytes: %s\n",
                strerror(errno));
        exit(1);
    }
    if (o->master_port < 0) {
        o->master_port = free_port();
        if (o->master_port < 0) {
            fprintf(stderr, "todist-run: cannot find a free port: %s\n",
                    strerror(errno));
            exit(1);
        }
    }
}

static void
setenv_int(const char *name, long v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%ld", v);
    setenv(name, buf, 1);
}

/* In the child: the rank's environment, then exec. Never returns. */
static void
child_exec(const opts_t *o, int local_rank, int restart, const sigset_t *mask,
           int out_fd, int err_fd)
{
    int rank = o->node_rank * o->nproc + local_rank;
    int world = o->nnodes * o->nproc;
    char port[16];

    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* no orphans if the launcher dies */
    sigprocmask(SIG_UNBLOCK, mask, NULL);
    signal(SIGPIPE, SIG_DFL);           /* the launcher ignores it */
    if (out_fd >= 0 && (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)) {
        _exit(127);
    }
    snprintf(port, sizeof(port), "%d", o->master_port);
    setenv_int("TODIST_RANK", rank);
    setenv_int("TODIST_WORLD_SIZE", world);
    setenv_int("TODIST_LOCAL_RANK", local_rank);
    setenv_int("TODIST_LOCAL_WORLD_SIZE", o->nproc);
    setenv_int("TODIST_NODE_RANK", o->node_rank);
    setenv_int("TODIST_NNODES", o->nnodes);
    setenv("TODIST_MASTER_ADDR", o->master_addr, 1);
    setenv("TODIST_MASTER_PORT", port, 1);
    setenv("TODIST_JOB_TOKEN", o->token, 1);
    setenv_int("TODIST_RESTART_COUNT", restart);
    setenv_int("RANK", rank);
    setenv_int("WORLD_SIZE", world);
    setenv_int("LOCAL_RANK", local_rank);
    setenv_int("LOCAL_WORLD_SIZE", o->nproc);
    setenv_int("GROUP_RANK", o->node_rank);
    setenv("MASTER_ADDR", o->master_addr, 1);
    setenv("MASTER_PORT", port, 1);
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
signal_group(child_t *c, int n, int sig)
{
    for (int i = 0; i < n; i++) {
        if (c[i].pid > 0) {
            kill(-c[i].pid, sig);
            kill(c[i].pid, sig);
        }
    }
}

static void
describe_status(int rank, pid_t pid, int st)
{
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "todist-run: rank %d (pid %d) was killed by signal %d "
                "(%s)\n", rank, (int)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else {
        fprintf(stderr, "todist-run: rank %d (pid %d) exited with code %d\n",
                rank, (int)pid, WEXITSTATUS(st));
    }
}

static int
status_to_exit(int st)
{
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* Run one incarnation of the group. Returns the launcher's exit code;
 * *retry_p says whether a restart may help (a rank failed on its own). */
static int
run_group(const opts_t *o, int restart, int sfd, const sigset_t *mask,
          int *retry_p)
{
    int n = o->nproc;
    child_t *c = calloc((size_t)n, sizeof(*c));
    int alive = 0, failed_rank = -1, failed_status = 0, got_signal = 0;
    double kill_at = 0;
    int rc;

    *retry_p = 0;
    if (c == NULL) {
        fprintf(stderr, "todist-run: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        int po[2] = { -1, -1 }, pe[2] = { -1, -1 };

        c[i].out.fd = c[i].err.fd = -1;
        if (o->label && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)) {
            fprintf(stderr, "todist-run: pipe: %s\n", strerror(errno));
            failed_rank = i;
            failed_status = 1 << 8;
            break;
        }
        c[i].pid = fork();
        if (c[i].pid == 0) {
            child_exec(o, i, restart, mask, po[1], pe[1]);
        }
        if (c[i].pid < 0) {
            fprintf(stderr, "todist-run: fork: %s\n", strerror(errno));
            c[i].pid = 0;
            failed_rank = i;
            failed_status = 1 << 8;
            if (o->label) {
                close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
            }
            break;
        }
        setpgid(c[i].pid, c[i].pid);        /* also here: no race with kill */
        alive++;
        if (o->label) {
            close(po[1]);
            close(pe[1]);
            c[i].out = (stream_t){ po[0], 1, malloc(LINE_MAX_BYTES), 0 };
            c[i].err = (stream_t){ pe[0], 2, malloc(LINE_MAX_BYTES), 0 };
            if (c[i].out.buf == NULL || c[i].err.buf == NULL) {
                fprintf(stderr, "todist-run: out of memory\n");
                failed_rank = i;
                failed_status = 1 << 8;
                break;
            }
        }
    }
    if (failed_rank >= 0) {
        signal_group(c, n, SIGTERM);
        kill_at = now() + o->grace;
    }

    for (;;) {
        struct pollfd *pf = calloc((size_t)(2 * n + 1), sizeof(*pf));
        stream_t **owner = calloc((size_t)(2 * n + 1), sizeof(*owner));
        int *owner_rank = calloc((size_t)(2 * n + 1), sizeof(*owner_rank));
        int np = 0, streams_open = 0, timeout = -1;

        if (pf == NULL || owner == NULL || owner_rank == NULL) {
            free(pf); free(owner); free(owner_rank);
            signal_group(c, n, SIGKILL);
            fprintf(stderr, "todist-run: out of memory\n");
            rc = 1;
            goto out;
        }
        pf[np++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
        for (int i = 0; i < n; i++) {
            stream_t *s[2] = { &c[i].out, &c[i].err };
            for (int k = 0; k < 2; k++) {
                if (s[k]->fd >= 0) {
                    owner[np] = s[k];
                    owner_rank[np] = o->node_rank * n + i;
                    pf[np++] = (struct pollfd){ .fd = s[k]->fd, .events = POLLIN };
                    streams_open++;
                }
            }
        }
        if (alive == 0 && streams_open == 0) {
            free(pf); free(owner); free(owner_rank);
            break;
        }
        if (kill_at > 0 && alive > 0) {
            double left = kill_at - now();
            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        } else if (alive == 0) {
            /* Children are gone; a grandchild may still hold a pipe. */
            timeout = 1000;
        }
        int pr = poll(pf, (nfds_t)np, timeout);
        if (pr == 0 && alive == 0) {
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

        if (pr > 0) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGCHLD) {
                    continue;
                }
                /* Forward INT/TERM/HUP; stop restarting. */
                if (!got_signal) {
                    got_signal = (int)si.ssi_signo;
                    signal_group(c, n, (int)si.ssi_signo);
                    kill_at = now() + o->grace;
                } else {
                    signal_group(c, n, SIGKILL);
                }
            }
        }
        for (;;) {
            int st;
            pid_t pid = waitpid(-1, &st, WNOHANG);
            if (pid <= 0) {
                break;
            }
            for (int i = 0; i < n; i++) {
                if (c[i].pid != pid) {
                    continue;
                }
                c[i].pid = 0;
                c[i].status = st;
                alive--;
                if ((WIFSIGNALED(st) || WEXITSTATUS(st) != 0) &&
                    failed_rank < 0 && !got_signal) {
                    failed_rank = i;
                    failed_status = st;
                    describe_status(o->node_rank * n + i, pid, st);
                    if (alive > 0) {
                        fprintf(stderr, "todist-run: stopping the other %d "
                                "rank(s)\n", alive);
                    }
                    signal_group(c, n, SIGTERM);
                    kill_at = now() + o->grace;
                }
            }
        }
        if (kill_at > 0 && alive > 0 && now() >= kill_at) {
            signal_group(c, n, SIGKILL);
            kill_at = now() + 3600;          /* SIGKILL once */
        }
    }

    if (got_signal) {
        rc = 128 + got_signal;
    } else if (failed_rank >= 0) {
        rc = status_to_exit(failed_status);
        *retry_p = 1;
    } else {
        rc = 0;
    }
out:
    for (int i = 0; i < n; i++) {
        free(c[i].out.buf);
        free(c[i].err.buf);
    }
    free(c);
    return rc;
}

int
main(int argc, char **argv)
{
    opts_t o;
    sigset_t mask;
    int sfd, rc, retry;

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

    for (int restart = 0;; restart++) {
        rc = run_group(&o, restart, sfd, &mask, &retry);
        if (rc == 0 || !retry || restart >= o.max_restarts) {
            break;
        }
        fprintf(stderr, "todist-run: restarting the group (%d of %d)\n",
                restart + 1, o.max_restarts);
    }
    close(sfd);
    return rc;
}
