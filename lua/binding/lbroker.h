/*
** lbroker.h -- (internal) what the broker's binding files share: the
** airlock.broker and airlock.run userdata (lbroker.c holds the broker, its
** dispatch of calls to Lua handlers and its start; lrun.c the run's methods;
** lresult.c the result table of a run that ended).
*/
#ifndef AIRLOCK_LBROKER_H
#define AIRLOCK_LBROKER_H

#include "lbinding.h"

/* reply: the scratch a handler's answer is packed into (cleared, not freed,
** between calls: no allocation per answer). */
/* extra_err: what the function of b:_watch_extra raised, for the next step. */
typedef struct lbroker {
  airlock_broker *b;
  int closed, busy;
  msgpack_sbuffer reply;
  char extra_err[512];
} lbroker;
/* recorded: whether its ctx has admit (a recorded run's calls are admitted
** in batches, admit_calls): 0 not looked at yet, 1 yes, -1 no. admitted: the
** id of the last call admit_calls looked at. */
typedef struct lrun {
  airlock_run *r;
  lbroker *lb;
  lua_Integer serial;
  int finished;
  int recorded;
  uint64_t admitted;
} lrun;

/* User values. broker: 1 = runs by serial (strong refs while live), 2 = the
** function b:_watch_extra gave (called in a step that saw its descriptor).
** run: 1 = broker, 2 = handlers, 3 = ctx fields, 4 = result once finished,
** 5 = the metatable of its handlers' ctx (push_ctx). */
enum { BUV_RUNS = 1, BUV_EXTRA, BUV_COUNT_ = BUV_EXTRA };
enum { RUV_BROKER = 1, RUV_HANDLERS, RUV_CTX, RUV_RESULT, RUV_CTX_MT, RUV_COUNT_ = RUV_CTX_MT };

/* The run userdata at i, whose broker is open (an argument error if not). */
lrun *airlock_l_check_run(lua_State *L, int i);
/* Answers call id of lr with the value at idx (lbroker.c says how a failure
** reads). 0, or -errno (-EMSGSIZE: too large to send; the call failed, the
** reason in why). */
int airlock_l_reply_value(lua_State *L, lrun *lr, uint64_t id, int idx, const char *effect, char *why,
                          size_t whylen);
/* The result table of a run that ended, pushed (lresult.c). */
void airlock_l_push_result(lua_State *L, lrun *lr, const airlock_result *res);
/* The run class's methods and metatable, registered, and the method table set
** as field run_methods of the table at the top (lrun.c). */
void airlock_l_open_run(lua_State *L);

#endif
