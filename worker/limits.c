/*
** limits.c -- the limits enforced inside the worker: a capped Lua allocator,
** an instruction-count hook, and CPU-time budgets read at a timer's ticks;
** a budget ends the run from within, past any pcall.
*/
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include <time.h>

#include "worker.h"

#define HOOK_STEP         1000     /* instructions between two hook calls */
#define CPU_TICK_NS       1000000u /* the CPU budgets' clock is read once per ms of CPU */
/* The most one tick can charge: past the timer's granularity, a scheduler
** tick at HZ=100. */
#define CPU_CHARGE_MAX_NS 12000000u

/* Lua's allocator contract: nsize 0 frees; growing may fail (return NULL, and
** Lua collects garbage and retries once before raising a memory error); a
** shrink must never fail. The account is the Lua heap as Lua sees it. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  worker *w = ud;
  size_t old = ptr != NULL ? osize : 0; /* without ptr, osize is a type tag */
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
    if (nsize <= old) return ptr;
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
  if (t != NULL) *t = state_time;
  return state_time;
}

/* The runtime is built with the cap lifted (see worker_limits_start): what the
** libraries need is the worker's cost, not the guest's. */
lua_State *worker_newstate(worker *w)
{
  state_time = (time_t)(uint32_t)w->init.seed;
  w->mem_exempt = 1;
  lua_State *L = lua_newstate(capped_alloc, w);
  if (L != NULL) *(worker **)lua_getextraspace(L) = w; /* copied into every new thread */
  return L;
}

/* Ends the run from within: returning or raising would let a guest pcall
** swallow the error and run on. */
__attribute__((noreturn)) static void budget_exhausted(lua_State *L, worker *w, const char *msg, int n,
                                                       const char *cause)
{
  w->mem_exempt++; /* the run is over; the traceback may need memory */
  luaL_traceback(L, L, NULL, 0);
  size_t tlen;
  const char *tb = lua_tolstring(L, -1, &tlen);
  worker_send_error(w, msg, (size_t)n, tb, tlen, cause);
}

/* ------------------------------------------------------------ CPU budgets */

/* The budgets are the worker's own CPU time, user and system, as os.clock
** reads it (CLOCK_PROCESS_CPUTIME_ID: the worker is one thread). Reading the
** clock at every instruction would cost what a count hook costs (Lua 5.4 runs
** its hook dispatch at every instruction while any count hook is set), so a
** timer on the same clock ticks each CPU_TICK_NS of CPU; its signal handler
** sets a one-instruction hook on the thread that runs, and that hook reads
** the clock and clears itself. Between ticks no hook is set. A tick is due
** only while the worker spends CPU, so a parked or waiting worker gets none.
** A budget strikes at most a tick (plus the kernel's timer granularity, one
** scheduler tick) after it is used up; the guest cannot delay the hook: it
** runs at its next instruction, inside any pcall, coroutine or metamethod.
** Like the instruction count, it cannot stop one library call that runs long
** without returning to Lua (a pattern that backtracks on a long subject,
** say): that one is ended by the process's RLIMIT_CPU, the backstop. */
static worker *cpu_worker; /* the one worker, for the signal handler */

static uint64_t cpu_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Charges the CPU the clock shows since it was last read to the run and to
** the turn. The timer fires from the same clock, so CPU the guest really
** spends comes with a tick for every millisecond or so (one per scheduler
** tick at most); a jump of the clock with no ticks along (a VM's hypervisor
** taking the vCPU away and the kernel counting it to the process, seen here
** as half a second in one interval of a long game) is charged at most
** CPU_CHARGE_MAX_NS a tick, so it cannot end a well-behaved guest. */
static void cpu_account(worker *w)
{
  uint64_t now = cpu_now_ns();
  unsigned ticks = w->cpu_signals;
  w->cpu_signals -= ticks;
  uint64_t spent = now - w->cpu_last_ns;
  uint64_t most = (uint64_t)(ticks + 1) * CPU_CHARGE_MAX_NS;
  w->cpu_last_ns = now;
  if (spent > most) spent = most;
  w->cpu_used_ns += spent;
  w->turn_used_ns += spent;
}

/* Ends the run when a CPU budget is used up. */
static void cpu_check(lua_State *L, worker *w)
{
  if (!w->cpu_on) return;
  w->cpu_due = 0;
  uint64_t run = w->init.cpu_ms, turn = w->init.turn_cpu_ms;
  if ((run == 0 && turn == 0) || !w->init.cpu_enforced)
    return; /* the tick was for the notes alone, or this is a replay */
  cpu_account(w);
  char msg[200];
  if (run != 0 && w->cpu_used_ns >= run * 1000000u)
    budget_exhausted(L, w, msg,
                     snprintf(msg, sizeof msg,
                              "CPU budget of %" PRIu64 " ms used up "
                              "(limits.cpu)",
                              run),
                     "cpu");
  if (turn != 0 && w->turn_used_ns >= turn * 1000000u)
    budget_exhausted(L, w, msg,
                     snprintf(msg, sizeof msg,
                              "turn CPU budget of %" PRIu64 " ms used "
                              "up (limits.turn_cpu: a turn ends when the host answers a "
                              "deferred call)",
                              turn),
                     "cpu");
}

/* The tick's hook: one call on the thread that ran, then gone. */
static void cpu_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  worker *w = worker_of(L);
  lua_sethook(L, NULL, 0, 0); /* taking a hook off walks nothing */
  w->cpu_armed = 0;
  if (w->notes.size > 0) worker_notes_flush(w);
  cpu_check(L, w);
}

/* The tick. Lua documents lua_sethook as safe to call from a signal handler
** (lua.c stops a script on SIGINT so): it stores the hook and marks the
** thread's live call frames, which Lua links before it enters them. The two
** threads it may touch are alive: the main thread until the chunk ends (the
** tick is off before lua_close frees its frames: run.c), a coroutine while
** it is being resumed (the wrappers below). With an instruction budget the
** count hook is already there and checks cpu_due itself; otherwise the hook
** goes on the running coroutine and the main thread (whichever runs next
** sees it).
**
** Setting a hook marks every call frame of the thread, so its cost grows
** with the depth of the guest's stack (a millisecond for some 10^5 frames).
** A tick that cost more than its share would leave the next tick pending at
** once, and a deep enough guest would get nothing but ticks. So a hook is set
** only when the last one has run (cpu_armed), and after a costly setting the
** next ticks are skipped (unless another coroutine runs by then), keeping
** the setting under a tenth of the CPU: the
** budget then strikes within ten times the cost of one setting (still about
** a millisecond for stacks of ordinary depth). */
static void cpu_tick(int sig)
{
  (void)sig;
  worker *w = cpu_worker;
  if (w == NULL || !w->cpu_on || w->L == NULL) return;
  w->cpu_signals++;
  /* without a budget, a tick only sends the notes waiting (if any) */
  if (w->init.cpu_ms == 0 && w->init.turn_cpu_ms == 0 && w->notes.size == 0) return;
  int saved = errno;
  w->cpu_due = 1;
  /* armed on another thread than the one running now (a resume began in
  ** between): that hook may never run, so this one is set regardless */
  if (w->hook_step == 0 && (!w->cpu_armed || w->cpu_armed_on != w->running)) {
    if (w->cpu_skip > 0 && w->cpu_armed_on == w->running) {
      w->cpu_skip--;
    } else {
      uint64_t t0 = cpu_now_ns();
      w->cpu_armed = 1;
      w->cpu_armed_on = w->running;
      if (w->running != NULL) lua_sethook(w->running, cpu_hook, LUA_MASKCOUNT, 1);
      lua_sethook(w->L, cpu_hook, LUA_MASKCOUNT, 1);
      w->cpu_skip = (unsigned)((cpu_now_ns() - t0) * 10 / CPU_TICK_NS);
    }
  }
  errno = saved;
}

/* Which coroutine runs: Lua's coroutine library (lcorolib) resumes through
** lua_resume and closes through lua_resetthread, the only ways Lua code runs
** on another thread. The worker links Lua in statically with both wrapped
** (-Wl,--wrap: every call to lua_resume outside ldo.c comes here, and
** __real_lua_resume is Lua's own), so the running thread is known. */
int __real_lua_resume(lua_State *L, lua_State *from, int narg, int *nres);
int __real_lua_resetthread(lua_State *L);
int __wrap_lua_resume(lua_State *L, lua_State *from, int narg, int *nres);
int __wrap_lua_resetthread(lua_State *L);
static unsigned wrapped_calls; /* for coroutines_are_tracked */

int __wrap_lua_resume(lua_State *L, lua_State *from, int narg, int *nres)
{
  worker *w = worker_of(L);
  lua_State *was = w->running;
  w->running = L;
  wrapped_calls++;
  int status = __real_lua_resume(L, from, narg, nres);
  w->running = was;
  return status;
}

int __wrap_lua_resetthread(lua_State *L)
{
  worker *w = worker_of(L);
  lua_State *was = w->running;
  w->running = L;
  wrapped_calls++;
  int status = __real_lua_resetthread(L);
  w->running = was;
  return status;
}

/* Whether Lua's own coroutine library resumes through lua_resume above:
** counts the wrapper's calls while a throwaway state resumes two coroutines
** (coroutine.resume and coroutine.wrap) and closes one. */
static int coroutines_are_tracked(void)
{
  static worker probe; /* zeroed: nothing runs but the wrappers' bookkeeping */
  lua_State *L = luaL_newstate();
  if (L == NULL) return 0;
  *(worker **)lua_getextraspace(L) = &probe;
  luaL_requiref(L, LUA_COLIBNAME, luaopen_coroutine, 1);
  lua_pop(L, 1);
  static const char chunk[] = "local co = coroutine.create(function() coroutine.yield() end)\n"
                              "coroutine.resume(co) coroutine.close(co)\n"
                              "return coroutine.wrap(function() return 1 end)()";
  unsigned before = wrapped_calls;
  int ok = luaL_loadbufferx(L, chunk, sizeof chunk - 1, "=probe", "t") == LUA_OK &&
           lua_pcall(L, 0, 1, 0) == LUA_OK;
  lua_close(L);
  return ok && wrapped_calls - before >= 3 && probe.running == NULL;
}

/* Whether the worker ticks: for a CPU budget, and for notes, which would
** otherwise wait in a guest that computes without another frame (a replay
** serves them before it ends a run the budget ended: session.lua). */
static int ticks_needed(const worker *w)
{
  return w->init.cpu_ms != 0 || w->init.turn_cpu_ms != 0 || w->init.notify != NULL;
}

void worker_cpu_timer(worker *w)
{
  /* The probe runs in every worker, ticking or not: it allocates, and
  ** whether a worker ticks must not change what its allocator holds, or a
  ** replay's guest could see other addresses than its recording's. */
  int tracked = coroutines_are_tracked();
  if (!ticks_needed(w)) return;
  if (!tracked)
    worker_die(WORKER_EXIT_INTERNAL,
               "limits.cpu: this worker's Lua resumes coroutines without "
               "going through its lua_resume wrapper, so a coroutine could run outside the CPU "
               "budget and keep notes waiting");
  cpu_worker = w;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cpu_tick;
  sa.sa_flags = SA_RESTART;
  sigfillset(&sa.sa_mask);
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGVTALRM;
  timer_t t;
  struct itimerspec every = {.it_interval = {0, CPU_TICK_NS}, .it_value = {0, CPU_TICK_NS}};
  if (sigaction(SIGVTALRM, &sa, NULL) != 0 || timer_create(CLOCK_PROCESS_CPUTIME_ID, &ev, &t) != 0 ||
      timer_settime(t, 0, &every, NULL) != 0)
    worker_die(WORKER_EXIT_INTERNAL, "limits.cpu: cannot start the CPU timer: %s", strerror(errno));
}

void worker_cpu_turn(worker *w)
{
  if (w->init.turn_cpu_ms == 0 || !w->cpu_on) return;
  cpu_account(w); /* what the last turn spent is its own */
  w->turn_used_ns = 0;
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
  if (w->notes.size > 0) worker_notes_flush(w);
  char msg[160];
  if (w->init.instructions != 0 && w->executed >= w->init.instructions)
    budget_exhausted(L, w, msg,
                     snprintf(msg, sizeof msg,
                              "instruction budget of %" PRIu64 " exhausted (limits.instructions)",
                              w->init.instructions),
                     "instructions");
  uint64_t turn = w->init.turn_instructions;
  if (turn != 0 && w->executed - w->turn_start >= turn)
    budget_exhausted(L, w, msg,
                     snprintf(msg, sizeof msg,
                              "turn instruction budget of %" PRIu64
                              " exhausted (limits.turn_instructions: a turn ends when "
                              "the host answers a deferred call)",
                              turn),
                     "instructions");
  if (w->cpu_due) cpu_check(L, w);
}

/* The smaller of the budgets in force, as the hook's step, at most HOOK_STEP. */
static int hook_step_of(const worker_init *in)
{
  uint64_t step = HOOK_STEP;
  if (in->instructions != 0 && in->instructions < step) step = in->instructions;
  if (in->turn_instructions != 0 && in->turn_instructions < step) step = in->turn_instructions;
  return (int)step;
}

/* The instruction hook, on the main thread (coroutines created later inherit
** it), when a budget is set. It counts only bytecode the state runs, and none
** runs between this and the guest's chunk, so a prepared worker sets it before
** it parks (nothing is left for after its start) and counts exactly what a
** fresh one does. Once; worker_limits_start sets it if this was not called. */
void worker_limits_hook(worker *w)
{
  if (w->hook_step != 0 || (w->init.instructions == 0 && w->init.turn_instructions == 0)) return;
  w->hook_step = hook_step_of(&w->init);
  lua_sethook(w->L, count_hook, LUA_MASKCOUNT, w->hook_step);
}

/* Called once, just before the guest's chunk is loaded: from here on every
** allocation counts against the cap and every instruction against the budgets. */
void worker_limits_start(worker *w)
{
  w->mem_exempt = 0;
  worker_limits_hook(w);
  if (ticks_needed(w)) {
    w->cpu_last_ns = cpu_now_ns();
    w->cpu_on = 1;
  }
}
