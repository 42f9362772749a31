/*
** ns_holder.h -- (internal) a helper process that makes new namespaces and
** holds them while the parent opens them (/proc/PID/ns/...) or maps them.
*/
#ifndef AIRLOCK_NS_HOLDER_H
#define AIRLOCK_NS_HOLDER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;   /* the helper, or -1 */
  void *stack; /* its stack (it shares the parent's memory), or NULL */
} airlock_ns_holder;

/* Starts a helper that calls unshare(flags) and waits. Returns 0 once it
** has unshared (h->pid is its pid), or -errno with a message in err
** (prefixed by what, "netns"). The caller ends it with
** airlock_ns_holder_end_ when done with it (on failure it is already ended). */
int airlock_ns_holder_start_(airlock_ns_holder *h, int flags, const char *what, char *err, size_t errlen);
/* Kills and reaps the helper, and frees its stack. */
void airlock_ns_holder_end_(airlock_ns_holder *h);

#endif
