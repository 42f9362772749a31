/*
** lstart_opts.c -- b:_start's options table read into airlock_run_opts: the
** plain fields by one table of rows, the rest by name, the mounts into the
** spawn's mount list (airlock_spawn_opts.mounts).
*/
#define _GNU_SOURCE
#include "lstart_opts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The empty net namespace every run with shared_net joins: made on first use,
** held for the life of the process. 0: not made yet; < 0: cannot be made here. */
static int shared_netns;
static char shared_netns_err[256];

int airlock_l_shared_netns(const char **why)
{
  if (shared_netns == 0) {
    int fd = airlock_netns_new(shared_netns_err, sizeof shared_netns_err);
    shared_netns = fd > 0 ? fd : (fd < 0 ? fd : -EBADF);
  }
  *why = shared_netns_err;
  return shared_netns;
}

/* Reads t[field] as a NULL-terminated array of strings. The list table and the
** array stay on the stack, which keeps every string alive until the caller returns. */
static const char **string_array(lua_State *L, int t, const char *field, int required)
{
  lua_getfield(L, t, field);
  int list = lua_gettop(L);
  if (lua_isnil(L, list) && !required) return NULL;
  if (!lua_istable(L, list)) luaL_error(L, "start: field '%s' must be a list of strings", field);
  lua_Integer n = luaL_len(L, list);
  if (n < (required ? 1 : 0) || n > 4096)
    luaL_error(L, "start: field '%s' must hold 1 to 4096 strings", field);
  const char **v = lua_newuserdatauv(L, sizeof(char *) * ((size_t)n + 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, list, i) != LUA_TSTRING) luaL_error(L, "start: %s[%d] must be a string", field, (int)i);
    v[i - 1] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  v[n] = NULL;
  return v;
}

/* t.namespaces = {"user", "pid", "net", ...} -> CLONE_NEW* flags */
static unsigned long namespace_flags(lua_State *L, int t)
{
  unsigned long flags = 0;
  if (lua_getfield(L, t, "namespaces") == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "start: field 'namespaces' must be a list of names");
  for (lua_Integer i = 1; lua_geti(L, -1, i) != LUA_TNIL; i++) {
    const char *name = lua_tostring(L, -1);
    const airlock_namespace *ns = airlock_namespaces;
    while (ns->name && (!name || strcmp(name, ns->name) != 0)) ns++;
    if (!ns->name) {
      AIRLOCK_L_NAMES(L, airlock_namespaces, name, ", ");
      luaL_error(L, "start: unknown namespace '%s' (%s)", name ? name : "?", lua_tostring(L, -1));
    }
    flags |= ns->flag;
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return flags;
}

/* t.rlimits = {as=, cpu=, nofile=, nproc=, fsize=, core=, stack=} (whole numbers;
** cpu in seconds) -> *rl. Returns 1 when the field is present. */
static int rlimits_field(lua_State *L, int t, airlock_rlimits *rl)
{
  memset(rl, 0, sizeof *rl);
  if (lua_getfield(L, t, "rlimits") == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "start: field 'rlimits' must be a table");
  int lt = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, lt)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const airlock_rlimit_kind *kind = airlock_rlimit_kinds;
    while (k && kind->name && strcmp(k, kind->name) != 0) kind++;
    if (!k || !kind->name) {
      AIRLOCK_L_NAMES(L, airlock_rlimit_kinds, name, ", ");
      luaL_error(L, "start: unknown rlimit '%s' (%s)", k ? k : "?", lua_tostring(L, -1));
    }
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0) luaL_error(L, "start: rlimits.%s must be a whole number >= 0", k);
    *(uint64_t *)((char *)rl + kind->off) = (uint64_t)v;
    rl->set_mask |= kind->bit;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return 1;
}

/* The options of b:_start that are plain values of airlock_run_opts: one row
** each, read by one loop. The rest (argv, namespaces, rlimits, shared_net, the
** mounts, the stdio descriptors, stdin; confine, init, handlers and ctx, which
** lbroker.c reads) need more than a type check and are read by name below. */
typedef enum { OPT_STR, OPT_STRS, OPT_BOOL, OPT_U32, OPT_U64, OPT_SIZE } opt_kind;
typedef struct start_opt {
  const char *name;
  opt_kind kind;
  size_t off;       /* in airlock_run_opts */
  lua_Integer max;  /* integers: the largest value accepted */
  const char *what; /* strings: what the value must be, for the message */
} start_opt;

#define RUN_OPT(name, kind, member, max, what)                \
  {                                                           \
    name, kind, offsetof(airlock_run_opts, member), max, what \
  }
static const start_opt START_OPTS[] = {
    RUN_OPT("path", OPT_STR, spawn.path, 0, "the program's path"),
    RUN_OPT("workdir", OPT_STR, spawn.workdir, 0, "a directory"),
    RUN_OPT("init_program", OPT_STR, spawn.init, 0, "a path"),
    RUN_OPT("env", OPT_STRS, spawn.envp, 0, NULL),
    RUN_OPT("no_new_privs", OPT_BOOL, spawn.no_new_privs, 0, NULL),
    RUN_OPT("drop_caps", OPT_BOOL, spawn.drop_caps, 0, NULL),
    RUN_OPT("verify_seccomp", OPT_BOOL, verify_seccomp, 0, NULL),
    RUN_OPT("program", OPT_BOOL, program, 0, NULL),
    RUN_OPT("channel", OPT_BOOL, program_channel, 0, NULL),
    RUN_OPT("deadline_ms", OPT_U64, deadline_ms, (lua_Integer)1 << 40, NULL),
    RUN_OPT("max_frame", OPT_U32, max_frame, UINT32_MAX, NULL),
    RUN_OPT("capture_max", OPT_SIZE, capture_max, (lua_Integer)1 << 30, NULL),
    RUN_OPT("pids_max", OPT_U64, pids_max, (lua_Integer)1 << 22, NULL),
    RUN_OPT("memory_max", OPT_U64, memory_max, (lua_Integer)1 << 50, NULL),
    RUN_OPT("cpu_millis", OPT_U32, cpu_millis, 1 << 20, NULL),
    RUN_OPT("park", OPT_BOOL, parked, 0, NULL),
    RUN_OPT("no_aslr", OPT_BOOL, spawn.no_aslr, 0, NULL),
    RUN_OPT("egress_port", OPT_U32, spawn.egress_port, 65535, NULL),
};
#undef RUN_OPT
#define NSTART_OPTS (sizeof START_OPTS / sizeof *START_OPTS)

/* The layers set with one call (confine.h's table): an option each, of the
** row's name, true to set it (airlock_spawn_opts.layers). */
static unsigned layer_options(lua_State *L, int t)
{
  unsigned bits = 0;
  for (unsigned i = 0; airlock_confine_layers[i].name != NULL; i++) {
    lua_getfield(L, t, airlock_confine_layers[i].name);
    if (lua_toboolean(L, -1)) bits |= 1u << i;
    lua_pop(L, 1);
  }
  return bits;
}

/* The options read by name, for the check that t holds nothing else (and
** the layer table's names, layer_options). */
static const char *const START_NAMED[] = {
    "argv",      "expect_ready", "shared_net",    "namespaces",    "rlimits",    "stdin_fd",     "stdout_fd",
    "stderr_fd", "stdin",        "stdin_file",    "confine",       "handlers",   "ctx",          "init",
    "workspace", "rootfs",       "keep",          "tmpfs",         "tmpfs_size", "tmpfs_inodes", "view_ro",
    "view_rw",   "protect",      "overlay_bytes", "overlay_files", NULL};

/* Every key of t must be an option: a misspelt one ("drop_cap") would
** otherwise be a layer silently not applied. */
static void check_start_keys(lua_State *L, int t)
{
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int known = 0;
    for (size_t i = 0; k && !known && i < NSTART_OPTS; i++) known = strcmp(k, START_OPTS[i].name) == 0;
    for (size_t i = 0; k && !known && START_NAMED[i]; i++) known = strcmp(k, START_NAMED[i]) == 0;
    known = known || (k && airlock_confine_layer_named(k) != NULL);
    if (!known) luaL_error(L, "start: unknown option '%s'", k ? k : luaL_typename(L, -1));
  }
}

static lua_Integer opt_int_field(lua_State *L, int t, const char *k, lua_Integer def, lua_Integer max)
{
  lua_getfield(L, t, k);
  lua_Integer v = def;
  if (!lua_isnil(L, -1)) {
    int isint;
    v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0 || v > max)
      luaL_error(L, "start: field '%s' must be an integer from 0 to %I", k, max);
  }
  lua_pop(L, 1);
  return v;
}

/* Reads every row of START_OPTS from t into o. Strings stay on the stack (the
** caller's frame keeps them alive until it returns). */
static void read_start_opts(lua_State *L, int t, airlock_run_opts *o)
{
  for (size_t i = 0; i < NSTART_OPTS; i++) {
    const start_opt *f = &START_OPTS[i];
    void *dst = (char *)o + f->off;
    switch (f->kind) {
      case OPT_STRS: *(const char ***)dst = string_array(L, t, f->name, 0); break;
      case OPT_STR:
        if (lua_getfield(L, t, f->name) != LUA_TNIL) {
          if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "start: field '%s' must be %s", f->name, f->what);
          *(const char **)dst = lua_tostring(L, -1);
        }
        break;
      case OPT_BOOL:
        lua_getfield(L, t, f->name);
        *(int *)dst = lua_toboolean(L, -1);
        lua_pop(L, 1);
        break;
      default: {
        lua_Integer v = opt_int_field(L, t, f->name, 0, f->max);
        if (f->kind == OPT_U32)
          *(uint32_t *)dst = (uint32_t)v;
        else if (f->kind == OPT_U64)
          *(uint64_t *)dst = (uint64_t)v;
        else
          *(size_t *)dst = (size_t)v;
      }
    }
  }
}

/* One list option of the mount set: each string a record of kind. */
static size_t add_mounts(lua_State *L, int t, const char *field, airlock_mount_kind kind, airlock_mount *m,
                         size_t n, size_t room)
{
  const char **v = string_array(L, t, field, 0);
  for (size_t i = 0; v && v[i]; i++, n++)
    if (n < room) m[n] = (airlock_mount){.kind = kind, .target = v[i]};
  return n;
}

/* The mount set as b:_start's options give it -- workspace = true (the workdir
** is the run's workspace), rootfs = dir, keep, tmpfs (each with tmpfs_size
** and tmpfs_inodes), view_ro, view_rw and protect = {paths}, overlay_bytes and
** overlay_files (the workspace overlaid, its writable layer bounded so) -- as
** the spawn's mount list, in that order, held by a userdata on the stack. A list longer
** than AIRLOCK_MOUNTS_MAX goes to the spawner whole, which refuses it. */
static void read_mounts(lua_State *L, int t, airlock_spawn_opts *so)
{
  static const struct {
    const char *field;
    airlock_mount_kind kind;
  } lists[] = {
      {"keep", AIRLOCK_MOUNT_KEEP},       {"tmpfs", AIRLOCK_MOUNT_TMPFS},
      {"view_ro", AIRLOCK_MOUNT_VIEW_RO}, {"view_rw", AIRLOCK_MOUNT_VIEW_RW},
      {"protect", AIRLOCK_MOUNT_PROTECT},
  };
  const char *size = NULL, *rootfs = NULL;
  if (lua_getfield(L, t, "tmpfs_size") != LUA_TNIL) {
    size = lua_tostring(L, -1);
    if (!size || strlen(size) > 24 || strspn(size, "0123456789kmgKMG%") != strlen(size))
      luaL_error(L, "start: field 'tmpfs_size' must be a size like \"64m\"");
  }
  unsigned long inodes = (unsigned long)opt_int_field(L, t, "tmpfs_inodes", 0, (lua_Integer)1 << 32);
  if (lua_getfield(L, t, "rootfs") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "start: field 'rootfs' must be a directory");
    rootfs = lua_tostring(L, -1);
  }
  lua_getfield(L, t, "workspace");
  int workspace = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_Integer ov_bytes = opt_int_field(L, t, "overlay_bytes", 0, (lua_Integer)1 << 50);
  unsigned long ov_files = (unsigned long)opt_int_field(L, t, "overlay_files", 0, 100000000);
  const char *ov_size = NULL; /* stays on the stack with the rest */
  if (ov_bytes > 0 || ov_files > 0) {
    if (!workspace || ov_bytes <= 0 || ov_files == 0)
      luaL_error(L, "start: fields 'overlay_bytes' and 'overlay_files' go together, with workspace = true");
    ov_size = lua_pushfstring(L, "%I", ov_bytes);
  }
  /* Counted first, then filled: the strings stay on the stack meanwhile. */
  size_t n = (size_t)workspace + (rootfs != NULL) + (ov_size != NULL);
  int view_given = 0;
  size_t nview = 0;
  for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
    int view = lists[k].kind == AIRLOCK_MOUNT_VIEW_RO || lists[k].kind == AIRLOCK_MOUNT_VIEW_RW;
    if (view) {
      view_given |= lua_getfield(L, t, lists[k].field) != LUA_TNIL;
      lua_pop(L, 1);
    }
    size_t before = n;
    n = add_mounts(L, t, lists[k].field, 0, NULL, n, 0);
    if (view) nview += n - before;
  }
  /* Fail closed: a view given with no path in it would otherwise be no view
  ** at all, the whole file system visible. */
  if (view_given && nview == 0 && !rootfs)
    luaL_error(L, "start: fields 'view_ro' and 'view_rw' name no path: a view of nothing is refused "
                  "(it would leave the whole file system visible); give at least one path, or neither field");
  if (n == 0) return;
  airlock_mount *m = lua_newuserdatauv(L, sizeof *m * n, 0);
  memset(m, 0, sizeof *m * n);
  size_t i = 0;
  if (workspace) m[i++] = (airlock_mount){.kind = AIRLOCK_MOUNT_WORKSPACE, .target = so->workdir};
  if (rootfs) m[i++] = (airlock_mount){.kind = AIRLOCK_MOUNT_ROOTFS, .source = rootfs};
  if (ov_size)
    m[i++] = (airlock_mount){
        .kind = AIRLOCK_MOUNT_OVERLAY, .target = so->workdir, .size = ov_size, .inodes = ov_files};
  for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
    size_t from = i;
    i = add_mounts(L, t, lists[k].field, lists[k].kind, m, i, n);
    for (size_t j = from; lists[k].kind == AIRLOCK_MOUNT_TMPFS && j < i; j++) {
      m[j].size = size;
      m[j].inodes = inodes;
    }
  }
  so->mounts = m;
  so->nmounts = n;
}

/* The child's stdio as b:_start's options give it (airlock_l_stdio). */
static void read_stdio(lua_State *L, int t, airlock_l_stdio *io)
{
  static const char *const passed[] = {"stdin_fd", "stdout_fd", "stderr_fd"};
  memset(io, 0, sizeof *io);
  for (int i = 0; i < 3; i++) {
    io->pass_fd[i] = -1;
    lua_Integer fd = opt_int_field(L, t, passed[i], 0, 1 << 20);
    lua_getfield(L, t, passed[i]);
    if (!lua_isnil(L, -1)) {
      if (fcntl((int)fd, F_GETFD) < 0)
        luaL_error(L, "start: field '%s': %d is not an open descriptor", passed[i], (int)fd);
      io->pass_fd[i] = (int)fd;
    }
    lua_pop(L, 1);
  }
  if (io->pass_fd[1] == 0 || io->pass_fd[2] == 0)
    luaL_error(L, "start: stdout_fd and stderr_fd must not be 0");
  if (lua_getfield(L, t, "stdin") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "start: field 'stdin' must be a string");
    io->data = lua_tolstring(L, -1, &io->len);
  }
  if (lua_getfield(L, t, "stdin_file") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "start: field 'stdin_file' must be a path");
    if (io->data) luaL_error(L, "start: give 'stdin' or 'stdin_file', not both");
    io->file = lua_tostring(L, -1);
  }
  if (io->pass_fd[0] >= 0 && (io->data || io->file))
    luaL_error(L, "start: give one of 'stdin', 'stdin_file' and 'stdin_fd'");
}

int airlock_l_open_stdin(const airlock_l_stdio *io, int *fd_out, char *err, size_t errlen)
{
  int in_fd = -1, rc = 0;
  *fd_out = -1;
  if (io->pass_fd[0] >= 0) {
    in_fd = fcntl(io->pass_fd[0], F_DUPFD_CLOEXEC, 3);
    if (in_fd < 0) {
      rc = -errno;
      snprintf(err, errlen, "stdin_fd %d: %s", io->pass_fd[0], airlock_strerror(errno));
    }
  } else if (io->file) {
    in_fd = open(io->file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (in_fd < 0) {
      rc = -errno;
      snprintf(err, errlen, "%s: %s", io->file, airlock_strerror(errno));
    }
  } else if (io->data) {
    in_fd = memfd_create("airlock-stdin", MFD_CLOEXEC);
    size_t off = 0;
    while (in_fd >= 0 && off < io->len) {
      ssize_t n = write(in_fd, io->data + off, io->len - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += (size_t)n;
    }
    if (in_fd < 0 || off < io->len || lseek(in_fd, 0, SEEK_SET) < 0) {
      rc = -(errno ? errno : EIO);
      snprintf(err, errlen, "cannot hold %zu bytes in a memfd: %s", io->len, airlock_strerror(-rc));
      if (in_fd >= 0) close(in_fd);
      return rc;
    }
  }
  if (rc < 0) return rc;
  if (in_fd == 0) {
    int moved = fcntl(in_fd, F_DUPFD_CLOEXEC, 3);
    close(in_fd);
    in_fd = moved;
  }
  *fd_out = in_fd;
  return 0;
}

void airlock_l_read_start(lua_State *L, int t, airlock_l_start *s)
{
  memset(s, 0, sizeof *s);
  luaL_checkstack(L, 3 * (int)NSTART_OPTS + 48, "start: too many options");
  check_start_keys(L, t);
  s->o.spawn.argv = string_array(L, t, "argv", 1);
  read_start_opts(L, t, &s->o);
  s->o.spawn.layers = layer_options(L, t);
  read_mounts(L, t, &s->o.spawn);
  lua_getfield(L, t, "expect_ready");
  s->o.expect_ready = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
  lua_getfield(L, t, "shared_net");
  if (lua_toboolean(L, -1)) {
    const char *why;
    s->o.spawn.netns_fd = airlock_l_shared_netns(&why);
    if (s->o.spawn.netns_fd < 0) luaL_error(L, "start: shared_net: %s", why);
  }
  s->o.spawn.namespaces = namespace_flags(L, t);
  if (rlimits_field(L, t, &s->rl)) s->o.spawn.rlimits = &s->rl;
  read_stdio(L, t, &s->io);
  s->o.spawn.stdout_fd = s->io.pass_fd[1] > 0 ? s->io.pass_fd[1] : 0;
  s->o.spawn.stderr_fd = s->io.pass_fd[2] > 0 ? s->io.pass_fd[2] : 0;
}
