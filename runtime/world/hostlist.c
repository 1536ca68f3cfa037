/* hostlist.c: Slurm's compact notations: hostlist expressions
 * ("gpu[001-012,015]", "rack[1-2]-n[01-02]") and tasks-per-node
 * ("2(x3),1"). Pure parsing, no Slurm library. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/world.h"

typedef struct {
    char  **hosts;
    size_t  n;
    size_t  cap;
    size_t  max;
    const char *expr;   /* the whole expression, for messages */
} hostvec_t;

static td_status_t
hostvec_push(hostvec_t *v, const char *name, size_t len)
{
    char *s;

    if (v->n >= v->max) {
        return td_error(TD_ERR_RANGE, "hostlist: '%s' expands to more than "
                        "%zu hosts", v->expr, v->max);
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        char **h = realloc(v->hosts, cap * sizeof(*h));
        if (h == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "hostlist: out of memory");
        }
        v->hosts = h;
        v->cap = cap;
    }
    s = strndup(name, len);
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "hostlist: out of memory");
    }
    v->hosts[v->n++] = s;
    return TD_OK;
}

/* Parse a decimal number of at most 9 digits at P; *end_p past it. */
static int
parse_digits(const char *p, const char **end_p, unsigned long *val_p)
{
    const char *q = p;
    unsigned long v = 0;

    while (isdigit((unsigned char)*q) && q - p < 9) {
        v = v * 10 + (unsigned long)(*q - '0');
        q++;
    }
    if (q == p || isdigit((unsigned char)*q)) {
        return -1;
    }
    *end_p = q;
    *val_p = v;
    return 0;
}

/* Expand ITEM[pos..end) (one host pattern, no top-level commas) with PREFIX
 * already built; brackets expand left to right, the first outermost. */
static td_status_t
expand_item(hostvec_t *v, const char *item, size_t pos, size_t end,
            char *buf, size_t blen, size_t bcap)
{
    const char *p = item + pos;
    const char *lb = memchr(p, '[', end - pos);
    const char *rb;
    size_t lit = lb ? (size_t)(lb - p) : end - pos;
    td_status_t status;

    if (blen + lit + 1 > bcap) {
        return td_error(TD_ERR_INVALID, "hostlist: host name too long in '%s'",
                        v->expr);
    }
    memcpy(buf + blen, p, lit);
    blen += lit;
    if (lb == NULL) {
        if (blen == 0) {
            return td_error(TD_ERR_INVALID, "hostlist: empty host name in '%s' "
                            "at position %zu", v->expr,
                            (size_t)(item - v->expr) + pos);
        }
        return hostvec_push(v, buf, blen);
    }

    rb = memchr(lb, ']', (size_t)(item + end - lb));
    if (rb == NULL) {
        return td_error(TD_ERR_INVALID, "hostlist: unclosed '[' in '%s' at "
                        "position %zu", v->expr, (size_t)(lb - v->expr));
    }
    /* Walk the ranges inside [...]: a, a-b, separated by commas. */
    for (const char *r = lb + 1; r < rb;) {
        const char *q;
        unsigned long lo, hi;
        int width;

        if (parse_digits(r, &q, &lo) != 0) {
            return td_error(TD_ERR_INVALID, "hostlist: expected a number in "
                            "'%s' at position %zu", v->expr,
                            (size_t)(r - v->expr));
        }
        width = (int)(q - r);
        hi = lo;
        if (*q == '-') {
            const char *h = q + 1;
            if (parse_digits(h, &q, &hi) != 0) {
                return td_error(TD_ERR_INVALID, "hostlist: expected a number "
                                "in '%s' at position %zu", v->expr,
                                (size_t)(h - v->expr));
            }
            if (hi < lo) {
                return td_error(TD_ERR_INVALID, "hostlist: range %lu-%lu is "
                                "reversed in '%s' at position %zu", lo, hi,
                                v->expr, (size_t)(r - v->expr));
            }
        }
        if (q != rb && *q != ',') {
            return td_error(TD_ERR_INVALID, "hostlist: unexpected '%c' in '%s' "
                            "at position %zu", *q, v->expr,
                            (size_t)(q - v->expr));
        }
        if (hi - lo >= v->max) {
            return td_error(TD_ERR_RANGE, "hostlist: '%s' expands to more than "
                            "%zu hosts", v->expr, v->max);
        }
        for (unsigned long i = lo; i <= hi; i++) {
            char num[16];
            int nlen = snprintf(num, sizeof(num), "%0*lu", width, i);
            if (blen + (size_t)nlen + 1 > bcap) {
                return td_error(TD_ERR_INVALID, "hostlist: host name too long "
                                "in '%s'", v->expr);
            }
            memcpy(buf + blen, num, (size_t)nlen);
            status = expand_item(v, item, (size_t)(rb + 1 - item), end, buf,
                                 blen + (size_t)nlen, bcap);
            if (status != TD_OK) {
                return status;
            }
        }
        r = (*q == ',') ? q + 1 : q;
        if (*q == ',' && r == rb) {
            return td_error(TD_ERR_INVALID, "hostlist: empty range in '%s' at "
                            "position %zu", v->expr, (size_t)(r - v->expr));
        }
    }
    if (rb == lb + 1) {
        return td_error(TD_ERR_INVALID, "hostlist: empty brackets in '%s' at "
                        "position %zu", v->expr, (size_t)(lb - v->expr));
    }
    return TD_OK;
}

void
td_hostlist_free(char **hosts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(hosts[i]);
    }
    free(hosts);
}

td_status_t
td_hostlist_expand(const char *expr, size_t max, char ***hosts_p, size_t *n_p)
{
    hostvec_t v = { NULL, 0, 0, max, expr };
    char buf[TD_HOSTNAME_MAX];
    size_t len, start = 0;
    int depth = 0;
    td_status_t status;

    if (expr == NULL || expr[0] == '\0') {
        return td_error(TD_ERR_INVALID, "hostlist: empty expression");
    }
    len = strlen(expr);
    /* Split at commas outside brackets; check bracket nesting on the way. */
    for (size_t i = 0; i <= len; i++) {
        char c = expr[i];
        if (c == '[') {
            if (depth++ > 0) {
                status = td_error(TD_ERR_INVALID, "hostlist: nested '[' in "
                                  "'%s' at position %zu", expr, i);
                goto err;
            }
        } else if (c == ']') {
            if (depth-- == 0) {
                status = td_error(TD_ERR_INVALID, "hostlist: unmatched ']' in "
                                  "'%s' at position %zu", expr, i);
                goto err;
            }
        } else if (isspace((unsigned char)c)) {
            status = td_error(TD_ERR_INVALID, "hostlist: whitespace in '%s' at "
                              "position %zu", expr, i);
            goto err;
        } else if ((c == ',' && depth == 0) || c == '\0') {
            if (c == '\0' && depth != 0) {
                status = td_error(TD_ERR_INVALID, "hostlist: unclosed '[' in "
                                  "'%s'", expr);
                goto err;
            }
            status = expand_item(&v, expr + start, 0, i - start, buf, 0,
                                 sizeof(buf));
            if (status != TD_OK) {
                goto err;
            }
            start = i + 1;
        }
    }
    *hosts_p = v.hosts;
    *n_p = v.n;
    return TD_OK;

err:
    td_hostlist_free(v.hosts, v.n);
    return status;
}

td_status_t
td_hostlist_first(const char *expr, char *buf, size_t len)
{
    char **hosts;
    size_t n;
    td_status_t status;

    /* Expanding validates the whole expression; Slurm node lists are small. */
    status = td_hostlist_expand(expr, 1u << 20, &hosts, &n);
    if (status != TD_OK) {
        return status;
    }
    if (strlen(hosts[0]) + 1 > len) {
        td_hostlist_free(hosts, n);
        return td_error(TD_ERR_RANGE, "hostlist: host name '%s' too long",
                        hosts[0]);
    }
    strcpy(buf, hosts[0]);
    td_hostlist_free(hosts, n);
    return TD_OK;
}

td_status_t
td_tasks_per_node_parse(const char *expr, int **counts_p, size_t *n_p)
{
    int *counts = NULL;
    size_t n = 0, cap = 0;
    const char *p = expr;

    if (expr == NULL || expr[0] == '\0') {
        return td_error(TD_ERR_INVALID, "tasks-per-node: empty expression");
    }
    while (*p != '\0') {
        unsigned long tasks, reps = 1;
        const char *q;

        if (parse_digits(p, &q, &tasks) != 0) {
            goto bad;
        }
        if (*q == '(') {
            const char *r = q + 1;
            if (*r != 'x' || parse_digits(r + 1, &q, &reps) != 0 ||
                *q != ')' || reps == 0) {
                p = r;
                goto bad;
            }
            q++;
        }
        if (*q != ',' && *q != '\0') {
            p = q;
            goto bad;
        }
        if (n + reps > 1u << 20) {
            free(counts);
            return td_error(TD_ERR_RANGE, "tasks-per-node: '%s' describes too "
                            "many nodes", expr);
        }
        if (n + reps > cap) {
            int *c;
            cap = (n + reps) * 2;
            c = realloc(counts, cap * sizeof(*c));
            if (c == NULL) {
                free(counts);
                return td_error(TD_ERR_NO_MEMORY, "tasks-per-node: out of memory");
            }
            counts = c;
        }
        for (unsigned long i = 0; i < reps; i++) {
            counts[n++] = (int)tasks;
        }
        p = (*q == ',') ? q + 1 : q;
        if (*q == ',' && *p == '\0') {
            goto bad;
        }
    }
    *counts_p = counts;
    *n_p = n;
    return TD_OK;

bad:
    free(counts);
    return td_error(TD_ERR_INVALID, "tasks-per-node: cannot parse '%s' at "
                    "position %zu", expr, (size_t)(p - expr));
}
