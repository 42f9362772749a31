/*
** broker_egress.c -- a run's egress listener: the TCP socket the spawner made
** on 127.0.0.1 in the program's own net namespace, which the run holds until
** its egress proxy (airlock exec, lua/airlock/egress.lua) has a copy.
*/
#include "broker_int.h"

#include <unistd.h>

int airlock_run_egress_fd(const airlock_run *r)
{
  return r->c.egress;
}

void airlock_run_egress_close(airlock_run *r)
{
  if (r->c.egress >= 0) close(r->c.egress);
  r->c.egress = -1;
}
