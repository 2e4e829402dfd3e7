/* sl_pg.c - a throwaway PostgreSQL cluster for tests (sl_pg.h). */
#include "sl_pg.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <pwd.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void say(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

/* Runs @argv (as the postgres user when we are root), output to @dir/cmd.log; its status. */
static int run(const sl_test_pg *pg, char *const *argv)
{
    char *full[24], log[128];
    size_t n = 0;
    posix_spawn_file_actions_t fa;
    pid_t pid;
    int status = -1;
    if (geteuid() == 0) {
        full[n++] = "runuser";
        full[n++] = "-u";
        full[n++] = "postgres";
        full[n++] = "--";
    }
    for (size_t i = 0; argv[i] != NULL && n < 23; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    snprintf(log, sizeof log, "%s/cmd.log", pg->dir);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawnp(&pid, full[0], &fa, NULL, full, environ) == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    posix_spawn_file_actions_destroy(&fa);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int start_server(sl_test_pg *pg)
{
    char data[128], log[128], opts[200], ctl[300];
    snprintf(data, sizeof data, "%s/data", pg->dir);
    snprintf(log, sizeof log, "%s/server.log", pg->dir);
    snprintf(ctl, sizeof ctl, "%s/pg_ctl", pg->bin);
    /* the socket in the folder, no TCP; fsync stays on (the crash tests rely on it) */
    snprintf(opts, sizeof opts, "-k %s -c listen_addresses= -c max_connections=100", pg->dir);
    {
        char *argv[] = {ctl, "-D", data, "-l", log, "-w", "-t", "60", "-o", opts, "start", NULL};
        if (run(pg, argv) != 0)
            return -1;
    }
    pg->running = 1;
    return 0;
}

static int stop_server(sl_test_pg *pg, const char *mode)
{
    char data[128], ctl[300];
    char *argv[] = {ctl, "-D", data, "-m", (char *)mode, "-w", "-t", "60", "stop", NULL};
    if (!pg->running)
        return 0;
    snprintf(data, sizeof data, "%s/data", pg->dir);
    snprintf(ctl, sizeof ctl, "%s/pg_ctl", pg->bin);
    pg->running = 0;
    return run(pg, argv);
}

int sl_test_pg_start(sl_test_pg *pg, char *why, size_t whycap)
{
    glob_t g;
    char initdb[300], data[128];
    memset(pg, 0, sizeof *pg);
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        say(why, whycap,
            "PostgreSQL is not installed (Debian's postgresql package: "
            "/usr/lib/postgresql/*/bin/initdb)");
        return -1;
    }
    /* the newest version: glob sorts, and versions here are two digits */
    snprintf(pg->bin, sizeof pg->bin, "%.*s", (int)(strlen(g.gl_pathv[g.gl_pathc - 1]) - 7),
             g.gl_pathv[g.gl_pathc - 1]);
    globfree(&g);
    snprintf(pg->dir, sizeof pg->dir, "/tmp/slpg.XXXXXX");
    if (mkdtemp(pg->dir) == NULL) {
        say(why, whycap, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL || chown(pg->dir, pw->pw_uid, pw->pw_gid) != 0) {
            say(why, whycap, "running as root, and no \"postgres\" user to run PostgreSQL as");
            rmdir(pg->dir);
            return -1;
        }
    }
    snprintf(initdb, sizeof initdb, "%s/initdb", pg->bin);
    snprintf(data, sizeof data, "%s/data", pg->dir);
    {
        char *argv[] = {initdb,
                        "-D",
                        data,
                        "-A",
                        "trust",
                        "-U",
                        "starling",
                        "-E",
                        "UTF8",
                        "--no-sync",
                        "--no-instructions",
                        NULL};
        if (run(pg, argv) != 0) {
            say(why, whycap, "initdb failed (see %s/cmd.log)", pg->dir);
            return -1;
        }
    }
    if (start_server(pg) != 0) {
        say(why, whycap, "the server did not start (see %s/server.log)", pg->dir);
        return -1;
    }
    snprintf(pg->conninfo, sizeof pg->conninfo, "host=%s user=starling dbname=postgres", pg->dir);
    return 0;
}

int sl_test_pg_restart(sl_test_pg *pg, int immediate)
{
    if (stop_server(pg, immediate ? "immediate" : "fast") != 0)
        return -1;
    return start_server(pg);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path); /* best effort */
    return 0;
}

void sl_test_pg_stop(sl_test_pg *pg)
{
    if (pg->dir[0] == '\0')
        return;
    (void)stop_server(pg, "fast");
    nftw(pg->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    pg->dir[0] = '\0';
}
