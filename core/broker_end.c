/*
** broker_end.c -- how a run ended: airlock-init's records, the wait status,
** the final frame, what the parent decided, cgroup counters and the tail of
** stderr become the result's cause and message. A child may claim only causes
** it can observe itself; everything else the parent decides.
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* airlock-init's records (AIRLOCK_INIT_*), written before it exited. Its own
** exit status is 128 + N for a signal; the record tells the signal itself.
** Only whole records of a known kind count (at most 8 are read); anything else
** is ignored, and broker_classify() checks them against airlock-init's exit. */
void broker_read_init_status(airlock_run *r)
{
  uint32_t rec[2];
  for (int k = 0; k < 8 && r->c.status >= 0; k++) {
    ssize_t n = read(r->c.status, rec, sizeof rec);
    if (n != (ssize_t)sizeof rec) break;
    if (rec[0] == AIRLOCK_INIT_WAIT_STATUS && (WIFEXITED((int)rec[1]) || WIFSIGNALED((int)rec[1]))) {
      r->init_status = (int)rec[1];
      r->init_seen = 1;
    } else if (rec[0] == AIRLOCK_INIT_EXEC_FAILED && rec[1] > 0 && rec[1] < 4096) {
      r->exec_errno = (int)rec[1];
    }
  }
}

static int worker_cause_word(airlock_run *r, const msgpack_object *err, airlock_cause *out)
{
  const msgpack_object *w = airlock_msg_field(err, "cause");
  char word[32];
  if (!w || w->type != MSGPACK_OBJECT_STR || w->via.str.size >= sizeof word) return 0;
  memcpy(word, w->via.str.ptr, w->via.str.size);
  word[w->via.str.size] = 0;
  int c = airlock_cause_from_name(word);
  /* A child may only claim causes it can observe itself (its budgets: the
  ** instructions, its heap, its own CPU time); "denied" only when the parent
  ** really refused one of its effects. */
  if (c == AIRLOCK_CAUSE_INSTRUCTIONS || c == AIRLOCK_CAUSE_MEMORY || c == AIRLOCK_CAUSE_CPU ||
      (c == AIRLOCK_CAUSE_DENIED && r->denied_noted)) {
    *out = (airlock_cause)c;
    return 1;
  }
  return 0;
}

static void copy_str_field(char *dst, size_t len, const msgpack_object *map, const char *key,
                           const char *fallback)
{
  const msgpack_object *s = airlock_msg_field(map, key);
  if (s && s->type == MSGPACK_OBJECT_STR) {
    size_t n = s->via.str.size < len - 1 ? s->via.str.size : len - 1;
    memcpy(dst, s->via.str.ptr, n);
    dst[n] = 0;
  } else {
    snprintf(dst, len, "%s", fallback);
  }
}

/* Last non-empty line of stderr, to explain an unexpected exit. */
static void stderr_tail(airlock_run *r, char *dst, size_t len)
{
  struct capture_buf *cb = &r->cap[1];
  size_t end = cb->len;
  dst[0] = 0;
  while (end > 0 && (cb->data[end - 1] == '\n' || cb->data[end - 1] == '\r')) end--;
  size_t start = end;
  while (start > 0 && cb->data[start - 1] != '\n') start--;
  size_t n = end - start < len - 1 ? end - start : len - 1;
  if (n) memcpy(dst, cb->data + start, n);
  dst[n] = 0;
}

/* The number in the last AIRLOCK_SECCOMP_REPORT line on stderr, or -1. */
static long blocked_syscall(airlock_run *r)
{
  struct capture_buf *cb = &r->cap[1];
  const size_t plen = sizeof AIRLOCK_SECCOMP_REPORT - 1;
  long nr = -1;
  for (size_t i = 0; cb->data && i + plen < cb->len; i++) {
    if (memcmp(cb->data + i, AIRLOCK_SECCOMP_REPORT, plen) != 0) continue;
    long v = 0;
    size_t j = i + plen;
    while (j < cb->len && cb->data[j] >= '0' && cb->data[j] <= '9' && v < 100000)
      v = v * 10 + (cb->data[j++] - '0');
    if (j > i + plen) nr = v;
  }
  return nr;
}

/* Killed by SIGKILL that the broker did not send, with the CPU time of the
** RLIMIT_CPU hard limit (soft + 1 s) used. */
static int cpu_limit_killed(const airlock_run *r)
{
  const airlock_result *res = &r->res;
  if (res->term_signal != SIGKILL || !(r->rlimits.set_mask & AIRLOCK_RL_CPU)) return 0;
  return res->usage.user_ms + res->usage.sys_ms >= (double)r->rlimits.cpu * 1000.0;
}

void broker_classify(airlock_run *r)
{
  airlock_result *res = &r->res;
  char sig[32], tail[400];
  /* With airlock-init, a program that ended on its own is told as it ended.
  ** The records come from a process the program could reach, so they count
  ** only where they agree with airlock-init's own exit status. */
  if (r->init_seen && WIFEXITED(r->status)) {
    int code = WEXITSTATUS(r->status), rec = r->init_status;
    if ((WIFEXITED(rec) && WEXITSTATUS(rec) == code) || (WIFSIGNALED(rec) && 128 + WTERMSIG(rec) == code))
      r->status = rec;
  }
  if (r->exec_errno &&
      !(WIFEXITED(r->status) && (WEXITSTATUS(r->status) == 126 || WEXITSTATUS(r->status) == 127)))
    r->exec_errno = 0;
  res->exit_code = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
  res->term_signal = WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0;
  res->usage.wall_ms = airlock_now_ms() - r->t_start;
  res->usage.user_ms = r->ru.ru_utime.tv_sec * 1e3 + r->ru.ru_utime.tv_usec / 1e3;
  res->usage.sys_ms = r->ru.ru_stime.tv_sec * 1e3 + r->ru.ru_stime.tv_usec / 1e3;
  res->usage.max_rss_kb = r->ru.ru_maxrss;
  if (r->final.live) {
    res->usage.done_frame_ms = r->t_final - r->t_start;
    /* The worker's own clock reading: only kept when it is possible. */
    double started = (double)r->final.m.started / 1e6;
    if (r->final.m.kind == AIRLOCK_MSG_DONE && started >= r->t_start && started <= r->t_final)
      res->usage.first_instruction_ms = started - r->t_start;
  }

  /* A worker that dies of seccomp just after ready loses its filter while it
  ** exits, so the check on ready can fail; the SIGSYS death itself shows
  ** the filter was there, and the more precise cause wins. */
  if (r->pending == AIRLOCK_CAUSE_CONFINEMENT && r->verify_failed && res->term_signal == SIGSYS)
    r->pending = AIRLOCK_CAUSE_OK;
  if (r->pending != AIRLOCK_CAUSE_OK) {
    res->cause = r->pending;
  } else if (r->final.live && r->final.m.kind == AIRLOCK_MSG_PAUSE) {
    res->cause = AIRLOCK_CAUSE_PAUSED;
    res->value = r->final.m.value;
    snprintf(r->message, sizeof r->message, "the guest asked for input");
  } else if (r->final.live && !r->final.m.err) {
    res->cause = AIRLOCK_CAUSE_OK;
    res->value = r->final.m.value;
    r->message[0] = 0;
  } else if (r->final.live) {
    airlock_cause c = AIRLOCK_CAUSE_ERROR;
    worker_cause_word(r, r->final.m.err, &c);
    res->cause = c;
    res->err = r->final.m.err;
    copy_str_field(r->message, sizeof r->message, r->final.m.err, "message", "guest error");
  } else if (res->term_signal == SIGSYS) {
    res->cause = AIRLOCK_CAUSE_SECCOMP;
    long nr = blocked_syscall(r);
    if (nr >= 0)
      snprintf(r->message, sizeof r->message,
               "killed by seccomp: the guest tried system call %s (number %ld), "
               "which this policy does not allow",
               airlock_syscall_name(nr, sig, sizeof sig), nr);
    else
      snprintf(r->message, sizeof r->message,
               "killed by seccomp (SIGSYS): a system call this policy does not allow "
               "(the process did not say which)");
  } else if (r->exec_errno) {
    res->cause = AIRLOCK_CAUSE_EXIT;
    char en[24];
    snprintf(r->message, sizeof r->message, "the program could not be started: exec: %s (%s)",
             strerror(r->exec_errno), airlock_errno_name(r->exec_errno, en, sizeof en));
  } else if (r->program && WIFEXITED(r->status) && res->exit_code == 0) {
    res->cause = AIRLOCK_CAUSE_OK; /* a plain program that exited 0 */
    r->message[0] = 0;
  } else if (res->usage.oom_kills > 0) {
    res->cause = AIRLOCK_CAUSE_MEMORY;
    snprintf(r->message, sizeof r->message,
             "the run's memory limit of %llu bytes was reached: its "
             "cgroup's OOM killer ended %llu process%s (%s)",
             (unsigned long long)r->memory_max, (unsigned long long)res->usage.oom_kills,
             res->usage.oom_kills == 1 ? "" : "es",
             WIFEXITED(r->status) ? "the program then exited" : "the program was killed");
  } else if (r->expect_ready && WIFEXITED(r->status) && res->exit_code == AIRLOCK_WORKER_EXIT_CONFINE) {
    res->cause = AIRLOCK_CAUSE_CONFINEMENT;
    stderr_tail(r, tail, sizeof tail);
    snprintf(r->message, sizeof r->message, "%s",
             tail[0] ? tail : "confinement: a required layer could not be applied");
  } else if (res->term_signal == SIGXCPU || cpu_limit_killed(r)) {
    /* In a new pid namespace the worker is its init, which the kernel spares
    ** from SIGXCPU; the hard limit's SIGKILL a second later is the sign then. */
    res->cause = AIRLOCK_CAUSE_CPU;
    snprintf(r->message, sizeof r->message, "CPU time limit of %llu s reached (%s)",
             (unsigned long long)r->rlimits.cpu,
             res->term_signal == SIGXCPU ? "SIGXCPU" : "SIGKILL at the hard limit");
  } else if (res->term_signal) {
    res->cause = AIRLOCK_CAUSE_CRASH;
    snprintf(r->message, sizeof r->message, "crashed: killed by SIG%s",
             airlock_signal_name(res->term_signal, sig, sizeof sig));
  } else {
    res->cause = AIRLOCK_CAUSE_EXIT;
    stderr_tail(r, tail, sizeof tail);
    snprintf(r->message, sizeof r->message, "exited with status %d%s%s%s%s", res->exit_code,
             r->program ? "" : " without a done frame", tail[0] ? " (stderr: " : "", tail,
             tail[0] ? ")" : "");
  }
  res->ok = res->cause == AIRLOCK_CAUSE_OK;
  res->message = r->message;
  if (r->ready.live) res->confined = r->ready.m.value;
  for (int i = 0; i < 2; i++) {
    airlock_capture *c = i == 0 ? &res->out : &res->errout;
    if (r->cap[i].data) r->cap[i].data[r->cap[i].len] = 0;
    c->data = r->cap[i].data ? r->cap[i].data : "";
    c->len = r->cap[i].len;
    c->truncated = r->cap[i].truncated;
  }
}
