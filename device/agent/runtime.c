/*
 * runtime.c - the bottom of the agent's layers (agent_int.h): what every
 * file above uses of the running program without calling up into it. Its
 * events go to the options' callback, its stop flag is read where it is
 * kept, its clock and random draws are its own, and the faults a fleet
 * injects into its link (a cut transfer, a link gone dark) go through the
 * hooks of the link it was given (relay.c's), not into the fleet.
 */
#include <time.h>

#include "agent_int.h"

void sl__agent_emit(sl_agent *a, sl_agent_event *ev)
{
    ev->client = a->o.client;
    ev->device_id = a->device_id;
    if (ev->reason == NULL)
        ev->reason = "";
    if (a->o.on_event != NULL)
        a->o.on_event(a->o.event_ctx, ev);
}

int sl__agent_stopping(const sl_agent *a)
{
    return a->stopped || (a->o.stop != NULL && *a->o.stop);
}

int sl__agent_sleep(const sl_agent *a, int64_t ms)
{
    int64_t end = sl_clock_monotonic_ns(NULL) + ms * 1000000;
    while (!sl__agent_stopping(a)) {
        int64_t left = end - sl_clock_monotonic_ns(NULL);
        struct timespec ts;
        if (left <= 0)
            return 0;
        if (left > 50000000)
            left = 50000000;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)left;
        nanosleep(&ts, NULL);
    }
    return 1;
}

double sl__agent_uniform(sl_agent *a)
{
    uint64_t x = a->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    a->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

int64_t sl__agent_now_ms(void)
{
    return sl_clock_wall_ns(NULL) / 1000000;
}

/* ---- link faults, through the link's hooks -------------------------------------------------- */

int sl__agent_link_faults(const sl_agent *a)
{
    return a->link != NULL && a->link_hooks != NULL;
}

void sl__agent_maybe_cut(sl_agent *a, uint64_t expected)
{
    if (!sl__agent_link_faults(a))
        return;
    if (sl__agent_uniform(a) < a->o.faults.cut) {
        uint64_t span = expected > 0 ? expected : a->o.faults.cut_span;
        a->link_hooks->arm(a->link, 1 + (int64_t)(sl__agent_uniform(a) * (double)span));
    } else {
        a->link_hooks->arm(a->link, -1);
    }
}

void sl__agent_disarm(sl_agent *a)
{
    if (sl__agent_link_faults(a))
        a->link_hooks->arm(a->link, -1);
}

void sl__agent_link_dark(sl_agent *a, int dark)
{
    if (sl__agent_link_faults(a))
        a->link_hooks->dark(a->link, dark);
}
