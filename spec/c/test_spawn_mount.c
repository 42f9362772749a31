/*
** test_spawn_mount.c -- airlock_spawn's mount list (airlock_spawn_opts.mounts)
** as data: the checks that refuse a list before anything is made (too long, an
** unknown kind, a record without what its kind needs, more of a kind than a
** spawn may have, an overlay that is not bounded or not over the workspace),
** each with its message and its step code; and the step a
** spawn failed in, for the steps C alone can reach here.
*/
#define _GNU_SOURCE
#include "airlock.h"
#include "check.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>

#define PROTECT_MAX 128 /* protected paths a spawn may have (airlock.h, AIRLOCK_MOUNT_PROTECT) */

static const char *const true_argv[] = {"/bin/true", NULL};

/* Spawns with the given mounts (and mount namespace) and expects a refusal
** with errno e, step s and a message holding want. */
static void refused(const airlock_mount *m, size_t n, unsigned long ns, int e, airlock_spawn_step s,
                    const char *want, const char *what)
{
  airlock_spawn_opts o;
  airlock_child c;
  char err[512] = "";
  memset(&o, 0, sizeof o);
  o.argv = true_argv;
  o.stdin_fd = -1;
  o.namespaces = ns;
  o.mounts = m;
  o.nmounts = n;
  int rc = airlock_spawn(&o, &c, err, sizeof err);
  char msg[800];
  snprintf(msg, sizeof msg, "%s: rc %d, step %s, message '%s'", what, rc, airlock_spawn_step_name(c.step),
           err);
  CHECK_MSG(rc == -e && c.step == s && strstr(err, want) != NULL && c.pid == -1, msg);
  if (rc == 0) {
    waitpid(c.pid, NULL, 0);
    airlock_child_close(&c);
  }
}

static void test_list_checks(void)
{
  static airlock_mount many[AIRLOCK_MOUNTS_MAX + 1];
  for (size_t i = 0; i < AIRLOCK_MOUNTS_MAX + 1; i++)
    many[i] = (airlock_mount){.kind = AIRLOCK_MOUNT_VIEW_RO, .target = "/usr"};
  refused(many, AIRLOCK_MOUNTS_MAX + 1, CLONE_NEWNS, E2BIG, AIRLOCK_STEP_MOUNT, "at most 256 mounts",
          "too long");
  refused(NULL, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "mounts is NULL", "a count without a list");

  airlock_mount unknown[] = {{.kind = (airlock_mount_kind)99, .target = "/tmp"}};
  refused(unknown, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "mount 1 has an unknown kind (99)", "kind 99");
  airlock_mount zero[] = {{.kind = AIRLOCK_MOUNT_KEEP, .target = "/usr"}, {.target = "/tmp"}};
  refused(zero, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "mount 2 has an unknown kind (0)", "kind 0");

  airlock_mount no_target[] = {{.kind = AIRLOCK_MOUNT_TMPFS}};
  refused(no_target, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "mount 1 (tmpfs) has no target",
          "no target");
  airlock_mount no_source[] = {{.kind = AIRLOCK_MOUNT_ROOTFS, .target = "/"}};
  refused(no_source, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "mount 1 (rootfs) has no source",
          "no source");

  airlock_mount tmpfs[] = {{.kind = AIRLOCK_MOUNT_TMPFS, .target = "/tmp"}};
  refused(tmpfs, 1, 0, EINVAL, AIRLOCK_STEP_MOUNT, "a private tmpfs (/tmp) needs the mount namespace",
          "tmpfs without a mount namespace");
  airlock_mount big[] = {{.kind = AIRLOCK_MOUNT_TMPFS,
                          .target = "/tmp",
                          .size = "1234567890123456789012345678901234567890123456789012345678901234"}};
  refused(big, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "tmpfs size", "a size too long for the options");
  static airlock_mount tmpfs_many[40];
  for (size_t i = 0; i < 40; i++)
    tmpfs_many[i] = (airlock_mount){.kind = AIRLOCK_MOUNT_TMPFS, .target = "/tmp"};
  refused(tmpfs_many, 40, CLONE_NEWNS, E2BIG, AIRLOCK_STEP_MOUNT, "at most 32 private tmpfs", "40 tmpfs");

  airlock_mount two_ws[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp"},
                            {.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/var"}};
  refused(two_ws, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "at most one workspace", "two workspaces");
  airlock_mount root_ws[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/"}};
  refused(root_ws, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "a workspace must be an absolute directory",
          "the workspace /");
  airlock_mount two_roots[] = {{.kind = AIRLOCK_MOUNT_ROOTFS, .source = "/usr"},
                               {.kind = AIRLOCK_MOUNT_ROOTFS, .source = "/var"}};
  refused(two_roots, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "at most one root file system", "two roots");

  airlock_mount keeps[5];
  for (size_t i = 0; i < 5; i++) keeps[i] = (airlock_mount){.kind = AIRLOCK_MOUNT_KEEP, .target = "/usr"};
  refused(keeps, 5, CLONE_NEWNS, E2BIG, AIRLOCK_STEP_MOUNT, "more than four kept directories", "five kept");
  airlock_mount rel_keep[] = {{.kind = AIRLOCK_MOUNT_KEEP, .target = "usr"}};
  refused(rel_keep, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "a kept directory must be an absolute path",
          "a relative kept directory");

  airlock_mount rel_view[] = {{.kind = AIRLOCK_MOUNT_VIEW_RW, .target = "/"}};
  refused(rel_view, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT,
          "a view path must be an absolute path other than /", "the view path /");
  airlock_mount gone[] = {{.kind = AIRLOCK_MOUNT_VIEW_RO, .target = "/nonexistent-airlock-view-path"}};
  refused(gone, 1, CLONE_NEWNS, ENOENT, AIRLOCK_STEP_MOUNT, "none of the view's paths exists",
          "a view of nothing");
  airlock_mount view[] = {{.kind = AIRLOCK_MOUNT_VIEW_RO, .target = "/usr"}};
  refused(view, 1, 0, EINVAL, AIRLOCK_STEP_MOUNT, "a view needs the mount namespace", "a view without one");
}

/* Protected paths are tool.protect's: their failures carry the protect step. */
static void test_protect_checks(void)
{
  static airlock_mount m[PROTECT_MAX + 2];
  m[0] = (airlock_mount){.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"};
  for (size_t i = 1; i < PROTECT_MAX + 2; i++)
    m[i] = (airlock_mount){.kind = AIRLOCK_MOUNT_PROTECT, .target = "/tmp/ws/x"};
  refused(m, PROTECT_MAX + 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_PROTECT,
          "tool.protect: protected paths must be at most 128", "129 protected paths");
  airlock_mount outside[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
                             {.kind = AIRLOCK_MOUNT_PROTECT, .target = "/tmp/wsx/y"}};
  refused(outside, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_PROTECT, "beneath the workspace (/tmp/wsx/y)",
          "a protected path outside the workspace");
  airlock_mount alone[] = {{.kind = AIRLOCK_MOUNT_PROTECT, .target = "/tmp/ws/y"}};
  refused(alone, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_PROTECT, "beneath the workspace", "no workspace");
}

/* An overlay record: a bounded size and file count, once, over the workspace. */
static void test_overlay_checks(void)
{
  const char *need = "an overlay needs a size (digits, then k, m or g) and a number of files";
  airlock_mount no_size[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
                             {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .inodes = 10}};
  refused(no_size, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, need, "an overlay without a size");
  airlock_mount bad_size[] = {
      {.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
      {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "12x", .inodes = 10}};
  refused(bad_size, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, need, "an overlay of 12x");
  airlock_mount pct[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
                         {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "50%", .inodes = 10}};
  refused(pct, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, need, "an overlay of half the memory");
  airlock_mount no_files[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
                              {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "1m"}};
  refused(no_files, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, need, "an overlay without a file count");
  airlock_mount two[] = {{.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
                         {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "1m", .inodes = 10},
                         {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "1m", .inodes = 10}};
  refused(two, 3, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "at most one overlay", "two overlays");
  airlock_mount elsewhere[] = {
      {.kind = AIRLOCK_MOUNT_WORKSPACE, .target = "/tmp/ws"},
      {.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/other", .size = "1m", .inodes = 10}};
  refused(elsewhere, 2, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "its target must be the workspace's",
          "an overlay of another directory");
  airlock_mount alone[] = {{.kind = AIRLOCK_MOUNT_OVERLAY, .target = "/tmp/ws", .size = "1m", .inodes = 10}};
  refused(alone, 1, CLONE_NEWNS, EINVAL, AIRLOCK_STEP_MOUNT, "its target must be the workspace's",
          "an overlay without a workspace");
}

/* The step of a spawn that failed before the list (options) and in the child
** (exec), and none for one that started. */
static void test_steps(void)
{
  airlock_spawn_opts o;
  airlock_child c;
  char err[512];
  memset(&o, 0, sizeof o);
  o.stdin_fd = -1;
  int rc = airlock_spawn(&o, &c, err, sizeof err);
  CHECK(rc == -EINVAL && c.step == AIRLOCK_STEP_OPTIONS && strstr(err, "no program given"));

  static const char *const missing[] = {"/nonexistent/airlock-test-program", NULL};
  o.argv = missing;
  rc = airlock_spawn(&o, &c, err, sizeof err);
  CHECK_MSG(rc == -ENOENT && c.step == AIRLOCK_STEP_EXEC && strncmp(err, "exec /nonexistent", 17) == 0, err);

  o.argv = true_argv;
  rc = airlock_spawn(&o, &c, err, sizeof err);
  CHECK_MSG(rc == 0 && c.step == AIRLOCK_STEP_NONE, err);
  if (rc == 0) {
    int st = -1;
    waitpid(c.pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    airlock_child_close(&c);
  }
}

static void test_names(void)
{
  CHECK(strcmp(airlock_spawn_step_name(AIRLOCK_STEP_CLONE), "clone") == 0);
  CHECK(strcmp(airlock_spawn_step_name(AIRLOCK_STEP_CGROUP), "cgroup") == 0);
  CHECK(strcmp(airlock_spawn_step_name(AIRLOCK_STEP_PROTECT), "protect") == 0);
  CHECK(strcmp(airlock_spawn_step_name(AIRLOCK_STEP_WATCH), "watch") == 0);
  CHECK(strcmp(airlock_spawn_step_name(AIRLOCK_STEP_COUNT_), "unknown") == 0);
  CHECK(strcmp(airlock_spawn_step_name((airlock_spawn_step)-1), "unknown") == 0);
  CHECK(strcmp(airlock_mount_kind_name(AIRLOCK_MOUNT_TMPFS), "tmpfs") == 0);
  CHECK(strcmp(airlock_mount_kind_name(AIRLOCK_MOUNT_VIEW_RW), "view_rw") == 0);
  CHECK(strcmp(airlock_mount_kind_name(AIRLOCK_MOUNT_OVERLAY), "overlay") == 0);
  CHECK(strcmp(airlock_mount_kind_name((airlock_mount_kind)0), "unknown") == 0);
  CHECK(strcmp(airlock_mount_kind_name(AIRLOCK_MOUNT_KIND_COUNT_), "unknown") == 0);
}

int main(void)
{
  test_list_checks();
  test_protect_checks();
  test_overlay_checks();
  test_steps();
  test_names();
  return check_summary();
}
