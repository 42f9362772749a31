/*
** broker_connect.c -- a run with an egress proxy: each connect(2) of the
** program is first shown to the listener (the spec's observe_connect), which
** records an IPv4 or IPv6 destination other than the proxy's own
** (res.connects), then lets the call continue. Such a connect fails in the
** kernel (Landlock allows only the proxy's port; the run's network namespace
** has only its loopback): the record is what lets the run say why and which
** field would have let the proxy reach it. Only stream sockets are recorded.
**
** The record is an observation, never a decision: the call continues
** (SECCOMP_USER_NOTIF_FLAG_CONTINUE) and the kernel decides it exactly as
** without the filter, so the time between reading the address and the call's
** own reading of it (a thread may change the bytes) can only make a record
** wrong, never let the call reach more.
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/seccomp.h>

/* The destination as "ADDRESS:PORT" ("[ADDRESS]:PORT" for IPv6) into out, or
** 0 when it is not one to record: another family, or the proxy itself. */
static int destination(const struct sockaddr_storage *sa, size_t len, int proxy_port, char *out,
                       size_t outlen)
{
  char host[INET6_ADDRSTRLEN];
  if (sa->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    int port = ntohs(in->sin_port);
    if (port == proxy_port && ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK) return 0;
    if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof host) == NULL) return 0;
    return snprintf(out, outlen, "%s:%d", host, port) < (int)outlen;
  }
  if (sa->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    int port = ntohs(in6->sin6_port);
    static const uint8_t mapped_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    if (port == proxy_port && memcmp(&in6->sin6_addr, mapped_loopback, 16) == 0) return 0;
    if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host) == NULL) return 0;
    return snprintf(out, outlen, "[%s]:%d", host, port) < (int)outlen;
  }
  return 0; /* AF_UNIX, AF_NETLINK, ...: not the network, not recorded */
}

/* Whether the caller's socket fd is a stream socket (TCP, what Landlock's
** connect rule and the proxy concern): a datagram socket's connect only names
** its peer (a resolver's, for one). Unknown (the descriptor cannot be taken)
** counts as a stream: the record only says more. */
static int is_stream(pid_t pid, int fd)
{
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return 1;
  int sock = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  close(pidfd);
  if (sock < 0) return 1;
  int type = 0;
  socklen_t tl = sizeof type;
  int stream = getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type == SOCK_STREAM;
  close(sock);
  return stream;
}

static void record(airlock_run *r, const char *dest)
{
  airlock_result *res = &r->res;
  res->connects_total++;
  for (size_t i = 0; i < res->nconnects; i++)
    if (strcmp(r->connects[i], dest) == 0) return;
  if (res->nconnects < AIRLOCK_CONNECTS_MAX)
    snprintf(r->connects[res->nconnects++], AIRLOCK_CONNECT_LEN, "%s", dest);
}

void broker_observe_connect(airlock_run *r, const struct seccomp_notif *n)
{
  /* connect(fd, addr, addrlen): the address read from the caller's memory,
  ** at most a sockaddr_storage of it (SECURITY: the length is the caller's). */
  struct sockaddr_storage sa;
  memset(&sa, 0, sizeof sa);
  uint64_t addr = n->data.args[1], len = (uint32_t)n->data.args[2];
  if (len > sizeof sa) len = sizeof sa;
  char mem[64], dest[AIRLOCK_CONNECT_LEN];
  snprintf(mem, sizeof mem, "/proc/%d/mem", (int)n->pid);
  int memfd = open(mem, O_RDONLY | O_CLOEXEC);
  /* SECURITY: read only while the notification is still pending (checked
  ** after), so a reused pid's memory is never taken for the caller's. */
  if (memfd >= 0 && len >= sizeof(sa_family_t) &&
      pread(memfd, &sa, (size_t)len, (off_t)addr) == (ssize_t)len &&
      ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &n->id) == 0 &&
      destination(&sa, (size_t)len, r->observe_connect, dest, sizeof dest) &&
      is_stream((pid_t)n->pid, (int)(uint32_t)n->data.args[0]) &&
      ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &n->id) == 0)
    record(r, dest);
  if (memfd >= 0) close(memfd);
  /* Executed now as the kernel would without the filter (ENOENT: the caller
  ** died meanwhile; nothing to answer). */
  struct seccomp_notif_resp resp = {
      .id = n->id, .val = 0, .error = 0, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
  (void)ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}
