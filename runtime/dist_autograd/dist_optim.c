/* runtime/dist_autograd/dist_optim.c: the per-owner part of the distributed optimizer:
 * SGD, Adam and AdamW (PyTorch 1.13 rules, per-parameter state) over the gradients of a distributed
 * autograd context. State is kept in float64 per parameter element. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <todist/dist_autograd.h>
#include <todist/dist_optim.h>
#include <todist/optim.h>

typedef struct {
    td_tensor_t *param;
    double      *buf;        /* SGD momentum buffer / Adam exp_avg */
    double      *sq;         /* Adam exp_avg_sq */
    double      *sq_max;     /* Adam amsgrad max_exp_avg_sq */
    int64_t      step;       /* updates this parameter received */
} slot_t;

typedef enum {
    KIND_SGD,
    KIND_ADAM,
    KIND_ADAMW
} kind_t;

/* The options of either kind, in one place. */
typedef struct {
    kind_t kind;
    double lr, weight_decay;
    double momentum, dampening;
    int    nesterov;
    double beta1, beta2, eps;
    int    amsgrad;
} hparams_t;

struct td_dist_optim {
    hparams_t         hp;
    slot_t           *slots;
    int               n;
    int64_t           steps;
    pthread_mutex_t   lock;  /* serializes steps */
};

static td_status_t
check_params(const hparams_t *hp)
{
    if (!(hp->lr >= 0)) {
        return td_error(TD_ERR_INVALID, "dist_optim: lr=%g is negative",
                        hp->lr);
    }
    if (!(hp->weight_decay >= 0)) {
        return td_error(TD_ERR_INVALID, "dist_optim: weight_decay=%g is "
                        "negative", hp->weight_decay);
    }
    if (hp->kind == KIND_SGD) {
        if (!(hp->momentum >= 0)) {
            return td_error(TD_ERR_INVALID, "dist_optim: momentum=%g is "
                            "negative", hp->momentum);
        }
        if (hp->nesterov && (hp->momentum <= 0 || hp->dampening != 0)) {
            return td_error(TD_ERR_INVALID, "dist_optim: nesterov needs "
                            "momentum > 0 and dampening = 0 (momentum=%g, "
                            "dampening=%g)", hp->momentum, hp->dampening);
        }
        return TD_OK;
    }
    if (!(hp->beta1 >= 0 && hp->beta1 < 1) ||
        !(hp->beta2 >= 0 && hp->beta2 < 1)) {
        return td_error(TD_ERR_INVALID, "dist_optim: betas=(%g, %g) outside "
                        "[0, 1)", hp->beta1, hp->beta2);
    }
    if (!(hp->eps >= 0)) {
        return td_error(TD_ERR_INVALID, "dist_optim: eps=%g is negative",
                        hp->eps);
    }
    return TD_OK;
}

static td_status_t
optim_create(const hparams_t *hp, td_tensor_t *const *ts, int n,
             td_dist_optim_t **optim_p)
{
    td_dist_optim_t *o;
    td_status_t status;

    if (n <= 0 || ts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: %d parameters", n);
    }
    status = check_params(hp);
    if (status != TD_OK) {
        return status;
    }
    for (int i = 0; i < n; i++) {
        td_dtype_t dt;

        if (ts[i] == NULL || !td_tensor_is_leaf(ts[i])) {
            return td_error(TD_ERR_INVALID, "dist_optim: parameter %d is "
                            "missing or not a leaf", i);
        }
        dt = td_tensor_dtype(ts[i]);
        if ((dt != TD_FLOAT32 && dt != TD_FLOAT64) ||
            !td_tensor_is_contiguous(ts[i]) ||
            td_tensor_device(ts[i]).type != TD_DEVICE_CPU) {
            return td_error(TD_ERR_DTYPE, "dist_optim: parameter %d must be a "
                            "contiguous float32/float64 cpu tensor (is %s)", i,
                            td_dtype_name(dt));
        }
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL || (o->slots = calloc((size_t)n, sizeof(slot_t))) == NULL) {
        free(o);
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    o->hp = *hp;
    o->n = n;
    pthread_mutex_init(&o->lock, NULL);
    for (int i = 0; i < n; i++) {
        o->slots[i].param = td_tensor_retain(ts[i]);
    }
    *optim_p = o;
    return TD_OK;
}

td_status_t
td_dist_optim_sgd(td_tensor_t *const *params, int n, const td_sgd_opts_t *opts,
                  td_dist_optim_t **optim_p)
{
    hparams_t hp;

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: SGD without options");
    }
    memset(&hp, 0, sizeof(hp));
    hp.kind = KIND_SGD;
    hp.lr = opts->lr;
    hp.weight_decay = opts->weight_decay;
    hp.momentum = opts->momentum;
    hp.dampening = opts->dampening;
    hp.nesterov = opts->nesterov;
    return optim_create(&hp, params, n, optim_p);
}

static td_status_t
adam_create(kind_t kind, td_tensor_t *const *params, int n,
            const td_adam_opts_t *opts, td_dist_optim_t **optim_p)
{
    hparams_t hp;

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: Adam without options "
                        "(start from td_adam_defaults())");
    }
    memset(&hp, 0, sizeof(hp));
    hp.kind = kind;
    hp.lr = opts->lr;
    hp.weight_decay = opts->weight_decay;
    hp.beta1 = opts->beta1;
    hp.beta2 = opts->beta2;
    hp.eps = opts->eps;
    hp.amsgrad = opts->amsgrad;
    return optim_create(&hp, params, n, optim_p);
}

td_status_t
td_dist_optim_adam(td_tensor_t *const *params, int n,
                   const td_adam_opts_t *opts, td_dist_optim_t **optim_p)
{
    return adam_create(KIND_ADAM, params, n, opts, optim_p);
}

td_status_t
td_dist_optim_adamw(td_tensor_t *const *params, int n,
                    const td_adam_opts_t *opts, td_dist_optim_t **optim_p)
{
    return adam_create(KIND_ADAMW, params, n, opts, optim_p);
}

void
td_dist_optim_destroy(td_dist_optim_t *o)
{
    if (o == NULL) {
        return;
    }
    for (int i = 0; i < o->n; i++) {
        td_tensor_release(o->slots[i].param);
        free(o->slots[i].buf);
        free(o->slots[i].sq);
        free(o->slots[i].sq_max);
    }
    pthread_mutex_destroy(&o->lock);
    free(o->slots);
    free(o);
}

int64_t
td_dist_optim_steps(const td_dist_optim_t *o)
{
    return o->steps;
}

static double
load(const void *data, td_dtype_t dt, int64_t i)
{
    return dt == TD_FLOAT64 ? ((const double *)data)[i]
                            : (double)((const float *)data)[i];
}

static void
store(void *data, td_dtype_t dt, int64_t i, double v)
{
    if (dt == TD_FLOAT64) {
        ((double *)data)[i] = v;
    } else {
        ((float *)data)[i] = (float)v;
    }
}

/* torch.optim.SGD, one parameter:
 *   d = g + wd p;  buf = d (first) | momentum buf + (1 - dampening) d;
 *   d = d + momentum buf (nesterov) | buf;  p -= lr d */
static void
sgd_update(const hparams_t *hp, slot_t *s, void *p, const void *g,
           td_dtype_t dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double pv = load(p, dt, i), d = load(g, dt, i) + hp->weight_decay * pv;

        if (hp->momentum != 0) {
            s->buf[i] = s->step == 0 ? d : hp->momentum * s->buf[i] +
                                           (1 - hp->dampening) * d;
            d = hp->nesterov ? d + hp->momentum * s->buf[i] : s->buf[i];
        }
        store(p, dt, i, pv - hp->lr * d);
    }
}

/* torch.optim.Adam / AdamW, one parameter (t = step after increment):
 *   Adam: g += wd p;  AdamW: p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   denom = sqrt(v or max v) / sqrt(1 - b2^t) + eps;
 *   p -= lr / (1 - b1^t) * m / denom */
static void
adam_update(const hparams_t *hp, slot_t *s, void *p, const void *g,
            td_dtype_t dt, int64_t n)
{
    double t = (double)s->step;
    double bc1 = 1 - pow(hp->beta1, t), bc2 = 1 - pow(hp->beta2, t);
    double step_size = hp->lr / bc1;

    for (int64_t i = 0; i < n; i++) {
        double pv = load(p, dt, i), gv = load(g, dt, i), v, denom;

        if (hp->kind == KIND_ADAMW) {
            pv *= 1 - hp->lr * hp->weight_decay;
        } else {
            gv += hp->weight_decay * pv;
        }

        s->buf[i] = hp->beta1 * s->buf[i] + (1 - hp->beta1) * gv;
        s->sq[i] = hp->beta2 * s->sq[i] + (1 - hp->beta2) * gv * gv;
        v = s->sq[i];
        if (hp->amsgrad) {
            s->sq_max[i] = fmax(s->sq_max[i], s->sq[i]);
            v = s->sq_max[i];
        }
        denom = sqrt(v) / sqrt(bc2) + hp->eps;
        store(p, dt, i, pv - step_size * s->buf[i] / denom);
    }
}

static td_status_t
slot_state(const hparams_t *hp, slot_t *s, int64_t n)
{
    int need_buf = hp->kind != KIND_SGD || hp->momentum != 0;

    if (need_buf && s->buf == NULL &&
        (s->buf = calloc((size_t)n, sizeof(double))) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    if (hp->kind != KIND_SGD && s->sq == NULL &&
        (s->sq = calloc((size_t)n, sizeof(double))) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    if (hp->amsgrad && s->sq_max == NULL &&
        (s->sq_max = calloc((size_t)n, sizeof(double))) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    return TD_OK;
}

td_status_t
td_dist_optim_step(td_dist_optim_t *o, int64_t ctx_id)
{
    td_tensor_t **grads;
    td_status_t status = TD_OK;

    grads = calloc((size_t)o->n, sizeof(*grads));
    if (grads == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    /* gather every gradient first: a bad one leaves all parameters as
     * they were */
    for (int i = 0; i < o->n && status == TD_OK; i++) {
        td_tensor_t *p = o->slots[i].param, *g = NULL, *gc = NULL;

        if (td_dist_get_gradient(ctx_id, p, &g) != TD_OK) {
            continue;                            /* None: skipped */
        }
        if (td_tensor_dtype(g) != td_tensor_dtype(p) ||
            td_tensor_numel(g) != td_tensor_numel(p)) {
            status = td_error(TD_ERR_SHAPE, "dist_optim: gradient of "
                              "parameter %d has %lld %s elements, the "
                              "parameter %lld %s", i,
                              (long long)td_tensor_numel(g),
                              td_dtype_name(td_tensor_dtype(g)),
                              (long long)td_tensor_numel(p),
                              td_dtype_name(td_tensor_dtype(p)));
        } else {
            status = td_tensor_contiguous(g, &gc);
        }
        td_tensor_release(g);
        grads[i] = gc;
    }
    td_error_clear();
    pthread_mutex_lock(&o->lock);
    for (int i = 0; i < o->n && status == TD_OK; i++) {
        slot_t *s = &o->slots[i];
        int64_t n = td_tensor_numel(s->param);

        if (grads[i] == NULL) {
            continue;
        }
        status = slot_state(&o->hp, s, n);
        if (status != TD_OK) {
            break;
        }
        if (o->hp.kind == KIND_SGD) {
            /* step 0: the momentum buffer starts as the first d */
            sgd_update(&o->hp, s, td_tensor_data(s->param),
                       td_tensor_data(grads[i]), td_tensor_dtype(s->param), n);
            s->step++;
        } else {
            s->step++;          /* Adam's bias correction uses t >= 1 */
            adam_update(&o->hp, s, td_tensor_data(s->param),
                        td_tensor_data(grads[i]), td_tensor_dtype(s->param),
                        n);
        }
        td_tensor_bump_version(s->param);
    }
    if (status == TD_OK) {
        o->steps++;
    }
    pthread_mutex_unlock(&o->lock);
    for (int i = 0; i < o->n; i++) {
        td_tensor_release(grads[i]);
    }
    free(grads);
    return status;
}
