/*
** broker_overlay.c -- a run's overlay layer: the tmpfs holding the writable
** layer of an overlaid workspace (AIRLOCK_MOUNT_OVERLAY), which the child
** handed to the parent before exec; the caller takes it to read after the run,
** and with it the overlay mount, to let go once that is done.
*/
#include "broker_int.h"

int airlock_run_overlay_take(airlock_run *r, int *mount)
{
  int fd = r->c.overlay;
  r->c.overlay = -1;
  if (mount) {
    *mount = r->c.overlay_mount;
    r->c.overlay_mount = -1;
  }
  return fd;
}
