/*
** fd_send.h -- one descriptor handed to the other end of a unix socket, with
** one byte that says what it is. For the spawner's child, which may make raw
** system calls only (nothing allocated; under a seccomp filter, sendmsg
** alone): the workspace's overlay layer, the egress listener, the seccomp
** listener.
*/
#ifndef AIRLOCK_FD_SEND_H
#define AIRLOCK_FD_SEND_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* sendmsg(sock, {byte, SCM_RIGHTS fd}, flags) as a raw system call.
** Returns 0, or -1 with errno set (a short send is EIO). */
static inline int airlock_fd_send(int sock, int fd, char byte, int flags)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } cm;
  memset(&cm, 0, sizeof cm);
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  long n = syscall(SYS_sendmsg, sock, &mh, flags);
  if (n == 1) return 0;
  if (n >= 0) errno = EIO;
  return -1;
}

#endif
