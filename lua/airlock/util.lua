-- airlock.util -- small helpers the package shares: reading a whole file,
-- whether a file opens, a list as a set, a deep copy, a value as a key, a
-- string quoted for Lua or for sh, and word wrapping. No requires: any module may use it.
local M = {}

--- read_file(path) -> its whole content, or nil, why (io.open's or the read's message).
function M.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s, rerr = f:read("a")
  f:close()
  if not s then return nil, rerr or "cannot read" end
  return s
end

--- exists(path) -> whether path opens for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

--- set_of(list) -> the items of a list as a set (item -> true); {} for anything but a table.
function M.set_of(list)
  local s = {}
  if type(list) == "table" then for _, v in ipairs(list) do s[v] = true end end
  return s
end

--- copy(v) -> a deep plain copy (tables key by key, a frozen policy through __pairs; no metatables).
function M.copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = M.copy(x) end
  return c
end

--- key_of(v) -> one text per plain value (tables by sorted keys), to use as a table key.
function M.key_of(v)
  if type(v) ~= "table" then return type(v) == "string" and string.format("%q", v) or tostring(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return M.key_of(a) < M.key_of(b) end)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = M.key_of(k) .. "=" .. M.key_of(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- quote(s) -> s as a one-line Lua string literal (%q, with a newline written \n).
function M.quote(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

--- shell_quote(s) -> s as one word for sh, in single quotes.
function M.shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- tmpdir(prefix) -> a new directory under $TMPDIR (or /tmp), named
--- PREFIX.XXXXXX (mktemp -d), or nil: for the caller to remove.
function M.tmpdir(prefix)
  local p = io.popen("mktemp -d " .. M.shell_quote((os.getenv("TMPDIR") or "/tmp") .. "/" .. prefix .. ".XXXXXX"))
  local d = p and p:read("l")
  if p then p:close() end
  return d ~= "" and d or nil
end

--- wrap(text, width, indent) -> text word-wrapped to width, later lines indented; a `command` stays whole.
function M.wrap(text, width, indent)
  local lines, line = {}, ""
  text = text:gsub("`[^`]*`", function(cmd) return (cmd:gsub(" ", "\0")) end)
  for word in text:gmatch("%S+") do
    word = word:gsub("%z", " ")
    if line ~= "" and #line + 1 + #word > width then
      lines[#lines + 1] = line
      line = word
    else
      line = line == "" and word or line .. " " .. word
    end
  end
  if line ~= "" then lines[#lines + 1] = line end
  return table.concat(lines, "\n" .. indent)
end

return M
