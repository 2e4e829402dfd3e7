/* sl_faultvfs.h - a SQLite VFS shim that fails the N-th write or sync (tests only). */
#ifndef SL_FAULTVFS_H
#define SL_FAULTVFS_H

#define SL_FAULTVFS_NAME "faultvfs"

enum { SL_FAULT_WRITE = 0, SL_FAULT_SYNC = 1 };

/* Register the VFS (once) on top of the default one. Returns SQLITE_OK. */
int sl_faultvfs_register(void);

/* From now on, fail the @nth call (1-based) of @what with SQLite code @err,
 * and every later call of that kind until disarmed (a device that failed
 * stays failed). */
void sl_faultvfs_arm(int what, long nth, int err);

/* Stop failing; reset the counters. */
void sl_faultvfs_disarm(void);

/* How many faults were injected since the last arm. */
long sl_faultvfs_injected(void);

#endif /* SL_FAULTVFS_H */
