/*
 * starling/api.h - the REST protocol, both ends (libmicrohttpd server, libcurl client).
 *
 * Not implemented yet (issue 7). This header declares nothing, so that no
 * caller can link against behaviour that does not exist.
 */
#ifndef STARLING_API_H
#define STARLING_API_H

#include "starling/common.h"

#endif /* STARLING_API_H */
