/* test_log: the library's logging facility (base/log.c): TODIST_LOG picks
 * the level (default warn), lines carry "todist[rank N]: " once the rank is
 * known ("todist: " before), errors say "error: ", an unknown level is
 * reported once and warn kept, and a long message stays one line. Each
 * case runs in a child process (the level is read once per process) with
 * stderr sent to a file. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "tests/tap.h"

static char out[8192];

/* Run the standard messages under TODIST_LOG=LEVEL (NULL: unset); OUT gets
 * what went to stderr. */
static void
run(const char *level, int rank)
{
    char path[] = "/tmp/todist-test-log.XXXXXX";
    int fd = mkstemp(path), st;
    pid_t pid;
    ssize_t n;

    pid = fork();
    if (pid == 0) {
        if (level != NULL) {
            setenv("TODIST_LOG", level, 1);
        } else {
            unsetenv("TODIST_LOG");
        }
        dup2(fd, 2);
        td__log_set_rank(rank);
        td_log_error("E %d", 1);
        td_log_warn("W %d", 2);
        td_log_info("I %d", 3);
        td_log_debug("D %d", 4);
        _exit(0);
    }
    waitpid(pid, &st, 0);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, out, sizeof(out) - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

/* A quiet process under TODIST_LOG=LEVEL: it only asks whether info is
 * enabled (as the library does before costly formatting) or, with INIT,
 * only calls td__log_init twice (as td_init does); it logs nothing. */
static void
run_quiet(const char *level, int init)
{
    char path[] = "/tmp/todist-test-log.XXXXXX";
    int fd = mkstemp(path), st;
    pid_t pid;
    ssize_t n;

    pid = fork();
    if (pid == 0) {
        setenv("TODIST_LOG", level, 1);
        dup2(fd, 2);
        if (init) {             /* td__log_init alone must report it */
            td__log_init();
            td__log_init();
            _exit(0);
        }
        _exit(td__log_enabled(TD_LOG_INFO) ? 3 : 0);
    }
    waitpid(pid, &st, 0);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, out, sizeof(out) - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

static int
lines(const char *s)
{
    int n = 0;
    for (; *s; s++) {
        n += *s == '\n';
    }
    return n;
}

int
main(void)
{
    plan(17);

    run(NULL, 3);
    is_str(out, "todist[rank 3]: error: E 1\ntodist[rank 3]: W 2\n",
           "default level warn: error and warn, rank-prefixed");
    run("debug", 3);
    is_int(lines(out), 4, "debug prints all four levels");
    like(out, "todist\\[rank 3\\]: D 4", "debug line carries the prefix");
    run("info", 0);
    is_int(lines(out), 3, "info prints error, warn, info");
    run("error", 0);
    is_str(out, "todist[rank 0]: error: E 1\n", "error prints errors only");
    run("WARN", -1);
    is_str(out, "todist: error: E 1\ntodist: W 2\n",
           "levels are case-insensitive; no rank yet: 'todist: '");
    run("loud", 1);
    like(out, "TODIST_LOG=loud is not one of error, warn, info, debug",
         "an unknown level is named");
    is_int(lines(out), 3, "reported once, then warn kept (error + warn)");
    /* issue 36 defect 3: a process that logs nothing still hears of it */
    run_quiet("bogus", 0);
    is_str(out, "todist: TODIST_LOG=bogus is not one of error, warn, info, "
           "debug; using warn\n", "a quiet process: the bad value is named "
           "when the level is first read, with no message logged");
    run_quiet("bogus", 1);
    is_int(lines(out), 1, "td__log_init reports it, once however often called");
    like(out, "TODIST_LOG=bogus", "td__log_init names the value");
    run_quiet("info", 1);
    is_str(out, "", "a good value: td__log_init prints nothing");
    run_quiet("", 1);
    is_str(out, "", "an empty value is the default, not reported");

    /* one line, whatever the length */
    {
        char path[] = "/tmp/todist-test-log.XXXXXX";
        int fd = mkstemp(path), st;
        char big[5000];
        ssize_t n;
        pid_t pid;

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        pid = fork();
        if (pid == 0) {
            unsetenv("TODIST_LOG");
            dup2(fd, 2);
            td_log_warn("%s\n\n", big);
            _exit(0);
        }
        waitpid(pid, &st, 0);
        lseek(fd, 0, SEEK_SET);
        n = read(fd, out, sizeof(out) - 1);
        out[n > 0 ? n : 0] = '\0';
        close(fd);
        unlink(path);
        is_int(lines(out), 1, "a 5 KB message is cut to one line");
        ok(n > 1000 && out[n - 1] == '\n', "it ends with its newline (%zd "
           "bytes)", n);
    }
    ok(td__log_enabled(TD_LOG_ERROR), "errors are always enabled");
    ok(!td__log_enabled(TD_LOG_DEBUG) || getenv("TODIST_LOG") != NULL,
       "debug is off by default");
    return exit_status();
}
