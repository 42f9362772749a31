/*
** ns_holder.h -- (internal) a helper process that makes new namespaces and
** holds them while the parent opens them (/proc/PID/ns/...) or maps them.
*/
#ifndef AIRLOCK_NS_HOLDER_H
#define AIRLOCK_NS_HOLDER_H

#include <stddef.h>
#include <sys/types.h>

/* Forks a helper that calls unshare(flags) and waits. Returns its pid once it
** has unshared, or -errno with a message in err (prefixed by what, "netns").
** The caller ends it with airlock_ns_holder_end_ when done with it. */
pid_t airlock_ns_holder_start_(int flags, const char *what, char *err, size_t errlen);
/* Kills and reaps the helper. */
void airlock_ns_holder_end_(pid_t pid);

#endif
