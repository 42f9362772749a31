/*
** worker.h -- the parts of airlock-worker and the one state they share.
** The worker hosts a single guest and then exits, so that state is a singleton.
*/
#ifndef AIRLOCK_WORKER_H
#define AIRLOCK_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <msgpack.h>

#include "airlock.h"

/* Exit codes. After ready every ending is a done or pause frame and code 0,
** except a broken channel: then nobody is left to tell, stderr says why. */
#define WORKER_EXIT_DONE     0
#define WORKER_EXIT_INTERNAL 1 /* the worker itself failed (out of memory) */
#define WORKER_EXIT_BADINIT  2 /* the init frame was missing or malformed */
#define WORKER_EXIT_CHANNEL  3 /* fd 3 broke or carried an unexpected frame */
#define WORKER_EXIT_CONFINE  4 /* a required confinement layer is missing */

#define WORKER_INIT_MAX (64u << 20) /* init comes from the trusted parent */
#define WORKER_TEXT_MAX (64u << 10) /* longest message or traceback in done */

typedef struct worker_init {
  const char *name, *source; /* guest.name ("" if absent), guest.source */
  uint32_t name_len, source_len;
  const msgpack_object *input;         /* NULL when absent (the guest gets nil) */
  const msgpack_object *effects;       /* array of strings, or NULL */
  const msgpack_object *notify;        /* array of strings: the effects that are notifications
                                          (sent without waiting, no answer), or NULL */
  const msgpack_object *confine;       /* map, or NULL */
  const msgpack_object *resume_inputs; /* array: what host.input returns, in order,
                                          before it pauses again (resume), or NULL */
  int prepared;                        /* init said prepare = true: a start frame brings the run */
  int64_t seed;
  uint64_t instructions, memory, output; /* limits; 0 = unlimited */
  uint64_t turn_instructions;            /* limits.turn: instructions between two turns (replies
                                            marked turn); 0 = unlimited */
  uint64_t cpu_ms, turn_cpu_ms;          /* limits.cpu, limits.turn_cpu: the worker's own CPU time
                                            (user + system) for the run, and for one turn; 0 = none */
  int cpu_enforced;                      /* limits.cpu_enforced: 0 in a replay (they never strike) */
} worker_init;

typedef struct worker {
  lua_State *L;
  worker_init init;

  /* limits.c: the allocator's account and the instruction budget */
  size_t mem_used;
  int mem_exempt;      /* >0: the cap is lifted (runtime setup, reports) */
  int mem_refused;     /* why the last growth failed: MEM_CAP or MEM_SYSTEM (0: none) */
  uint64_t as_limit;   /* RLIMIT_AS as the spawner set it (0: none), read before confining */
  uint64_t executed;   /* instructions counted by the hook so far */
  uint64_t turn_start; /* executed when the last turn ended (a reply marked turn) */
  int hook_step;

  /* limits.c: the CPU budgets. A CPU-time timer's signal sets cpu_due and
  ** arms a one-instruction hook on the running thread, which reads the clock;
  ** between two ticks no hook is set and the interpreter runs at full speed. */
  lua_State *running;               /* the coroutine being resumed (NULL: the main thread) */
  volatile int cpu_on;              /* the ticks act (for the budgets, and to send waiting
                                       notes): from the guest's first instruction until its
                                       chunk has ended (never while the state closes) */
  volatile int cpu_due;             /* a tick came: check the clock at the next instruction */
  volatile int cpu_armed;           /* the tick's hook is set and has not run yet */
  lua_State *volatile cpu_armed_on; /* the running coroutine it was set for (NULL: main) */
  volatile unsigned cpu_skip;       /* ticks to let pass after a costly setting of the hook */
  volatile unsigned cpu_signals;    /* ticks delivered since the clock was last read */
  uint64_t cpu_last_ns;             /* the process's CPU clock when it was last read */
  uint64_t cpu_used_ns;             /* CPU charged to the run (limits.cpu) ... */
  uint64_t turn_used_ns;            /* ... and to this turn (limits.turn_cpu), since the last
                                       reply marked turn */

  /* run.c: CLOCK_MONOTONIC ns just before the guest's first instruction */
  uint64_t started_ns;

  /* host_api.c: how many resume inputs host.input has handed out */
  uint32_t inputs_used;

  /* host_api.c: print's output budget */
  uint64_t out_used;
  int out_truncated;

  /* host_api.c: the warning function's state and the line it builds */
  int warn_on, warn_cont;
  size_t warn_len;
  char warn_buf[1024];

  /* channel.c: one outgoing frame at a time, one reply at a time */
  uint64_t last_id;
  msgpack_sbuffer out;
  msgpack_packer pk; /* writes into out, refusing past the frame limit */
  int out_refused;   /* the frame in out is incomplete: never send it */
  airlock_frame_reader in;
  msgpack_unpacked reply;

  /* channel.c: notes not sent yet, whole frames (header and body), sent with
  ** the next frame, when they pass a size, or from the instruction hook or
  ** the CPU tick's (limits.c) */
  msgpack_sbuffer notes;
  uint32_t notes_n;
} worker;

/* worker.mem_refused: the allocator refused past limits.memory, or the
** system refused (the address space limit, confine.rlimits.as, or the host). */
#define MEM_CAP    1
#define MEM_SYSTEM 2

/* The worker owning L (kept in the state's extra space). */
static inline worker *worker_of(lua_State *L)
{
  return *(worker **)lua_getextraspace(L);
}

/* main.c */
__attribute__((noreturn, format(printf, 2, 3))) void worker_die(int code, const char *fmt, ...);

/* init.c: validates the decoded init map into w->init, or dies with exit 2.
** An init with prepare = true and no guest makes a prepared worker: its run
** (run, guest, input) comes later, in a start frame (worker_start_parse). */
void worker_init_parse(worker *w, const msgpack_object *init);
void worker_start_parse(worker *w, const msgpack_object *start);

/* channel.c */
void worker_channel_open(worker *w);
/* Reads the next frame, which must be of kind want (init first; start, for a
** prepared worker, after ready), and decodes it into u; dies on any failure. */
void worker_channel_read_first(msgpack_unpacked *u, airlock_msg *msg, airlock_msg_kind want);
/* Starts an outgoing frame of kind kind with nfields fields (t included) and
** returns the packer, positioned after the t field. */
msgpack_packer *worker_frame_begin(worker *w, airlock_msg_kind kind, uint32_t nfields);
/* Sends the frame begun last; dies if the channel is broken. */
void worker_frame_send(worker *w);
/* Begins a call frame for effect and returns the packer positioned at args. */
msgpack_packer *worker_call_begin(worker *w, const char *effect, size_t len);
/* Sends the call, waits for its reply and pushes ok, or raises err. */
int worker_call_finish(lua_State *L, worker *w);
/* The same without a Lua state (for the warning function, which may run
** where raising is not allowed): the reply's value is dropped; -1 on err. */
int worker_call_finish_quiet(worker *w);
/* A note (an effect the policy declares a notification): begun like a call,
** then queued, not sent: notes go out with the next frame, when a batch is
** full, or from the instruction hook (worker_notes_flush). No answer. L may
** be NULL (the warning function): a note too large is then dropped. */
msgpack_packer *worker_note_begin(worker *w, const char *effect, size_t len);
int worker_note_finish(lua_State *L, worker *w);
void worker_notes_flush(worker *w);
/* Registers what worker_call_finish needs in L (under lua_pcall). */
void worker_channel_lua(lua_State *L);

/* limits.c */
lua_State *worker_newstate(worker *w);
/* Before confining (it needs timer_create and sigaction): when a CPU budget is
** set, a timer on the process's CPU clock ticking every AIRLOCK_CPU_TICK_MS. */
void worker_cpu_timer(worker *w);
/* A reply marked turn arrived: the next turn's CPU budget starts now. */
void worker_cpu_turn(worker *w);
void worker_limits_hook(worker *w);
void worker_limits_start(worker *w);

/* sandbox_env.c: the guest's globals; runs under lua_pcall. */
void worker_env_open(lua_State *L, worker *w);

/* host_api.c: host, print */
void worker_host_open(lua_State *L, worker *w);

/* modules.c: require */
void worker_modules_open(lua_State *L);

/* os_shim.c: os.time, os.clock, os.date, os.difftime */
void worker_os_open(lua_State *L);

/* confine.c: applies the worker's own layers and packs one report map. */
/* channel.c: after the final frame, waits for the parent to hang up, then exits. */
__attribute__((noreturn)) void worker_end(worker *w);

int worker_confine(const msgpack_object *confine_spec, msgpack_packer *report, char *why, size_t len);

/* run.c: loads and runs the guest (its input at input_idx), sends done, exits. */
__attribute__((noreturn)) void worker_run_guest(worker *w, int input_idx);
/* Sends done with an error (cause: error, instructions, memory, denied), exits. */
__attribute__((noreturn)) void worker_send_error(worker *w, const char *message, size_t mlen,
                                                 const char *traceback, size_t tlen, const char *cause);
/* Remembers an effect error the policy marked denied: if the guest's final
** error is exactly this message, the run's cause is denied. */
void worker_note_denied(lua_State *L, const char *msg, size_t len);

#endif
