/*
** lprobe.c -- airlock.core.probe(): what this kernel and privilege level can
** enforce (airlock_probe in core/confine.h), as a Lua table for `airlock probe`.
*/
#include "lbinding.h"
#include "confine.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>

/* Pushes { ok = boolean, detail = string } and stores it as t[name] (t on top). */
static void set_entry(lua_State *L, const char *name, int ok, const char *detail)
{
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "ok");
  lua_pushstring(L, detail);
  lua_setfield(L, -2, "detail");
  lua_setfield(L, -2, name);
}

/* An entry for a "works" field: 1, or -errno saying why not. what names the call. */
static void set_works(lua_State *L, const char *name, int v, const char *what)
{
  char detail[192];
  if (v == 1)
    snprintf(detail, sizeof detail, "%s works", what);
  else
    snprintf(detail, sizeof detail, "%s: %s", what, v < 0 ? airlock_strerror(-v) : "not available");
  set_entry(L, name, v == 1, detail);
}

static void set_landlock(lua_State *L, int abi)
{
  char detail[192];
  if (abi >= 1)
    snprintf(detail, sizeof detail, "ABI %d", abi);
  else if (abi == -EOPNOTSUPP)
    snprintf(detail, sizeof detail,
             "built in but disabled at boot (not in lsm=): "
             "landlock_create_ruleset: %s",
             airlock_strerror(EOPNOTSUPP));
  else if (abi == -ENOSYS)
    snprintf(detail, sizeof detail, "kernel without Landlock: landlock_create_ruleset: %s",
             airlock_strerror(ENOSYS));
  else
    snprintf(detail, sizeof detail, "landlock_create_ruleset: %s", airlock_strerror(abi < 0 ? -abi : EINVAL));
  set_entry(L, "landlock", abi >= 1, detail);
  lua_pushinteger(L, abi >= 1 ? abi : 0);
  lua_setfield(L, -2, "landlock_abi");
}

/* Why cgroup2 is not delegated: the probe only says yes or no. */
static void set_cgroup2(lua_State *L, int delegated)
{
  struct statfs sf;
  const char *detail;
  if (delegated == 1)
    detail = "/sys/fs/cgroup is cgroup2 and the current cgroup is writable";
  else if (statfs("/sys/fs/cgroup", &sf) != 0)
    detail = "/sys/fs/cgroup is not mounted";
  else if (sf.f_type != 0x63677270 /* CGROUP2_SUPER_MAGIC */)
    detail = "/sys/fs/cgroup is not cgroup2 (cgroup v1 or hybrid hierarchy)";
  else
    detail = "cgroup2, but the current cgroup or its cgroup.procs is not writable";
  set_entry(L, "cgroup2_delegated", delegated == 1, detail);
}

/* airlock.core.pids_cgroup([controller]) -> the directory runs' cgroups of
** controller ("pids" (default), "memory", "cpu", "cpuacct") go in, or nil, why
** (what to change). */
int airlock_l_pids_cgroup(lua_State *L)
{
  static const char *const names[] = {"pids", "memory", "cpu", "cpuacct", NULL};
  int c = luaL_checkoption(L, 1, "pids", names);
  char where[512], why[512];
  int rc = airlock_cgroup_probe_controller(c, where, sizeof where, why, sizeof why);
  if (rc < 0) { /* why already starts "cgroup: " */
    lua_pushnil(L);
    lua_pushstring(L, why);
    lua_pushinteger(L, -rc);
    return 3;
  }
  lua_pushstring(L, where);
  return 1;
}

/* airlock.core.probe() -> table (see probe.lua for the fields), or nil, message, errno. */
int airlock_l_probe(lua_State *L)
{
  airlock_probe_report r;
  int rc = airlock_probe(&r);
  if (rc < 0) return airlock_l_fail(L, "probe", airlock_strerror(-rc), -rc);

  /* Without privilege the spawner adds CLONE_NEWUSER to gain the capability the
  ** other namespaces need, and so does the probe after an EPERM. */
  const char *with_user = r.is_root ? "" : "CLONE_NEWUSER|";
  static const struct {
    const char *key, *flag;
    size_t off;
  } ns[] = {
      {"net_ns", "CLONE_NEWNET", offsetof(airlock_probe_report, net_ns)},
      {"pid_ns", "CLONE_NEWPID", offsetof(airlock_probe_report, pid_ns)},
      {"mount_ns", "CLONE_NEWNS", offsetof(airlock_probe_report, mount_ns)},
      {"ipc_ns", "CLONE_NEWIPC", offsetof(airlock_probe_report, ipc_ns)},
      {"uts_ns", "CLONE_NEWUTS", offsetof(airlock_probe_report, uts_ns)},
      {"cgroup_ns", "CLONE_NEWCGROUP", offsetof(airlock_probe_report, cgroup_ns)},
  };

  lua_createtable(L, 0, 20);
  set_landlock(L, r.landlock_abi);
  set_entry(L, "seccomp", r.seccomp == 1,
            r.seccomp == 1 ? "filter mode available" : airlock_strerror(r.seccomp < 0 ? -r.seccomp : EINVAL));
  if (r.seccomp_kill_process == 1)
    set_entry(L, "seccomp_kill_process", 1, "SECCOMP_RET_KILL_PROCESS available");
  else
    set_works(L, "seccomp_kill_process", r.seccomp_kill_process, "SECCOMP_GET_ACTION_AVAIL(KILL_PROCESS)");
  set_works(L, "user_ns", r.user_ns, "unshare(CLONE_NEWUSER)");
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    char what[64];
    int v;
    memcpy(&v, (const char *)&r + ns[i].off, sizeof v);
    snprintf(what, sizeof what, "unshare(%s%s)", with_user, ns[i].flag);
    set_works(L, ns[i].key, v, what);
  }
  set_works(L, "pidfd", r.pidfd, "pidfd_open");
  /* each layer of the table that depends on the kernel (confine.h) */
  for (const airlock_confine_layer *l = airlock_confine_layers; l->name != NULL; l++) {
    if (l->available == NULL) continue;
    int has = l->available() == 1;
    set_entry(L, l->name, has, has ? l->has : l->lacks);
  }
  set_cgroup2(L, r.cgroup2_delegated);
  { /* the pids cgroup airlock exec puts each program in */
    char where[512], why[512], detail[600];
    if (airlock_cgroup_probe(where, sizeof where, why, sizeof why) == 0) {
      snprintf(detail, sizeof detail, "%s (cgroup %s)", where, strstr(where, "/pids/") ? "v1" : "v2");
      set_entry(L, "pids_cgroup", 1, detail);
    } else {
      set_entry(L, "pids_cgroup", 0, why);
    }
    /* the memory and cpu cgroups airlock exec bounds a whole run with */
    static const struct {
      const char *key;
      int c;
    } more[] = {{"memory_cgroup", AIRLOCK_CGROUP_MEMORY}, {"cpu_cgroup", AIRLOCK_CGROUP_CPU}};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
      if (airlock_cgroup_probe_controller(more[i].c, where, sizeof where, why, sizeof why) == 0)
        set_entry(L, more[i].key, 1, where);
      else
        set_entry(L, more[i].key, 0, why);
    }
  }

  lua_pushboolean(L, r.is_root);
  lua_setfield(L, -2, "is_root");
  lua_pushinteger(L, r.unprivileged_userns_clone);
  lua_setfield(L, -2, "unprivileged_userns_clone");
  lua_pushinteger(L, r.apparmor_restrict_userns);
  lua_setfield(L, -2, "apparmor_restrict_userns");
  struct utsname u;
  if (uname(&u) == 0)
    lua_pushstring(L, u.release);
  else
    lua_pushliteral(L, "unknown");
  lua_setfield(L, -2, "kernel");
  return 1;
}
