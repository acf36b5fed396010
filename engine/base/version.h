/*
 * version.h — the version of loragate, one place (the CLI's --version,
 * /metrics' build_info).
 */
#ifndef LG_VERSION_H
#define LG_VERSION_H

#define LG_VERSION "0.1.0"

#endif
