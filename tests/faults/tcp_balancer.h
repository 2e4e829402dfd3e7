/*
 * tcp_balancer.h - a TCP load balancer for tests: connections to its
 * loopback port go to its backends (loopback ports) in turn; a backend that
 * refuses the connection (killed, restarting) is skipped for the next one,
 * as a Kubernetes Service or HAProxy would. Bytes are copied both ways
 * until either side closes.
 */
#ifndef TCP_BALANCER_H
#define TCP_BALANCER_H

#include <stddef.h>

typedef struct tcp_balancer tcp_balancer;

/* Start one on a free loopback port (*@port) over @n backend ports; NULL on failure. */
tcp_balancer *tb_start(const int *backends, size_t n, int *port);

/* Stop accepting, close every connection, free. */
void tb_stop(tcp_balancer *b);

#endif /* TCP_BALANCER_H */
