-- untrusted -- the strict default policy for guest code nobody vouches for.
-- Small limits, no effects beyond the built-in log (print) and clock.now.
return {
  name = "untrusted",
  description = "strict default: small limits, no granted effects",
  limits = {
    deadline_ms = "5s",
    memory = "64M",
    instructions = 1e9,
    output = "64K",
    max_frame = "16M",
    capture = "64K",
  },
  effects = {},
}
