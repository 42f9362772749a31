/*
** limits.c -- the limits enforced inside the worker: a capped Lua allocator
** and an instruction-count hook that ends the run from within, past any pcall.
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <lauxlib.h>

#include <time.h>

#include "worker.h"

#define HOOK_STEP 1000   /* instructions between two hook calls */

/* Lua's allocator contract: nsize 0 frees; growing may fail (return NULL, and
** Lua collects garbage and retries once before raising a memory error); a
** shrink must never fail. The account is the Lua heap as Lua sees it. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  worker *w = ud;
  size_t old = ptr != NULL ? osize : 0;   /* without ptr, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    w->mem_used -= old;
    return NULL;
  }
  size_t cap = (size_t)w->init.memory;
  if (nsize > old && cap != 0 && w->mem_exempt == 0 &&
      (w->mem_used > cap || nsize - old > cap - w->mem_used)) {
    w->mem_refused = MEM_CAP;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p == NULL) {
    if (nsize <= old)
      return ptr;
    w->mem_refused = MEM_SYSTEM;
    return NULL;
  }
  w->mem_used = w->mem_used - old + nsize;
  return p;
}

/* Lua 5.4 seeds its string hash from time(NULL) and three addresses
** (luai_makeseed in lstate.c), so the order pairs walks string keys in would
** differ between a run and its replay. The worker defines time() itself (the
** dynamic linker binds liblua's call to it) and answers the run's seed from
** init while the state is made; with the spawner's no_aslr the addresses are
** fixed too, and the hash seed is a function of init alone. Nothing else in
** the worker asks for the time: the guest's clock is the clock.now effect. */
static time_t state_time;

time_t time(time_t *t)
{
  if (t != NULL)
    *t = state_time;
  return state_time;
}

/* The runtime is built with the cap lifted (see worker_limits_start): what the
** libraries need is the worker's cost, not the guest's. */
lua_State *worker_newstate(worker *w)
{
  state_time = (time_t)(uint32_t)w->init.seed;
  w->mem_exempt = 1;
  lua_State *L = lua_newstate(capped_alloc, w);
  if (L != NULL)
    *(worker **)lua_getextraspace(L) = w;   /* copied into every new thread */
  return L;
}

/* Ends the run from within: returning or raising would let a guest pcall
** swallow the error and run on. */
__attribute__((noreturn))
static void budget_exhausted(lua_State *L, worker *w, const char *msg, int n)
{
  w->mem_exempt++;   /* the run is over; the traceback may need memory */
  luaL_traceback(L, L, NULL, 0);
  size_t tlen;
  const char *tb = lua_tolstring(L, -1, &tlen);
  worker_send_error(w, msg, (size_t)n, tb, tlen, "instructions");
}

/* Counts in hook steps: the instructions between the last step and a turn's
** end count toward the next turn. Both counts are functions of the guest's
** code and the replies alone (which replies end a turn is the host's word,
** recorded in the journal), so a replay stops at the same instruction. */
static void count_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  worker *w = worker_of(L);
  w->executed += (uint64_t)w->hook_step;
  /* Notes wait at most one hook step (1000 instructions) for their batch. */
  if (w->notes.size > 0)
    worker_notes_flush(w);
  char msg[160];
  if (w->init.instructions != 0 && w->executed >= w->init.instructions)
    budget_exhausted(L, w, msg, snprintf(msg, sizeof msg, "instruction budget of %" PRIu64
                                         " exhausted", w->init.instructions));
  uint64_t turn = w->init.turn_instructions;
  if (turn != 0 && w->executed - w->turn_start >= turn)
    budget_exhausted(L, w, msg, snprintf(msg, sizeof msg, "turn instruction budget of %" PRIu64
                                         " exhausted (limits.turn_instructions: a turn ends when "
                                         "the host answers a deferred call)", turn));
}

/* The smaller of the budgets in force, as the hook's step, at most HOOK_STEP. */
static int hook_step_of(const worker_init *in)
{
  uint64_t step = HOOK_STEP;
  if (in->instructions != 0 && in->instructions < step)
    step = in->instructions;
  if (in->turn_instructions != 0 && in->turn_instructions < step)
    step = in->turn_instructions;
  return (int)step;
}

/* The instruction hook, on the main thread (coroutines created later inherit
** it), when a budget is set. It counts only bytecode the state runs, and none
** runs between this and the guest's chunk, so a prepared worker sets it before
** it parks (nothing is left for after its start) and counts exactly what a
** fresh one does. Once; worker_limits_start sets it if this was not called. */
void worker_limits_hook(worker *w)
{
  if (w->hook_step != 0 || (w->init.instructions == 0 && w->init.turn_instructions == 0))
    return;
  w->hook_step = hook_step_of(&w->init);
  lua_sethook(w->L, count_hook, LUA_MASKCOUNT, w->hook_step);
}

/* Called once, just before the guest's chunk is loaded: from here on every
** allocation counts against the cap and every instruction against the budgets. */
void worker_limits_start(worker *w)
{
  w->mem_exempt = 0;
  worker_limits_hook(w);
}
