/*
 * fleet.c - N virtual devices in one process. Each is a plain sl_agent on
 * its own thread with its own state directory (dev-K), key, partition
 * client and residual, talking real HTTP to the coordinator, through the
 * same code as a lone agent. Faults are drawn per device from seeded
 * generators (seed + K), so a run can be repeated:
 *   dropout   the agent drops out after the download (sl_agent_run)
 *   straggle  training slows down by a factor (participate.c)
 *   cut       a transfer (download or upload) is cut at a random byte by
 *             the device's relay, then resumed by the client
 *   crash     around an upload (participate.c): before it, mid-upload (the
 *             relay goes dark), or after its answer; the agent object is
 *             freed and created again from the directory, as a restarted
 *             process would be
 *   poison    round(P * N) devices, picked by a shuffle seeded with the
 *             fleet's seed, send scaled, flipped or NaN updates for the whole
 *             run (poison.c); the others never do
 *   speeds    a heterogeneous fleet: each device trains a factor slower, drawn
 *             log-uniform in [1, speed_max] (participate.c)
 *   links     and its link carries a rate drawn log-uniform between the
 *             options' bounds, through its relay (relay.c)
 * The devices enrol one after the other in their places' order, so a fresh
 * fleet's device K gets the coordinator's (K+1)-th id and the selections (a
 * seeded shuffle of ids) pick the same places in every run of a seed.
 * Every event is one debug line; the summary adds up the devices.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent_int.h"

/* Devices enrol in their places' order, one after the other: device K's id is the (K+1)-th
 * the coordinator hands out to a fresh fleet, so its selections (a seeded shuffle of device
 * ids) pick the same places in every run, not whichever device won the race to enrol. */
typedef struct enrol_gate {
    pthread_mutex_t lock;
    pthread_cond_t turn;
    unsigned next; /* the place whose turn it is; devices below it have enrolled or ended */
} enrol_gate;

typedef struct device {
    sl_agent_options o;
    enrol_gate *gate;
    int enrolled; /* its turn passed on */
    const sl_agent_options *base;
    char dir[SL__AGENT_PATH_MAX];
    sl__agent_relay *relay;
    pthread_t thread;
    int started;
    int rc;
    uint32_t target;             /* participations to resolve; 0: until stopped */
    sl_agent_stats first, stats; /* persisted counters at the start, and now */
    uint64_t crashes, bytes_up, bytes_down;
} device;

/* Wait for device @d's turn to enrol. */
static void wait_turn(device *d)
{
    pthread_mutex_lock(&d->gate->lock);
    while (d->gate->next < d->o.client)
        pthread_cond_wait(&d->gate->turn, &d->gate->lock);
    pthread_mutex_unlock(&d->gate->lock);
}

/* Device @d enrolled (or ended without): the next place's turn. */
static void pass_turn(device *d)
{
    if (d->enrolled)
        return;
    d->enrolled = 1;
    pthread_mutex_lock(&d->gate->lock);
    if (d->gate->next <= d->o.client)
        d->gate->next = d->o.client + 1;
    pthread_cond_broadcast(&d->gate->turn);
    pthread_mutex_unlock(&d->gate->lock);
}

static void on_event(void *ctx, const sl_agent_event *ev)
{
    device *d = ctx;
    if (ev->kind == SL_AGENT_EV_ENROLLED)
        pass_turn(d);
    if (ev->kind != SL_AGENT_EV_PROGRESS || ev->bytes == ev->total)
        sl_log(SL_LOG_DEBUG, "fleet",
               "dev=%u device=%" PRId64 " event=%s round=%" PRId64 " version=%" PRId64
               " bytes=%" PRIu64 " value=%.4g%s%s",
               ev->client, ev->device_id, sl_agent_event_name(ev->kind), ev->round_id,
               ev->model_version, ev->bytes, ev->value, ev->reason[0] ? " reason=" : "",
               ev->reason);
    if (d->base->on_event != NULL)
        d->base->on_event(d->base->event_ctx, ev);
}

/* Device @d's lives: the agent created from its directory and run, again after each simulated
 * crash, until it has resolved its participations or failed. */
static void device_lives(device *d)
{
    uint64_t first = 0, done = 0;
    int have_first = 0;
    for (;;) {
        sl_agent *a = NULL;
        sl_agent_stats st;
        char err[256] = "";
        int rc = sl_agent_create(&d->o, &a, err, sizeof err);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "fleet", "dev=%u: %s", d->o.client, err);
            d->rc = rc;
            return;
        }
        if (d->relay != NULL)
            sl__agent_use_relay(a, d->relay);
        sl_agent_get_stats(a, &st);
        if (!have_first) {
            first = st.participations;
            d->first = st;
            have_first = 1;
        }
        if (d->target > 0) {
            done = st.participations - first;
            if (done >= d->target) {
                d->stats = st;
                sl_agent_free(a);
                d->rc = SL_OK;
                return;
            }
            d->o.rounds = d->target - (uint32_t)done;
            d->o.once = 0;
        }
        rc = sl_agent_run(a);
        sl_agent_get_stats(a, &d->stats);
        d->bytes_up += d->stats.bytes_up;
        d->bytes_down += d->stats.bytes_down;
        sl_agent_free(a);
        if (rc == SL_ESTATE) {
            d->crashes++; /* a simulated crash: start again from the directory */
            d->o.seed += 0x9E3779B97F4A7C15ULL; /* a new life draws new faults */
            continue;
        }
        d->rc = rc;
        if (rc != SL_OK)
            sl_log(SL_LOG_ERROR, "fleet", "dev=%u ended: %s", d->o.client, sl_strerror(rc));
        return;
    }
}

static void *device_main(void *arg)
{
    device *d = arg;
    wait_turn(d);
    device_lives(d);
    pass_turn(d); /* ended before it enrolled: the next may go */
    return NULL;
}

/* Which devices poison: exactly round(@fraction * @devices) of them, the
 * first of a Fisher-Yates shuffle seeded with @seed (the same for a seed). */
static int pick_poisoners(uint64_t seed, double fraction, unsigned devices, unsigned char *chosen)
{
    unsigned *order = malloc(devices * sizeof *order);
    double want = fraction * (double)devices + 0.5;
    unsigned count = want >= (double)devices ? devices : (unsigned)want;
    uint64_t x = seed ^ 0x706F69736F6E6564ULL;
    if (order == NULL)
        return SL_ENOMEM;
    for (unsigned k = 0; k < devices; k++)
        order[k] = k;
    for (unsigned k = devices; k > 1; k--) {
        unsigned j, t;
        /* splitmix64 */
        uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        j = (unsigned)(z % k);
        t = order[k - 1];
        order[k - 1] = order[j];
        order[j] = t;
    }
    memset(chosen, 0, devices);
    for (unsigned k = 0; k < count; k++)
        chosen[order[k]] = 1;
    free(order);
    return SL_OK;
}

/* host and port of an http:// URL */
static int split_url(const char *url, char *host, size_t cap, int *port)
{
    const char *h = url + 7, *end = h;
    long p = 80;
    if (strncmp(url, "http://", 7) != 0)
        return SL_EINVAL;
    while (*end != '\0' && *end != ':' && *end != '/')
        end++;
    if (end == h || (size_t)(end - h) >= cap)
        return SL_EINVAL;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = '\0';
    if (*end == ':') {
        char *stop;
        p = strtol(end + 1, &stop, 10);
        if (p <= 0 || p > 65535 || (*stop != '\0' && *stop != '/'))
            return SL_EINVAL;
    }
    *port = (int)p;
    return SL_OK;
}

/* Device @k's speed and link, log-uniform between the options' bounds, from the fleet's
 * seed: the same device gets the same pace in every run of that seed. */
static void draw_pace(const sl_agent_options *o, unsigned k, sl_agent_faults *f)
{
    uint64_t x = (o->seed ^ 0x9ace5eedull) + (uint64_t)k * 0x9e3779b97f4a7c15ull;
    double u1, u2;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    u1 = (double)(x >> 11) * 0x1p-53;
    u2 = (double)((x * 0x9e3779b97f4a7c15ull) >> 11) * 0x1p-53;
    if (o->speed_max > 1)
        f->slowdown = exp(u1 * log(o->speed_max));
    if (o->link_max_bps > 0 && o->link_min_bps > 0 && o->link_max_bps >= o->link_min_bps)
        f->link_bps = o->link_min_bps * exp(u2 * log(o->link_max_bps / o->link_min_bps));
}

int sl_agent_fleet_run(const sl_agent_options *o, unsigned devices, sl_agent_fleet_summary *sum)
{
    device *devs;
    enrol_gate gate;
    unsigned char *poisoners;
    char host[256];
    int port = 0, relay = 0, rc = SL_OK;
    if (o == NULL || sum == NULL || devices == 0 || o->state_dir == NULL || o->data == NULL ||
        o->data->first != 0 || o->data->count < devices)
        return SL_EINVAL;
    if (o->faults.cut > 0 || o->faults.crash > 0 || o->link_max_bps > 0) {
        relay = split_url(o->coordinator, host, sizeof host, &port) == SL_OK;
        if (!relay)
            sl_log(SL_LOG_WARN, "fleet",
                   "cut, mid-upload crash and link faults need an http:// coordinator (a "
                   "loopback relay); with %s only crashes before and after uploads are "
                   "simulated, links run at full speed",
                   o->coordinator);
    }
    devs = calloc(devices, sizeof *devs);
    poisoners = calloc(devices, 1);
    if (devs == NULL || poisoners == NULL ||
        (o->faults.poison_mode != SL_AGENT_POISON_NONE &&
         pick_poisoners(o->seed, o->faults.poison, devices, poisoners) != SL_OK)) {
        free(devs);
        free(poisoners);
        return SL_ENOMEM;
    }
    sl_nn_set_threads(1);
    pthread_mutex_init(&gate.lock, NULL);
    pthread_cond_init(&gate.turn, NULL);
    gate.next = 0;
    memset(sum, 0, sizeof *sum);
    sum->devices = devices;
    for (unsigned k = 0; k < devices && rc == SL_OK; k++) {
        device *d = &devs[k];
        d->base = o;
        d->gate = &gate;
        d->o = *o;
        d->o.client = k;
        d->target = o->rounds ? o->rounds : (o->once ? 1 : 0);
        d->o.seed = o->seed + k;
        d->o.seed_alone = 1; /* training draws by the device's place, not its id: runs repeat */
        d->o.threads = 0;    /* the process-wide GEMM setting stays 1 */
        d->o.on_event = on_event;
        d->o.event_ctx = d;
        /* 1 or 0, so the device's own draw (agent.c) gives the fleet's pick */
        d->o.faults.poison = poisoners[k] ? 1.0 : 0.0;
        if (poisoners[k]) {
            sum->poisoned++;
            sl_log(SL_LOG_INFO, "fleet", "dev=%u poisons its updates (%s)", k,
                   sl_agent_poison_name(o->faults.poison_mode));
        }
        snprintf(d->dir, sizeof d->dir, "%s/dev-%u", o->state_dir, k);
        d->o.state_dir = d->dir;
        draw_pace(o, k, &d->o.faults);
        if (relay) {
            rc = sl__agent_relay_create(host, port, &d->relay);
            if (rc != SL_OK)
                break;
            sl__agent_relay_set_rate(d->relay, d->o.faults.link_bps);
        }
        if (d->o.faults.slowdown > 1 || d->o.faults.link_bps > 0)
            sl_log(SL_LOG_INFO, "fleet", "dev=%u trains %.2fx slower, link %.0f bytes/s", k,
                   d->o.faults.slowdown, d->o.faults.link_bps);
    }
    /* the parent directory first: each device makes its own below it */
    if (rc == SL_OK && mkdir(o->state_dir, 0700) != 0 && errno != EEXIST) {
        sl_log(SL_LOG_ERROR, "fleet", "%s: %s", o->state_dir, strerror(errno));
        rc = sl_status_from_errno(errno);
    }
    for (unsigned k = 0; k < devices && rc == SL_OK; k++) {
        if (pthread_create(&devs[k].thread, NULL, device_main, &devs[k]) != 0) {
            rc = SL_ENOMEM;
            break;
        }
        devs[k].started = 1;
    }
    if (rc != SL_OK) { /* the started ones may go on: those not started pass their turns */
        pthread_mutex_lock(&gate.lock);
        gate.next = devices;
        pthread_cond_broadcast(&gate.turn);
        pthread_mutex_unlock(&gate.lock);
    }
    sum->first_error = SL_OK;
    for (unsigned k = 0; k < devices; k++) {
        device *d = &devs[k];
        if (d->started)
            pthread_join(d->thread, NULL);
        if (d->started && d->rc != SL_OK) {
            sum->failed++;
            if (sum->first_error == SL_OK)
                sum->first_error = d->rc;
        }
        /* this run's share of the persisted counters */
        sum->accepted += d->stats.accepted - d->first.accepted;
        sum->duplicates += d->stats.duplicates - d->first.duplicates;
        sum->folded += d->stats.folded - d->first.folded;
        sum->discarded += d->stats.discarded - d->first.discarded;
        sum->dropped += d->stats.dropped - d->first.dropped;
        sum->crashes += d->crashes;
        sum->bytes_up += d->bytes_up;
        sum->bytes_down += d->bytes_down;
        if (d->relay != NULL) {
            uint64_t cuts, resumes;
            sl__agent_relay_counts(d->relay, &cuts, &resumes);
            sum->cuts += cuts;
            sum->resumes += resumes;
            sl__agent_relay_free(d->relay);
        }
    }
    free(devs);
    free(poisoners);
    pthread_cond_destroy(&gate.turn);
    pthread_mutex_destroy(&gate.lock);
    if (rc == SL_OK)
        rc = sum->first_error;
    sl_log(SL_LOG_INFO, "fleet",
           "%u devices: accepted %" PRIu64 " (duplicates %" PRIu64 "), folded %" PRIu64
           ", discarded %" PRIu64 ", dropped %" PRIu64 ", crashes %" PRIu64 ", cuts %" PRIu64
           ", resumes %" PRIu64 ", %" PRIu64 " bytes up, %" PRIu64 " down, %u poisoned, %u failed",
           devices, sum->accepted, sum->duplicates, sum->folded, sum->discarded, sum->dropped,
           sum->crashes, sum->cuts, sum->resumes, sum->bytes_up, sum->bytes_down, sum->poisoned,
           sum->failed);
    return rc;
}
