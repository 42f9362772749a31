/*
** landlock_compat.h -- private to core/: the Landlock constants and structures
** this code uses, with their upstream values, because the installed
** <linux/landlock.h> may predate the kernel.
*/
#ifndef AIRLOCK_LANDLOCK_COMPAT_H
#define AIRLOCK_LANDLOCK_COMPAT_H

#include <stdint.h>
#include <linux/landlock.h>

/* The installed <linux/landlock.h> may predate the kernel (Debian 12 ships the
** ABI 1 header on a kernel with ABI 7): every constant past ABI 1 is defined
** here with its upstream value, and the ruleset attribute is our own struct
** laid out like the current upstream one. */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#ifndef LANDLOCK_CREATE_RULESET_ERRATA
#define LANDLOCK_CREATE_RULESET_ERRATA (1U << 1)
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13) /* ABI 2 */
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0) /* ABI 4 */
#endif
#ifndef LANDLOCK_ACCESS_NET_CONNECT_TCP
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1) /* ABI 4 */
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1) /* ABI 6 */
#endif

/* The newest ABI whose rights this file knows. ABI 7 added audit logging
** flags only, no access right, so a kernel at 7 or later is fully covered by
** the ABI 6 rights; a newer kernel's extra rights are reported as unhandled. */
#define LL_ABI_KNOWN 7

struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net; /* ABI 4 */
  uint64_t scoped;             /* ABI 6 */
};

/* Why Landlock is missing, for airlock_landlock_abi's -EOPNOTSUPP or other
** -errno, with what to do about it. */
const char *ll_missing(int abi);

#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef LANDLOCK_ACCESS_FS_EXECUTE
#define LANDLOCK_ACCESS_FS_EXECUTE (1ULL << 0)
#endif
/* Rule types: upstream enum landlock_rule_type (PATH_BENEATH = 1, NET_PORT = 2, ABI 4). */
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT     2

struct ll_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

struct ll_net_port_attr {
  uint64_t allowed_access;
  uint64_t port;
};

#endif
