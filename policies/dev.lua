-- dev -- generous limits for trying things at the REPL. Not for untrusted code.
return {
  name = "dev",
  description = "generous limits for experiments; never for untrusted code",
  limits = {
    deadline_ms = "60s",
    memory = "1G",
    instructions = 0,
    output = "1M",
    capture = "1M",
  },
  effects = {},
}
