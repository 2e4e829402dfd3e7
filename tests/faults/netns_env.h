/*
 * netns_env.h - two network namespaces joined by a veth pair, for the
 * real-network fault tests (tests/faults/test_net_faults.c, issue #9):
 * "C" holds the coordinator (and the test process itself, which enters it
 * with setns()), "A" the agents. Kernel faults go on the veth: nftables
 * loss (numgen random), tbf rate limits, links set down and up, and
 * periodic fault drivers (a thread that runs one command, waits, runs
 * another, waits, ...).
 *
 * Names are unique per process ("slnet<pid>x..."), so parallel runs do not
 * collide; namespaces of processes that died without cleaning up are swept
 * by the next run (nn_sweep_stale); nn_teardown() and an atexit() handler
 * delete what this process made. Deleting a namespace takes its veth end,
 * its nftables tables and qdiscs with it.
 *
 * Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2 (`ip`, `tc`);
 * nftables (`nft`) for the loss cells. Not thread-safe except the drivers.
 */
#ifndef NETNS_ENV_H
#define NETNS_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct nn_env {
    char ns_a[40], ns_c[40];     /* namespace names */
    char veth_a[16], veth_c[16]; /* interface names (IFNAMSIZ) */
    char addr_a[16], addr_c[16]; /* "10.201.0.2", "10.201.0.1" */
    int home_fd;                 /* the process's own namespace, to come back to */
    int inside;                  /* 1 while the process is in C */
    int made;                    /* 1 after the namespaces exist */
} nn_env;

/* 1 when namespaces can be made here (root, `ip`, a probe namespace that
 * can be created and entered); else 0 with the reason in @why. Also sweeps
 * stale namespaces of earlier runs. */
int nn_available(char *why, size_t cap);

/* Make both namespaces (suffix @tag, letters and digits, <= 6 chars), the
 * veth pair with its addresses, loopbacks up. 0, or -1 with @why. */
int nn_setup(nn_env *e, const char *tag, char *why, size_t cap);
/* Move the calling thread (the process's main thread) into C / back home. */
int nn_enter_c(nn_env *e);
int nn_leave(nn_env *e);
/* Leave C, delete both namespaces (idempotent). */
void nn_teardown(nn_env *e);

/* Run a shell command made from @fmt; its exit status (-1: not run). */
int nn_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The first line of a command's output (trailing newline removed) in @out. */
int nn_sh_read(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* fork + exec @argv (argv[0] is the program path) inside namespace @ns
 * (NULL: the caller's), stdout and stderr appended to @log. The child gets
 * SIGKILL if the test process dies (PR_SET_PDEATHSIG). */
pid_t nn_spawn(const char *ns, char *const argv[], const char *log);

/* Bytes received and sent by interface @ifname of the calling thread's
 * namespace (/proc/self/net/dev). 0, or -1 when the interface is absent. */
int nn_if_bytes(const char *ifname, uint64_t *rx, uint64_t *tx);

/* Packets counted by nftables named counter @name of table inet @table in
 * namespace @ns; times the root qdisc of @dev in @ns went over its limit
 * (tbf). 0 when there is no such counter or qdisc. */
unsigned long long nn_nft_counter(const char *ns, const char *table, const char *name);
unsigned long long nn_tbf_overlimits(const char *ns, const char *dev);

/* A periodic fault driver: runs @on_cmd, waits @on_ms, runs @off_cmd,
 * waits @off_ms, ... until stopped; stopping runs @off_cmd a last time. */
typedef struct nn_driver nn_driver;
nn_driver *nn_driver_start(const char *on_cmd, unsigned on_ms, const char *off_cmd,
                           unsigned off_ms);
/* Stop (joins; leaves the "off" state); returns the completed "on" phases. NULL: 0. */
unsigned nn_driver_stop(nn_driver *d);

#endif /* NETNS_ENV_H */
