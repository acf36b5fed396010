/*
 * tls.h — the gateway's OpenSSL server context and its self-signed
 * certificate.
 *
 * Policy (Mozilla "intermediate", 2023): TLS 1.2 and 1.3 only; for 1.2 only
 * ECDHE/DHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305);
 * TLS 1.3 suites are OpenSSL's defaults (all AEAD); the client's cipher
 * order is honoured (every suite offered is strong); no compression, no
 * renegotiation. ALPN offers "h2" then "http/1.1"; a client without ALPN
 * gets HTTP/1.1.
 *
 * Without a configured certificate the server uses DATA_DIR/tls/cert.pem
 * and key.pem, generating them on first start: EC P-256 key, self-signed,
 * SAN = DNS:localhost, IP:127.0.0.1, IP:::1, valid one year. The key file
 * is created 0600 in a 0700 directory, written to a temporary name and
 * renamed, so a crash never leaves a half-written key behind.
 */
#ifndef LG_GW_TLS_H
#define LG_GW_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>

#include "engine/base/common.h"

#define LG_TLS12_CIPHERS                                                                                   \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"              \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"                \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"

/* A server context with the policy above, the certificate chain and key
 * loaded and checked against each other. NULL with err set on failure. */
SSL_CTX *lg_tls_server_ctx(const char *cert_path, const char *key_path, lg_err *err);

/* Paths of DATA_DIR/tls/{cert,key}.pem (malloc'd, caller frees); creates
 * them when absent (*created = true). Refuses a key file readable by group
 * or others, and a pair where only one file exists. */
int lg_tls_self_signed(const char *data_dir, char **cert_path, char **key_path, bool *created, lg_err *err);

#endif
