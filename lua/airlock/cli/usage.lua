-- airlock.cli.usage -- what each command of `airlock` takes and does, written
-- once: the global usage, each command's --help, the man pages (airlock(1)
-- and airlock-run(1), airlock-exec(1), ...) and the bash completion are all
-- made from this table (`airlock help --man [COMMAND]`, `airlock help
-- --completion`, which `make install` writes out).
local wrap = require("airlock.util").wrap

local M = {}

-- The host's ceilings on budgets, an option of every command that runs something.
local CEILING = { "--ceiling", "NAME=VALUE,...", "raise the host's ceiling on a budget a policy may ask for " ..
  "(cpu, memory, stack, instructions, deadline, output; 0: none; repeatable; also AIRLOCK_CEILING)" }

-- name, synopsis (after "airlock NAME"), what it does, its options as
-- { flag, VALUE or nil, help }, and its exit statuses.
M.COMMANDS = {
  { name = "run", synopsis = "[OPTIONS] GUEST.lua | -e CODE | -",
    about = "Run one guest (a Lua 5.4 file, inline CODE, or the guest read from stdin) in a " ..
      "disposable confined worker and print its value, or the result as JSON. On a terminal, " ..
      "control characters the guest prints are shown as ^X (cat -v).",
    options = {
      { "-e", "CODE", "the guest's source itself, as lua -e takes it" },
      { "--policy", "NAME|FILE", "the policy: a stock name (untrusted, the default) or a file" },
      { "--input", "JSON", "the guest's input (host.input)" },
      { "--json", nil, "print the whole result as one JSON object" },
      { "--raw", nil, "pass control characters through to the terminal" },
      { "--ledger", "DIR", "record every effect in a new session in DIR" },
      { "--durability", "MODE", "none, batch (the default) or always" },
      { "--learn", "FILE", "draft the policy it needs (modules, effects, limits with headroom) to FILE, " ..
        "then run it again under the draft and report any difference" },
      CEILING,
    },
    exit = "0 the guest returned; 1 it failed (any cause but ok); 2 bad usage; 3 paused" },
  { name = "replay", synopsis = "[OPTIONS] DIR",
    about = "Re-run a recorded session answered only from its journal. The policy is --policy, " ..
      "else the stock policy the journal names (never a file it names).",
    options = {
      { "--policy", "NAME|FILE", "the policy to replay under" },
      { "--policy-changed", nil, "replay although the policy's digest differs from the recorded one" },
      { "--guest", "FILE", "the guest's source, when the journal does not hold it" },
      { "--json", nil, "print the comparison as one JSON object" },
      CEILING,
    },
    exit = "0 identical; 1 not (the first divergence named); 2 bad usage or unreadable" },
  { name = "resume", synopsis = "DIR --input JSON [OPTIONS]",
    about = "Answer a paused session's host.input and continue it live.",
    options = {
      { "--input", "JSON", "the answer to the pause (required)" },
      { "--policy", "NAME|FILE", "the policy to continue under" },
      { "--policy-changed", nil, "continue although the policy's digest differs" },
      { "--durability", "MODE", "none, batch (the default) or always" },
      { "--raw", nil, "pass control characters through to the terminal" },
      { "--json", nil, "print the whole result as one JSON object" },
      CEILING,
    },
    exit = "as run" },
  { name = "branch", synopsis = "DIR --at SEQ NEWDIR",
    about = "Make a new session holding DIR's records up to SEQ.",
    options = { { "--at", "SEQ", "the last record to keep" } },
    exit = "0 made; 1 it could not be; 2 bad usage" },
  { name = "exec", synopsis = "[OPTIONS] [--] PROGRAM [ARGS...]",
    about = "Run any program confined by the policy's tool authority (default policy tool: " ..
      "read-only system, the workspace writable, a private /tmp, no network). stdin, stdout " ..
      "and stderr are passed through; on a terminal the program gets one of its own.",
    options = {
      { "--policy", "NAME|FILE", "the policy (default tool)" },
      { "--workspace", "DIR", "the one writable directory, also the cwd and HOME (default .)" },
      { "--rootfs", "DIR", "run inside another root file system, read-only" },
      { "--timeout", "DURATION", "a deadline with a unit: 500ms, 30s, 5m (only shorter than the policy's)" },
      { "--capture", "SIZE", "capture stdout and stderr up to SIZE each (64K, 1M) instead of passing them" },
      { "--stdin", "FILE|none|-", "stdin from FILE, none (/dev/null), or ours (-, the default)" },
      { "--env", "NAME=VALUE", "add a variable to the program's environment (repeatable)" },
      { "--stream", nil, "with a capture, print lines as they come" },
      { "--json", nil, "capture, and print the whole result as one JSON object" },
      { "--review", nil, "with tool.overlay, show the changes the policy would apply and apply them only " ..
        "on y read from stdin (the program then gets --stdin none unless given a FILE)" },
      { "--no-tty", nil, "on a terminal, hand over our descriptors as they are, not a terminal of its own" },
      { "--ledger", "DIR", "record the program's effects in a new session in DIR" },
      { "--durability", "MODE", "none, batch (the default) or always" },
      { "--observe", nil, "observe its file system calls: each path it could not reach (outside its view, " ..
        "or read-only) is named with the field that would grant it (learn mode's listener; costs per call)" },
      { "--learn", "FILE", "run it permissively, observed; write the draft policy that covers what it did " ..
        "to FILE, then run it again under the draft and report any difference (docs/TOOLS.md, \"Learn mode\")" },
      CEILING,
    },
    exit = "the program's status; 124 at the deadline; 128+N on signal N; 127 not found; " ..
      "126 not runnable; 125 airlock could not start it; 1 a capture was cut and it exited 0" },
  { name = "call", synopsis = "EFFECT [JSON-ARGS | -]",
    about = "Inside airlock exec: ask the parent for EFFECT over fd 3 (arguments JSON-ARGS, - " ..
      "reads them from stdin, none means null) and print the answer as one line of JSON.",
    options = {},
    exit = "0 answered; 1 the effect failed; 3 the policy denied it; 2 no channel or a bad reply" },
  { name = "probe", synopsis = "[--json]",
    about = "Say what this kernel can enforce (Landlock, seccomp, namespaces, cgroups) and how " ..
      "to fix what is missing.",
    options = { { "--json", nil, "one JSON object" } },
    exit = "0 the untrusted policy can run here; 1 it cannot" },
  { name = "repl", synopsis = "",
    about = "Interactive Lua with the airlock module loaded (:help inside).", options = {},
    exit = "0" },
  { name = "bench", synopsis = "[exec | ledger | scale | net | warm | guest] [--json] [--quick]",
    about = "Measure spawn and effect round trips (exec: airlock exec; ledger: appends and " ..
      "verify; scale: a plugin host's frames, N guests x K effects; net: an HTTP request through " ..
      "a program's egress proxy; warm: only the warm-* rows, pooled starts against a raw " ..
      "pre-forked child; guest: CPU-bound guest code against lua5.4 on the same programs) " ..
      "against baselines taken " ..
      "in the same run, as ratios.",
    options = { { "--json", nil, "one JSON object per row" }, { "--quick", nil, "fewer rounds" },
                { "--guests", "N", "scale: only N guests (default 10, 50, 200)" },
                { "--effects", "K", "scale: effects per guest and frame (default 5)" } },
    exit = "0 measured; 2 bad usage" },
  { name = "demo", synopsis = "",
    about = "A short tour: guests that succeed, fail and misbehave, one run per cause.",
    options = {}, exit = "0" },
  { name = "ledger verify", synopsis = "DIR [--checkpoint SEQ:HASH | --checkpoint FILE [--key KEYFILE]] [--json]",
    about = "Check a session's hash chain, and that each checkpoint's record is there unchanged: " ..
      "same session (else substituted), seq present (else truncated), same chain hash (else altered); " ..
      "with --key, each line's MAC (else forged). One walk of the journal for all of a file's checkpoints.",
    options = { { "--checkpoint", "SEQ:HASH", "a head printed earlier (ledger head)" },
                { "--checkpoint", "FILE", "every line of a file ledger checkpoint wrote (seqs increasing; " ..
                  "at most 4 MiB, 4096 lines of at most 4 KiB)" },
                { "--key", "KEYFILE", "the key the lines were written with: each must carry a MAC that " ..
                  "verifies" },
                { "--json", nil, "one JSON object, with one result per checkpoint" } },
    exit = "0 intact; 1 damaged (or a checkpoint does not match); 2 bad usage, no journal, or a key or " ..
      "checkpoint file that cannot be used" },
  { name = "ledger show", synopsis = "DIR [--json]",
    about = "Print one line (or JSON object) per record.",
    options = { { "--json", nil, "one JSON object per record" } },
    exit = "0 read whole; 1 damaged midway; 2 bad usage or no journal" },
  { name = "ledger head", synopsis = "DIR",
    about = "Print the last record's checkpoint, SEQ:HASH.", options = {},
    exit = "0; 1 damaged; 2 bad usage or no journal" },
  { name = "ledger checkpoint", synopsis = "DIR [--to FILE] [--key KEYFILE] [--json]",
    about = "Write the session's head as one checkpoint line (airlock-checkpoint-v1: session id, seq, " ..
      "chain hash, time), to keep outside the ledger's authority; read through a ledger process.",
    options = { { "--to", "FILE", "append the line to FILE (created 0600; refused inside DIR)" },
                { "--key", "KEYFILE", "add HMAC-SHA256 under the host's key (a file of yours, mode 0600, " ..
                  "32 bytes or more, not a link, not inside DIR)" },
                { "--json", nil, "one JSON object" } },
    exit = "0 written; 1 damaged; 2 bad usage, no journal, or a key or FILE that cannot be used" },
  { name = "ledger revert", synopsis = "DIR [--run N] [--workspace WS] [--force] [--json]",
    about = "Undo the session's committed workspace changes (an overlaid airlock exec's), newest first, " ..
      "from its journal and the contents it kept (DIR/blobs): files put back as they were, created ones " ..
      "removed, deleted ones made again. The journal's chain must verify; every path must be as the " ..
      "records left it and every blob present and of its hash, or nothing is written. Written by you, " ..
      "through no link, each file renamed into place.",
    options = { { "--run", "N", "only run N's changes" },
                { "--workspace", "WS", "the workspace to write (default: the one the records name)" },
                { "--force", nil, "write a path that changed since, instead of refusing" },
                { "--json", nil, "one JSON object" } },
    exit = "0 written; 1 refused (nothing written) or failed; 2 bad usage" },
  { name = "ledger reapply", synopsis = "DIR [--run N] [--workspace WS] [--force] [--json]",
    about = "Apply the session's committed workspace changes again, oldest first, from its journal and " ..
      "kept contents: every path must be as the records found it (as a revert leaves it), checked as " ..
      "ledger revert checks, before anything is written.",
    options = { { "--run", "N", "only run N's changes" },
                { "--workspace", "WS", "the workspace to write (default: the one the records name)" },
                { "--force", nil, "write a path that changed since, instead of refusing" },
                { "--json", nil, "one JSON object" } },
    exit = "0 written; 1 refused (nothing written) or failed; 2 bad usage" },
  { name = "version", synopsis = "", about = "Print the version (also airlock --version).",
    options = {}, exit = "0" },
  { name = "help", synopsis = "[COMMAND] [--man [COMMAND] | --completion]",
    about = "Print the usage of every command, or of COMMAND; --man writes a man page, " ..
      "--completion the bash completion.", options = {
      { "--man", nil, "a man page (roff) for airlock, or for COMMAND" },
      { "--completion", nil, "the bash completion script" } },
    exit = "0; 2 unknown command" },
}

local BY_NAME = {}
for _, c in ipairs(M.COMMANDS) do BY_NAME[c.name] = c end

--- find(name) -> the command's entry, or nil.
function M.find(name) return BY_NAME[name] end

local function flag_text(o) return o[2] and (o[1] .. " " .. o[2]) or o[1] end

--- command(name) -> the usage of one command, as --help prints it.
function M.command(name)
  local c = assert(BY_NAME[name], name)
  local out = { "usage: airlock " .. c.name .. (c.synopsis ~= "" and (" " .. c.synopsis) or ""), "",
                wrap(c.about, 78, ""), "" }
  if #c.options > 0 then
    out[#out + 1] = "options:"
    for _, o in ipairs(c.options) do
      out[#out + 1] = string.format("  %-26s %s", flag_text(o), wrap(o[3], 50, string.rep(" ", 29)))
    end
    out[#out + 1] = ""
  end
  out[#out + 1] = "exit status: " .. wrap(c.exit, 65, "             ")
  return table.concat(out, "\n") .. "\n"
end

--- global() -> the usage of the command as a whole.
function M.global()
  local out = { "usage: airlock COMMAND [ARGS]   (airlock COMMAND --help for one command)", "" }
  for _, c in ipairs(M.COMMANDS) do
    local head = "  " .. c.name .. (c.synopsis ~= "" and (" " .. c.synopsis) or "")
    local first = c.about:match("^[^.]*%.") or c.about
    if #head < 24 then
      out[#out + 1] = string.format("%-24s %s", head, wrap(first, 54, string.rep(" ", 25)))
    else
      out[#out + 1] = head
      out[#out + 1] = string.rep(" ", 25) .. wrap(first, 54, string.rep(" ", 25))
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = "A policy may raise its budgets (CPU, memory, stack, instructions, deadline, output)"
  out[#out + 1] = "up to the host's ceilings: --ceiling NAME=VALUE,... on run, exec, replay and resume,"
  out[#out + 1] = "or AIRLOCK_CEILING for every command (docs/API.md, \"Budgets and ceilings\")."
  out[#out + 1] = "Every command takes --help. Documentation: README.md, docs/ (TOOLS.md for exec)."
  return table.concat(out, "\n") .. "\n"
end

-- roff-safe text: backslashes doubled, a leading dot or quote escaped.
local function roff(s)
  s = s:gsub("\\", "\\\\"):gsub("%-", "\\-")
  return (s:gsub("^([.'])", "\\&%1"))
end

--- man(name) -> a man page in roff: airlock(1) for nil, else airlock-NAME(1)
--- (ledger: all of ledger's subcommands).
function M.man(name, version)
  local date = "2026"
  local list = {}
  local title
  if name == nil then
    title = "AIRLOCK"
    list = M.COMMANDS
  else
    title = "AIRLOCK-" .. name:upper()
    for _, c in ipairs(M.COMMANDS) do
      if c.name == name or c.name:match("^" .. name:gsub("%p", "%%%0") .. " ") then list[#list + 1] = c end
    end
    if #list == 0 then return nil end
  end
  local out = { string.format('.TH %s 1 "%s" "airlock %s" "airlock manual"', title, date, version or ""), ".SH NAME" }
  local short = name == "ledger" and "check and show a session's hash-chained ledger" or
    name and ((list[1].about:match("^[^.(:]*") or ""):gsub("%s+$", "")) or
    "run untrusted code confined, with a Lua policy"
  out[#out + 1] = roff(name and ("airlock-" .. name) or "airlock") .. " \\- " .. roff(short)
  out[#out + 1] = ".SH SYNOPSIS"
  for _, c in ipairs(list) do
    out[#out + 1] = ".B airlock " .. roff(c.name)
    if c.synopsis ~= "" then out[#out + 1] = roff(c.synopsis) end
    out[#out + 1] = ".br"
  end
  out[#out + 1] = ".SH DESCRIPTION"
  for _, c in ipairs(list) do
    if #list > 1 then out[#out + 1] = ".SS airlock " .. roff(c.name) end
    out[#out + 1] = roff(c.about)
    if #c.options > 0 then
      out[#out + 1] = ".PP\nOptions:"
      for _, o in ipairs(c.options) do
        out[#out + 1] = ".TP\n.B " .. roff(o[1]) .. (o[2] and (" \\fI" .. roff(o[2]) .. "\\fR") or "")
        out[#out + 1] = roff(o[3])
      end
    end
    out[#out + 1] = ".PP\nExit status: " .. roff(c.exit)
  end
  if name == nil then
    out[#out + 1] = ".SH ENVIRONMENT"
    out[#out + 1] = ".TP\n.B AIRLOCK_CEILING\n" .. roff("NAME=VALUE,...: the host's ceilings on the budgets a " ..
      "policy may raise (cpu, memory, stack, instructions, deadline, output; 0: none), before any --ceiling")
    out[#out + 1] = ".TP\n.B AIRLOCK_REQUIRE_CONFINEMENT\n" .. roff("1: refuse any run with less " ..
      "confinement than its tier's stock policy (a layer off), instead of warning")
    out[#out + 1] = ".SH SEE ALSO"
    out[#out + 1] = "airlock\\-run(1), airlock\\-exec(1), airlock\\-ledger(1); README.md and docs/ in the source."
  end
  return table.concat(out, "\n") .. "\n"
end

--- completion() -> a bash completion script for airlock.
function M.completion()
  local names, ledger, opts = {}, {}, {}
  for _, c in ipairs(M.COMMANDS) do
    local top, sub = c.name:match("^(%S+) (%S+)$")
    if top then
      ledger[#ledger + 1] = sub
      if not names[#names] or names[#names] ~= top then names[#names + 1] = top end
    else
      names[#names + 1] = c.name
    end
    local flags = { "--help" }
    for _, o in ipairs(c.options) do flags[#flags + 1] = o[1] end
    opts[#opts + 1] = string.format('    "%s") flags="%s" ;;', c.name, table.concat(flags, " "))
  end
  return table.concat({
    "# bash completion for airlock (generated by airlock help --completion)",
    "_airlock() {",
    "  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} flags",
    "  if [ \"$COMP_CWORD\" -eq 1 ]; then",
    "    COMPREPLY=( $(compgen -W \"" .. table.concat(names, " ") .. " --help --version\" -- \"$cur\") ); return",
    "  fi",
    "  if [ \"$cmd\" = ledger ]; then",
    "    if [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=( $(compgen -W \"" .. table.concat(ledger, " ") ..
      "\" -- \"$cur\") ); return; fi",
    "    cmd=\"ledger ${COMP_WORDS[2]}\"",
    "  fi",
    "  case \"$cmd\" in",
    table.concat(opts, "\n"),
    "    *) flags=\"--help\" ;;",
    "  esac",
    "  if [[ \"$cur\" == -* ]]; then COMPREPLY=( $(compgen -W \"$flags\" -- \"$cur\") );",
    "  else COMPREPLY=( $(compgen -f -- \"$cur\") ); fi",
    "}",
    "complete -F _airlock airlock", "" }, "\n")
end

return M
