/* sl_faultvfs.c - fault-injecting SQLite VFS shim (after SQLite's own test VFSes). */
#include <sqlite3.h>
#include <stdatomic.h>
#include <string.h>

#include "sl_faultvfs.h"

typedef struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* follows this struct in the same allocation */
} fault_file;

static sqlite3_vfs fault_vfs;
static sqlite3_vfs *real_vfs;
static _Atomic long counters[2], armed_at[2], injected;
static _Atomic int armed_err[2];

void sl_faultvfs_arm(int what, long nth, int err)
{
    counters[what] = 0;
    armed_at[what] = nth;
    armed_err[what] = err;
    injected = 0;
}

void sl_faultvfs_disarm(void)
{
    for (int i = 0; i < 2; i++) {
        armed_at[i] = 0;
        counters[i] = 0;
    }
}

long sl_faultvfs_injected(void)
{
    return injected;
}

static int fault_for(int what)
{
    long n = atomic_fetch_add(&counters[what], 1) + 1;
    long at = armed_at[what];
    if (at > 0 && n >= at) {
        injected++;
        return armed_err[what];
    }
    return SQLITE_OK;
}

static int f_close(sqlite3_file *f)
{
    return ((fault_file *)f)->real->pMethods->xClose(((fault_file *)f)->real);
}
static int f_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    return ((fault_file *)f)->real->pMethods->xRead(((fault_file *)f)->real, p, n, off);
}
static int f_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    int rc = fault_for(SL_FAULT_WRITE);
    if (rc != SQLITE_OK)
        return rc;
    return ((fault_file *)f)->real->pMethods->xWrite(((fault_file *)f)->real, p, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return ((fault_file *)f)->real->pMethods->xTruncate(((fault_file *)f)->real, size);
}
static int f_sync(sqlite3_file *f, int flags)
{
    int rc = fault_for(SL_FAULT_SYNC);
    if (rc != SQLITE_OK)
        return rc;
    return ((fault_file *)f)->real->pMethods->xSync(((fault_file *)f)->real, flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return ((fault_file *)f)->real->pMethods->xFileSize(((fault_file *)f)->real, size);
}
static int f_lock(sqlite3_file *f, int l)
{
    return ((fault_file *)f)->real->pMethods->xLock(((fault_file *)f)->real, l);
}
static int f_unlock(sqlite3_file *f, int l)
{
    return ((fault_file *)f)->real->pMethods->xUnlock(((fault_file *)f)->real, l);
}
static int f_check(sqlite3_file *f, int *out)
{
    return ((fault_file *)f)->real->pMethods->xCheckReservedLock(((fault_file *)f)->real, out);
}
static int f_control(sqlite3_file *f, int op, void *arg)
{
    return ((fault_file *)f)->real->pMethods->xFileControl(((fault_file *)f)->real, op, arg);
}
static int f_sector(sqlite3_file *f)
{
    return ((fault_file *)f)->real->pMethods->xSectorSize(((fault_file *)f)->real);
}
static int f_devchar(sqlite3_file *f)
{
    return ((fault_file *)f)->real->pMethods->xDeviceCharacteristics(((fault_file *)f)->real);
}
static int f_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
    return ((fault_file *)f)->real->pMethods->xShmMap(((fault_file *)f)->real, pg, sz, ext, pp);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return ((fault_file *)f)->real->pMethods->xShmLock(((fault_file *)f)->real, off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f)
{
    ((fault_file *)f)->real->pMethods->xShmBarrier(((fault_file *)f)->real);
}
static int f_shm_unmap(sqlite3_file *f, int del)
{
    return ((fault_file *)f)->real->pMethods->xShmUnmap(((fault_file *)f)->real, del);
}

static const sqlite3_io_methods fault_methods = {
    2,          f_close,       f_read,      f_write,   f_truncate, f_sync,    f_size,
    f_lock,     f_unlock,      f_check,     f_control, f_sector,   f_devchar, f_shm_map,
    f_shm_lock, f_shm_barrier, f_shm_unmap, NULL,      NULL,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    fault_file *ff = (fault_file *)f;
    int rc;
    (void)vfs;
    ff->real = (sqlite3_file *)(ff + 1);
    rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out);
    ff->base.pMethods = ff->real->pMethods ? &fault_methods : NULL;
    return rc;
}

static int v_delete(sqlite3_vfs *v, const char *n, int s)
{
    (void)v;
    return real_vfs->xDelete(real_vfs, n, s);
}
static int v_access(sqlite3_vfs *v, const char *n, int f, int *o)
{
    (void)v;
    return real_vfs->xAccess(real_vfs, n, f, o);
}
static int v_full(sqlite3_vfs *v, const char *n, int sz, char *o)
{
    (void)v;
    return real_vfs->xFullPathname(real_vfs, n, sz, o);
}
static int v_random(sqlite3_vfs *v, int n, char *o)
{
    (void)v;
    return real_vfs->xRandomness(real_vfs, n, o);
}
static int v_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return real_vfs->xSleep(real_vfs, us);
}
static int v_time(sqlite3_vfs *v, double *t)
{
    (void)v;
    return real_vfs->xCurrentTime(real_vfs, t);
}
static int v_error(sqlite3_vfs *v, int n, char *o)
{
    (void)v;
    return real_vfs->xGetLastError(real_vfs, n, o);
}
static int v_time64(sqlite3_vfs *v, sqlite3_int64 *t)
{
    (void)v;
    return real_vfs->xCurrentTimeInt64(real_vfs, t);
}

int sl_faultvfs_register(void)
{
    if (real_vfs != NULL)
        return SQLITE_OK;
    real_vfs = sqlite3_vfs_find(NULL);
    memset(&fault_vfs, 0, sizeof fault_vfs);
    fault_vfs.iVersion = 2;
    fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
    fault_vfs.mxPathname = real_vfs->mxPathname;
    fault_vfs.zName = SL_FAULTVFS_NAME;
    fault_vfs.xOpen = v_open;
    fault_vfs.xDelete = v_delete;
    fault_vfs.xAccess = v_access;
    fault_vfs.xFullPathname = v_full;
    fault_vfs.xRandomness = v_random;
    fault_vfs.xSleep = v_sleep;
    fault_vfs.xCurrentTime = v_time;
    fault_vfs.xGetLastError = v_error;
    fault_vfs.xCurrentTimeInt64 = v_time64;
    return sqlite3_vfs_register(&fault_vfs, 0);
}
