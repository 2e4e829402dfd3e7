/* netns_env.c - see netns_env.h. */
#include "netns_env.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../support/sl_test.h"

#define PREFIX   "slnet-"
#define MAX_ENVS 16

static nn_env *made[MAX_ENVS];
static int atexit_set;

int nn_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (rc < 0 || (size_t)rc >= sizeof cmd)
        return -1;
    rc = system(cmd);
    if (rc == -1)
        return -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

int nn_sh_read(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    FILE *f;
    int rc;
    va_start(ap, fmt);
    rc = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    out[0] = '\0';
    if (rc < 0 || (size_t)rc >= sizeof cmd || (f = popen(cmd, "r")) == NULL)
        return -1;
    if (fgets(out, (int)cap, f) == NULL)
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    rc = pclose(f);
    return rc == -1 ? -1 : (WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc));
}

/* Delete namespaces "slnet-<pid>-..." whose process is gone. */
static void sweep_stale(void)
{
    char line[256];
    FILE *f = popen("ip netns list 2>/dev/null", "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        char name[64], *end;
        long pid;
        if (strncmp(line, PREFIX, strlen(PREFIX)) != 0 || sscanf(line, "%63s", name) != 1)
            continue;
        pid = strtol(name + strlen(PREFIX), &end, 10);
        if (end == name + strlen(PREFIX) || *end != '-' || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        fprintf(stderr, "netns: deleting %s, left by process %ld\n", name, pid);
        nn_sh("ip netns del '%s' 2>/dev/null", name);
    }
    pclose(f);
}

static int enter(const char *ns)
{
    char path[128];
    int fd, rc;
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc;
}

int nn_available(char *why, size_t cap)
{
    char probe[64];
    int home, ok;
    if (geteuid() != 0) {
        snprintf(why, cap, "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN");
        return 0;
    }
    if (nn_sh("command -v ip >/dev/null 2>&1") != 0) {
        snprintf(why, cap, "no `ip` (install iproute2: deploy/install-deps.sh)");
        return 0;
    }
    sweep_stale();
    snprintf(probe, sizeof probe, PREFIX "%ld-probe", (long)getpid());
    if (nn_sh("ip netns add '%s' >/dev/null 2>&1", probe) != 0) {
        snprintf(why, cap, "`ip netns add` failed: no permission to make network namespaces");
        return 0;
    }
    home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    ok = home >= 0 && enter(probe) == 0 && setns(home, CLONE_NEWNET) == 0;
    if (home >= 0)
        close(home);
    nn_sh("ip netns del '%s' >/dev/null 2>&1", probe);
    if (!ok) {
        snprintf(why, cap, "setns() into a new network namespace failed: %s", strerror(errno));
        return 0;
    }
    return 1;
}

static void at_exit(void)
{
    for (int i = 0; i < MAX_ENVS; i++)
        if (made[i] != NULL)
            nn_teardown(made[i]);
}

int nn_setup(nn_env *e, const char *tag, char *why, size_t cap)
{
    int slot = -1;
    memset(e, 0, sizeof *e);
    e->home_fd = -1;
    snprintf(e->ns_a, sizeof e->ns_a, PREFIX "%ld-%s-a", (long)getpid(), tag);
    snprintf(e->ns_c, sizeof e->ns_c, PREFIX "%ld-%s-c", (long)getpid(), tag);
    /* the veth is made inside the namespaces: its names never meet another run's */
    snprintf(e->veth_a, sizeof e->veth_a, "veth-a");
    snprintf(e->veth_c, sizeof e->veth_c, "veth-c");
    snprintf(e->addr_a, sizeof e->addr_a, "10.201.0.2");
    snprintf(e->addr_c, sizeof e->addr_c, "10.201.0.1");
    for (int i = 0; i < MAX_ENVS && slot < 0; i++)
        if (made[i] == NULL)
            slot = i;
    if (slot < 0) {
        snprintf(why, cap, "too many environments");
        return -1;
    }
    if (!atexit_set) {
        atexit(at_exit);
        atexit_set = 1;
    }
    made[slot] = e;
    e->made = 1;
    if (nn_sh("ip netns add %s && ip netns add %s", e->ns_a, e->ns_c) != 0 ||
        nn_sh("ip link add %s netns %s type veth peer name %s netns %s", e->veth_a, e->ns_a,
              e->veth_c, e->ns_c) != 0 ||
        nn_sh("ip -n %s addr add %s/24 dev %s && ip -n %s addr add %s/24 dev %s", e->ns_a,
              e->addr_a, e->veth_a, e->ns_c, e->addr_c, e->veth_c) != 0 ||
        nn_sh("ip -n %s link set lo up && ip -n %s link set lo up && ip -n %s link set %s up && "
              "ip -n %s link set %s up",
              e->ns_a, e->ns_c, e->ns_a, e->veth_a, e->ns_c, e->veth_c) != 0) {
        snprintf(why, cap, "could not make namespaces %s and %s joined by a veth pair", e->ns_a,
                 e->ns_c);
        nn_teardown(e);
        return -1;
    }
    return 0;
}

int nn_enter_c(nn_env *e)
{
    if (e->inside)
        return 0;
    e->home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (e->home_fd < 0 || enter(e->ns_c) != 0)
        return -1;
    e->inside = 1;
    return 0;
}

int nn_leave(nn_env *e)
{
    int rc = 0;
    if (!e->inside)
        return 0;
    rc = setns(e->home_fd, CLONE_NEWNET);
    close(e->home_fd);
    e->home_fd = -1;
    e->inside = 0;
    return rc;
}

void nn_teardown(nn_env *e)
{
    nn_leave(e);
    if (e->made) {
        nn_sh("ip netns del %s >/dev/null 2>&1; ip netns del %s >/dev/null 2>&1", e->ns_a, e->ns_c);
        e->made = 0;
    }
    for (int i = 0; i < MAX_ENVS; i++)
        if (made[i] == e)
            made[i] = NULL;
}

pid_t nn_spawn(const char *ns, char *const argv[], const char *log)
{
    pid_t parent = getpid(), pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (ns != NULL && enter(ns) != 0) {
        fprintf(stderr, "setns(%s): %s\n", ns, strerror(errno));
        _exit(126);
    }
    int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    sl_test_execv(argv[0], argv);
    _exit(127);
}

int nn_if_bytes(const char *ifname, uint64_t *rx, uint64_t *tx)
{
    char line[512];
    size_t len = strlen(ifname);
    int found = -1;
    FILE *f = fopen("/proc/thread-self/net/dev", "r");
    if (f == NULL)
        return -1;
    while (found < 0 && fgets(line, sizeof line, f) != NULL) {
        char *p = line;
        unsigned long long r, t, skip;
        while (*p == ' ')
            p++;
        if (strncmp(p, ifname, len) != 0 || p[len] != ':')
            continue;
        /* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ... */
        if (sscanf(p + len + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &r, &skip, &skip,
                   &skip, &skip, &skip, &skip, &skip, &t) == 9) {
            *rx = r;
            *tx = t;
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* ---- periodic drivers ---------------------------------------------------------------------- */

struct nn_driver {
    char on_cmd[1024], off_cmd[1024];
    unsigned on_ms, off_ms, cycles;
    atomic_int stop;
    pthread_t thread;
};

/* Sleep @ms in short slices; 1 when asked to stop. */
static int nap(nn_driver *d, unsigned ms)
{
    for (unsigned slept = 0; slept < ms; slept += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        if (atomic_load(&d->stop))
            return 1;
        nanosleep(&ts, NULL);
    }
    return atomic_load(&d->stop);
}

static void *driver_main(void *arg)
{
    nn_driver *d = arg;
    while (!nap(d, d->off_ms)) {
        if (nn_sh("%s", d->on_cmd) != 0)
            fprintf(stderr, "netns driver: `%s` failed\n", d->on_cmd);
        d->cycles++;
        nap(d, d->on_ms);
        if (nn_sh("%s", d->off_cmd) != 0)
            fprintf(stderr, "netns driver: `%s` failed\n", d->off_cmd);
    }
    return NULL;
}

nn_driver *nn_driver_start(const char *on_cmd, unsigned on_ms, const char *off_cmd, unsigned off_ms)
{
    nn_driver *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    snprintf(d->on_cmd, sizeof d->on_cmd, "%s", on_cmd);
    snprintf(d->off_cmd, sizeof d->off_cmd, "%s", off_cmd);
    d->on_ms = on_ms;
    d->off_ms = off_ms;
    if (pthread_create(&d->thread, NULL, driver_main, d) != 0) {
        free(d);
        return NULL;
    }
    return d;
}

unsigned nn_driver_stop(nn_driver *d)
{
    unsigned cycles;
    if (d == NULL)
        return 0;
    atomic_store(&d->stop, 1);
    pthread_join(d->thread, NULL);
    nn_sh("%s", d->off_cmd); /* whatever phase it stopped in, the link is whole again */
    cycles = d->cycles;
    free(d);
    return cycles;
}

/* ---- fault counters ----------------------------------------------------------------------- */

unsigned long long nn_nft_counter(const char *ns, const char *table, const char *name)
{
    char out[128];
    nn_sh_read(out, sizeof out,
               "ip netns exec %s nft list counter inet %s %s 2>/dev/null | "
               "awk '/packets/ {for (i = 1; i < NF; i++) if ($i == \"packets\") print $(i + 1)}'",
               ns, table, name);
    return strtoull(out, NULL, 10);
}

unsigned long long nn_tbf_overlimits(const char *ns, const char *dev)
{
    char out[128];
    nn_sh_read(out, sizeof out,
               "tc -n %s -s qdisc show dev %s | "
               "awk '/overlimits/ {for (i = 1; i < NF; i++) if ($i == \"overlimits\") print "
               "$(i + 1)}'",
               ns, dev);
    return strtoull(out, NULL, 10);
}
