/*
** overlay_apply.h -- one change of an overlaid workspace applied to the real
** workspace by the trusted parent, as the layer holds it now (the path is
** all it takes from its caller): every path opened beneath the workspace's
** and the layer's own descriptors with openat2(RESOLVE_BENEATH |
** RESOLVE_NO_SYMLINKS), so neither a link the program made nor one in the
** workspace is followed; a file written to a temporary name beside its place,
** fsync'd, then renamed into place (the workspace holds the file as it was or
** as it is, never a part); setuid, setgid and sticky bits stripped; device
** nodes, fifos and sockets refused; a change that would replace a directory
** with a file or link refused.
*/
#ifndef AIRLOCK_OVERLAY_APPLY_H
#define AIRLOCK_OVERLAY_APPLY_H

#include <stddef.h>

/* Applies the change at path (relative, as airlock_overlay_changes gave it)
** from layer_fd's upper/ to the workspace at ws_fd (a directory opened
** O_RDONLY). Returns 0, 1 when it was refused (the reason in err), or
** -errno with a message in err. */
int airlock_overlay_apply(int layer_fd, int ws_fd, const char *path, char *err, size_t errlen);

#endif
