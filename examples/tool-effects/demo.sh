#!/bin/sh
# demo.sh -- a shell script asking the airlock parent for effects with `airlock call`.
# Run it under `airlock exec` (see README.md); AIRLOCK names the airlock command
# (default: the one on PATH). Each line says how one call went: ok with the
# answer (one line of JSON), failed (the effect's error) or denied (the policy
# refused it). Exits 2 when there is no parent to ask.
AIRLOCK=${AIRLOCK:-airlock}

# ask EFFECT [JSON-ARGS | -]: one call; its answer or its error on one line.
ask() {
  answer=$("$AIRLOCK" call "$@" 2>&1)
  status=$?
  case $status in
    0) printf '%-11s ok      %s\n' "$1" "$answer" ;;
    1) printf '%-11s failed  %s\n' "$1" "${answer#"airlock call: $1: "}" ;;
    3) printf '%-11s denied  %s\n' "$1" "${answer#"airlock call: $1: "}" ;;
    *) printf '%s\n' "$answer" >&2    # 2: not under airlock exec, or a protocol problem
       exit 2 ;;
  esac
}

ask clock.now                                   # no arguments: args is null
ask random.int '{"min": 1, "max": 6}'           # arguments: one JSON value, quoted for the shell
echo '{"path": "notes.txt"}' | ask fs.read -    # "-": the JSON comes from stdin
ask net.fetch '{"url": "https://example.com/"}' # what the policy does not grant is denied
