/* status.c - names and messages of project statuses, from SL_STATUS_MAP. */
#include <errno.h>

#include "starling/common.h"

const char *sl_strerror(int status)
{
    switch (status) {
    case SL_OK:
        return "ok";
#define SL__STATUS_MSG(name, value, msg) \
    case SL_##name:                      \
        return msg;
        SL_STATUS_MAP(SL__STATUS_MSG)
#undef SL__STATUS_MSG
    default:
        return "unknown status";
    }
}

const char *sl_errname(int status)
{
    switch (status) {
    case SL_OK:
        return "SL_OK";
#define SL__STATUS_NAME(name, value, msg) \
    case SL_##name:                       \
        return "SL_" #name;
        SL_STATUS_MAP(SL__STATUS_NAME)
#undef SL__STATUS_NAME
    default:
        return "SL_UNKNOWN";
    }
}

int sl_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return SL_OK;
    case ENOMEM:
        return SL_ENOMEM;
    case EINVAL:
        return SL_EINVAL;
    case ERANGE:
        return SL_ERANGE;
    case ENOENT:
    case ENOTDIR:
        return SL_ENOENT;
    case EEXIST:
        return SL_EEXIST;
    case ENOSPC:
#ifdef EDQUOT
    case EDQUOT:
#endif
    case EFBIG:
        return SL_ENOSPC;
    case ETIMEDOUT:
        return SL_ETIMEDOUT;
    case EBUSY:
    case EAGAIN:
        return SL_EBUSY;
    case EACCES:
    case EPERM:
    case EROFS:
        return SL_EPERM;
    default:
        return SL_EIO;
    }
}
