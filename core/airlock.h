/*
** airlock.h -- public C API of libairlock: frames, protocol codec, spawn, broker.
** No Lua here: a C host can use every primitive without an interpreter.
** Conventions: functions return 0 (or a count) on success and -errno on failure;
** objects that can fail expose a message accessor with a person-readable cause.
** Nothing in libairlock prints or exits. Not thread-safe: one broker per thread.
*/
#ifndef AIRLOCK_H
#define AIRLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <msgpack.h>
#include "confine.h"

#define AIRLOCK_PROTOCOL_VERSION  1
#define AIRLOCK_FRAME_MAX_DEFAULT (16u << 20)  /* 16 MiB */
#define AIRLOCK_CAPTURE_DEFAULT   (64u << 10)  /* 64 KiB per stream */
#define AIRLOCK_OUTPUT_DEFAULT    (64u << 10)  /* limits.output when a policy gives none */
#define AIRLOCK_EFFECT_NAME_MAX   256          /* bytes in an effect name */
#define AIRLOCK_CHANNEL_FD        3            /* the child's end of the socketpair */
#define AIRLOCK_MSG_DEPTH_MAX     32           /* nesting accepted from a child */
#define AIRLOCK_MSG_DECODE_SLACK  (256 * 1024) /* decode bytes always allowed beyond 3x a frame */

/* ------------------------------------------------------------------ causes */

/* How a run ended: one stable word each (see airlock_cause_name). */
typedef enum airlock_cause {
  AIRLOCK_CAUSE_OK = 0,
  AIRLOCK_CAUSE_ERROR,        /* the guest raised an error */
  AIRLOCK_CAUSE_INSTRUCTIONS, /* instruction budget ran out */
  AIRLOCK_CAUSE_MEMORY,       /* memory cap hit */
  AIRLOCK_CAUSE_DEADLINE,     /* wall-clock deadline: the parent killed the child */
  AIRLOCK_CAUSE_CPU,          /* RLIMIT_CPU (SIGXCPU, or SIGKILL at the hard limit) */
  AIRLOCK_CAUSE_SECCOMP,      /* killed by SIGSYS */
  AIRLOCK_CAUSE_CRASH,        /* any other fatal signal */
  AIRLOCK_CAUSE_EXIT,         /* exited without a done frame */
  AIRLOCK_CAUSE_PROTOCOL,     /* bad, oversized or unexpected frame */
  AIRLOCK_CAUSE_DENIED,       /* an effect was refused and the guest did not handle it */
  AIRLOCK_CAUSE_CONFINEMENT,  /* a required layer could not be applied */
  AIRLOCK_CAUSE_LEDGER,       /* the ledger refused a required record */
  AIRLOCK_CAUSE_DIVERGED,     /* replay asked for a different effect */
  AIRLOCK_CAUSE_PAUSED,       /* the guest asked for input */
  AIRLOCK_CAUSE_CANCELLED,    /* the host cancelled the run */
  AIRLOCK_CAUSE_COUNT_
} airlock_cause;

/* The cause's word ("ok", "deadline", ...); "unknown" for an out-of-range value. */
const char *airlock_cause_name(airlock_cause c);
/* The cause for a word, or -1 when the word names no cause. */
int airlock_cause_from_name(const char *word);
/* Signal name without the SIG prefix ("SEGV"), or "signal N" in buf. */
const char *airlock_signal_name(int sig, char *buf, size_t len);
/* The errno's name ("ENOENT"), or "errno N" in buf. */
const char *airlock_errno_name(int err, char *buf, size_t len);
/* The errno's text with its name, "No such file or directory (ENOENT)", for
** messages a person reads. The string lives in a per-thread buffer that the
** thread's next call overwrites. */
const char *airlock_strerror(int err);

/* ------------------------------------------------------------------ frames */

/* A frame is a 4-byte big-endian length N (1 <= N <= max) and N bytes of body.
** The reader is incremental: it accepts partial headers and bodies across calls
** and never allocates more than the bytes that have actually arrived (rounded up
** to a growth step), so a lying length header costs nothing. */
#define AIRLOCK_FRAME_AHEAD 512 /* bytes read at once when a frame's rest is smaller */
typedef struct airlock_frame_reader {
  uint8_t hdr[4];
  uint32_t hdr_have; /* header bytes received so far */
  uint32_t len;      /* body length once the header is complete */
  uint32_t have;     /* body bytes received */
  uint32_t cap;      /* bytes allocated at body */
  uint32_t max;      /* largest accepted body */
  uint8_t *body;
  /* Read-ahead: a small frame and its header come in one read(2); bytes past
  ** the frame wait here for the next pull (a fixed buffer, never grown). */
  uint8_t ahead[AIRLOCK_FRAME_AHEAD];
  uint32_t ahead_off, ahead_len;
  int drained; /* the last read returned less than it asked for */
} airlock_frame_reader;

#define AIRLOCK_FRAME_READY 1         /* a whole frame is in r->body[0..r->len) */
#define AIRLOCK_FRAME_AGAIN 0         /* no complete frame yet: the source would block */
#define AIRLOCK_FRAME_EOF   (-100000) /* clean end of stream at a frame boundary */

/* A byte source: returns bytes read (>0), 0 at end of stream, or -errno
** (-EAGAIN when it would block). */
typedef ssize_t (*airlock_read_fn)(void *ctx, void *buf, size_t n);

/* Prepares an empty reader accepting bodies up to max bytes (0 = default). */
void airlock_frame_reader_init(airlock_frame_reader *r, uint32_t max);
/* Frees the body buffer; the reader may be initialised again. Idempotent. */
void airlock_frame_reader_free(airlock_frame_reader *r);
/* Pulls bytes from src until one frame is complete or the source would block.
** Returns AIRLOCK_FRAME_READY, AIRLOCK_FRAME_AGAIN, AIRLOCK_FRAME_EOF, or
** -EMSGSIZE (length over max), -EPROTO (zero length, or EOF inside a frame),
** -ENOMEM, or a -errno from the source. EINTR is retried internally.
** After READY the caller consumes r->body and calls airlock_frame_reader_reset. */
int airlock_frame_reader_pull(airlock_frame_reader *r, airlock_read_fn src, void *ctx);
/* airlock_frame_reader_pull on a file descriptor (read(2)). */
int airlock_frame_read_fd(airlock_frame_reader *r, int fd);
/* Forgets the current frame and keeps the buffer for the next one (buffers
** larger than 1 MiB are released so one big frame does not pin memory).
** Bytes already read past it stay for the next frame. */
void airlock_frame_reader_reset(airlock_frame_reader *r);
/* 1 when the reader holds no byte of a next frame and its last read returned
** fewer bytes than it asked for: the source was empty then, so a caller woken
** by level-triggered readiness (epoll without EPOLLET) may wait for the next
** wake-up instead of reading once more to see EAGAIN. */
int airlock_frame_reader_drained(const airlock_frame_reader *r);
/* Bytes read past the current frame, waiting for the next pull. */
uint32_t airlock_frame_reader_buffered(const airlock_frame_reader *r);
/* Writes one whole frame (header + body) to fd, retrying on EINTR and short
** writes; on a non-blocking fd it waits for room (poll) rather than fail with
** EAGAIN. Returns 0, -EMSGSIZE for len 0 or over UINT32_MAX, or -errno. */
int airlock_frame_write_fd(int fd, const void *body, size_t len);
/* Writes bytes that already hold whole frames, each with its header (a batch),
** the same way. Returns 0 or -errno. */
int airlock_frames_write_fd(int fd, const void *frames, size_t len);

/* Builds frames in a msgpack_sbuffer: begin reserves the 4-byte header, the
** caller packs exactly one map, end writes the length. end returns -EMSGSIZE
** when the body is empty or larger than max (0 = default). */
int airlock_frame_begin(msgpack_sbuffer *sb);
int airlock_frame_end(msgpack_sbuffer *sb, uint32_t max);

/* ------------------------------------------------------------------ codec */

typedef enum airlock_msg_kind {
  AIRLOCK_MSG_INIT = 1,
  AIRLOCK_MSG_READY,
  AIRLOCK_MSG_CALL,
  AIRLOCK_MSG_REPLY,
  AIRLOCK_MSG_PAUSE,
  AIRLOCK_MSG_DONE,
  AIRLOCK_MSG_NOTE, /* an effect the policy declared a notification: no reply */
  AIRLOCK_MSG_START /* parent -> a prepared worker (init without guest): its run */
} airlock_msg_kind;
#define AIRLOCK_MSG_LAST AIRLOCK_MSG_START

/* One decoded protocol message. Pointers borrow from the msgpack_unpacked given
** to airlock_msg_decode and live as long as it does. */
typedef struct airlock_msg {
  airlock_msg_kind kind;
  uint64_t version;   /* init, ready, start: field v (0 if absent) */
  uint64_t id;        /* call, reply */
  const char *effect; /* call: not NUL-terminated */
  uint32_t effect_len;
  const msgpack_object *value; /* call: args; reply/done: ok; pause: prompt;
                                  ready: confined; init, start: the whole map */
  const msgpack_object *err;   /* reply: err (string); done: err (map) */
  const msgpack_object *code;  /* reply: optional err code (string) */
  int turn;                    /* reply: field turn is true (the answer to a deferred
                                  call: the guest's turn ends) */
  uint64_t started;            /* done: field started, the worker's CLOCK_MONOTONIC in
                                  nanoseconds just before the guest's first instruction
                                  (0 if absent) */
} airlock_msg;

/* Checks that body is a well-formed message before anything is allocated for
** it: nesting at most AIRLOCK_MSG_DEPTH_MAX, every array and map count no larger
** than the bytes left, no trailing bytes. Returns 0 or -EPROTO with a message. */
int airlock_msg_check(const void *body, size_t len, char *err, size_t errlen);
/* The same walk over what may be only the first len bytes of a message: returns
** 1 when every byte fits a well-formed message that would need more bytes, 0 when
** body is exactly one complete well-formed message, -EPROTO (with a message)
** when the bytes cannot start one or a complete message has trailing bytes. */
int airlock_msg_check_prefix(const void *body, size_t len, char *err, size_t errlen);
/* Decodes a frame body: airlock_msg_check, then msgpack-c into *u (the caller
** owns u: msgpack_unpacked_init before, msgpack_unpacked_destroy after), then
** checks the top-level map: string keys, t a known kind, the kind's required
** fields with the right types (call: id positive integer, effect a non-empty
** string of at most AIRLOCK_EFFECT_NAME_MAX bytes; reply: id, ok or err; done: ok
** or err). Unknown fields are ignored. Returns 0 or -EPROTO with a message such
** as "call: field 'effect' must be a string (got integer)". */
int airlock_msg_decode(const void *body, size_t len, msgpack_unpacked *u, airlock_msg *msg, char *err,
                       size_t errlen);
/* The word for a kind ("call"), or "?" */
const char *airlock_msg_kind_name(airlock_msg_kind k);
/* Packs the string s of length n as a msgpack str. */
void airlock_pack_str(msgpack_packer *pk, const char *s, size_t n);
/* Packs a NUL-terminated key string. */
void airlock_pack_cstr(msgpack_packer *pk, const char *s);
/* Looks up key in a map object; NULL if absent or o is not a map. */
const msgpack_object *airlock_msg_field(const msgpack_object *o, const char *key);

/* Encoding, the mirror of airlock_msg_decode: every writer of frames (the
** broker, the worker, `airlock call`, a C host) starts its messages here, so
** the keys are spelt once. Each packs the map header for nfields fields in
** all and the fields it names; the caller packs the rest. */
/* {t = kind, ...}: nfields counts t. */
void airlock_pack_head(msgpack_packer *pk, airlock_msg_kind kind, uint32_t nfields);
/* {t = "call", id, effect, args = <the caller packs the value next>} */
void airlock_pack_call(msgpack_packer *pk, uint64_t id, const char *effect, size_t len);
/* The same head for a note {t = "note", id, effect, args}: the caller packs args. */
void airlock_pack_note(msgpack_packer *pk, uint64_t id, const char *effect, size_t len);
/* {t = "reply", id, turn = true (when turn), ok = <the caller packs the value next>} */
void airlock_pack_reply_ok(msgpack_packer *pk, uint64_t id, int turn);
/* {t = "reply", id, turn = true (when turn), err = msg, code = code (when not NULL)}:
** complete. */
void airlock_pack_reply_err(msgpack_packer *pk, uint64_t id, const char *msg, size_t len, const char *code,
                            int turn);

/* What a C host puts in a worker's init frame: every field the Lua module's
** init carries (docs/API.md, "C hosts"), so a C host can give its guests what
** `airlock run` gives them. Zero and NULL fields are left out of the frame, which
** the worker reads as unlimited or absent (as a Lua host's 0 is): a zeroed
** struct asks for nothing, so start from airlock_untrusted_defaults. Fields
** the Lua module sends that a host does not: the run's serial (`run`, taken
** from the broker), `resume.inputs` (the answers a resumed run's host.input
** replays: internal to resume) and `confine.pretend_absent` (tests only). */
typedef struct airlock_init {
  const char *guest_name; /* NULL: "guest" */
  const char *source;
  size_t source_len;                     /* the guest's Lua source (NULL: empty) */
  uint64_t instructions;                 /* limits.instructions: VM instructions of the run */
  uint64_t memory;                       /* limits.memory: bytes of Lua heap */
  const char *const *effects;            /* NULL-terminated effect names it may call, each
                                            1 to AIRLOCK_EFFECT_NAME_MAX bytes */
  int confine_landlock, confine_seccomp; /* the worker applies the layer to itself */
  int require_landlock, require_seccomp; /* ... and without it the run ends with cause
                                            confinement before any guest code */
  uint64_t output;                       /* limits.output: bytes the guest may print over
                                            the run (the log effect) */
  uint64_t turn_instructions;            /* limits.turn_instructions: VM instructions of
                                            one turn (airlock_run_turn ends a turn);
                                            then cause instructions */
  uint64_t cpu_ms;                       /* limits.cpu: ms of the worker's own CPU time
                                            (user + system) for the run; then cause cpu */
  uint64_t turn_cpu_ms;                  /* limits.turn_cpu: the same for one turn */
  int64_t seed;                          /* math.random's and the string hash's seed (0: 0;
                                            the Lua module draws one per run) */
  const void *input;
  size_t input_len;               /* the guest's input, its `...`: the bytes of one
                                     msgpack value (packed with msgpack-c) that a
                                     Lua value can be (no ext; no nil or NaN map
                                     key). NULL: none (nil) */
  const char *const *notify;      /* NULL-terminated effects the guest sends as
                                     notifications (AIRLOCK_EV_NOTE, no answer) */
  int confine_mdwe, require_mdwe; /* memory-deny-write-execute, as above (skipped on
                                     kernels before 6.3) */
  const void *seccomp_program;    /* optional: the worker's filter compiled once
                                     by the parent for pid 1 of a pid namespace
                                     (airlock_seccomp_worker_program(1, ...)); the
                                     worker builds its own without it, or when it is
                                     not pid 1. Saves ~0.2 ms per spawn */
  size_t seccomp_program_len;
  int prepare; /* 1: a prepared worker's init (airlock_run_opts.
                  parked): no guest and no input here; its run
                  gets them from airlock_start_frame */
} airlock_init;
/* Fills sb (cleared first) with the whole init frame, header included. The
** input is checked first, without allocating: one well-formed value of at
** most max bytes, which the worker can turn into a Lua value; then the frame,
** whose body must fit in max (0: AIRLOCK_FRAME_MAX_DEFAULT) and pass the
** checks the worker applies to it (airlock_msg_check: nesting, size).
** Returns 0, -EINVAL (a name, or a pointer NULL with a length), -EPROTO (the
** input), -EMSGSIZE (over max) or -ENOMEM, with a message in err. */
int airlock_init_frame(msgpack_sbuffer *sb, const airlock_init *in, uint32_t max, char *err, size_t errlen);
/* The start frame that gives a prepared worker (in->prepare) its run: run
** (airlock_run_serial of the parked run), in's guest name, source and input,
** checked as airlock_init_frame checks them; the rest of in was fixed by the
** worker's init. For airlock_run_unpark's o->init. Same returns. */
int airlock_start_frame(msgpack_sbuffer *sb, const airlock_init *in, uint64_t run, uint32_t max, char *err,
                        size_t errlen);

/* ------------------------------------------------------------------ spawn */

/* What the spawner does between fork and exec, in this order: socketpair end
** to fd 3 (when channel), stdin from /dev/null (or stdin_fd), stdout/stderr to
** pipes, every other fd closed, signals reset and unblocked, new session (and process group),
** PR_SET_PDEATHSIG(SIGKILL), chdir, capabilities dropped, rlimits, the
** prepared confinement, environment replaced, exec. */
/* The step a spawn failed in (airlock_child.step, airlock_broker_error_step),
** so a caller decides by a code what to make of a failure and leaves the
** message to people. In the order a spawn takes them. */
typedef enum airlock_spawn_step {
  AIRLOCK_STEP_NONE = 0,    /* "none": nothing failed */
  AIRLOCK_STEP_OPTIONS,     /* "options": the options were refused; nothing was made */
  AIRLOCK_STEP_CGROUP,      /* "cgroup": the run's cgroups could not be made (broker) */
  AIRLOCK_STEP_PREPARE,     /* "prepare": what the parent makes first (pipes, the
                               socketpair, the stack, the identity namespaces,
                               airlock-init, the view as the host has it) */
  AIRLOCK_STEP_PROTECT,     /* "protect": a protected path could not be held, made,
                               or covered in the child */
  AIRLOCK_STEP_CLONE,       /* "clone": the child, and its namespaces, were not made */
  AIRLOCK_STEP_CGROUP_JOIN, /* "cgroup_join": the child could not join its cgroups */
  AIRLOCK_STEP_NAMESPACE,   /* "namespace": joining the shared net namespace, or the
                               user namespace's id maps */
  AIRLOCK_STEP_MOUNT,       /* "mount": the mount list (airlock_spawn_opts.mounts) */
  AIRLOCK_STEP_EGRESS,      /* "egress": the egress listener */
  AIRLOCK_STEP_IDENTITY,    /* "identity": becoming uid/gid 65534, dropping capabilities */
  AIRLOCK_STEP_PROCESS,     /* "process": signals, session, no_new_privs, descriptors,
                               personality, the layer table's (mdwe), chdir */
  AIRLOCK_STEP_RLIMITS,     /* "rlimits": setrlimit */
  AIRLOCK_STEP_CONFINE,     /* "confine": the prepared confinement (Landlock, seccomp) */
  AIRLOCK_STEP_EXEC,        /* "exec": the program (or airlock-init) could not be run */
  AIRLOCK_STEP_WATCH,       /* "watch": the broker could not watch the child (pidfd, epoll) */
  AIRLOCK_STEP_COUNT_
} airlock_spawn_step;
/* The step's word ("clone"), or "unknown" for an out-of-range value. */
const char *airlock_spawn_step_name(airlock_spawn_step s);

/* airlock-worker's exit status when a layer its init requires could not be
** applied; a run that expects ready ends with cause confinement then. */
#define AIRLOCK_WORKER_EXIT_CONFINE 4

/* One mount of a child's own mount namespace (airlock_spawn_opts.mounts). A
** spawn's mounts are data: the spawner checks the list, plans it against the
** host as it is (core/spawn_mount.c) and the child carries the plan out before
** exec. Every kind needs CLONE_NEWNS. The root is made rprivate first, so
** nothing reaches the host. */
typedef enum airlock_mount_kind {
  AIRLOCK_MOUNT_WORKSPACE = 1, /* target: the run's workspace, an absolute directory other
                               than / (at most one; normally the workdir): bound onto
                               itself nosuid and nodev, idmapped when the parent is root
                               so that files the child (uid 65534) makes there are the
                               caller's; without a view everything else is made
                               read-only */
  AIRLOCK_MOUNT_KEEP,          /* target: an absolute directory (at most four) that stays
                                  visible at its path, read-only, when it lies beneath a
                                  tmpfs or in a view (the airlock command's own, so
                                  `airlock call` runs); a workspace stays visible anyway */
  AIRLOCK_MOUNT_TMPFS,         /* target: a directory covered by a private, empty tmpfs
                                  (mode 1777, nosuid, nodev); size is its "size=" option
                                  (NULL: AIRLOCK_TMPFS_SIZE_DEFAULT bytes), inodes its "nr_inodes=" (0:
                                  AIRLOCK_TMPFS_INODES_DEFAULT). With confine's Landlock,
                                  it gets read+write */
  AIRLOCK_MOUNT_VIEW_RO,       /* target: an absolute path other than /: with any VIEW_* or
                                  ROOTFS record, the child's root is a new, empty tmpfs
                                  holding the view's paths (read-only here), the workspace,
                                  the kept directories, the tmpfs and a /proc of its own,
                                  each at its path (pivot_root); what the view does not name
                                  is not there. At most 64 paths in all */
  AIRLOCK_MOUNT_VIEW_RW,       /* the same, writable */
  AIRLOCK_MOUNT_ROOTFS,        /* source: a directory whose top-level entries (but dev,
                                  proc, sys, tmp) make the view's root, read-only, nosuid,
                                  nodev: a program runs inside another root file system, and
                                  its path is resolved inside it (at most one) */
  AIRLOCK_MOUNT_PROTECT,       /* target: an absolute path beneath the workspace (at most 128),
                                  made read-only in place (a
                                  read-only bind of itself) once the workspace is, each
                                  directory above it a bind of itself: a program may not
                                  change, remove, rename or add to them. One that does not
                                  exist is made first, empty (a trailing '/': a directory),
                                  and removed when the child is closed (docs/TOOLS.md) */
  AIRLOCK_MOUNT_OVERLAY,       /* target: the workspace (its WORKSPACE record's target): the
                                  program sees it through an overlay whose writable layer is
                                  a tmpfs of size bytes ("size=", required) and inodes files
                                  ("nr_inodes=", required), so the kernel bounds what a run
                                  can write (ENOSPC past it) and the real workspace is never
                                  written. The child hands the tmpfs to the parent
                                  (airlock_child.overlay) before exec, so it outlives the
                                  child's mount namespace (docs/TOOLS.md, "Overlay") */
  AIRLOCK_MOUNT_KIND_COUNT_
} airlock_mount_kind;

typedef struct airlock_mount {
  airlock_mount_kind kind;
  const char *target;   /* where it appears (every kind but ROOTFS) */
  const char *source;   /* ROOTFS: the root file system's directory */
  const char *size;     /* TMPFS, OVERLAY: "size=", e.g. "64m"; NULL: AIRLOCK_TMPFS_SIZE_DEFAULT
                           (OVERLAY: required) */
  unsigned long inodes; /* TMPFS, OVERLAY: "nr_inodes="; 0: the default (OVERLAY: required) */
} airlock_mount;
#define AIRLOCK_MOUNTS_MAX 256 /* records in airlock_spawn_opts.mounts */

/* The kind's word ("workspace", "keep", "tmpfs", "view_ro", "view_rw", "rootfs",
** "protect", "overlay"), or "unknown". */
const char *airlock_mount_kind_name(airlock_mount_kind k);

typedef struct airlock_spawn_opts {
  const char *const *argv;                 /* the program's argv; argv[0] is its path unless path is set */
  const char *path;                        /* NULL: argv[0]. The program's path (no PATH search) */
  const char *const *envp;                 /* NULL: empty environment */
  const char *workdir;                     /* NULL: "/" */
  int channel;                             /* 1: create the fd-3 socketpair */
  int stdin_fd;                            /* -1: /dev/null */
  int stdout_fd, stderr_fd;                /* > 0: the child's stdout (stderr) is this descriptor, not
                                              captured (airlock_child.out, .err are -1); else a pipe */
  unsigned long namespaces;                /* CLONE_NEW* flags: namespaces the child is born in.
                                              With CLONE_NEWUSER the child maps itself to uid and
                                              gid 65534 inside, so exec leaves it no capability */
  int no_new_privs;                        /* 1: PR_SET_NO_NEW_PRIVS before exec */
  const airlock_rlimits *rlimits;          /* NULL: inherit. Applied last before exec */
  int netns_fd;                            /* > 0: join this (shared, empty) net namespace instead of
                                              making one; needs namespaces & CLONE_NEWNET, and the
                                              privilege to setns into it (root) */
  int drop_caps;                           /* 1: empty the bounding, ambient and inheritable sets
                                              before exec (needs CAP_SETPCAP: root, or a user
                                              namespace), so exec leaves no capability at all */
  const airlock_confine_prepared *confine; /* NULL: none. Applied last before exec,
                               after rlimits and the capability drop (no_new_privs,
                               landlock_restrict_self, seccomp); the caller keeps it
                               alive until airlock_spawn returns. Its filter must
                               allow execve. In kill mode the child hands its
                               seccomp listener to the parent (airlock_child.notify) */
  const int *cgroup_fds;                   /* NULL, or ncgroup_fds open cgroup.procs (airlock_cgroup; -1
                                              entries skipped) the child joins before anything else,
                                              so all it forks is counted */
  int ncgroup_fds;
  const airlock_mount *mounts; /* the child's mount namespace, as a list (see
                               airlock_mount): at most AIRLOCK_MOUNTS_MAX records,
                               checked before anything is made. NULL or none: no
                               mount of its own */
  size_t nmounts;
  int no_aslr;          /* 1: the child's address space is laid out without
                           randomisation (personality ADDR_NO_RANDOMIZE, kept
                           across exec): a recorded guest's worker, so that the
                           addresses Lua hashes and prints are a function of its
                           inputs and a replay sees the same ones */
  unsigned layers;      /* the layers the child sets on itself with one call
                           before exec, a bit each: row i of the layer table
                           (airlock_confine_layers in confine.h; its bit is
                           airlock_confine_layer_bit("mdwe")). mdwe:
                           memory-deny-write-execute, no mapping of the child
                           or of anything it runs may be writable and
                           executable, or become executable; kept across fork
                           and exec, never undone (the row's available() first).
                           A layer of the address space gets the child a copy
                           of it, not the caller's (CLONE_VM), which it would mark */
  int keep_identity;    /* 1: a parent that is root does not make the child host
                           uid/gid 65534: it keeps uid and gid 0, with no
                           supplementary group, and (with drop_caps) no
                           capability, so it still owns what root owns. For the
                           ledger process, which must own its session
                           directory; it confines itself before it reads */
  const char *init;     /* with CLONE_NEWPID: the path of airlock-init, which the
                           child becomes (PID 1): it runs the program as PID 2,
                           reaps every process, forwards signals, and reports the
                           program's wait status on airlock_child.status. Its
                           filter must allow execveat. NULL: the program is PID 1 */
  unsigned egress_port; /* > 0: with a net namespace of the child's own (not
                           netns_fd), the child brings its loopback up and listens
                           on 127.0.0.1:egress_port there before exec; the parent
                           gets the listener (airlock_child.egress) and the child
                           keeps none: a proxy outside accepts the program's
                           connections on it (airlock exec's egress proxy) */
} airlock_spawn_opts;

/* ------------------------------------------------------------------ identity */

/* When the parent runs as root, no child keeps a host identity that owns host
** files: every child becomes host uid AIRLOCK_RUN_UID and gid AIRLOCK_RUN_GID
** (nobody and nogroup on Debian, which own no files) with no supplementary
** groups, in AIRLOCK_RUN_USERNS when it asks for a user namespace. A parent
** that is not root gives its own ids, the most it has, mapped to 65534 inside. */
#define AIRLOCK_RUN_UID 65534
#define AIRLOCK_RUN_GID 65534
typedef enum airlock_identity_ns {
  AIRLOCK_RUN_USERNS,  /* 65534 inside is host 65534: children join it */
  AIRLOCK_IDMAP_USERNS /* the caller's uid and gid are 65534: idmaps a workspace */
} airlock_identity_ns;
/* The fd of one of the two namespaces, made on first use by this process (needs
** root), or -errno with a message in err. The fd stays open for the process. */
int airlock_identity_userns(airlock_identity_ns which, char *err, size_t errlen);

#define AIRLOCK_TMPFS_SIZE_DEFAULT   (64ul << 20) /* bytes of a private tmpfs whose size is NULL */
#define AIRLOCK_TMPFS_INODES_DEFAULT 16384ul      /* one per 4 KiB of the default 64 MiB */
/* Inodes an overlay's writable layer uses itself (its root, upper/, work/ and
** overlayfs's own two in work/), on top of the record's inodes. */
#define AIRLOCK_OVERLAY_OWN_INODES   5ul

/* The namespaces a child can be born in: the word policies use, the entry in
** /proc/PID/ns, and the CLONE_NEW* flag. The list ends with a NULL name. */
typedef struct airlock_namespace {
  const char *name; /* "user", "pid", "net", "ipc", "uts", "mount", "cgroup" */
  const char *proc; /* "user", ..., "mnt", "cgroup" */
  unsigned long flag;
} airlock_namespace;
extern const airlock_namespace airlock_namespaces[];

typedef struct airlock_child {
  pid_t pid;
  int pidfd;                       /* readable when the child exits (-1 if the kernel lacks pidfd) */
  int chan;                        /* parent's end of the socketpair, non-blocking, or -1 */
  int out, err;                    /* read ends of the capture pipes, non-blocking */
  int notify;                      /* seccomp user-notification listener for the child's refused
                                      calls (see airlock_spawn_opts.confine), or -1 */
  int status;                      /* with airlock_spawn_opts.init: the read end of the status pipe,
                                      non-blocking (AIRLOCK_INIT_* records), or -1 */
  int egress;                      /* with airlock_spawn_opts.egress_port: the listening TCP socket
                                      in the child's net namespace (blocking), or -1 */
  int overlay;                     /* with an AIRLOCK_MOUNT_OVERLAY record: the root of the tmpfs
                                      holding the overlay's writable layer (upper/, work/), an
                                      directory the parent may read once the run
                                      has ended, or -1 */
  int overlay_mount;               /* with an AIRLOCK_MOUNT_OVERLAY record: the overlay mount itself,
                                      held so that its teardown (every inode the program looked up)
                                      happens off the caller's path, in airlock_close_later (from
                                      airlock_child_close); not to be read, or -1 */
  struct airlock_protect *protect; /* with AIRLOCK_MOUNT_PROTECT records: the paths
                     held for the run and the placeholders made; airlock_child_close
                     removes those once the child has exited */
  airlock_spawn_step step;         /* when airlock_spawn fails: the step it failed in (the
                             child's own report, for a step after clone) */
} airlock_child;

/* airlock-init's status records: two native uint32, kind then value. */
enum {
  AIRLOCK_INIT_WAIT_STATUS = 1, /* value: the program's wait status */
  AIRLOCK_INIT_EXEC_FAILED = 2
}; /* value: the errno of the program's exec */

/* Starts a child. Returns 0 and fills c (all fds CLOEXEC), or -errno with a
** message in err naming the step that failed ("exec /x: No such file ...")
** and its code in c->step. */
int airlock_spawn(const airlock_spawn_opts *o, airlock_child *c, char *err, size_t errlen);

/* Makes an empty net namespace (only a loopback device, down) and returns an
** O_CLOEXEC fd to it, for many children to join through netns_fd. Needs
** CAP_SYS_ADMIN. Returns the fd, or -errno with a message in err. */
int airlock_netns_new(char *err, size_t errlen);
/* Closes fd (if >= 0) in a helper process, so that the kernel's work when
** it is the last reference (an overlay mount: freeing every inode and
** dentry the program's lookups made, milliseconds for a few thousand files)
** does not hold up the caller. The helper shares our memory and descriptor
** table, is born with every signal blocked and without an exit signal (a
** host's waitpid(-1) never sees it), and is reaped by a later call, or by
** init once this process has exited. Without a helper the close is done
** here. core/release.c */
void airlock_close_later(int fd);

/* Closes the parent's fds of a child (not the process). Idempotent. */
void airlock_child_close(airlock_child *c);

/* ------------------------------------------------------------------ broker */

typedef struct airlock_broker airlock_broker;
typedef struct airlock_run airlock_run;

typedef struct airlock_usage {
  double wall_ms, user_ms, sys_ms;
  long max_rss_kb;
  uint64_t effects;             /* call and note frames received */
  uint64_t notes;               /* of which notes */
  uint64_t bytes_in, bytes_out; /* channel bytes child->parent, parent->child */
  uint64_t pids_peak;           /* with pids_max: most processes at once (0: unknown) */
  uint64_t pids_refused;        /* with pids_max: forks the limit refused */
  uint64_t memory_peak;         /* with memory_max: most bytes the run used at once */
  uint64_t oom_kills;           /* with memory_max: processes the limit's OOM killer ended */
  uint64_t cpu_usec;            /* with cpu_millis: CPU time of all its processes */
  double first_instruction_ms;  /* a worker's: from the run's start (spawn, or unpark for
                                   a pooled one) to just before the guest's first
                                   instruction, as the worker's done frame claims it;
                                   kept only if it lies between the start and the done
                                   frame's arrival (else 0): a timing figure, nothing
                                   is decided by it */
  double done_frame_ms;         /* from the run's start to the done (or pause) frame's
                                   arrival, before the child's exit is reaped (0: none) */
} airlock_usage;

typedef struct airlock_capture {
  const char *data;
  size_t len;
  int truncated; /* 1 when bytes past the cap were discarded */
} airlock_capture;

/* A system call the run's seccomp filter refused with an errno (the spec's
** refuse_errno is AIRLOCK_REFUSE_CHOSEN), and how often. */
typedef struct airlock_refusal {
  int nr;  /* the system call's number */
  int err; /* the errno it answered */
  uint64_t count;
} airlock_refusal;
#define AIRLOCK_REFUSALS_MAX 16 /* distinct calls named per run; the rest only counted */

#define AIRLOCK_CONNECTS_MAX 64 /* direct connects named per run (a run with a proxy) */
#define AIRLOCK_CONNECT_LEN  56 /* "[" INET6_ADDRSTRLEN "]:65535" */

/* The outcome of a finished run. Pointers live as long as the run. */
typedef struct airlock_result {
  int ok; /* cause == ok */
  airlock_cause cause;
  const char *message;            /* never NULL: "" when ok */
  const msgpack_object *value;    /* done.ok, or pause.prompt; NULL if none */
  const msgpack_object *err;      /* done.err (map with message, traceback) */
  const msgpack_object *confined; /* ready.confined as the child claimed it */
  int exit_code;                  /* -1 unless the child exited */
  int term_signal;                /* 0 unless the child was killed by a signal */
  airlock_capture out, errout;    /* captured stdout and stderr */
  airlock_usage usage;
  const airlock_refusal *refused; /* the first AIRLOCK_REFUSALS_MAX distinct refused calls */
  size_t nrefused;
  uint64_t refused_total; /* every refused call, named or not */
  const char *observed;   /* learn mode (a confine spec with observe): one line per distinct
                             observed call, "KV PATH\n" (K: r read, w write, x run, s stat,
                             d mkdir/unlink/rename; V: + present in the run's view, - missing,
                             ? unknown; PATH absolute as the program saw it); NULL otherwise */
  size_t observed_len;
  int observed_truncated; /* records past AIRLOCK_OBSERVED_MAX bytes were dropped */
  /* A confine spec with observe_connect: the first AIRLOCK_CONNECTS_MAX
  ** distinct IPv4 or IPv6 destinations the program connected to directly (not
  ** the proxy) on a stream socket, as "ADDRESS:PORT" ("[ADDRESS]:PORT" for
  ** IPv6); the kernel decided each as without the record. */
  const char (*connects)[AIRLOCK_CONNECT_LEN];
  size_t nconnects;
  uint64_t connects_total; /* every such connect, named or not */
} airlock_result;
#define AIRLOCK_OBSERVED_MAX (8u << 20) /* bytes of observed records kept per run */

typedef struct airlock_run_opts {
  airlock_spawn_opts spawn; /* the process and its confinement, as airlock_spawn
                               takes them, with three differences: the broker sets
                               spawn.channel (a worker, or a program with
                               program_channel) and spawn.cgroup_fds (from pids_max,
                               memory_max, cpu_millis) itself; spawn.stdin_fd <= 0
                               means /dev/null (the caller keeps a descriptor it
                               passes and may close it once start returns);
                               spawn.rlimits is copied at start. The confinement
                               (spawn.confine) may be freed once start returns: a
                               seccomp filter is checked from outside right after
                               spawn (Seccomp: 2, NoNewPrivs: 1); in kill mode a
                               refused call ends the run with cause seccomp, named;
                               with AIRLOCK_REFUSE_CHOSEN it fails with an errno and
                               is named in the result (refused), the run going on.
                               Namespaces asked for are checked right after spawn;
                               with drop_caps the Cap* lines must be zero on ready.
                               With spawn.init the result tells the program's own
                               exit status or signal */
  const void *init;         /* whole init frame (header included), or NULL */
  size_t init_len;
  uint32_t max_frame;   /* 0: AIRLOCK_FRAME_MAX_DEFAULT */
  uint64_t deadline_ms; /* 0: none */
  size_t capture_max;   /* per stream; 0: AIRLOCK_CAPTURE_DEFAULT (streams passed
                           as spawn.stdout_fd/stderr_fd are not captured) */
  int expect_ready;     /* 1: the first frame must be ready (worker) */
  int verify_seccomp;   /* on ready: /proc/PID/status must show Seccomp: 2
                           and NoNewPrivs: 1, else the run ends with cause
                           confinement */
  void *udata;          /* returned by airlock_run_udata */
  int program;          /* 1: a plain program, not a worker: no init, no
                           ready; exit status 0 is cause ok, another status
                           cause exit (the status in the message) */
  int program_channel;  /* with program: the program gets the fd-3 channel and
                           may send call frames (only those, one at a time;
                           ids need only be positive, since every process of
                           the program shares the channel) */
  uint64_t pids_max;    /* > 0: a pids cgroup (airlock_cgroup) holds the child
                           and everything it forks to this many processes;
                           removed when the run ends. Unavailable: start fails */
  uint64_t memory_max;  /* > 0: a memory cgroup holds the run to this many bytes
                           (all its processes together; cause memory when its OOM
                           killer ends one); unavailable: start fails */
  uint32_t cpu_millis;  /* > 0: a cpu cgroup holds the run to this rate, in
                           thousandths of a core; unavailable: start fails */
  int parked;           /* 1: a warm worker: spawned, confined by the spawner
                           and checked from outside now, with no deadline and
                           not counted live until airlock_run_unpark gives it
                           its run. Its init (if any) is sent now: a prepared
                           worker's (prepare = true), which says ready, is
                           checked on ready (airlock_run_joined), and then may
                           send nothing until its run starts; if it does, or
                           dies meanwhile, its DONE event says so */
} airlock_run_opts;

typedef enum airlock_event_kind { AIRLOCK_EV_CALL = 1, AIRLOCK_EV_DONE, AIRLOCK_EV_NOTE } airlock_event_kind;

/* An event popped from the broker. For CALL, effect and args borrow from the
** run and stay valid until the call is answered or the run ends. A NOTE is the
** same with no answer: the host calls airlock_run_note_done when it has taken
** it, and only then does the broker read the run's next frame (one effect at
** a time still). For DONE, the run is finished: read airlock_run_result, then
** airlock_run_release. */
typedef struct airlock_event {
  airlock_event_kind kind;
  airlock_run *run;
  uint64_t id;
  const char *effect;
  uint32_t effect_len;
  const msgpack_object *args; /* never NULL for CALL (nil object if absent) */
} airlock_event;

/* ------------------------------------------------------------------ defaults */

/* The stock `untrusted` policy (policies/untrusted.lua), the one `airlock run`
** and the Lua module give a guest when nothing else is said, for a C host: call
** it on a zeroed airlock_init and airlock_run_opts, then add the guest, its
** effects and input, the worker's argv and the init frame; tighten what it
** sets, or add per-turn budgets, as the host needs. It sets what the policy
** decides and nothing else (core/untrusted.c has the values):
**   in: limits (instructions, memory, output; the per-turn and CPU budgets to
**       none, as the policy has them), Landlock and seccomp applied by the
**       worker and required, mdwe applied where the kernel has it;
**   o:  spawn.namespaces (all of airlock_namespaces), spawn.rlimits
**       (airlock_untrusted_rlimits), spawn.drop_caps, spawn.no_new_privs,
**       deadline_ms, max_frame, capture_max, expect_ready, verify_seccomp.
** The Lua module also joins, as root, one pre-made empty net namespace that
** all runs share (confine.shared_net: less time per spawn; a C host may set
** spawn.netns_fd = airlock_netns_new(...)); without it each run has an empty
** net namespace of its own, the same confinement. Either pointer may be NULL.
** spec/core/c_defaults_spec.lua holds every value to what the Lua module
** resolves the policy to. */
extern const airlock_rlimits airlock_untrusted_rlimits;
void airlock_untrusted_defaults(airlock_init *in, airlock_run_opts *o);

/* Creates a broker (an epoll set). Returns 0 or -errno. */
int airlock_broker_new(airlock_broker **out);
/* Kills and reaps every live run, frees every run the caller has not released,
** and the broker itself. NULL is a no-op. */
void airlock_broker_free(airlock_broker *b);
/* The message for the last failed call on b (start, step). */
const char *airlock_broker_error(const airlock_broker *b);
/* The spawn step the last airlock_broker_start failed in (AIRLOCK_STEP_CGROUP,
** the child's own report, AIRLOCK_STEP_WATCH), or AIRLOCK_STEP_NONE after one
** that succeeded. */
airlock_spawn_step airlock_broker_error_step(const airlock_broker *b);
/* Spawns a run and queues its init frame. The run belongs to the broker until
** its DONE event; the caller then reads the result and releases it. Returns 0
** or -errno (the message says which step failed); nothing is left behind. */
int airlock_broker_start(airlock_broker *b, const airlock_run_opts *o, airlock_run **out);
/* Waits up to timeout_ms (0: poll, -1: until something happens or the nearest
** deadline) and processes I/O, exits and deadlines. Returns the number of
** events now queued, or -errno. Never blocks past the nearest run deadline. */
int airlock_broker_step(airlock_broker *b, int timeout_ms);
/* Pops the next event. Returns 1 and fills ev, or 0 when the queue is empty. */
int airlock_broker_next(airlock_broker *b, airlock_event *ev);
/* The calls waiting in the queue, without taking them: fills out[0..max) with
** the CALL events airlock_broker_next would give (of live runs), in order, and
** returns how many. Each stays valid until that call is answered or its run
** ends. A host uses it to prepare many calls at once (e.g. record them all in
** one round trip each to their ledgers) before it handles them one by one. */
size_t airlock_broker_peek_calls(const airlock_broker *b, airlock_event *out, size_t max);
/* One descriptor of the host's own that wakes a step when it is readable (a
** host's I/O engine: its own epoll set, say), so a host can wait on its work
** and its runs in one airlock_broker_step. fd -1 stops watching. The broker
** never reads, writes or closes it. -> 0, or -errno (-EBUSY: one is watched). */
int airlock_broker_watch_extra(airlock_broker *b, int fd);
/* 1 when the last step saw the watched descriptor readable, then 0 until a
** step sees it again. */
int airlock_broker_extra_ready(airlock_broker *b);
/* Live runs (started, DONE not yet delivered); parked runs are not counted. */
size_t airlock_broker_live(const airlock_broker *b);
/* The serial the next airlock_broker_start will give its run. */
uint64_t airlock_broker_next_serial(const airlock_broker *b);
/* Gives a parked run its run: o->init (whole frame) is sent, o->deadline_ms
** counts from now, and so does the result's wall time; o->capture_max,
** o->max_frame and o->udata as airlock_broker_start takes them (0 and NULL:
** the defaults); the rest of o is ignored (the process exists). Returns 0,
** -EINVAL when r is not parked, -EPIPE when it has died (its DONE follows). */
int airlock_run_unpark(airlock_run *r, const airlock_run_opts *o);
/* A parked run whose worker has said ready and passed the checks from outside
** (the pool's "joined"): 1, else 0. */
int airlock_run_joined(const airlock_run *r);
/* When r started (spawn, or unpark): ms on airlock_now_ms's clock. */
double airlock_run_t_start(const airlock_run *r);
/* Waits up to timeout_ms for a parked run's ready frame, reading only its
** channel (a parked worker may send nothing else), and checks it from
** outside. Returns 1 when it joined, 0 when it has ended instead (its DONE
** event follows; *why, if not NULL, is the reason), -ETIMEDOUT, or -EINVAL
** when r is not parked. */
int airlock_run_await_ready(airlock_run *r, int timeout_ms, const char **why);

/* Answers call id with a msgpack-encoded value (len bytes at value; one object).
** Returns 0, -EINVAL when id is not the outstanding call, -EPIPE when the run
** has ended (the answer is dropped), -EMSGSIZE when the value is too large to
** send (airlock_run_answer_max): the call is then failed instead, with the
** message airlock_run_answer_too_large gives, so the guest is never left
** waiting for it. */
int airlock_run_reply(airlock_run *r, uint64_t id, const void *value, size_t len);
/* The most bytes of an encoded value airlock_run_reply sends r: a reply frame
** is no larger than the frames r may send (its max_frame) and than a worker
** reads (AIRLOCK_FRAME_MAX_DEFAULT), and holds the reply's own fields too. */
size_t airlock_run_answer_max(const airlock_run *r);
/* 1, with the message airlock_run_reply fails the call with in msg ("answer
** too large to send (N bytes; frames are limited to 16 MiB)"), when an encoded
** value of len bytes is over airlock_run_answer_max; else 0. */
int airlock_run_answer_too_large(const airlock_run *r, size_t len, char *msg, size_t n);
/* Answers call id with an error message; code is an optional word ("denied"). */
int airlock_run_fail(airlock_run *r, uint64_t id, const char *msg, size_t len, const char *code);
/* Marks the answer to call id, whenever it is given, as the end of the guest's
** turn: its reply frame carries turn = true, and the worker starts counting
** the per-turn budget (limits.turn_instructions) afresh. For a call the host
** answers later (deferred), so that turns are the host's decision and a replay
** can give the same ones. Returns 0, -EINVAL when id is not the outstanding
** call, -EPIPE when the run has ended. */
int airlock_run_turn(airlock_run *r, uint64_t id);
/* Done with note id (its args are gone): the broker goes on with the frames the
** run sent after it. Returns 0, -EINVAL when id is not the note held. */
int airlock_run_note_done(airlock_run *r, uint64_t id);
/* Marks that an effect of this run was refused by policy (so a guest's uncaught
** "denied" error is believed). */
void airlock_run_note_denied(airlock_run *r);
/* Ends a live run with cause cancelled (SIGKILL to its process group); the DONE
** event follows. No-op on a finished run. */
int airlock_run_cancel(airlock_run *r);
/* Ends a live run with the given cause and message (protocol, ledger, ...). */
int airlock_run_abort(airlock_run *r, airlock_cause cause, const char *message);
/* The result once DONE was delivered, else NULL. */
const airlock_result *airlock_run_result(const airlock_run *r);
/* The caller gives up its handle: a finished run is freed now; a live one is
** cancelled, and the broker reaps and frees it without an event. */
void airlock_run_release(airlock_run *r);
pid_t airlock_run_pid(const airlock_run *r);
/* The CPU time (user and system, all threads) the run's process has used so
** far, in nanoseconds, as the kernel counts it: measured from outside, never a
** number from the child. Returns 0, -ESRCH once the process is gone (reaped,
** or never started), or the -errno of clock_getcpuclockid/clock_gettime. */
int airlock_run_cpu_ns(const airlock_run *r, uint64_t *ns);
uint64_t airlock_run_serial(const airlock_run *r); /* 1, 2, ... per broker */
/* The run's egress listener (airlock_spawn_opts.egress_port), still owned by
** the run, or -1. airlock_run_egress_close closes the run's copy (once the
** proxy holds its own, so that a proxy gone makes the program's connections
** fail at once instead of waiting in the backlog). */
int airlock_run_egress_fd(const airlock_run *r);
void airlock_run_egress_close(airlock_run *r);
/* The run's overlay layer (airlock_child.overlay), handed to the caller, who
** then owns it (closes it); -1 when there is none or it was taken. With
** mount not NULL, the overlay mount itself (airlock_child.overlay_mount) is
** handed over too, into *mount (or -1), for the caller to let go with
** airlock_close_later once the layer has been read; with NULL the run lets
** it go when its child is closed. */
int airlock_run_overlay_take(airlock_run *r, int *mount);
void *airlock_run_udata(const airlock_run *r);
int airlock_run_live(const airlock_run *r);
/* Captured output so far (which: 1 stdout, 2 stderr), for streaming it while
** the run goes on: *data is valid until the next step. Returns the length. */
size_t airlock_run_output(const airlock_run *r, int which, const char **data);

/* Milliseconds on CLOCK_MONOTONIC. */
double airlock_now_ms(void);

#endif
