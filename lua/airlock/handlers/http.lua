-- airlock.handlers.http -- http.request, performed by the parent (libcurl)
-- only to hosts an allowlist names.
local core = require "airlock.core"
local nest = require "airlock.nest"
local policy = require "airlock.policy"
local common = require "airlock.handlers.common"

local fail, refuse, show, options = common.fail, common.refuse, common.show, common.options
local size_opt, count_opt, args_table = common.size_opt, common.count_opt, common.args_table
local sfmt = string.format

local M = {}

local HTTP_OPTS = { allow = true, methods = true, max_bytes = true, timeout = true, max_redirects = true,
                    max_header_bytes = true }
-- Headers libcurl sets itself, or that would let a guest smuggle a request.
local FORBIDDEN_HEADERS = { host = true, ["content-length"] = true, ["transfer-encoding"] = true,
                            connection = true, expect = true, upgrade = true, te = true, trailer = true,
                            ["keep-alive"] = true, ["proxy-authorization"] = true, ["proxy-connection"] = true }
local CREDENTIAL_HEADERS = { authorization = true, cookie = true }
local REDIRECTS = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

local function parse_headers(raw)
  local out = {}
  for line in raw:gmatch("([^\r\n]*)\r?\n") do
    local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
    if name then
      name = name:lower()
      out[name] = out[name] and out[name] .. ", " .. value or value
    end
  end
  return out
end

local HTTP_ERRORS = {
  bad_url = "bad URL",
  scheme = "denied: only http and https URLs are allowed",
  bad_method = "bad method",
  timeout = "timed out",
  connect = "cannot connect",
  busy = "too many requests at once",
}

-- Requests made from a call's handler on a broker do not block it: each
-- broker has one engine (libcurl's multi interface, core.http_engine) whose
-- descriptor the broker watches (b:_watch_extra); the handler waits in its
-- coroutine (nest.suspend) while the broker serves every other run, and goes
-- on when its transfer ends. Called anywhere else (a host's own code, a
-- note's handler), a request is performed at once and blocks.
local engines = setmetatable({}, { __mode = "k" })   -- broker -> {engine, waiting = {id -> resume}}

local function engine_for(b)
  local e = engines[b]
  if e then return e end
  local engine, code, why = core.http_engine()
  if not engine then return nil, code, why end
  e = { engine = engine, waiting = {} }
  assert(b:_watch_extra(engine:fd(), function()
    -- Never raises: a transfer's end goes to its handler, whose errors are its call's.
    local ok, done = pcall(engine.pump, engine)
    if not ok then
      local failed = e.waiting
      e.waiting = {}
      for _, resume in pairs(failed) do resume(nil, "io", tostring(done)) end
      return
    end
    for _, d in ipairs(done) do
      local resume = e.waiting[d.id]
      e.waiting[d.id] = nil
      if resume then resume(d.res, d.code, d.detail) end
    end
  end))
  engines[b] = e
  return e
end

-- Not API: how many of broker b's requests are in flight (for specs).
function M._http_in_flight(b)
  local e = engines[b]
  return e and e.engine:pending() or 0
end

-- One request: on the broker's engine when the handler can wait, else now.
local function http_perform(req, ctx)
  local run = type(ctx) == "table" and ctx.handle
  if run and nest.suspendable() and run:live() then
    local e, code, why = engine_for(run:_broker())
    if not e then return nil, code, why end
    local id, ecode, detail = e.engine:start(req)
    if not id then return nil, ecode, detail end
    return nest.suspend(function(resume) e.waiting[id] = resume end,
      function() e.waiting[id] = nil e.engine:cancel(id) end)   -- its run ended first
  end
  return core.http_request(req)
end

--- http{allow = {"api.example.com", "127.0.0.1:8080"}, methods = {"GET"}, max_bytes = "1M",
--- timeout = "5s", max_redirects = 5, max_header_bytes = "64K"} -> a handler for
--- http.request{url, method = "GET", headers = {Name = value}, body} -> {status, headers, body, url}.
--- The parent performs the request (libcurl) only to allowed hosts: "host:port",
--- or "host" for the scheme's default port; http and https only; the host is
--- compared after libcurl's own URL parsing, and the parsed URL is the one
--- connected to. Redirects are followed here, each re-checked against the
--- allowlist (credentials are dropped on a redirect); the response is bounded
--- by max_bytes (the transfer is aborted past it); timeout covers the whole call.
--- Response header names are lower case. The call blocks the broker's loop for
--- its duration (at most timeout).
function M.http(opts)
  opts = options(opts, HTTP_OPTS, "http")
  if type(opts.allow) ~= "table" or #opts.allow == 0 then
    error("http: 'allow' must be a non-empty list of \"host\" or \"host:port\"", 2)
  end
  local allow = {}
  for i, a in ipairs(opts.allow) do
    if type(a) ~= "string" or not a:match("^[%w%.%-%[%]:]+$") then
      error(sfmt("http: allow[%d] must be \"host\" or \"host:port\"", i), 2)
    end
    allow[i] = a:lower()
  end
  local methods = {}
  for i, m in ipairs(opts.methods or { "GET" }) do
    if type(m) ~= "string" or not m:match("^%a+$") then error(sfmt("http: methods[%d] must be a method name", i), 2) end
    methods[m:upper()] = true
  end
  local max_bytes = size_opt(opts, "max_bytes", 1 << 20, "http")
  local max_header = size_opt(opts, "max_header_bytes", 64 << 10, "http")
  local timeout = 5000
  if opts.timeout ~= nil then
    local v, why = policy.parse_duration(opts.timeout)
    if not v or v < 1 then error("http: 'timeout' must be " .. (why or "at least 1ms"), 2) end
    timeout = v
  end
  local max_redirects = count_opt(opts, "max_redirects", 5, "http", 20)

  return function(args, ctx)
    args_table(args)
    local url, method, body = args.url, args.method or "GET", args.body
    if type(url) ~= "string" then fail("args.url must be a string") end
    if #url > 8192 then fail("args.url is longer than 8192 bytes") end
    if type(method) ~= "string" then fail("args.method must be a string") end
    method = method:upper()
    if not methods[method] then refuse("method " .. show(method) .. " is not allowed") end
    if body ~= nil and type(body) ~= "string" then fail("args.body must be a string") end
    if body and #body > max_bytes then fail(sfmt("args.body is larger than max_bytes (%d)", max_bytes)) end
    local headers = {}
    if args.headers ~= nil then
      if type(args.headers) ~= "table" then fail("args.headers must be a table {Name = value}") end
      for k, v in pairs(args.headers) do
        if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+.^_`|~-]+$") or #k > 256 then
          refuse("bad header name " .. show(tostring(k)))
        end
        if type(v) ~= "string" or #v > 8192 or v:find("[%z\r\n]") then
          refuse("bad value for header " .. show(k))
        end
        if FORBIDDEN_HEADERS[k:lower()] then refuse("header " .. show(k) .. " cannot be set") end
        headers[#headers + 1] = { k, v }
        if #headers > 64 then refuse("more than 64 headers") end
      end
      table.sort(headers, function(a, b) return a[1] < b[1] end)
    end

    local deadline = core.now_ms() + timeout
    local redirects = 0
    while true do
      local list = {}
      for _, h in ipairs(headers) do list[#list + 1] = h[1] .. ": " .. h[2] end
      local left = math.floor(deadline - core.now_ms())
      if left < 1 then fail(sfmt("timed out after %d ms", timeout)) end
      local res, code, detail = http_perform({
        url = url, method = method, headers = list, body = body, allow = allow,
        max_bytes = max_bytes, max_header_bytes = max_header, timeout_ms = left,
      }, ctx)
      if not res then
        local where = redirects > 0 and ("redirect to " .. show(url)) or show(url)
        if code == "not_allowed" then
          refuse(sfmt("%s: host %s is not in the allowlist", where, show(detail)))
        elseif code == "too_large" then
          fail(sfmt("%s: response %s larger than %d bytes", where, detail, detail == "headers" and max_header or max_bytes))
        elseif code == "timeout" then
          fail(sfmt("%s: timed out after %d ms", where, timeout))
        end
        fail(sfmt("%s: %s: %s", where, HTTP_ERRORS[code] or code, detail))
      end
      if REDIRECTS[res.status] and res.location and max_redirects > 0 then
        redirects = redirects + 1
        if redirects > max_redirects then fail(sfmt("too many redirects (max %d)", max_redirects)) end
        if res.status == 303 or ((res.status == 301 or res.status == 302) and method == "POST") then
          if method ~= "HEAD" then method = "GET" end
          body = nil
        end
        if not methods[method] then refuse("redirect needs method " .. show(method) .. ", which is not allowed") end
        local kept = {}
        for _, h in ipairs(headers) do
          local n = h[1]:lower()
          if not CREDENTIAL_HEADERS[n] and not (body == nil and n == "content-type") then kept[#kept + 1] = h end
        end
        headers = kept
        url = res.location
      else
        return { status = res.status, headers = parse_headers(res.headers), body = res.body, url = url }
      end
    end
  end
end

return M
