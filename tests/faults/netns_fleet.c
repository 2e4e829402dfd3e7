/* netns_fleet.c - see netns_fleet.h. */
#include <inttypes.h>

#include "../support/sl_test.h"
#include "netns_fleet.h"
#include "starling/common.h"

void nf_read_fleet_summary(const char *log, nf_fleet_summary *s)
{
    void *text = NULL;
    size_t len = 0;
    const char *line;
    if (sl_fs_read_file(log, 64 << 20, &text, &len) != SL_OK)
        fail_msg("%s: cannot read the fleet's log", log);
    line = strstr(text, "fleet of ");
    if (line == NULL ||
        sscanf(line,
               "fleet of %u: %llu accepted (%llu duplicates), %llu folded, %llu discarded, %llu "
               "dropped, %llu crashes, %llu cuts, %llu resumes, %llu bytes up, %llu down, %u "
               "devices failed",
               &s->devices, &s->accepted, &s->duplicates, &s->folded, &s->discarded, &s->dropped,
               &s->crashes, &s->cuts, &s->resumes, &s->up, &s->down, &s->failed) != 12)
        fail_msg("%s: no summary line", log);
    free(text);
}

static uint64_t counter(const char *text, const char *key)
{
    char want[64];
    const char *p;
    snprintf(want, sizeof want, "%s=", key);
    for (p = text; (p = strstr(p, want)) != NULL; p++)
        if (p == text || p[-1] == '\n')
            return strtoull(p + strlen(want), NULL, 10);
    fail_msg("counters: no %s", key);
    return 0;
}

unsigned long long nf_check_devices(const char *name, const char *state, unsigned devices,
                                    const char *log)
{
    unsigned long long folded = 0;
    for (unsigned k = 0; k < devices; k++) {
        char dev[900], path[1000];
        void *text = NULL;
        size_t len = 0, acks;
        ag_ack *lines = NULL;
        int64_t round;
        uint8_t sha[32];
        uint64_t made, parts, accepted, fold, discarded;
        int pending;
        snprintf(dev, sizeof dev, "%s/dev-%u", state, k);
        snprintf(path, sizeof path, "%s/counters", dev);
        if (sl_fs_read_file(path, 1 << 16, &text, &len) != SL_OK)
            fail_msg("%s: device %u has no counters (it never made an update?)", name, k);
        made = counter(text, "next_gen") - 1;
        parts = counter(text, "participations");
        accepted = counter(text, "accepted");
        fold = counter(text, "folded");
        discarded = counter(text, "discarded");
        free(text);
        pending = ag_pending(dev, &round, sha);
        acks = ag_read_acks(dev, &lines);
        free(lines);
        if (made != parts + (uint64_t)pending)
            fail_msg("%s: device %u made %" PRIu64 " updates, resolved %" PRIu64 " and %d pending",
                     name, k, made, parts, pending);
        if (parts != accepted + fold + discarded)
            fail_msg("%s: device %u: %" PRIu64 " participations != %" PRIu64 " accepted + %" PRIu64
                     " folded + %" PRIu64 " discarded",
                     name, k, parts, accepted, fold, discarded);
        if (discarded != 0)
            fail_msg("%s: device %u discarded %" PRIu64 " updates (a network fault made a valid "
                     "update invalid); see %s",
                     name, k, discarded, log);
        if (acks != accepted)
            fail_msg("%s: device %u: %zu lines in acks.log, %" PRIu64 " accepted", name, k, acks,
                     accepted);
        folded += fold;
    }
    return folded;
}
