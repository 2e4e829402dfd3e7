/*
 * netns_fleet.h - what a simulated fleet (starling-agent --fleet) says about
 * itself after a run, for the real-network fault tests
 * (tests/faults/test_net_faults.c): its summary line, and every device's
 * counters and acknowledgement ledger checked against each other. Failures
 * are cmocka failures (call from a test).
 */
#ifndef NETNS_FLEET_H
#define NETNS_FLEET_H

#include <stdint.h>

#include "../integration/agent_harness.h"

/* The fleet's last line: "fleet of N: A accepted (D duplicates), F folded, ..." */
typedef struct nf_fleet_summary {
    unsigned devices, failed;
    unsigned long long accepted, duplicates, folded, discarded, dropped, crashes, cuts, resumes;
    unsigned long long up,
        down; /* frame bytes: accepted update frames sent, model frames received */
} nf_fleet_summary;

/* Parse the summary line of the fleet's log @log (fails the test without one). */
void nf_read_fleet_summary(const char *log, nf_fleet_summary *s);

/* For each device @state/dev-K (K < @devices): every update it made (a
 * generation: counters' next_gen - 1) is resolved (accepted, folded or
 * discarded) or is its one pending upload; none is discarded; acks.log
 * holds one line per accepted update. @name and @log go into failure
 * messages. Returns the devices' folded updates. */
unsigned long long nf_check_devices(const char *name, const char *state, unsigned devices,
                                    const char *log);

#endif /* NETNS_FLEET_H */
