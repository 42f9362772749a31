-- dev -- NO CONFINEMENT: generous limits for trying things at the REPL, never
-- for untrusted code. Every run under it prints
--   airlock: WARNING: policy 'dev' runs guests WITHOUT confinement
-- to stderr, and with AIRLOCK_REQUIRE_CONFINEMENT=1 in the environment it is
-- refused (cause confinement) before anything is spawned.
return {
  name = "dev",
  description = "no confinement, generous limits for experiments; never for untrusted code",
  unconfined = true,
  limits = {
    deadline_ms = "60s",
    memory = "1G",
    instructions = 0,
    output = "1M",
    capture = "1M",
  },
  effects = {},
}
