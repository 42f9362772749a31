/*
** repl_readline.h -- the REPL's line editing (GNU readline, opened on first
** use): airlock.core.readline, add_history, history_load, history_save and
** set_completer, for a person at a terminal.
*/
#ifndef AIRLOCK_REPL_READLINE_H
#define AIRLOCK_REPL_READLINE_H

#include <lua.h>
#include <signal.h>

/* Sets the functions in the table on top of L's stack; flag is the Ctrl-C
** flag the prompt watches (and clears). */
void airlock_repl_readline_install(lua_State *L, volatile sig_atomic_t *flag);

#endif
