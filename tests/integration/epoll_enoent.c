/*
 * epoll_enoent.c - an LD_PRELOAD shim for test_api_server's test_quiesce_race: libmicrohttpd's
 * MHD_quiesce_daemon removes the listening socket from each worker's epoll set from the thread
 * that quiesces, and aborts when a removal fails, which a worker that removes it first makes
 * happen (ENOENT; api/server/daemon.c, quiesce()). Here every other removal the process's main
 * thread asks for (the first, the third, ...) fails with ENOENT without removing anything, as
 * if a worker had been quicker; the next one goes through. The coordinator must survive both
 * a certificate reload (SIGHUP) and its SIGTERM under it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    static int (*real)(int, int, int, struct epoll_event *);
    static int main_dels;
    if (real == NULL)
        *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (op == EPOLL_CTL_DEL && (pid_t)syscall(SYS_gettid) == getpid() && main_dels++ % 2 == 0) {
        errno = ENOENT; /* the main thread alone: no race on the count */
        return -1;
    }
    return real(epfd, op, fd, event);
}
