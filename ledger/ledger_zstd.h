/*
** ledger_zstd.h -- the zstd block codec (ledger/zstd.c), for the programs
** that link libzstd: airlock-ledgerd, the C tests and the fuzz targets.
*/
#ifndef AIRLOCK_LEDGER_ZSTD_H
#define AIRLOCK_LEDGER_ZSTD_H

#include "journal.h"

/* The codec, for airlock_ledger_set_codec. */
const airlock_ledger_codec *ledger_zstd_codec(void);

#endif
