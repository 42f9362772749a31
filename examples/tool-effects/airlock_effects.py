"""airlock_effects -- ask the airlock parent for effects from a Python program.

A program run by `airlock exec` finds the trusted parent at the other end of
fd 3. This module speaks the frame protocol on it: each call is a frame
{t="call", id, effect, args}; the parent answers with {t="reply", id, ok=value}
or {t="reply", id, err=message, code=word}. See README.md beside this file.

    from airlock_effects import call, Denied, EffectError
    now = call("clock.now")
    try:
        text = call("fs.read", {"path": "notes.txt"})
    except Denied as e:          # refused by the policy
        ...
    except EffectError as e:     # the effect itself failed: e.message
        ...

ChannelError (a subclass of OSError) means there was no usable answer: fd 3
is not an airlock channel, the parent hung up, or its reply broke the protocol.

Needs Debian's python3-msgpack, so run it with /usr/bin/python3. Only read,
write, fstat and poll are used on fd 3: no socket is created, so it works
under the tool policy's seccomp promises. Calls are made one at a time (a lock
serialises threads).

As a command it behaves like `airlock call` (exit 0 ok, 1 error, 3 denied,
2 no channel or a protocol problem):

    /usr/bin/python3 airlock_effects.py EFFECT [JSON-ARGS]
"""

import errno
import json
import os
import select
import stat
import struct
import sys
import threading

import msgpack

CHANNEL_FD = 3
FRAME_MAX = 16 << 20        # bytes in a frame's body, the protocol's limit
EFFECT_NAME_MAX = 256       # bytes in an effect name
_READ_CHUNK = 64 << 10


class ChannelError(OSError):
    """No usable answer: not an airlock channel, hang-up, or a protocol breach."""


class EffectError(Exception):
    """The parent answered the call with an error."""

    def __init__(self, effect, message, code=None):
        super().__init__(f"{effect}: {message}")
        self.effect = effect
        self.message = message
        self.code = code


class Denied(EffectError):
    """The policy refused the effect (reply code "denied")."""


def _no_ext(code, _data):
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


def _wait(fd, events):
    p = select.poll()
    p.register(fd, events)
    p.poll()


class Channel:
    """The program's end of the airlock channel (fd 3 unless told otherwise)."""

    def __init__(self, fd=CHANNEL_FD, max_reply=FRAME_MAX):
        if not 1 <= max_reply <= FRAME_MAX:
            raise ValueError(f"max_reply must be from 1 to {FRAME_MAX} bytes")
        try:
            st = os.fstat(fd)
        except OSError as e:
            if e.errno == errno.EBADF:
                raise ChannelError(errno.EBADF, f"channel: fd {fd} is not open: effects are asked "
                                   f"of the parent over fd {fd}, which `airlock exec` passes to "
                                   "the program it runs") from None
            raise ChannelError(e.errno, f"channel: cannot inspect fd {fd}: {e.strerror}") from None
        if not stat.S_ISSOCK(st.st_mode):
            raise ChannelError(errno.ENOTSOCK, f"channel: fd {fd} is not the airlock channel "
                               "(a socket): effects can only be asked by a program run under "
                               "`airlock exec`")
        self.fd = fd
        self.max_reply = max_reply
        self._next_id = 1
        self._broken = None     # after a ChannelError the stream is out of step for good
        self._lock = threading.Lock()

    # -- bytes

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)     # EINTR is retried by Python itself
            except BlockingIOError:
                _wait(self.fd, select.POLLOUT)
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise ChannelError(errno.EPIPE, f"channel: the parent has closed fd {self.fd} "
                                   "(the run may have ended or been cancelled)") from None
            view = view[n:]

    def _read_exact(self, n, what):
        """n bytes, or None at a clean end of stream before the first byte."""
        parts, have = [], 0
        while have < n:
            try:
                chunk = os.read(self.fd, min(n - have, _READ_CHUNK))
            except BlockingIOError:
                _wait(self.fd, select.POLLIN)
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                if have == 0 and what == "header":
                    return None
                raise ChannelError(errno.EPROTO, f"protocol: the parent closed fd {self.fd} in "
                                   f"the middle of the reply's {what}")
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    # -- frames

    def _receive(self):
        hdr = self._read_exact(4, "header")
        if hdr is None:
            raise ChannelError(errno.EPIPE, f"channel: the parent closed fd {self.fd} without "
                               "replying (the run may have ended or been cancelled)")
        (n,) = struct.unpack(">I", hdr)
        # SECURITY: the length is checked before anything is read or allocated for it.
        if n == 0:
            raise ChannelError(errno.EPROTO, "protocol: the parent sent an empty frame (length 0)")
        if n > self.max_reply:
            raise ChannelError(errno.EMSGSIZE, f"protocol: the reply is {n} bytes, over the "
                               f"limit of {self.max_reply} bytes")
        body = self._read_exact(n, "body")
        try:
            # Lua strings are bytes: text that is not UTF-8 survives as surrogates.
            return msgpack.unpackb(body, raw=False, strict_map_key=False,
                                   unicode_errors="surrogateescape", ext_hook=_no_ext)
        except Exception as e:      # msgpack raises several types for bad input
            raise ChannelError(errno.EPROTO, "protocol: the parent's reply is malformed: "
                               f"{e}") from None

    # -- calls

    def call(self, effect, args=None):
        """The parent's answer to effect(args); raises EffectError, Denied or ChannelError."""
        if not isinstance(effect, str):
            raise TypeError("effect must be a str")
        name_len = len(effect.encode("utf-8", "surrogateescape"))
        if not 1 <= name_len <= EFFECT_NAME_MAX:
            raise ValueError(f"the effect name must be 1 to {EFFECT_NAME_MAX} bytes "
                             f"(got {name_len})")
        with self._lock:
            if self._broken is not None:
                raise ChannelError(self._broken.errno, "channel: unusable after an earlier "
                                   f"failure ({self._broken.strerror})")
            call_id = self._next_id
            # Unsendable args (a set, an object) raise TypeError here, before any I/O.
            body = msgpack.packb({"t": "call", "id": call_id, "effect": effect, "args": args},
                                 use_bin_type=True)
            if len(body) > FRAME_MAX:
                raise ValueError(f"the call is {len(body)} bytes, over the frame limit of "
                                 f"{FRAME_MAX}")
            self._next_id += 1
            try:
                self._write_all(struct.pack(">I", len(body)) + body)
                reply = self._receive()
                return self._outcome(effect, call_id, reply)
            except ChannelError as e:
                self._broken = e
                raise

    @staticmethod
    def _outcome(effect, call_id, reply):
        def breach(why):
            return ChannelError(errno.EPROTO, f"protocol: {why}")
        if not isinstance(reply, dict):
            raise breach(f"the reply is a {type(reply).__name__}, not a map")
        if reply.get("t") != "reply":
            raise breach(f"expected a 'reply' frame from the parent, got {reply.get('t')!r}")
        rid = reply.get("id")
        if type(rid) is not int:
            raise breach("the reply's field 'id' is not an integer")
        if rid != call_id:
            raise breach(f"the reply is for call {rid}, not for this call ({call_id})")
        has_ok, has_err = "ok" in reply, "err" in reply
        if has_ok == has_err:
            raise breach("the reply must carry exactly one of 'ok' and 'err'")
        if has_ok:
            return reply["ok"]
        err, code = reply["err"], reply.get("code")
        if not isinstance(err, str):
            raise breach("the reply's field 'err' is not a string")
        if code is not None and not isinstance(code, str):
            raise breach("the reply's field 'code' is not a string")
        cls = Denied if code == "denied" else EffectError
        raise cls(effect, err, code)


_default = None
_default_lock = threading.Lock()


def call(effect, args=None):
    """effect(args) through the parent on fd 3: its answer, or an exception."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Channel()
    return _default.call(effect, args)


def main(argv):
    """`airlock call` in Python: prints the answer as one line of JSON."""
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: airlock_effects.py EFFECT [JSON-ARGS]\n")
        return 2
    effect = argv[1]
    args = None
    if len(argv) == 3:
        try:
            args = json.loads(argv[2])
        except ValueError as e:
            sys.stderr.write(f"airlock_effects: {effect}: JSON-ARGS is not valid JSON: {e}\n")
            return 2
    try:
        value = call(effect, args)
    except Denied as e:
        sys.stderr.write(f"airlock_effects: {effect}: {e.message}\n")
        return 3
    except EffectError as e:
        sys.stderr.write(f"airlock_effects: {effect}: {e.message}\n")
        return 1
    except (ChannelError, ValueError, TypeError) as e:
        sys.stderr.write(f"airlock_effects: {effect}: {e.strerror if isinstance(e, OSError) else e}\n")
        return 2
    sys.stdout.write(json.dumps(_jsonable(value), separators=(",", ":"), default=str) + "\n")
    return 0


def _jsonable(v):
    """bytes (msgpack bin) as text and every map key as a string, as JSON needs."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {_key(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _key(k):
    if isinstance(k, str):
        return k
    if isinstance(k, bytes):
        return k.decode("utf-8", "replace")
    return json.dumps(k) if isinstance(k, (bool, float)) or k is None else str(k)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
