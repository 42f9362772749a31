/*
** codec_fuzz.c -- libFuzzer target: one frame body, as the parent receives it
** from a child, through the bounds prescan and the protocol decoder for every
** message kind; anything accepted must also survive re-packing.
*/
#include <stdint.h>
#include <string.h>

#include "airlock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char err[256];
  airlock_msg_check_prefix(data, size, err, sizeof err);
  msgpack_unpacked u;
  airlock_msg m;
  msgpack_unpacked_init(&u);
  if (airlock_msg_decode(data, size, &u, &m, err, sizeof err) == 0) {
    /* Accepted: the decoded object packs back without trouble. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, u.data);
    (void)airlock_msg_kind_name(m.kind);
    (void)airlock_msg_field(&u.data, "effect");
    msgpack_sbuffer_destroy(&sb);
  }
  msgpack_unpacked_destroy(&u);
  return 0;
}
