/* tap.h: a tiny Test Anything Protocol producer with typed asserts, so a
 * failing check prints both values. Header-only; one test program each. */
#ifndef TD_TESTS_TAP_H
#define TD_TESTS_TAP_H

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_planned = -1;
static int tap_run;
static int tap_failed;

static inline void
plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

static inline void
plan_skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

/* A failed check's result line carries its cause, "not ok N - desc --
 * got X, expected Y" (as tests/lib.sh's do): make check prints result
 * lines, so the cause reaches CI's output, not only the test's .log. WHY
 * (NULL: none) is cut to one short line without '#' (a TAP directive). */
static inline int
tap_report_why(int pass, const char *why, const char *fmt, va_list ap)
{
    tap_run++;
    if (!pass) {
        tap_failed++;
    }
    printf("%sok %d - ", pass ? "" : "not ", tap_run);
    vprintf(fmt, ap);
    if (!pass && why != NULL && why[0] != '\0') {
        printf(" -- ");
        for (int i = 0; why[i] != '\0' && i < 200; i++) {
            char c = why[i];

            putchar(c == '#' ? ' ' : c == '\n' || c == '\r' ? '|' : c);
        }
    }
    printf("\n");
    fflush(stdout);
    return pass;
}

static inline int
tap_report(int pass, const char *fmt, va_list ap)
{
    return tap_report_why(pass, NULL, fmt, ap);
}

static inline void
diag(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static inline int __attribute__((format(printf, 2, 3)))
ok(int cond, const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = tap_report(cond, fmt, ap);
    va_end(ap);
    return r;
}

static inline int __attribute__((format(printf, 3, 4)))
is_int_(long long got, long long want, const char *fmt, ...)
{
    va_list ap;
    char why[96] = "";
    int r = got == want;

    if (!r) {       /* built only for a failure: some tests check millions */
        snprintf(why, sizeof(why), "got %lld, expected %lld", got, want);
    }
    va_start(ap, fmt);
    r = tap_report_why(r, why, fmt, ap);
    va_end(ap);
    if (!r) {
        diag("     got: %lld", got);
        diag("expected: %lld", want);
    }
    return r;
}
#define is_int(got, want, ...) is_int_((long long)(got), (long long)(want), __VA_ARGS__)

static inline int __attribute__((format(printf, 4, 5)))
is_double(double got, double want, double tol, const char *fmt, ...)
{
    va_list ap;
    char why[128] = "";
    int r = fabs(got - want) <= tol || (isnan(got) && isnan(want));

    if (!r) {
        snprintf(why, sizeof(why), "got %.10g, expected %.10g (tolerance "
                 "%g)", got, want, tol);
    }
    va_start(ap, fmt);
    r = tap_report_why(r, why, fmt, ap);
    va_end(ap);
    if (!r) {
        diag("     got: %.10g", got);
        diag("expected: %.10g (tolerance %g)", want, tol);
    }
    return r;
}

static inline int __attribute__((format(printf, 3, 4)))
is_str(const char *got, const char *want, const char *fmt, ...)
{
    va_list ap;
    char why[256] = "";
    int r = got != NULL && want != NULL && strcmp(got, want) == 0;

    if (!r) {
        snprintf(why, sizeof(why), "got '%.100s', expected '%.100s'",
                 got ? got : "(null)", want ? want : "(null)");
    }
    va_start(ap, fmt);
    r = tap_report_why(r, why, fmt, ap);
    va_end(ap);
    if (!r) {
        diag("     got: '%s'", got ? got : "(null)");
        diag("expected: '%s'", want ? want : "(null)");
    }
    return r;
}

/* GOT matches the extended regular expression PATTERN. */
static inline int __attribute__((format(printf, 3, 4)))
like(const char *got, const char *pattern, const char *fmt, ...)
{
    va_list ap;
    regex_t re;
    char why[160] = "";
    int r = 0;

    if (got != NULL && regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) == 0) {
        r = regexec(&re, got, 0, NULL, 0) == 0;
        regfree(&re);
    }
    if (!r) {
        snprintf(why, sizeof(why), "got '%.140s'", got ? got : "(null)");
    }
    va_start(ap, fmt);
    r = tap_report_why(r, why, fmt, ap);
    va_end(ap);
    if (!r) {
        diag("     got: '%s'", got ? got : "(null)");
        diag("expected to match: '%s'", pattern);
    }
    return r;
}

static inline void
skip(int n, const char *why)
{
    for (int i = 0; i < n; i++) {
        tap_run++;
        printf("ok %d # SKIP %s\n", tap_run, why);
    }
    fflush(stdout);
}

/* Exit status: 0 when every planned test ran and passed. */
static inline int
exit_status(void)
{
    if (tap_planned >= 0 && tap_run != tap_planned) {
        diag("planned %d tests but ran %d", tap_planned, tap_run);
        return 1;
    }
    if (tap_planned < 0) {
        printf("1..%d\n", tap_run);
    }
    return tap_failed ? 1 : 0;
}

#endif /* TD_TESTS_TAP_H */
