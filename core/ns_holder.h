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
  int ready;   /* begun, not yet ready: the pipe it says how unshare went on; else -1 */
  int killed;  /* let go (airlock_ns_holder_kill_), not yet reaped */
} airlock_ns_holder;

/* A helper that calls unshare(flags) and waits, in two halves, so that
** several helpers unshare at once (a new namespace is a fraction of a
** millisecond of the kernel's time): begin starts it, ready waits until it
** has unshared (h->pid is its pid). Each returns 0, or -errno with a
** message in err (prefixed by what, "netns"), the helper then already ended.
** The caller ends it with airlock_ns_holder_end_ when done with it. */
int airlock_ns_holder_begin_(airlock_ns_holder *h, int flags, const char *what, char *err, size_t errlen);
int airlock_ns_holder_ready_(airlock_ns_holder *h, const char *what, char *err, size_t errlen);
/* Kills and reaps the helper, and frees its stack. */
void airlock_ns_holder_end_(airlock_ns_holder *h);
/* Kills it without waiting: its namespace, opened, outlives it. A helper's
** death takes a fifth of a millisecond to be reaped; several let go first
** and ended afterwards die at once. */
void airlock_ns_holder_kill_(airlock_ns_holder *h);

/* As root: the run's and the idmap's user namespaces (identity.c), made now
** if not made yet, both helpers at once, in three steps so that a caller's
** own helper runs alongside: begin starts the helpers, take waits for them,
** writes their maps, opens and caches each namespace and lets the helpers
** go, end reaps them. A failure is cached for airlock_identity_userns to
** report. */
typedef struct {
  airlock_ns_holder h[2];
  int begun[2];
} airlock_identity_batch_;
void airlock_identity_begin_(airlock_identity_batch_ *b, int run, int idmap);
void airlock_identity_take_(airlock_identity_batch_ *b);
void airlock_identity_end_(airlock_identity_batch_ *b);
/* All three, for both namespaces (root only; else nothing). */
void airlock_identity_prepare_(void);

#endif
