/*
** lbinding.h -- shared declarations of the Lua binding (the files in lua/binding).
*/
#ifndef AIRLOCK_LBINDING_H
#define AIRLOCK_LBINDING_H

#include <lua.h>
#include <lauxlib.h>
#include "airlock.h"
#include "convert.h"

#define AIRLOCK_BROKER_MT "airlock.broker"
#define AIRLOCK_RUN_MT    "airlock.run"

/* Expected environment failure: pushes nil, "cause: message", errno; returns 3. */
int airlock_l_fail(lua_State *L, const char *cause, const char *message, int err);
/* Adds broker() and defer() to the table on top of the stack; registers metatables. */
void airlock_l_open_broker(lua_State *L);
/* Adds ledger_open, ledger_records, ledger_verify, ledger_branch and sha256 to
** the table on top of the stack; registers the ledger metatables (lledger.c). */
void airlock_l_open_ledger(lua_State *L);
/* airlock.core.probe(): what this kernel can enforce, one {ok, detail} per layer (lprobe.c). */
int airlock_l_probe(lua_State *L);
/* core.channel_call: a program's one effect call over fd 3 (lcall.c). */
int airlock_l_channel_call(lua_State *L);
/* airlock.core.pids_cgroup() -> where programs' pids cgroups go, or nil, why (lprobe.c). */
int airlock_l_pids_cgroup(lua_State *L);
/* airlock.core.seccomp_worker_program(tgid) -> the worker's filter as a BPF string (lseccomp.c). */
int airlock_l_seccomp_worker_program(lua_State *L);

/* airlock.core.confine(spec) -> layer reports, or nil, message, errno (lconfine.c). */
int airlock_l_confine(lua_State *L);
/* Parses the spec table at idx and prepares it (airlock_confine_prepare): pushes
** a userdata holding the prepared spec (freed by its __gc, or earlier with
** airlock_confine_prepared_free) and sets *out to it. Raises a Lua error for a
** malformed table; returns 0, or -errno with a message in err. */
int airlock_l_confine_prepare(lua_State *L, int idx, airlock_confine_prepared **out,
                              char *err, size_t errlen);

/* Adds fs_read, fs_stat, fs_list, fs_write, fs_remove and fs_check_path to the
** table on top of the stack: files beneath a root, for airlock.handlers (lfs.c). */
void airlock_l_open_fs(lua_State *L);
void airlock_l_open_pty(lua_State *L);   /* lpty.c: core.pty_open */
/* Adds http_request to the table on top of the stack (lhttp.c, libcurl). */
void airlock_l_open_http(lua_State *L);

#endif
