/* fault.c: TODIST_FAULT, fault injection for tests (fault.h, F1-F3). */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ucx_transport/fault.h"
#include "base/log.h"

void
td__fault_init(td__faults_t *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->lock, NULL);
}

void
td__fault_destroy(td__faults_t *f)
{
    pthread_mutex_destroy(&f->lock);
}

static double
fault_rand(td__faults_t *f)
{
    f->rng ^= f->rng << 13;   /* xorshift64 */
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return (double)(f->rng >> 11) / (double)(1ull << 53);
}

static bool
fault_matches(const td__fault_rule_t *r, const td_transport_kind_t *k,
              int dst)
{
    if (r->action == TD__FAULT_BREAK && r->to >= 0 && r->to != dst) {
        return false;
    }
    if (strcmp(r->kind, "any") == 0) {
        return true;
    }
    if (strncmp(r->kind, "fn=", 3) == 0) {
        return k->name != NULL &&
               strncmp(k->name, r->kind + 3, strlen(r->kind + 3)) == 0;
    }
    return strcmp(r->kind, k->kind) == 0;
}

/* F2 */
static bool
fault_kind_known(const char *kind)
{
    static const char *kinds[] = { "any", "call", "reply", "rref", "coll",
                                   "mbox", "other" };

    if (strncmp(kind, "fn=", 3) == 0) {
        return kind[3] != '\0' && strlen(kind) < 64;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(kind, kinds[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* The first rule for a message of kind K to DST (-1: not through UCX,
 * never broken) that fires (counted): its action, or -1; its delay into
 * *DELAY_S. Any thread. */
static int
fault_pick(td__faults_t *f, const td_transport_kind_t *k, int dst,
           double *delay_s)
{
    int action = -1;

    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < f->n && action < 0; i++) {
        const td__fault_rule_t *r = &f->rules[i];

        if ((dst >= 0 || r->action != TD__FAULT_BREAK) &&
            fault_matches(r, k, dst) && fault_rand(f) < r->rate) {
            f->count[r->action]++;
            action = r->action;
            *delay_s = r->delay_s;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return action;
}

static void
fault_sleep(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

    nanosleep(&ts, NULL);
}

int
td__fault_send(td__faults_t *f, uint16_t id, int dst, uint8_t *hdr,
               size_t len)
{
    td_transport_kind_t k = { "other", NULL };
    double delay_s = 0;
    int action;

    if (id < TD_TRANSPORT_HANDLERS_MAX && f->id_kind[id] != NULL) {
        k.kind = f->id_kind[id];
    } else if (f->classify != NULL) {
        k = f->classify(f->classify_arg, id, hdr, len);
    }
    action = fault_pick(f, &k, dst, &delay_s);
    if (action == TD__FAULT_DROP || action == TD__FAULT_BREAK) {
        return action;
    }
    if (action == TD__FAULT_CORRUPT && len > 0) {
        hdr[0] ^= 0xff;
    } else if (action == TD__FAULT_DELAY) {
        fault_sleep(delay_s);
    }
    return -1;
}

int
td__fault_roll(td__faults_t *f, const char *kind)
{
    td_transport_kind_t k = { kind, NULL };
    double delay_s = 0;
    int action;

    if (f->n == 0) {
        return TD_TRANSPORT_FAULT_NONE;
    }
    action = fault_pick(f, &k, -1, &delay_s);
    if (action == TD__FAULT_DELAY) {
        fault_sleep(delay_s);
    }
    return action == TD__FAULT_DROP ? TD_TRANSPORT_FAULT_DROP :
           action == TD__FAULT_CORRUPT ? TD_TRANSPORT_FAULT_CORRUPT :
           TD_TRANSPORT_FAULT_NONE;
}

td_status_t
td__fault_parse(td__faults_t *f, const char *spec, int rank)
{
    static const char *names[TD__FAULT_ACTIONS] = { "drop", "corrupt",
                                                    "delay", "break" };
    char buf[512], *save = NULL, *item;
    uint64_t seed = 1;

    if (strlen(spec) >= sizeof(buf)) {
        return td_error(TD_ERR_INVALID, "transport: TODIST_FAULT is longer "
                        "than %zu bytes", sizeof(buf) - 1);
    }
    strcpy(buf, spec);
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *fields[4] = { NULL }, *s2 = NULL, *end;
        int nf = 0, a;
        if (strncmp(item, "seed=", 5) == 0) {
            seed = strtoull(item + 5, &end, 10);
            if (*end != '\0' || item[5] == '\0') {
                goto bad;
            }
            continue;
        }
        for (char *t = strtok_r(item, ":", &s2); t != NULL && nf < 4;
             t = strtok_r(NULL, ":", &s2)) {
            fields[nf++] = t;
        }
        for (a = 0; a < TD__FAULT_ACTIONS && nf > 0; a++) {
            if (strcmp(fields[0], names[a]) == 0) {
                break;
            }
        }
        if (nf < 3 || a == TD__FAULT_ACTIONS ||
            (a == TD__FAULT_DELAY || a == TD__FAULT_BREAK) != (nf == 4) ||
            f->n == TD__FAULT_RULES_MAX || !fault_kind_known(fields[1])) {
            goto bad;
        }
        td__fault_rule_t *r = &f->rules[f->n];
        r->action = a;
        r->to = -1;
        strcpy(r->kind, fields[1]);
        r->rate = strtod(fields[2], &end);
        if (*end != '\0' || !(r->rate >= 0 && r->rate <= 1)) {
            goto bad;
        }
        if (a == TD__FAULT_DELAY) {
            r->delay_s = strtod(fields[3], &end) / 1000.0;
            if (*end != '\0' || !(r->delay_s >= 0 && r->delay_s <= 10)) {
                goto bad;
            }
        } else if (a == TD__FAULT_BREAK) {
            long to = strtol(fields[3], &end, 10);

            if (*end != '\0' || fields[3][0] == '\0' || to < -1 ||
                to > INT32_MAX) {
                goto bad;
            }
            r->to = (int)to;
        }
        f->n++;
    }
    f->rng = (seed ^ 0x9e3779b97f4a7c15ull) * (2 * (uint64_t)rank + 1) | 1;
    td_log_warn("transport: TODIST_FAULT='%s': injecting faults (for tests "
                "only)", spec);
    return TD_OK;

bad:
    return td_error(TD_ERR_INVALID, "transport: TODIST_FAULT='%s' is not a "
                    "list of drop|corrupt:KIND:RATE, delay:KIND:RATE:MS, "
                    "break:KIND:RATE:RANK (at most %d, KIND any|call|reply|"
                    "rref|coll|mbox|other|fn=PREFIX, RATE in [0, 1], MS <= "
                    "10000, RANK -1 for any) and seed=N",
                    spec, TD__FAULT_RULES_MAX);
}

void
td__fault_report(const td__faults_t *f)
{
    if (f->n > 0) {
        td_log_warn("transport: TODIST_FAULT dropped %" PRIu64 ", corrupted "
                    "%" PRIu64 ", delayed %" PRIu64 " and broke %" PRIu64
                    " message(s)",
                    f->count[TD__FAULT_DROP], f->count[TD__FAULT_CORRUPT],
                    f->count[TD__FAULT_DELAY], f->count[TD__FAULT_BREAK]);
    }
}
