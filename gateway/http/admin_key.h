/*
 * admin_key.h — the operator ("admin") key: where it comes from, how it is
 * checked, and the auth hook for operator routes.
 *
 * Source, in order: the environment variable LORAGATE_ADMIN_KEY (at least
 * 32 characters), else DATA_DIR/admin.key (one line; must be a regular file
 * of mode 0600 or stricter owned by us, else refused), else a new key is
 * generated into DATA_DIR/admin.key: "lg-admin-" + 43 base64url characters
 * (256 random bits), written to a temporary name with mode 0600, fsynced
 * and renamed, so a crash never leaves a half-written key.
 *
 * The key itself is dropped once loaded: only its SHA-256 stays in memory
 * and a presented key is hashed and compared in constant time
 * (CRYPTO_memcmp), so neither its length nor its prefix leaks through
 * timing. It is never logged: `hint` ("lg-admin-AbCd…") is what may be
 * printed.
 */
#ifndef LG_GW_ADMIN_KEY_H
#define LG_GW_ADMIN_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/common.h"
#include "gateway/http/router.h"

#define LG_ADMIN_KEY_ENV "LORAGATE_ADMIN_KEY"
#define LG_ADMIN_KEY_MIN_LEN 32

typedef enum lg_admin_key_source {
    LG_ADMIN_KEY_FROM_ENV = 0,
    LG_ADMIN_KEY_FROM_FILE = 1,
    LG_ADMIN_KEY_GENERATED = 2,
} lg_admin_key_source;

typedef struct lg_admin_key {
    uint8_t sha256[32];
    lg_admin_key_source source;
    char path[4096]; /* FROM_FILE / GENERATED: the file */
    char hint[24];   /* the first 13 characters and an ellipsis */
} lg_admin_key;

/* Loads or creates the key as described above (env: getenv(LG_ADMIN_KEY_ENV)). */
int lg_admin_key_load(const char *data_dir, lg_admin_key *out, lg_err *err);
/* Same, with the environment value given (NULL: unset); for tests. */
int lg_admin_key_load_from(const char *data_dir, const char *env_value, lg_admin_key *out, lg_err *err);

/* Constant-time comparison of SHA-256(presented) with the key's hash. */
bool lg_admin_key_matches(const lg_admin_key *k, const char *presented, size_t len);

/* lg_auth_fn for operator routes (user: the lg_admin_key): 401
 * invalid_api_key when the bearer token is missing or is not the operator
 * key; sets the principal to the lg_admin_key. */
int lg_auth_admin(const lg_auth_in *in, void *admin_key, lg_auth_result *out);

#endif
