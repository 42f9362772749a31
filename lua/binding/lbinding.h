/*
** lbinding.h -- shared declarations of the Lua binding (the files in lua/binding).
*/
#ifndef AIRLOCK_LBINDING_H
#define AIRLOCK_LBINDING_H

#include <stddef.h>
#include <lua.h>
#include <lauxlib.h>
#include "airlock.h"
#include "convert.h"

#define AIRLOCK_BROKER_MT "airlock.broker"
#define AIRLOCK_RUN_MT    "airlock.run"

/* Registers the metatable name for a class of userdata: __index a new table
** of methods (none when NULL), then the metamethods in meta (__gc, __close,
** __tostring, ...; NULL for none); __name is name. Registered again, the
** metatable gets fresh tables the same way. Leaves the stack as it was
** (lclass.c); luaL_setmetatable(L, name) then gives an object the class. */
void airlock_l_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta);
/* Expected environment failure: pushes nil, "cause: message", errno; returns 3. */
int airlock_l_fail(lua_State *L, const char *cause, const char *message, int err);
/* Pushes the names of a C table whose entries lie stride bytes apart, each
** holding its const char * name at offset off, the table ending with a NULL
** name: as a Lua list, or, with sep, as one string joined by sep (for a
** message). AIRLOCK_L_NAMES takes the table and the name field's member. */
void airlock_l_push_names(lua_State *L, const void *table, size_t stride, size_t off, const char *sep);
#define AIRLOCK_L_NAMES(L, table, member, sep) \
  airlock_l_push_names(L, table, sizeof *(table), offsetof(__typeof__(*(table)), member), sep)
/* The first key of table t that is not one of keys (NULL-terminated), as
** text (a non-string key as Lua shows it, pushed), or NULL when all are. */
const char *airlock_l_unknown_key(lua_State *L, int t, const char *const *keys);
/* Adds broker() and defer() to the table on top of the stack; registers metatables. */
void airlock_l_open_broker(lua_State *L);
struct airlock_ledger_report;
/* Pushes a ledger report table (lledger_proc.c); ok < 0 leaves the field out. */
void airlock_l_push_ledger_report(lua_State *L, const struct airlock_ledger_report *rep, int ok);
/* nil, message, errno for a verify that could not read its journal (lledger_proc.c). */
int airlock_l_verify_failed(lua_State *L, const char *dir, const struct airlock_ledger_report *rep, int rc);
/* Adds ledger_proc_open, ledger_proc_records, ledger_proc_verify, ledger_proc_branch
** and ledger_proc_probe: the ledger in a process of its own (lledger_proc.c). */
void airlock_l_open_ledger_proc(lua_State *L);
/* Adds hmac_sha256, checkpoint_outside, checkpoint_key, checkpoint_append and
** ledger_proc_verify_at: ledger checkpoints kept outside a session (lcheckpoint.c). */
void airlock_l_open_checkpoint(lua_State *L);
/* airlock.core.probe(): what this kernel can enforce, one {ok, detail} per layer (lprobe.c). */
int airlock_l_probe(lua_State *L);
/* Adds channel_call: a program's one effect call over fd 3 (lcall.c). */
void airlock_l_open_call(lua_State *L);
/* airlock.core.pids_cgroup() -> where programs' pids cgroups go, or nil, why (lprobe.c). */
int airlock_l_pids_cgroup(lua_State *L);
/* airlock.core.seccomp_worker_program(tgid) -> the worker's filter as a BPF string (lseccomp.c). */
int airlock_l_seccomp_worker_program(lua_State *L);

/* Adds confine(spec) -> layer reports, or nil, message, errno (lconfine.c), and
** registers the class of the prepared specs below. */
void airlock_l_open_confine(lua_State *L);
/* Parses the spec table at idx and prepares it (airlock_confine_prepare): pushes
** a userdata holding the prepared spec (freed by its __gc, or earlier with
** airlock_confine_prepared_free) and sets *out to it. Raises a Lua error for a
** malformed table; returns 0, or -errno with a message in err. */
int airlock_l_confine_prepare(lua_State *L, int idx, airlock_confine_prepared **out, char *err,
                              size_t errlen);

/* Adds fs_read, fs_stat, fs_list, fs_write, fs_remove and fs_check_path to the
** table on top of the stack: files beneath a root, for airlock.handlers (lfs.c). */
void airlock_l_open_fs(lua_State *L);
void airlock_l_open_pty(lua_State *L); /* lpty.c: core.pty_open */
/* Adds http_request to the table on top of the stack (lhttp.c, libcurl). */
void airlock_l_open_http(lua_State *L);
/* Adds deny() and denial() to the table on top of the stack (ldenial.c). */
void airlock_l_open_denial(lua_State *L);
/* loverlay.c: an overlaid workspace's writable layer (airlock.overlay_layer),
** owning fd. */
void airlock_l_open_overlay(lua_State *L);
void airlock_l_push_overlay_layer(lua_State *L, int fd, int mount);
/* The reason of the denial at idx (a value core.deny raised), or NULL when it
** is not one. The text lives as long as the value does. */
const char *airlock_l_denial_reason(lua_State *L, int idx);

#endif
