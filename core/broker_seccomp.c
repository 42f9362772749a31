/*
** broker_seccomp.c -- the seccomp listener of a confined program: a call its
** filter refuses waits in the kernel, never executed, and is answered here
** with an errno (AIRLOCK_REFUSE_CHOSEN, counted in the result) or ends the run
** with cause seccomp, the call named.
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/seccomp.h>

/* Counts a refused call, naming the first AIRLOCK_REFUSALS_MAX distinct ones. */
static void note_refusal(airlock_run *r, int nr, int err)
{
  airlock_result *res = &r->res;
  res->refused_total++;
  for (size_t i = 0; i < res->nrefused; i++)
    if (r->refused[i].nr == nr && r->refused[i].err == err) {
      r->refused[i].count++;
      return;
    }
  if (res->nrefused < AIRLOCK_REFUSALS_MAX) r->refused[res->nrefused++] = (airlock_refusal){nr, err, 1};
}

/* A confined program made a call its filter refuses (the spawner handed the
** filter's listener over). The call waits in the kernel, never executed. With
** a chosen errno it fails with that errno and is counted; in kill mode the
** run ends with cause seccomp, the call named, and the caller is killed even
** if it left the process group. */
void broker_on_notify(airlock_run *r, uint32_t events)
{
  if (events & EPOLLIN) {
    struct seccomp_notif n;
    memset(&n, 0, sizeof n);
    if (ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_RECV, &n) == 0) {
      if (r->observe && airlock_observed_call_find(n.data.nr)) {
        broker_observe(r, &n);
        return;
      }
      if (r->observe_connect && n.data.nr == SYS_connect) { /* sent only where the filter allows it */
        broker_observe_connect(r, &n);
        return;
      }
      if (r->refuse_chosen) {
        int e = airlock_refusal_errno(n.data.nr);
        struct seccomp_notif_resp resp = {.id = n.id, .val = 0, .error = -e, .flags = 0};
        /* ENOENT: the caller was killed meanwhile; nothing to answer. */
        if (ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_SEND, &resp) == 0 || errno == ENOENT)
          note_refusal(r, n.data.nr, e);
        return;
      }
      char name[64];
      /* A pidfd for the caller, taken while the notification is still pending
      ** (checked after), so the pid cannot have been reused. The run's group
      ** dies first: killing the caller alone first would let its parent see it
      ** die and run on (a shell's next command) before its own SIGKILL. */
      int pfd = (int)syscall(SYS_pidfd_open, (pid_t)n.pid, 0);
      if (pfd >= 0 && ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &n.id) != 0) {
        close(pfd);
        pfd = -1;
      }
      broker_end_with(r, AIRLOCK_CAUSE_SECCOMP,
                      "killed by seccomp: the program tried system call %s (number %d), "
                      "which this policy does not allow",
                      airlock_syscall_name(n.data.nr, name, sizeof name), n.data.nr);
      if (pfd >= 0) { /* one that left the process group (setsid) goes too */
        syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
        close(pfd);
      }
      return;
    }
    if (errno == ENOENT || errno == EINTR) return; /* withdrawn: its caller died */
  } else if (!(events & (EPOLLHUP | EPOLLERR))) {
    return;
  }
  /* No process is left under the filter, or the listener failed: stop
  ** watching (a level-triggered HUP would wake every step). */
  broker_watch_del(r, W_NOTIFY, r->c.notify);
  close(r->c.notify);
  r->c.notify = -1;
}
